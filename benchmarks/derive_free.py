"""Benchmark of the dimension-free engine: cold derivations and torch evaluation for any n.

    python benchmarks/derive_free.py [--orders 2 4 6 8] [--timeout 1200] [--dims 1 2 3 6 12 24 48]

Table 1: cold derivation (fresh subprocess, empty cache) of the modified plus inverse modified
Lagrangian for the generic L, midpoint and trapezoidal, with the number of terms (trees) of the
top coefficient. Table 1b (--stages [--stage-cpu 600] [--stage-skip galerkin3:8:generic]): the stage
schemes at orders 2s and 2s + 2 beside the midpoint rule: the dimension-free derivation (once for every n;
galerkin2 with rational constants, galerkin3 and the triple jump with constants in a radical extension), and cold component-engine derivations: the concrete coupled oscillators
with n = 3 (the closed-form test's system) and the generic L with n = 1, wall and CPU seconds, and the midpoint
rule's generic n = 1 and dimension-free times at the same order. Table 1c (--stage-free [SCHEME:ORDER ...]
[--stage-mem-gb 6]): the dimension-free stage derivations alone with CPU seconds and peak memory, the Lagrangians and the
modified equation. Results: benchmarks/RESULTS_derive.md. Table 2: evaluation of the modified Lagrangian of order 2, 4, 6 at 10^4 points of a
chain of n pendula (position-dependent mass, 1/2 v^T M(q) v with M_jk = (n - max(j,k)) cos(q_j - q_k)),
beside the component code where it exists (n <= 2), as a ratio measured in the same run. From
n = 24 on the points are 10^3 (--large-points), and order 6 stops at n = 12 (--max-n-order6): the
cost per point grows like n^3 (n passes for M, each over the O(n^2) chain Lagrangian). The growth
with n is fitted as time per point ~ n^p over n >= 6.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, sys, time
from bea.api import free_raw
scheme, order = sys.argv[1], int(sys.argv[2])
t0 = time.perf_counter(); m = free_raw("modified_lagrangian", scheme, order, cache=False, allow_slow=True); t1 = time.perf_counter()
i = free_raw("inverse_modified_lagrangian", scheme, order, cache=False, allow_slow=True); t2 = time.perf_counter()
print(json.dumps({"mod": t1 - t0, "inv": t2 - t1, "terms_mod": len(m.coeffs[order]), "terms_inv": len(i.coeffs[order])}))
"""

CHILD_STAGE = r"""
import json, os, resource, signal, sys, time
import bea, sympy
from bea.errors import UnsupportedSchemeError
from integrators import systems
scheme, order, case = sys.argv[1], int(sys.argv[2]), sys.argv[3]

reserve = bytearray(64 << 20)  # released at a limit, so that the report itself can be written


def stopped(*_):  # at the CPU limit (SIGXCPU) or the memory limit: report how far it got, then stop
    global reserve
    reserve = None
    print(json.dumps({"stopped": True, "cpu": time.process_time() - c0,
                      "rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}), flush=True)
    os._exit(0)

signal.signal(signal.SIGXCPU, stopped)
if case.startswith("free"):  # dimension-free: derived once for every n
    kw = {}
elif case == "generic":
    kw = {"n": 1}
else:  # coupled oscillators, n = 3, non-diagonal stiffness (the closed-form test's system)
    s = systems.coupled_oscillators(3, coupling=sympy.Rational(1, 3))
    kw = {"lagrangian": s.expr, "q": list(s.q), "v": list(s.v)}
w0, c0 = time.perf_counter(), time.process_time()
try:
    if case == "free-equation":  # the dimension-free modified equation alone
        m = bea.modified_equation(scheme, order, cache=False, allow_slow=True)
    else:
        m = bea.modified_lagrangian(scheme, order, cache=False, allow_slow=True, **kw)
        i = bea.inverse_modified_lagrangian(scheme, order, cache=False, allow_slow=True, **kw)
except UnsupportedSchemeError:  # constants no exact engine represents
    print(json.dumps({"refused": True}))
    sys.exit(0)
except MemoryError:
    stopped()
print(json.dumps({"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0,
                  "rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                  "terms": len(m.raw.coeffs[order]) if case.startswith("free") else None}))
"""
#: scheme -> its order 2s; derived at 2s and 2s + 2
STAGE_SCHEMES = {"galerkin2": 4, "triple_jump": 4, "galerkin3": 6}


def cold(scheme: str, order: int, timeout: float, child: str = CHILD, *extra: str, cpu_limit: float = 0.0, mem_gb: float = 0.0):
    """One derivation in a fresh process with an empty cache; ``None`` past ``timeout`` wall seconds or, when
    ``cpu_limit`` is set, past that many CPU seconds (RLIMIT_CPU: a limit that does not depend on the load of a
    shared machine; the wall timeout is then only a backstop). ``mem_gb``: an address-space limit (RLIMIT_AS). A
    stage child stopped at either limit reports ``{"stopped": True, "cpu": ..., "rss_gb": ...}``."""
    env = dict(os.environ, BEA_CACHE_DIR=tempfile.mkdtemp(prefix="bea-bench-"))

    def limit_cpu():
        import resource

        resource.setrlimit(resource.RLIMIT_CPU, (int(cpu_limit), int(cpu_limit) + 5))
        if mem_gb:  # the machine is shared: a derivation that outgrows this stops (MemoryError) instead of swapping
            resource.setrlimit(resource.RLIMIT_AS, (int(mem_gb * 2**30), int(mem_gb * 2**30)))

    try:
        r = subprocess.run([sys.executable, "-c", child, scheme, str(order), *extra], capture_output=True, text=True,
                           timeout=timeout, env=env, preexec_fn=limit_cpu if cpu_limit else None)
    except subprocess.TimeoutExpired:
        return None
    if cpu_limit and r.returncode < 0:  # SIGXCPU / SIGKILL from the CPU limit
        return None
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


def free_stage_rows(cpu: float, mem_gb: float, rows, equation_max: int = 4) -> int:
    """Table 1c: the dimension-free stage derivations alone, each a fresh process with an empty cache: the modified
    plus the inverse modified Lagrangian, and the modified equation, to ``h^order`` for each ``(scheme, order)`` of
    ``rows``: CPU seconds, peak resident memory (``ru_maxrss`` of the child) and the terms of the top coefficient. The
    modified equation is run only to ``h^equation_max`` (above, it costs more than the Lagrangians of the same order:
    the Lagrangians need it only two orders lower)."""
    print(f"Limit per run: {cpu:.0f} CPU seconds, address space {mem_gb or 'unlimited'} GB.\n")
    print("| scheme | order | mod + inv: CPU s | peak GB | top terms | modified equation: CPU s | peak GB |")
    print("|---|---|---|---|---|---|---|")

    def cells(r):
        if r is None:
            return [f"> {cpu:.0f} (limit)", "-", "-"]
        if r.get("refused"):
            return ["refused (cost guard)", "-", "-"]
        if r.get("stopped"):
            return [f"> {r['cpu']:.0f} (stopped)", f"{r['rss_gb']:.2f}", "-"]
        return [f"{r['cpu']:.2f}", f"{r['rss_gb']:.2f}", str(r["terms"])]

    for scheme, order in rows:
        lag = cells(cold(scheme, order, 20 * cpu, CHILD_STAGE, "free", cpu_limit=cpu, mem_gb=mem_gb))
        eq = cells(cold(scheme, order, 20 * cpu, CHILD_STAGE, "free-equation", cpu_limit=cpu, mem_gb=mem_gb)) \
            if order <= equation_max else ["not run", "-"]
        print(f"| {scheme} | {order} | {' | '.join(lag)} | {eq[0]} | {eq[1]} |", flush=True)
    return 0


def pendulum_chain(n: int):
    import torch

    idx = torch.arange(n)
    weight = (n - torch.maximum(idx[:, None], idx[None, :])).to(torch.float64)

    def L(q, v):
        M = weight * torch.cos(q[..., :, None] - q[..., None, :])
        T = 0.5 * (v[..., :, None] * M * v[..., None, :]).sum((-1, -2))
        U = -((n - idx).to(q.dtype) * torch.cos(q)).sum(-1)
        return T - U

    return L


def timed(f, *args, repeat: int = 1) -> float:
    f(*args)  # warm-up (allocations, first autograd graph)
    t0 = time.perf_counter()
    for _ in range(repeat):
        f(*args)
    return (time.perf_counter() - t0) / repeat


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, nargs="+", default=[2, 4, 6, 8])
    ap.add_argument("--timeout", type=float, default=1200.0)
    ap.add_argument("--dims", type=int, nargs="+", default=[1, 2, 3, 6, 12, 24, 48])
    ap.add_argument("--points", type=int, default=10_000)
    ap.add_argument("--large-n", type=int, default=24, help="from this n on, evaluate at --large-points points")
    ap.add_argument("--large-points", type=int, default=1_000)
    ap.add_argument("--max-n-order6", type=int, default=12, help="largest n evaluated at order 6")
    ap.add_argument("--skip-cold", action="store_true")
    ap.add_argument("--stages", action="store_true", help="only table 1b: the stage schemes (issue 26)")
    ap.add_argument("--stage-cpu", type=float, default=600.0, help="CPU seconds per stage derivation (table 1b)")
    ap.add_argument("--stage-skip", nargs="+", default=[], metavar="SCHEME:ORDER:CASE",
                    help="leave out stage runs, e.g. galerkin3:8:generic (case: concrete or generic)")
    ap.add_argument("--stage-mem-gb", type=float, default=0.0, help="address-space limit per stage derivation, GB (0: none)")
    ap.add_argument("--stage-skip-free", action="store_true", help="table 1b without the midpoint's dimension-free times")
    ap.add_argument("--stage-schemes", nargs="+", default=list(STAGE_SCHEMES), choices=list(STAGE_SCHEMES))
    ap.add_argument("--stage-free", nargs="*", metavar="SCHEME:ORDER",
                    help="only table 1c: dimension-free stage derivations with CPU s and peak memory (default rows: each "
                         "scheme at 2s and 2s + 2, and galerkin2 at 8)")
    ap.add_argument("--stage-free-equation-max", type=int, default=4, help="table 1c: the modified equation to this order")
    args = ap.parse_args(argv)
    if args.stage_free is not None:
        rows = [(a, int(b)) for a, b in (x.split(":") for x in args.stage_free)] or \
            [(sch, o) for sch, two_s in STAGE_SCHEMES.items() for o in (two_s, two_s + 2)] + [("galerkin2", 8)]
        return free_stage_rows(args.stage_cpu, args.stage_mem_gb, rows, args.stage_free_equation_max)
    if args.stages:
        skip = {(a, int(b), c) for a, b, c in (x.split(":") for x in args.stage_skip)}
        return stage_table(args.stage_cpu, skip, not args.stage_skip_free, args.stage_schemes, args.stage_mem_gb)

    if not args.skip_cold:
        print("| scheme | order | cold mod (s) | cold inv (s) | terms h^N mod | terms h^N inv |")
        print("|---|---|---|---|---|---|")
        for scheme in ("midpoint", "trapezoidal"):
            for order in args.orders:
                r = cold(scheme, order, args.timeout)
                if r is None:
                    print(f"| {scheme} | {order} | > {args.timeout:.0f} (timeout) | | | |", flush=True)
                    break
                print(f"| {scheme} | {order} | {r['mod']:.2f} | {r['inv']:.2f} | {r['terms_mod']} | {r['terms_inv']} |", flush=True)

    import torch

    import bea

    os.environ["BEA_CACHE_DIR"] = tempfile.mkdtemp(prefix="bea-bench-")
    print()
    print(f"| order | n | points | dimension-free (s) | component (s) | free / component |")
    print("|---|---|---|---|---|---|")
    growth = {}
    for order in [o for o in args.orders if o <= 6]:
        f = bea.compile_torch("modified_lagrangian", "midpoint", order)
        for n in args.dims:
            if order >= 6 and n > args.max_n_order6:
                continue
            points = args.points if n < args.large_n else args.large_points
            L = pendulum_chain(n)
            g = torch.Generator().manual_seed(n)
            q = torch.rand(points, n, generator=g, dtype=torch.float64) - 0.5
            v = torch.rand(points, n, generator=g, dtype=torch.float64) - 0.5
            t_free = timed(f, L, q, v, 0.1)
            comp, ratio = "", ""
            if n <= 2 and not (n == 2 and order > 4):
                c = bea.compile_torch("modified_lagrangian", "midpoint", order, n=n)
                t_c = timed(c, L, q, v, 0.1)
                comp, ratio = f"{t_c:.3f}", f"{t_free / t_c:.2f}"
            growth.setdefault(order, []).append((n, t_free / points))
            print(f"| {order} | {n} | {points} | {t_free:.3f} | {comp} | {ratio} |", flush=True)
    if 4 in args.orders and 48 not in args.dims:
        f = bea.compile_torch("modified_lagrangian", "midpoint", 4)
        L = pendulum_chain(48)
        q = torch.rand(1000, 48, dtype=torch.float64) - 0.5
        v = torch.rand(1000, 48, dtype=torch.float64) - 0.5
        print(f"| 4 | 48 | 1000 | {timed(f, L, q, v, 0.1):.3f} | | |")
    print()
    for order, pts in growth.items():
        big = [(n, t) for n, t in pts if n >= 6]
        if len(big) >= 2:
            xs = [math.log(n) for n, _ in big]
            ys = [math.log(t) for _, t in big]
            mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
            p = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
            print(f"order {order}: time per point ~ n^{p:.2f} for n in {[n for n, _ in big]}")
    return 0


def stage_table(cpu: float, skip=(), free_midpoint: bool = True, schemes=tuple(STAGE_SCHEMES), mem_gb: float = 0.0) -> int:
    """Table 1b: cold derivations (modified plus inverse modified Lagrangian, fresh process) of the stage schemes at
    orders 2s and 2s + 2: dimension-free, the concrete coupled oscillators (n = 3) and the generic L (n = 1), the midpoint rule's
    generic n = 1 and dimension-free times alongside. Wall and CPU seconds: the machine is shared, CPU is the
    steadier figure, so the limit ``cpu`` is CPU seconds per derivation (the wall backstop is 20 times it).
    ``skip``: ``(scheme, order, case)`` runs left out (shown as "not run"); ``free_midpoint=False`` leaves out the
    midpoint rule's dimension-free derivation (table 1 has it; at order 8 it takes minutes). ``mem_gb``: the address
    space per stage derivation (0: no limit); a run stopped at a limit shows its CPU seconds and peak memory."""
    timeout = 20 * cpu
    print(f"Limit per run: {cpu:.0f} CPU seconds (modified + inverse; the dimension-free midpoint: {timeout:.0f} s wall). "
          "Cells: wall / CPU seconds.\n")
    print("| scheme | order | dimension-free, every n (s) | concrete n=3 (s) | generic n=1 (s) | midpoint generic n=1 (s) | "
          "midpoint free (s) | generic n=1 / midpoint n=1 (CPU) |")
    print("|---|---|---|---|---|---|---|---|")
    mid = {}

    def show(r):
        if r is not None and r.get("stopped"):
            return f"> {r['cpu']:.0f} CPU s, stopped at {r['rss_gb']:.1f} GB"
        return f"> {cpu:.0f} CPU s (limit)" if r is None else f"{r['wall']:.1f} / {r['cpu']:.2f}"

    for scheme in schemes:
        two_s = STAGE_SCHEMES[scheme]
        for order in (two_s, two_s + 2):
            if order not in mid:
                free = cold("midpoint", order, timeout) if free_midpoint else None
                mid[order] = (cold("midpoint", order, timeout, CHILD_STAGE, "generic", cpu_limit=cpu),
                              None if free is None else {"wall": free["mod"] + free["inv"], "cpu": math.nan})
            runs = {case: "not run" if (scheme, order, case) in skip
                    else cold(scheme, order, timeout, CHILD_STAGE, case, cpu_limit=cpu, mem_gb=mem_gb)
                    for case in ("free", "concrete", "generic")}
            m1, mf = mid[order]
            g = runs["generic"]
            ratio = "-" if not isinstance(g, dict) or m1 is None else f"{g['cpu'] / m1['cpu']:.0f}x"
            cells = [r if isinstance(r, str) else "refused (radical)" if r and r.get("refused") else show(r)
                     for r in (runs["free"], runs["concrete"], g)]
            print(f"| {scheme} | {order} | {cells[0]} | {cells[1]} | {cells[2]} | {show(m1)} | "
                  f"{('> %.0f' % timeout if free_midpoint else 'not run') if mf is None else '%.1f' % mf['wall']} | {ratio} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
