r"""The ``shadow`` and ``modlanet`` task kinds (see :mod:`pipelines.sweep.tasks`): one run of
:func:`pipelines.shadow_experiments.run` or :func:`pipelines.modlanet_experiments.run` from a preset, any field of
its configuration overridden by the task's parameters, and the metrics flattened to numbers."""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Dict, Tuple

from .kinds import Kind, Param, ParamError, TaskOutput, register

__all__ = ["SHADOW_PRESETS"]


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
register(Kind("shadow", _shadow_params, _shadow_run, _shadow_check, x="n_traj",
              metrics=("traj_lsi", "ls_rec2", "heldout_rms")))
register(Kind("modlanet", _modlanet_params, _modlanet_run, _modlanet_check, x="n_traj",
              metrics=("modlanet.mse_q", "modlanet.mse_E")))
