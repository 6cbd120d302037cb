"""Which of the refined structure's solves a cheaper search could skip, read off one default fit's traces (issue 23
item 5, Session 23): no search is re-run, so every row is exact only where its rule leaves the path a prefix of the
one taken. Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/refinement_whatif.py --system fpu6 [--save h.json]
    PYTHONPATH=. python3 benchmarks/refinement_whatif.py --history h.json

Prints the refined structure's basins, its tied refinement (stage 2), correction scan (2b) and untied search (3), each
value marked ``*`` where it improved, then three what-ifs:

- **untied budget k**: the coordinate search checks its budget before each trial, so a budget of ``k`` takes the first
  ``k`` trials of this path and ends at their lowest value: the refined value's change, relative;
- **tied stop**: the tied stage ending at its first failing trial after an improvement: the path is this one's prefix,
  and stages 2b-3 start from the same point (the same fit) only where the tied stage's best came before that stop;
- **scan stop**: the correction scan ending at the first scale worse than the one before: the same choice where the
  lowest scale came before that stop.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings


def _fit_history(name: str) -> dict:
    """The default fit of acceptance system ``name`` (seed 0, 5 steps; as structure_fit_cost.py): its history."""
    import tests.test_learners_shadow_auto as A
    from benchmarks.identification_acceptance import UNTUNED
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP

    systems = {make.__name__: (make, h, T) for make, h, T in A.SYSTEMS + A.UNTUNED + UNTUNED}
    make, h, T = systems[name]
    started = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = InverseModifiedLagrangianGP(h, progress=False).fit(snapshots(make(), h, T, 5, seed=0))
    print(f"fit CPU s {time.process_time() - started:.1f}")
    return json.loads(json.dumps(model.history, default=lambda x: x.tolist() if hasattr(x, "tolist") else repr(x)))


def _marked(start: float, values: list) -> str:
    best, out = start, []
    for v in values:
        out.append(f"{v:.4f}{'*' if v < best else ''}")
        best = min(best, v)
    return " ".join(out)


def _first_stop(start: float, values: list, after_improvement: bool) -> int:
    """How many of ``values`` a stop rule takes: up to the first value not below the best so far (after an
    improvement only, with ``after_improvement``); all where none."""
    best, improved = start, False
    for k, v in enumerate(values):
        if v < best:
            best, improved = v, True
        elif improved or not after_improvement:
            return k + 1
    return len(values)


def report(history: dict) -> None:
    kept = history.get("structure_kept")
    print(f"kept {kept}; default refined {history.get('default_objective')}")
    record = history.get("structures", {}).get(kept) if kept else None
    if record is None:
        refined = [k for k, r in history.get("structures", {}).items() if "refined" in r]
        record = history["structures"][refined[0]] if refined else None
    if record is None:
        print("no structure refined: nothing to read")
        return
    h = record["history"]
    print("basins (ell_q, ell_v, subset, full):", [tuple(round(x, 4) for x in b) for b in h["basins"][-1]])
    tied = h["search"]
    print("tied:", f"{tied[0]:.4f} |", _marked(tied[0], tied[1:]))
    scan = h.get("correction_scan", [])
    if scan:
        print("scan:", f"{scan[0]:.4f} |", _marked(scan[0], scan[1:]))
    untied, start = h["search_untied"], min([tied[0]] + tied[1:] + scan)
    print("untied:", f"{start:.4f} |", _marked(start, untied))
    refined = min([start] + untied)
    for k in range(len(untied), 0, -1):
        value = min([start] + untied[:k])
        print(f"untied budget {k:>2}: refined {value:.6f}, relative change {abs(value - refined) / abs(refined):.2e}")
    stop = _first_stop(tied[0], tied[1:], True)
    same = min(tied[1:1 + stop] + [tied[0]]) == min(tied)
    print(f"tied stop: takes {stop} of {len(tied) - 1} trials ({len(tied) - 1 - stop} fewer, revisits included); "
          f"same start of stages 2b-3: {same}")
    if scan:
        stop = _first_stop(scan[0], scan[1:], False)
        same = min(scan[:1 + stop]) == min(scan)
        print(f"scan stop: takes {stop} of {len(scan) - 1} scales; same choice: {same}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system")
    ap.add_argument("--history", help="a history saved by --save (no fit)")
    ap.add_argument("--save")
    args = ap.parse_args(argv)
    if args.history:
        with open(args.history) as f:
            history = json.load(f)
    else:
        history = _fit_history(args.system)
    if args.save:
        with open(args.save, "w") as f:
            json.dump(history, f)
    if not math.isfinite(float(history.get("objective", math.nan))):
        print("the fit's objective is not finite")
    report(history)


if __name__ == "__main__":
    main()
