r"""The ``convergence`` task kind (see :mod:`pipelines.sweep.tasks`): one error of
:mod:`integrators.convergence` at one step size ``h``, its parameters, their checks and the expected order."""

from __future__ import annotations

import functools
import math
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from .kinds import REQUIRED, Kind, Param, ParamError, TaskOutput, register

__all__ = ["CONVERGENCE_SYSTEMS", "CONVERGENCE_EXPERIMENTS", "expected_order"]

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
        "order": Param(int, 0, "truncation order of the correction (even for symmetric schemes; unused by 'exact')"),
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
    if p["order"] < 0:
        raise ParamError("order", f"order must be >= 0, got {p['order']}")
    if p["experiment"] != "exact" and scheme.symmetric and p["order"] % 2:
        raise ParamError("order", f"{p['scheme']} is symmetric (only even powers of h): order must be even, got {p['order']}")
    for key in ("h", "T"):
        if not (p[key] > 0 and math.isfinite(p[key])):
            raise ParamError(key, f"{key} must be a positive finite number, got {p[key]}")
    if not math.isfinite(p["T"] / p["h"]):
        raise ParamError("h", f"T / h = {p['T']} / {p['h']} overflows: T must be a multiple (>= 2) of h, a step count "
                              "that can be run")
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
    return p["order"] + (2 if symmetric else 1)


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
        errors = fn(system, p["scheme"], p["order"], hs, p["T"], q0t, v0t, formula=p["formula"], start=p["start"])
    else:
        errors = fn(system, p["scheme"], p["order"], hs, p["T"], q0t, v0t)
    timings = {"experiment": time.perf_counter() - t}
    config = dict(p, q0=q0, qdot0=v0)
    return TaskOutput({"error": float(errors[0])}, config, timings, {"expected_order": expected_order(p)})


register(Kind("convergence", _convergence_params, _convergence_run, _convergence_check, x="h", metrics=("error",),
              slopes=True, renamed=(("N", "order"),)))
