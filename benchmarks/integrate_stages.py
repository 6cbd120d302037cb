"""Speed of stage schemes (issue 26, item 3): the eager nested Newton solve against the torch.compile stage path.

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/integrate_stages.py [--quick] [--repeats 3]

For the SymPy pendulum and Henon-Heiles systems with ``galerkin2`` and ``triple_jump`` (h = 0.1), on one
trajectory and at batch 1000, it prints the steps per second of ``VariationalIntegrator`` with
``execution="eager"`` (every evaluation of the discrete Lagrangian solves its interior points by Newton,
:mod:`bea.stage_torch`) and with ``execution="compiled"`` (one Newton solve on the interior points and the next
position with compiled ``torch.func`` derivatives, :mod:`integrators.compiled_stages`), their ratio measured in
this run, the build time ("build s": for batch 1 the stepper's build, torch.compile of the first batch bucket with
its verification; for batch 1000 the wall time of a 2-step run, which compiles the 1024-row bucket) and the largest
deviation between the two trajectories over the eager run's steps.

Every rate is the median of ``--repeats`` timed runs, the two sides of each ratio timed alternately in this run
(the machine may be shared: ratios, not absolute rates, compare across runs). ``--quick``: Henon-Heiles only.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from integrators import VariationalIntegrator, systems

H = 0.1
#: steps per timed run: eager stage steps cost tens of milliseconds each (hundreds at batch 1000)
STEPS = {"eager": {1: 20, 1000: 5}, "compiled": {1: 200, 1000: 40}}


def _start(batch: int, n: int):
    g = torch.Generator().manual_seed(0)
    return (0.3 * torch.rand(batch, n, generator=g, dtype=torch.float64),
            0.1 * torch.rand(batch, n, generator=g, dtype=torch.float64))


def _timed(vi, q0, v0, steps):
    t = time.perf_counter()
    out = vi.solve(q0, v0, steps)
    return time.perf_counter() - t, out


def compare(name: str, system, n: int, scheme: str, repeats: int) -> list:
    """Rows ``(system, scheme, batch, eager steps/s, compiled steps/s, ratio, build s, deviation)``."""
    eager = VariationalIntegrator(system, H, scheme, execution="eager")
    fast = VariationalIntegrator(system, H, scheme, execution="compiled")
    rows = []
    for batch in (1, 1000):
        q0, v0 = _start(batch, n)
        before = fast.compile_seconds
        t = time.perf_counter()
        # builds (first batch) or compiles this batch's bucket (second): execution="compiled" does so for any run,
        # whereas "auto" would step a run this short eagerly at a bucket not compiled yet
        fast.solve(q0, v0, 2)
        build = (fast.compile_seconds - before) if fast.compile_seconds > before else time.perf_counter() - t
        rates = {"eager": [], "compiled": []}
        for _ in range(repeats):
            for path, vi in (("eager", eager), ("compiled", fast)):
                k = STEPS[path][batch]
                dt, out = _timed(vi, q0, v0, k)
                rates[path].append(k / dt)
                if path == "eager":
                    ref = out
        got = fast.solve(q0, v0, STEPS["eager"][batch])
        dev = float((got.q - ref.q).abs().max())
        re, rc = statistics.median(rates["eager"]), statistics.median(rates["compiled"])
        rows.append((name, scheme, batch, re, rc, rc / re, build, dev))
        print(f"| {name} | {scheme} | {batch} | {re:.3g} | {rc:.3g} | {rc / re:.1f}x | {build:.1f} | {dev:.1e} |", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="Henon-Heiles only")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per rate (median; default 3)")
    args = ap.parse_args()
    cases = [("henon_heiles", systems.henon_heiles(), 2)]
    if not args.quick:
        cases.insert(0, ("pendulum", systems.pendulum(), 1))
    print(f"h = {H}; steps per timed run {STEPS}; median of {args.repeats}; torch threads {torch.get_num_threads()}")
    print("| system | scheme | batch | eager steps/s | compiled steps/s | ratio | build s | max deviation |")
    print("|---|---|---|---|---|---|---|---|")
    rows = [r for name, system, n in cases for scheme in ("galerkin2", "triple_jump")
            for r in compare(name, system, n, scheme, args.repeats)]
    for batch in (1, 1000):
        ratios = [r[5] for r in rows if r[2] == batch]
        print(f"batch {batch}: compiled/eager from {min(ratios):.1f}x to {max(ratios):.1f}x")


if __name__ == "__main__":
    main()
