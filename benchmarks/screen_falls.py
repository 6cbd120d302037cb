"""How far each structure's held-out value falls from its subset grid to all training functionals (issue 23 item 5):
the measurement behind a rule that would skip the screen's full solve of a structure far behind on its subset grid.
Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/screen_falls.py fpu6 two_body4 fpu6@0.45

Per system (seed 0, 5 steps, library defaults; ``name@h`` another step): the default kernels' refined value ``D``, then
per structure its subset grid's lowest value ``grid``, its screen (that point solved with all training functionals),
the fall ``grid - screen`` and ``grid - bound``, the bound being the lower of ``D`` and the screens before it (a skip
rule with constant C would leave out the full solve where ``grid - bound >= C``, and is safe only where every fall
stays below C); then the default kernels' own falls (each candidate's grid lowest minus its full solve at that point).
The fit stops after the screens (no structure is refined), so a system costs the default search and the screens."""

from __future__ import annotations

import argparse
import math
import time
import warnings


class _Stop(Exception):
    """Raised after the screens: the rest of the fit is not needed here."""


def _lowest(grid) -> float:
    return min((g[2] for g in grid if math.isfinite(g[2])), default=math.inf)


def _stop_after_screens(rows: list):
    """A stand-in for structure_choice.choose_structure: the screens only, their numbers appended to ``rows``."""
    import learners.shadow.structure_choice as SC

    def choose(model, args, found):
        history, records = model.history, {}
        SC._screen(model, args, args[0].dim, records)
        default = [(name, _lowest(history[key]), full) for key, name, full in zip(
            [k for k in history if k.startswith("grid")], history["normalisation_candidates"],
            history["normalisation_values"])]
        screens = [(name, _lowest(r["history"].get("grid", []) + r["history"].get("grid_alt", [])), r.get("screen"))
                   for name, r in records.items()]
        rows.append((history["objective"], screens, default))
        raise _Stop
    return choose


def main(argv=None) -> None:
    import learners.shadow.structure_choice as SC
    import tests.test_learners_shadow_auto as A
    from benchmarks.identification_acceptance import UNTUNED
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP

    systems = {make.__name__: (make, h, T) for make, h, T in A.SYSTEMS + A.UNTUNED + UNTUNED}
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("system", nargs="+", help="name or name@h")
    args = ap.parse_args(argv)
    rows = []
    SC.choose_structure = _stop_after_screens(rows)
    for spec in args.system:
        name, _, step = spec.partition("@")
        make, h, T = systems[name]
        h = float(step) if step else h
        started, before = time.process_time(), len(rows)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                InverseModifiedLagrangianGP(h, progress=False).fit(snapshots(make(), h, T, 5, seed=0))
            except _Stop:
                pass
        if len(rows) == before:  # the fit never reached the structure choice (n <= 2, or no screens): no row of its own
            print(f"{spec} ({T} trajectories, h {h}): no structure screens ran, nothing to measure, "
                  f"CPU s {time.process_time() - started:.0f}")
            continue
        D, screens, default = rows[-1]
        print(f"{spec} ({T} trajectories, h {h}): D {D:.3f}, CPU s {time.process_time() - started:.0f}")
        bound = D
        for structure, grid, screen in screens:
            if screen is None:
                print(f"  {structure:>13}: no screen")
                continue
            print(f"  {structure:>13}: grid {grid:8.3f} screen {screen:8.3f} fall {grid - screen:6.3f} "
                  f"grid - bound {grid - bound:7.3f}")
            bound = min(bound, screen)
        print("  default kernels' falls: " + ", ".join(f"{n} {g - f:.3f}" for n, g, f in default if f is not None))


if __name__ == "__main__":
    main()
