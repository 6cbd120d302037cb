"""One acceptance system of tests/test_learners_shadow_auto.py fitted with the library defaults (seed 0, 5 steps), as
the variance benchmarks take it from their command line (``--system``, ``--kernel``, ``--order``)."""

from __future__ import annotations

import argparse
import warnings


def fitted_system(argv, description: str, *, system=None, kernel: str, order: int):
    """``(args, A, system, model)``: the parsed arguments, the test module with the systems and held-out states, the
    chosen system and its fitted model. ``system=None`` makes ``--system`` required."""
    import tests.test_learners_shadow_auto as A
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP

    systems = {make.__name__: (make, h, T) for make, h, T in A.SYSTEMS + A.UNTUNED}
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--system", choices=sorted(systems), required=system is None, default=system)
    ap.add_argument("--kernel", default=kernel)
    ap.add_argument("--order", type=int, default=order)
    args = ap.parse_args(argv)
    make, h, T = systems[args.system]
    chosen = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = InverseModifiedLagrangianGP(h, progress=False, kernel=args.kernel).fit(snapshots(chosen, h, T, 5, seed=0))
    return args, A, chosen, model


def acceptance_system(name: str, h=None):
    """``(system, h, trajectories)`` of the acceptance system ``name`` (tests/test_learners_shadow_auto.py's and
    identification_acceptance.py's untuned ones), its step replaced by ``h`` where given (the benchmarks/ folder
    and the repository root on sys.path)."""
    import identification_acceptance as IA
    import tests.test_learners_shadow_auto as A

    systems = {make.__name__: (make, step, T) for make, step, T in A.SYSTEMS + A.UNTUNED + IA.UNTUNED}
    make, step, T = systems[name]
    return make(), h or step, T


def structure_report(history: dict) -> dict:
    """``kernel="auto"``'s element structures from a fit's ``history``: per structure its screen, refinement, CPU
    seconds, error or reason skipped, and a refined structure's degenerate scales (``DEGENERATE_MARGIN``)."""
    fields = ("screen", "refined", "screen_cpu_s", "refine_cpu_s", "error", "skipped")
    out = {k: {x: r[x] for x in fields if r.get(x) is not None} for k, r in history.get("structures", {}).items()}
    for k, r in history.get("structures", {}).items():
        if "refined" in r:
            out[k]["degenerate_scales"] = r["history"].get("degenerate_scales")
    return out
