r"""Task kinds: what one grid point computes, its parameters, and their checks.

A :class:`Kind` names its parameters (:class:`Param`: a type hint for validation, a default or
:data:`REQUIRED`), checks their values (raising :class:`ParamError` naming the key), and runs one
task, ``run(params, seed) -> TaskOutput``. ``seed`` is derived from the parameters
(:func:`pipelines.sweep.records.derived_seed`); every random draw of a task comes from it.

Built-in kinds (:data:`KINDS`), each a thin call into the library:

``convergence``
    One error of :mod:`integrators.convergence` at one step size ``h``: ``experiment`` =
    ``"exact"`` (:func:`~integrators.convergence.discrete_vs_exact`), ``"modified_flow"``
    (:func:`~integrators.convergence.discrete_vs_modified_flow`), ``"inverse_modified"``
    (:func:`~integrators.convergence.inverse_modified_vs_exact`) or ``"energy_oscillation"``
    (:func:`~integrators.convergence.modified_energy_oscillation`), for a ``scheme``, correction order
    ``N``, ``system`` and horizon ``T``. Metric ``error`` (max over grid times, trajectories and
    coordinates of :math:`|q_k - q(t_k)|`, or the oscillation amplitude of :math:`H_{mod}[N]`).
    ``info.expected_order``: :math:`N + 2` for symmetric schemes, :math:`N + 1` otherwise (``exact``:
    2 or 1). The observed order is the slope of :math:`\log \text{error}` against :math:`\log h` over
    the tasks that differ only in ``h`` (:mod:`pipelines.sweep.report`).
``shadow``
    One run of :func:`pipelines.shadow_experiments.run` (LSI fit, prediction, identification, held-out
    residuals; LGP baselines if ``baselines``). Defaults: the configuration object named by
    ``preset`` (``PENDULUM_SMALL``, ...); any field of :class:`~pipelines.shadow_experiments.ExperimentConfig`
    may be set, except ``data_seed`` (derived) and ``progress``. ``seed`` is the replicate index.
    Metrics: the experiment's (``traj_lsi``, ``ls_rec2``, ``heldout_rms``, ...).
``modlanet``
    One run of :func:`pipelines.modlanet_experiments.run` from the preset ``small`` or ``full`` for
    ``system``; any field of :class:`~pipelines.modlanet_experiments.ModLaNetConfig` may be set except
    ``seed`` (derived from the parameters, ``seed`` there being the replicate index) and
    ``progress``. Metrics per model row, ``<model>.<metric>`` (``modlanet.mse_q``,
    ``modlanet.mse_E``, ``modlanet.paper_E``, ``hnn.mse_E``, ...), of the position-only variant
    and of the extension (``extension3.direct.mse_E``, ...).

Further kinds can be added with :func:`register` (their functions must be importable, or picklable
by value, on the Ray workers).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

__all__ = ["Param", "Kind", "TaskOutput", "ParamError", "REQUIRED", "KINDS", "register", "get_kind",
           "CONVERGENCE_SYSTEMS", "CONVERGENCE_EXPERIMENTS"]


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = _Required()


class ParamError(ValueError):
    """A parameter value that cannot run; ``key`` names the parameter."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class Param:
    """A parameter: ``hint`` (the type a value must have), ``default`` (:data:`REQUIRED`; ``None``:
    optional, absent from the task's parameters unless given), ``doc``."""

    hint: Any
    default: Any = REQUIRED
    doc: str = ""


@dataclass
class TaskOutput:
    metrics: Dict[str, Any]
    config: Dict[str, Any] = field(default_factory=dict)
    timings: Dict[str, float] = field(default_factory=dict)
    info: Dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Kind:
    """A task kind. ``params()`` returns the schema (built lazily: it may import the library);
    ``check(params)`` raises :class:`ParamError`; ``run(params, seed)`` returns a :class:`TaskOutput`.
    For the report: ``x`` -- the parameter on the horizontal axis of the metric plots (``h``:
    log-log error plots with fitted slopes); ``metrics`` -- the metrics plotted by default."""

    name: str
    params: Callable[[], Dict[str, Param]]
    run: Callable[[Dict[str, Any], int], TaskOutput]
    check: Callable[[Dict[str, Any]], None] = lambda p: None
    x: Optional[str] = None
    metrics: Tuple[str, ...] = ()
    slopes: bool = False


KINDS: Dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    """Add (or replace) a task kind; returns it."""
    if not isinstance(kind, Kind):
        raise TypeError(f"register needs a pipelines.sweep.tasks.Kind, got {type(kind).__name__}")
    KINDS[kind.name] = kind
    return kind


def get_kind(name: str) -> Kind:
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"unknown kind {name!r} (one of {', '.join(sorted(KINDS))})") from None


def _jsonable(x: Any) -> Any:
    """Numbers, strings, lists and dicts of them; tensors and arrays as lists, anything else as text."""
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    tolist = getattr(x, "tolist", None)
    if callable(tolist):
        return _jsonable(tolist())
    return str(x)


def _number(x: Any) -> Any:
    """A metric as a JSON number (``bool`` -> int; numpy/torch scalars -> float/int)."""
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, int):
        return x
    item = getattr(x, "item", None)
    if callable(item):
        x = item()
    return x if isinstance(x, int) and not isinstance(x, bool) else float(x)


# --------------------------------------------------------------------------------------- convergence
#: system name -> (constructor, default initial positions, default initial velocities); the pendulum's
#: and Henon-Heiles' initial conditions are those of notebook 02
CONVERGENCE_SYSTEMS: Dict[str, Tuple[Callable[[], Any], List[List[float]], List[List[float]]]] = {}


def _systems_table():
    if not CONVERGENCE_SYSTEMS:
        from integrators import systems

        CONVERGENCE_SYSTEMS.update({
            "pendulum": (systems.pendulum, [[1.0], [2.0]], [[0.5], [0.0]]),
            "variable_mass_pendulum": (systems.variable_mass_pendulum, [[1.0]], [[0.5]]),
            "harmonic_oscillator": (functools.partial(systems.coupled_oscillators, 1), [[1.0], [0.5]], [[0.0], [0.8]]),
            "coupled_oscillators": (systems.coupled_oscillators, [[0.5, -0.3]], [[0.0, 0.4]]),
            "henon_heiles": (systems.henon_heiles, [[0.3, -0.2], [0.0, 0.4]], [[0.2, 0.3], [-0.3, 0.0]]),
            "kepler": (systems.kepler, [[1.0, 0.0]], [[0.0, 1.1]]),
        })
    return CONVERGENCE_SYSTEMS


CONVERGENCE_EXPERIMENTS = {
    "exact": "discrete_vs_exact",
    "modified_flow": "discrete_vs_modified_flow",
    "inverse_modified": "inverse_modified_vs_exact",
    "energy_oscillation": "modified_energy_oscillation",
}


def _convergence_params() -> Dict[str, Param]:
    M = Optional[List[List[float]]]
    return {
        "experiment": Param(str, "modified_flow", f"one of {', '.join(CONVERGENCE_EXPERIMENTS)}"),
        "scheme": Param(str, REQUIRED, "midpoint, trapezoidal or generalised_midpoint:ALPHA"),
        "N": Param(int, 0, "correction order (even for symmetric schemes; unused by 'exact')"),
        "system": Param(str, REQUIRED, "a name in CONVERGENCE_SYSTEMS"),
        "h": Param(float, REQUIRED, "step size; T must be a multiple (>= 2) of it"),
        "T": Param(float, 2.0, "time horizon"),
        "q0": Param(M, None, "initial positions, one row per trajectory (default: the system's)"),
        "qdot0": Param(M, None, "initial velocities (default: the system's)"),
        "formula": Param(str, "generic", "inverse_modified: 'generic' (autograd) or 'concrete' (SymPy)"),
        "start": Param(str, "positions", "inverse_modified: 'positions' or 'momentum'"),
    }


@functools.lru_cache(maxsize=None)
def _system(name: str):
    return _systems_table()[name][0]()


def _convergence_check(p: Dict[str, Any]) -> None:
    import bea

    if p["experiment"] not in CONVERGENCE_EXPERIMENTS:
        raise ParamError("experiment", f"unknown experiment {p['experiment']!r} (one of {', '.join(CONVERGENCE_EXPERIMENTS)})")
    table = _systems_table()
    if p["system"] not in table:
        raise ParamError("system", f"unknown system {p['system']!r} (one of {', '.join(table)})")
    try:
        scheme = bea.get_scheme(p["scheme"])
    except (ValueError, TypeError, ArithmeticError) as err:
        raise ParamError("scheme", str(err)) from None
    if p["N"] < 0:
        raise ParamError("N", f"N must be >= 0, got {p['N']}")
    if p["experiment"] != "exact" and scheme.symmetric and p["N"] % 2:
        raise ParamError("N", f"{p['scheme']} is symmetric (only even powers of h): N must be even, got {p['N']}")
    for key in ("h", "T"):
        if not (p[key] > 0 and math.isfinite(p[key])):
            raise ParamError(key, f"{key} must be a positive finite number, got {p[key]}")
    steps = round(p["T"] / p["h"])
    if steps < 2 or abs(steps * p["h"] - p["T"]) > 1e-9 * p["T"]:
        raise ParamError("h", f"T = {p['T']} must be a multiple (>= 2) of h = {p['h']}")
    if p["formula"] not in ("generic", "concrete"):
        raise ParamError("formula", f"formula must be 'generic' or 'concrete', got {p['formula']!r}")
    if p["start"] not in ("positions", "momentum"):
        raise ParamError("start", f"start must be 'positions' or 'momentum', got {p['start']!r}")
    n = _system(p["system"]).n
    rows = {}
    for key in ("q0", "qdot0"):
        m = p.get(key)
        if m is None:
            continue
        if not m or any(len(r) != n for r in m):
            raise ParamError(key, f"{key} must be a non-empty list of rows of {n} numbers (the dimension of "
                                  f"{p['system']}), got {m}")
        rows[key] = len(m)
    if len(rows) == 1:
        raise ParamError(next(iter(rows)), "give both q0 and qdot0, or neither (the system's defaults)")
    if len(rows) == 2 and rows["q0"] != rows["qdot0"]:
        raise ParamError("qdot0", f"q0 has {rows['q0']} rows and qdot0 {rows['qdot0']}: one row per trajectory in both")


def expected_order(p: Dict[str, Any]) -> int:
    """The theoretical order of convergence of a convergence task (docs/theory/orders.md)."""
    import bea

    symmetric = bool(bea.get_scheme(p["scheme"]).symmetric)
    if p["experiment"] == "exact":
        return 2 if symmetric else 1
    return p["N"] + (2 if symmetric else 1)


def _convergence_run(p: Dict[str, Any], seed: int) -> TaskOutput:
    import torch

    from integrators import convergence as C

    _, q_default, v_default = _systems_table()[p["system"]]
    q0 = p.get("q0") or q_default
    v0 = p.get("qdot0") or v_default
    system = _system(p["system"])
    q0t, v0t = torch.tensor(q0, dtype=torch.float64), torch.tensor(v0, dtype=torch.float64)
    fn = getattr(C, CONVERGENCE_EXPERIMENTS[p["experiment"]])
    hs = [p["h"]]
    t = time.perf_counter()
    if p["experiment"] == "exact":
        errors = fn(system, p["scheme"], hs, p["T"], q0t, v0t)
    elif p["experiment"] == "inverse_modified":
        errors = fn(system, p["scheme"], p["N"], hs, p["T"], q0t, v0t, formula=p["formula"], start=p["start"])
    else:
        errors = fn(system, p["scheme"], p["N"], hs, p["T"], q0t, v0t)
    timings = {"experiment": time.perf_counter() - t}
    config = dict(p, q0=q0, qdot0=v0)
    return TaskOutput({"error": float(errors[0])}, config, timings, {"expected_order": expected_order(p)})


# --------------------------------------------------------------------------------------- shadow (LSI)
SHADOW_PRESETS = ("PENDULUM", "PENDULUM_DEMO", "PENDULUM_SMALL", "HENON_HEILES", "HENON_HEILES_SMALL")


def _dataclass_params(cls, exclude: Tuple[str, ...]) -> Dict[str, Param]:
    import typing

    hints = typing.get_type_hints(cls)
    # defaults come from the preset at run time; declared optional here
    return {f.name: Param(hints[f.name], None, "") for f in dataclasses.fields(cls) if f.name not in exclude}


def _shadow_params() -> Dict[str, Param]:
    from pipelines.shadow_experiments import ExperimentConfig

    out = {"preset": Param(str, "PENDULUM_SMALL", f"the defaults: one of {', '.join(SHADOW_PRESETS)}"),
           "seed": Param(int, 0, "replicate index; the data seed derives from all parameters"),
           "baselines": Param(bool, False, "also fit LGP and LGPExact")}
    out.update(_dataclass_params(ExperimentConfig, ("data_seed", "progress")))
    return out


def _tuples(value: Any, hint: Any) -> Any:
    """TOML lists as the tuples a frozen configuration expects (recursively where the hint says tuple)."""
    import collections.abc
    import typing

    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        inner = [a for a in args if a is not type(None)]
        return _tuples(value, inner[0]) if len(inner) == 1 and value is not None else value
    if isinstance(value, list):
        if origin is tuple:
            elem = args[0] if args and (len(args) == 2 and args[1] is Ellipsis) else None
            return tuple(_tuples(v, elem if elem is not None else (args[i] if i < len(args) else Any))
                         for i, v in enumerate(value))
        if origin in (list, collections.abc.Sequence):
            elem = args[0] if args else Any
            return tuple(_tuples(v, elem) for v in value)
    return value


def _overrides(p: Dict[str, Any], cls, skip: Tuple[str, ...]) -> Dict[str, Any]:
    import typing

    hints = typing.get_type_hints(cls)
    return {k: _tuples(v, hints[k]) for k, v in p.items() if k not in skip and v is not None}


def _positive(p: Dict[str, Any], ints: Tuple[str, ...], floats: Tuple[str, ...]) -> None:
    for k in ints:
        if p.get(k) is not None and p[k] < 1:
            raise ParamError(k, f"{k} must be >= 1, got {p[k]}")
    for k in floats:
        if p.get(k) is not None and not (p[k] > 0 and math.isfinite(p[k])):
            raise ParamError(k, f"{k} must be a positive finite number, got {p[k]}")


def _shadow_check(p: Dict[str, Any]) -> None:
    if p["preset"] not in SHADOW_PRESETS:
        raise ParamError("preset", f"unknown preset {p['preset']!r} (one of {', '.join(SHADOW_PRESETS)})")
    if p["seed"] < 0:
        raise ParamError("seed", f"seed must be >= 0, got {p['seed']}")
    if p.get("system") is not None:
        from integrators import systems

        if not callable(getattr(systems, p["system"], None)) or p["system"].startswith("_"):
            raise ParamError("system", f"unknown system {p['system']!r}: a function in integrators.systems")
    _positive(p, ("n_traj", "steps", "validation_traj", "level_points"), ("h",))
    if p.get("n_steps") is not None and p["n_steps"] < 2:
        raise ParamError("n_steps", f"n_steps must be >= 2 (one DEL triple needs three positions), got {p['n_steps']}")


def _shadow_run(p: Dict[str, Any], seed: int) -> TaskOutput:
    from pipelines import shadow_experiments as experiments

    base = getattr(experiments, p["preset"])
    over = _overrides(p, experiments.ExperimentConfig, ("preset", "seed", "baselines"))
    cfg = dataclasses.replace(base, **over, data_seed=seed, progress=False)
    res = experiments.run(cfg, baselines=p["baselines"], log=None)
    info = {k: _jsonable(v) for k, v in res.info.items() if k not in ("levels", "level_states")}
    return TaskOutput({k: _number(v) for k, v in res.metrics.items()}, _jsonable(dataclasses.asdict(cfg)),
                      {k: float(v) for k, v in res.timings.items()}, info)


# --------------------------------------------------------------------------------------- modlanet
def _modlanet_params() -> Dict[str, Param]:
    from pipelines.modlanet_experiments import ModLaNetConfig

    out = {"preset": Param(str, "small", "the defaults: 'small' (minutes) or 'full' (hours)"),
           "system": Param(str, "double_pendulum", "'double_pendulum' or 'three_body'"),
           "seed": Param(int, 0, "replicate index; the model and data seed derives from all parameters")}
    out.update(_dataclass_params(ModLaNetConfig, ("seed", "progress", "system")))
    return out


def _modlanet_check(p: Dict[str, Any]) -> None:
    if p["preset"] not in ("small", "full"):
        raise ParamError("preset", f"preset must be 'small' or 'full', got {p['preset']!r}")
    if p["system"] not in ("double_pendulum", "three_body"):
        raise ParamError("system", f"system must be 'double_pendulum' or 'three_body', got {p['system']!r}")
    if p["seed"] < 0:
        raise ParamError("seed", f"seed must be >= 0, got {p['seed']}")
    _positive(p, ("epochs", "baseline_epochs", "batch_size", "n_states", "hidden", "del_n_traj", "del_epochs"),
              ("lr", "t_rollout", "dt_out", "del_h"))


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


_ROW_METRICS = ("mse_q", "mse_E", "paper_q", "paper_E", "failed", "states", "params")


def _row_metrics(prefix: str, row: Dict[str, Any], out: Dict[str, Any]) -> None:
    for k in _ROW_METRICS:
        if k in row:
            out[f"{prefix}.{k}"] = _number(row[k])
    if "train_val" in row:
        out[f"{prefix}.val_initial"], out[f"{prefix}.val_best"] = (float(v) for v in row["train_val"])


def _modlanet_run(p: Dict[str, Any], seed: int) -> TaskOutput:
    from pipelines import modlanet_experiments as ME

    base = (ME.SMALL if p["preset"] == "small" else ME.FULL)[p["system"]]
    over = _overrides(p, ME.ModLaNetConfig, ("preset", "seed", "system"))
    cfg = dataclasses.replace(base, **over, seed=seed, progress=False)
    res = ME.run(cfg, log=lambda s: None)
    metrics: Dict[str, Any] = {}
    for row in res["rows"]:
        _row_metrics(_slug(row["model"]), row, metrics)
    po = res.get("position_only")
    if po:
        _row_metrics("positions_del", po, metrics)
        for N, v in po["level_set"].items():
            metrics[f"positions_del.level_set_N{N}"] = float(v)
        for N, v in po["energy_band"].items():
            metrics[f"positions_del.energy_band_N{N}"] = float(v)
        for key in ("rk4", "variational"):
            if po.get(key):
                _row_metrics(f"positions_{key}", po[key], metrics)
    for e in res.get("extension", []):
        for stage in ("direct", "finetuned"):
            if stage in e:
                for k in ("mse_q", "mse_E", "paper_E", "max_energy_deviation", "failed"):
                    metrics[f"extension{e['elements']}.{stage}.{k}"] = _number(e[stage][k])
    return TaskOutput(metrics, _jsonable(dataclasses.asdict(cfg)), {k: float(v) for k, v in res["timings"].items()},
                      {"train_epochs": res["train"].epochs_run})


register(Kind("convergence", _convergence_params, _convergence_run, _convergence_check, x="h", metrics=("error",),
              slopes=True))
register(Kind("shadow", _shadow_params, _shadow_run, _shadow_check, x="n_traj",
              metrics=("traj_lsi", "ls_rec2", "heldout_rms")))
register(Kind("modlanet", _modlanet_params, _modlanet_run, _modlanet_check, x="n_traj",
              metrics=("modlanet.mse_q", "modlanet.mse_E")))
