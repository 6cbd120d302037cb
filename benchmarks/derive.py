"""Benchmark of the symbolic engine: cold derivation, cache load and torch evaluation.

    python benchmarks/derive.py [--timeout SECONDS] [--quick]

Prints a table. Each cold derivation (modified + inverse modified Lagrangian, midpoint, generic L)
runs in a fresh subprocess with an empty cache, so nothing is shared between rows; a row that
exceeds ``--timeout`` is reported as such. Targets (issue #2): n=1 order 8 <= 20 s, n=2 order 4
<= 30 s, cache load <= 1 s, 1e5-point evaluation of the h^4 modified pendulum Lagrangian <= 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, os, sys, time
import bea
from bea.api import generic_raw
n, order = int(sys.argv[1]), int(sys.argv[2])
t0 = time.perf_counter(); m = generic_raw("modified_lagrangian", "midpoint", order, n, cache=False, allow_slow=True); t1 = time.perf_counter()
i = generic_raw("inverse_modified_lagrangian", "midpoint", order, n, cache=False, allow_slow=True); t2 = time.perf_counter()
print(json.dumps({"mod": t1 - t0, "inv": t2 - t1, "terms_mod": len(m.coeffs[order]), "terms_inv": len(i.coeffs[order])}))
"""

CASES = [(1, o) for o in (2, 4, 6, 8, 10)] + [(2, o) for o in (2, 4, 6)] + [(3, o) for o in (2, 4)]
TARGETS = {(1, 8): 20.0, (2, 4): 30.0}


def cold(n: int, order: int, timeout: float):
    env = dict(os.environ, BEA_CACHE_DIR=tempfile.mkdtemp(prefix="bea-bench-"))
    try:
        r = subprocess.run([sys.executable, "-c", CHILD, str(n), str(order)], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


def cache_and_eval():
    import torch

    import bea

    os.environ["BEA_CACHE_DIR"] = tempfile.mkdtemp(prefix="bea-bench-")
    bea.compile_torch("modified_lagrangian", "midpoint", 4, 1)  # derive + generate + write
    t0 = time.perf_counter()
    f = bea.compile_torch("modified_lagrangian", "midpoint", 4, 1)  # load only
    t_load = time.perf_counter() - t0
    torch.manual_seed(0)
    q = torch.rand(100_000, 1, dtype=torch.float64) * 6 - 3
    v = torch.rand(100_000, 1, dtype=torch.float64) * 4 - 2

    def L(q, v):
        return 0.5 * (v**2).sum(-1) + torch.cos(q).sum(-1)

    f(L, q[:10], v[:10], 0.1)  # warm-up
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        out = f(L, q, v, 0.1)
        best = min(best, time.perf_counter() - t0)
    assert torch.isfinite(out).all()
    return t_load, best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per cold-derivation row (default 900)")
    ap.add_argument("--quick", action="store_true", help="only the rows with targets and the small ones")
    args = ap.parse_args()
    cases = [c for c in CASES if not args.quick or c in TARGETS or c[1] <= 4]
    print(f"{'n':>2} {'order':>5} {'modified [s]':>13} {'inverse [s]':>12} {'total [s]':>10} {'terms h^N':>10} {'target':>8}")
    for n, order in cases:
        r = cold(n, order, args.timeout)
        target = TARGETS.get((n, order))
        tgt = f"<= {target:.0f}s" if target else ""
        if r is None:
            print(f"{n:>2} {order:>5} {'> ' + str(int(args.timeout)) + ' s (timed out)':>37} {'':>10} {tgt:>8}", flush=True)
            continue
        total = r["mod"] + r["inv"]
        ok = "" if target is None else (" ok" if total <= target else " MISSED")
        print(f"{n:>2} {order:>5} {r['mod']:>13.2f} {r['inv']:>12.2f} {total:>10.2f} {r['terms_mod']:>10d} {tgt:>8}{ok}", flush=True)
    t_load, t_eval = cache_and_eval()
    print()
    print(f"cache load of the h^4 midpoint torch function: {t_load * 1e3:8.1f} ms   (target <= 1000 ms)")
    print(f"h^4 modified pendulum Lagrangian at 1e5 points: {t_eval * 1e3:8.1f} ms   (target <= 2000 ms)")


if __name__ == "__main__":
    main()
