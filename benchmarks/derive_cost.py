"""The CLI's cost estimates against measured times: ``bea derive`` at orders 2-8, n = 1, 2, 3 and dimension-free.

    OMP_NUM_THREADS=1 python3 benchmarks/derive_cost.py [--json docs/data/derive_cost.json] [--max-seconds 600]

Each derivation runs as ``bea derive`` runs it (``bea.modified_lagrangian`` or ``bea.inverse_modified_lagrangian``
of the midpoint rule, with ``dim`` or without), in a fresh process with an empty cache, and is timed by the CPU
time of that process (the engine is single-threaded Python, so CPU time is what an idle core's wall clock would
show; on a busy machine the wall time is longer by the load, which the table states). A combination predicted to
take more than ``--max-seconds`` is not run, and the table says so. Prints predicted, measured and their ratio; the
acceptance (issue 25) is a ratio within 2x on every row. ``--json`` writes the rows for
``python3 -m pipelines.report_tables``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bea.cost import estimate  # noqa: E402
from bea.files import atomic_write_text  # noqa: E402

CHILD = r"""
import json, sys, time
import bea
kind, order, dim = sys.argv[1], int(sys.argv[2]), None if sys.argv[3] == "any" else int(sys.argv[3])
c0, t0 = time.process_time(), time.perf_counter()
getattr(bea, kind)("midpoint", order, n=dim, cache=False)
print(json.dumps({"cpu": time.process_time() - c0, "wall": time.perf_counter() - t0}))
"""
KINDS = ("modified_lagrangian", "inverse_modified_lagrangian")
CASES = [(None, o) for o in (2, 4, 6, 8)] + [(1, o) for o in (2, 4, 6, 8)] + [(2, o) for o in (2, 4, 6, 8)] + \
        [(3, o) for o in (2, 4, 6, 8)]


def load() -> float:
    return round(os.getloadavg()[0], 2)


def cold(kind: str, order: int, dim, timeout: float) -> dict:
    env = dict(os.environ, BEA_CACHE_DIR=tempfile.mkdtemp(prefix="bea-cost-"), OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", CHILD, kind, str(order), "any" if dim is None else str(dim)],
                       capture_output=True, text=True, timeout=timeout, env=env)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def row(kind: str, dim, order: int, max_seconds: float, force: bool = False) -> dict:
    predicted, basis = estimate(kind, order, dim)
    out = {"kind": kind.replace("_lagrangian", ""), "dim": dim, "order": order, "predicted": predicted, "basis": basis,
           "measured": None, "wall": None, "note": None}
    if not force and (predicted is None or predicted > max_seconds):
        out["note"] = f"not run: predicted over {max_seconds / 60:.0f} min"
        return out
    # wall-clock limit: 4x the prediction (a busy machine), at least a minute, at most --max-seconds when forced
    limit = max_seconds if predicted is None else max(4 * predicted, 60.0)
    try:
        t = cold(kind, order, dim, timeout=limit)
    except subprocess.TimeoutExpired:
        out["note"] = f"over {limit / 60:.0f} min wall (stopped)"
        return out
    out["measured"], out["wall"] = round(t["cpu"], 3), round(t["wall"], 3)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the rows here (for pipelines.report_tables)")
    ap.add_argument("--max-seconds", type=float, default=600.0, help="skip combinations predicted to take longer")
    ap.add_argument("--dims", nargs="+", default=["any", "1", "2", "3"], help="any (dimension-free) and/or n values")
    ap.add_argument("--orders", type=int, nargs="+", default=[2, 4, 6, 8])
    ap.add_argument("--force", action="store_true", help="run combinations predicted over --max-seconds too, stopping "
                    "each after --max-seconds of wall time")
    ap.add_argument("--merge", help="update the rows of this JSON (the same --json file) instead of starting anew")
    args = ap.parse_args(argv)
    dims = [None if d == "any" else int(d) for d in args.dims]
    load_before, rows = load(), []
    print(f"{'kind':<18} {'n':>4} {'order':>5} {'predicted s':>12} {'measured s (CPU)':>17} {'wall s':>8} {'ratio':>7}")
    for dim, order in CASES:
        if dim not in dims or order not in args.orders:
            continue
        for kind in KINDS:
            r = row(kind, dim, order, args.max_seconds, args.force)
            rows.append(r)
            ratio = f"{r['measured'] / r['predicted']:.2f}x" if r["measured"] is not None and r["predicted"] else "-"
            meas = f"{r['measured']:.3g}" if r["measured"] is not None else r["note"]
            print(f"{r['kind']:<18} {'any' if dim is None else dim:>4} {order:>5} {r['predicted'] or float('nan'):>12.3g} "
                  f"{meas:>17} {r['wall'] or float('nan'):>8.3g} {ratio:>7}", flush=True)
    ratios = [r["measured"] / r["predicted"] for r in rows if r["measured"] is not None]
    ok = all(0.5 <= x <= 2.0 for x in ratios)
    span = f"ratios {min(ratios):.2f}-{max(ratios):.2f}: {'all within 2x' if ok else 'NOT all within 2x'}" if ratios else "none"
    print(f"\n{len(ratios)} measured, {span}; load {load_before}-{load()} on {os.cpu_count()} cores")
    if args.json:
        machine = {"cpus": os.cpu_count(), "load_before": load_before, "load_after": load()}
        if args.merge:  # a second pass over some combinations: keep the others, widen the load range
            old = json.loads(Path(args.merge).read_text(encoding="utf-8"))
            done = {(r["kind"], r["dim"], r["order"]) for r in rows}
            rows = [r for r in old["rows"] if (r["kind"], r["dim"], r["order"]) not in done] + rows
            rows.sort(key=lambda r: (r["dim"] is not None, r["dim"] or 0, r["order"], r["kind"] != "modified"))
            loads = [old["machine"]["load_before"], old["machine"]["load_after"], load_before, machine["load_after"]]
            machine.update(load_before=min(loads), load_after=max(loads))  # the range over both passes
        data = {"machine": machine, "rows": rows}
        atomic_write_text(Path(args.json), json.dumps(data, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
