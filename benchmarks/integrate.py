"""Benchmark of the batched variational integrator against a per-trajectory fsolve loop.

    python benchmarks/integrate.py [--quick] [--scheme midpoint]

For the pendulum (n = 1) and Kepler (n = 2) it prints, at batch sizes 1, 100 and 10^4, the time
steps per second and the trajectory-steps per second (batch x steps / wall time) of
``integrators.VariationalIntegrator``. Side by side, in the same run, it times what the peer codes do
(THEORY.md §6): a Python loop over trajectories and steps, each step one ``scipy.optimize.fsolve`` on
the same discrete Euler-Lagrange equation (same torch residual, Jacobian by finite differences
inside fsolve), and reports the ratio of throughputs at batch 1000 (target: at least 50x). It also
checks that both produce the same trajectories.
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import numpy as np
import torch
from scipy.optimize import fsolve

import bea
from integrators import VariationalIntegrator, systems

torch.set_default_dtype(torch.float64)


def initial_conditions(name: str, batch: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(batch, 2, generator=g)
    if name == "pendulum":
        return (u[:, :1] - 0.5) * 4.0, (u[:, 1:] - 0.5) * 2.0
    # Kepler: eccentricities 0 .. 0.5, random orientation
    e, phi = 0.5 * u[:, 0], 2 * math.pi * u[:, 1]
    r, s = 1 - e, torch.sqrt((1 + e) / (1 - e))
    q0 = torch.stack([r * torch.cos(phi), r * torch.sin(phi)], -1)
    v0 = torch.stack([-s * torch.sin(phi), s * torch.cos(phi)], -1)
    return q0, v0


def time_batched(vi: VariationalIntegrator, q0, v0, steps: int) -> float:
    vi.solve(q0[:1], v0[:1], 3)  # warm-up
    t = time.perf_counter()
    vi.solve(q0, v0, steps, progress=False)
    return time.perf_counter() - t


def fsolve_loop(L, scheme, h: float, q0, v0, steps: int, jacobian: bool = False) -> np.ndarray:
    """One trajectory at a time, one fsolve per step: D1 L_d(q_j, x) + p_j = 0, p_{j+1} = D2 L_d(q_j, x).
    ``jacobian``: give fsolve the exact Jacobian D12 L_d (autograd) instead of its finite differences."""
    n = q0.shape[-1]
    out = np.empty((steps + 1, q0.shape[0], n))

    def slots(a_np, b_np):
        a = torch.from_numpy(a_np).requires_grad_(True)
        b = torch.from_numpy(b_np).requires_grad_(True)
        d1, d2 = torch.autograd.grad(scheme(L, a, b, h), (a, b))
        return d1.numpy(), d2.numpy()

    def d12(a_np, b_np):
        a = torch.from_numpy(a_np).requires_grad_(True)
        b = torch.from_numpy(b_np).requires_grad_(True)
        (d1,) = torch.autograd.grad(scheme(L, a, b, h), (a,), create_graph=True)
        return np.stack([torch.autograd.grad(d1[i], b, retain_graph=True)[0].numpy() for i in range(n)])

    for k in range(q0.shape[0]):
        q = q0[k].numpy().copy()
        with torch.enable_grad():
            qq, vv = torch.from_numpy(q.copy()), v0[k].clone().requires_grad_(True)
            (p,) = torch.autograd.grad(L(qq, vv), vv)
        p = p.numpy()
        out[0, k] = q
        guess = q + h * v0[k].numpy()
        for j in range(steps):
            x = fsolve(lambda x: slots(q, x)[0] + p, guess, fprime=(lambda x: d12(q, x)) if jacobian else None, xtol=1e-12)
            p = slots(q, x)[1]
            guess = 2 * x - q
            q = x
            out[j + 1, k] = q
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer steps (a rough check, about 30 s)")
    ap.add_argument("--scheme", default="midpoint")
    args = ap.parse_args()
    # fsolve warns when it cannot improve a solution that is already at rounding level
    warnings.filterwarnings("ignore", message="The iteration is not making good progress")
    scheme = bea.get_scheme(args.scheme)
    h = 0.05
    steps_for = {1: 200, 100: 100, 1000: 50, 10_000: 20} if not args.quick else {1: 50, 100: 30, 1000: 20, 10_000: 5}
    fsolve_traj, fsolve_steps = (10, 40) if not args.quick else (4, 20)
    print(f"scheme {scheme!r}, h = {h}, float64, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'system':9s} {'batch':>6s} {'steps':>6s} {'wall s':>8s} {'steps/s':>9s} {'traj-steps/s':>13s}")
    summary = []
    for name, system in (("pendulum", systems.pendulum()), ("kepler", systems.kepler())):
        vi = VariationalIntegrator(system, h, scheme)
        rates = {}
        for batch in (1, 100, 1000, 10_000):
            q0, v0 = initial_conditions(name, batch)
            steps = steps_for[batch]
            wall = time_batched(vi, q0, v0, steps)
            rates[batch] = batch * steps / wall
            print(f"{name:9s} {batch:6d} {steps:6d} {wall:8.2f} {steps / wall:9.0f} {rates[batch]:13.0f}")
        # the peer-code loop, same equations (with fsolve's finite-difference Jacobian, and with autograd's)
        q0, v0 = initial_conditions(name, fsolve_traj, seed=1)
        ours = vi.solve(q0, v0, fsolve_steps).numpy()
        loop_rate = 0.0
        for jac in (False, True):
            t = time.perf_counter()
            ref = fsolve_loop(system, scheme, h, q0, v0, fsolve_steps, jacobian=jac)
            wall = time.perf_counter() - t
            rate = fsolve_traj * fsolve_steps / wall
            loop_rate = max(loop_rate, rate)
            label = "fsolve+jac" if jac else "fsolve"
            print(f"{name:9s} {label:>10s} loop: {fsolve_traj} traj x {fsolve_steps} steps in {wall:.2f} s = {rate:.0f} traj-steps/s; "
                  f"max |q_batched - q_fsolve| = {float(np.abs(ours - ref).max()):.1e}")
        summary.append((name, rates[1000], loop_rate, rates[1000] / loop_rate, 0.0))
    print()
    print(f"{'system':9s} {'batched@1000':>13s} {'fsolve loop':>12s} {'ratio':>8s}   (trajectory-steps/s; the faster loop; target ratio >= 50)")
    for name, ours, loop, ratio, _ in summary:
        print(f"{name:9s} {ours:13.0f} {loop:12.0f} {ratio:7.0f}x")


if __name__ == "__main__":
    main()
