"""Cold derivation times of the stage schemes (issue 26) beside the midpoint rule, measured in the same run.

    PYTHONPATH=. python benchmarks/derive_stages.py [--orders 4 6] [--timeout 600]

The dimension-free engine (benchmarks/derive_free.py) cannot hold the interior points of a stage scheme, so
these are derivations of the component engine: the generic L in dimension 1, and the concrete Henon-Heiles
Lagrangian (n = 2), each in a fresh subprocess with an empty cache, modified plus inverse modified
Lagrangian to h^order (for galerkin2, 2s = 4 and 2s + 2 = 6). Ratios are stage scheme / midpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
import bea
from integrators import systems
scheme, order, case = sys.argv[1], int(sys.argv[2]), sys.argv[3]
kw = {"n": 1} if case == "generic n=1" else dict(zip(("lagrangian", "q", "v"), (lambda s: (s.expr, list(s.q), list(s.v)))(systems.henon_heiles())))
t0 = time.perf_counter(); bea.modified_lagrangian(scheme, order, cache=False, **kw); t1 = time.perf_counter()
bea.inverse_modified_lagrangian(scheme, order, cache=False, **kw); t2 = time.perf_counter()
print(json.dumps({"mod": t1 - t0, "inv": t2 - t1}))
"""


def cold(scheme: str, order: int, case: str, timeout: float):
    env = dict(os.environ, BEA_CACHE_DIR=tempfile.mkdtemp(prefix="bea-bench-"))
    try:
        r = subprocess.run([sys.executable, "-c", CHILD, scheme, str(order), case], capture_output=True, text=True,
                           timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None
    if r.returncode:
        raise SystemExit(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, nargs="+", default=[4, 6])
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    print("| case | order | midpoint mod + inv (s) | galerkin2 mod + inv (s) | ratio |")
    print("| --- | --- | --- | --- | --- |")
    for case in ("concrete Henon-Heiles", "generic n=1"):
        for order in args.orders:
            mid, g2 = cold("midpoint", order, case, args.timeout), cold("galerkin2", order, case, args.timeout)
            tm = None if mid is None else mid["mod"] + mid["inv"]
            tg = None if g2 is None else g2["mod"] + g2["inv"]
            show = lambda t: f"over {args.timeout:.0f}" if t is None else f"{t:.1f}"  # noqa: E731
            ratio = f"{tg / tm:.1f}x" if tm and tg else "-"
            print(f"| {case} | {order} | {show(tm)} | {show(tg)} | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
