"""Steps per second of the compiled ``System`` path on one trajectory, for systems of 1 to 8 degrees of freedom.

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/compiled_systems.py [--repeats 7]

Each rate is ``steps`` over the least CPU time of this thread among ``--repeats`` calls of
``VariationalIntegrator(system, 0.05, execution="compiled").solve`` (the whole call: initial checks, the C
march, the Trajectory), after one call that builds the library. CPU time, not wall time, because the machine
may be shared and every part of a solve here is serial; to compare two trees, run this script in each, one
after the other (the last column, the final positions, must then agree bit for bit where the C arithmetic is
unchanged). ``cost`` is the C form's relative cost per evaluation (``CLagrangian.cost``).
"""

from __future__ import annotations

import argparse
import time

import sympy
import torch

from integrators import VariationalIntegrator, systems


def cases():
    q, v = sympy.symbols("q v", real=True)
    duffing = systems.from_sympy(v ** 2 / 2 - q ** 2 / 2 - q ** 4 / 4, [q], [v], name="duffing")
    return [("pendulum", systems.pendulum(), 50000), ("variable_mass_pendulum", systems.variable_mass_pendulum(), 50000),
            ("duffing", duffing, 50000), ("kepler", systems.kepler(), 20000), ("henon_heiles", systems.henon_heiles(), 20000),
            ("n_pendulum(3)", systems.n_pendulum(3), 5000), ("fpu_chain(8)", systems.fpu_chain(8), 2000)]


def initial(name: str, n: int):
    if name == "kepler":
        return torch.tensor([[1.0, 0.0]], dtype=torch.float64), torch.tensor([[0.0, 0.9]], dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    return (0.1 + 0.1 * torch.rand(1, n, generator=g, dtype=torch.float64),
            0.1 * torch.rand(1, n, generator=g, dtype=torch.float64))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7, help="timed calls per system, the least CPU time kept")
    args = ap.parse_args()
    print("| system | n | cost | steps | steps/s (CPU time) | q at the end |")
    print("|---|---:|---:|---:|---:|---|")
    for name, L, steps in cases():
        vi = VariationalIntegrator(L, 0.05, execution="compiled")
        q0, v0 = initial(name, L.n)
        vi.solve(q0, v0, 10)  # builds the library (or finds it in the caches)
        best = float("inf")
        for _ in range(max(1, args.repeats)):
            t = time.thread_time()
            tr = vi.solve(q0, v0, steps, progress=False)
            best = min(best, time.thread_time() - t)
        print(f"| {name} | {L.n} | {vi._steppers[L.n].cost} | {steps} | {steps / best:,.0f} | {tr.q[-1, 0].tolist()} |",
              flush=True)


if __name__ == "__main__":
    main()
