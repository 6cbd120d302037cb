"""Benchmark of the batched variational integrator: compiled and eager paths, a JAX peer, an fsolve loop.

    python benchmarks/integrate.py [--quick] [--scheme midpoint] [--h 0.05]

For the pendulum (n = 1) and Kepler (n = 2), at batch sizes 1, 100, 1000 and 10^4, it prints the time
steps per second and the trajectory-steps per second (batch x steps / wall time) of
``integrators.VariationalIntegrator`` on its compiled path (the default for long runs) and on its
eager path, and, in the same run, of a JAX implementation of the same integrator
(``benchmarks/_jax_peer.py``: jacfwd derivatives of L_d, Newton in lax.while_loop, lax.scan over
steps, vmap over trajectories, jit) when ``jax`` is installed (``pip install ".[bench]"``; the JAX
columns are skipped otherwise). Ratios are of throughputs measured in this run; compile times are
reported separately (ours: once per process and Lagrangian; JAX: once per shape and step count).

Side by side it also times what the peer codes do (docs/theory/lsi.md): a Python loop over trajectories
and steps, each step one ``scipy.optimize.fsolve`` on the same discrete Euler-Lagrange equation, and
reports the ratio of throughputs at batch 1000. Every path is checked against the others.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
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


def time_solve(vi: VariationalIntegrator, q0, v0, steps: int):
    vi.solve(q0[:1], v0[:1], 3).q  # warm-up (builds the compiled stepper if any)
    t = time.perf_counter()
    qs = vi.solve(q0, v0, steps, progress=False).q
    return qs, time.perf_counter() - t


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


def _jax():
    try:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import _jax_peer  # noqa: E402

        return _jax_peer
    except ImportError:
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer steps (a rough check)")
    ap.add_argument("--scheme", default="midpoint", choices=["midpoint", "trapezoidal"])
    ap.add_argument("--h", type=float, default=0.05)
    args = ap.parse_args()
    # fsolve warns when it cannot improve a solution that is already at rounding level
    warnings.filterwarnings("ignore", message="The iteration is not making good progress")
    scheme = bea.get_scheme(args.scheme)
    h = args.h
    scale = 0.1 if args.quick else 1.0
    compiled_steps = {1: 20000, 100: 2000, 1000: 500, 10_000: 100}
    eager_steps = {1: 200, 100: 100, 1000: 50, 10_000: 10}
    compiled_steps = {b: max(10, int(s * scale)) for b, s in compiled_steps.items()}
    eager_steps = {b: max(5, int(s * scale)) for b, s in eager_steps.items()}
    fsolve_traj, fsolve_steps = (10, 40) if not args.quick else (4, 20)
    jx = _jax()
    print(f"scheme {scheme!r}, h = {h}, float64, torch {torch.__version__}, {torch.get_num_threads()} threads; "
          + (f"jax {jx.jax.__version__} ({jx.jax.devices()[0].platform})" if jx else "jax not installed: no JAX columns"))
    head = f"{'system':9s} {'batch':>6s} {'compiled/s':>11s} {'eager/s':>9s} {'comp/eager':>10s}"
    if jx:
        head += f" {'jax/s':>11s} {'comp/jax':>9s} {'jax jit s':>9s} {'|q-q_jax|':>9s}"
    print("trajectory-steps per second (batch x steps / wall time); compiled steps "
          + ", ".join(f"{b}: {s}" for b, s in compiled_steps.items()) + "; eager steps "
          + ", ".join(f"{b}: {s}" for b, s in eager_steps.items()))
    print(head + f" {'|q-q_eager|':>11s}")
    summary = []
    for name, system in (("pendulum", systems.pendulum()), ("kepler", systems.kepler())):
        fast = VariationalIntegrator(system, h, scheme, execution="compiled")
        slow = VariationalIntegrator(system, h, scheme, execution="eager")
        t = time.perf_counter()
        fast.solve(*initial_conditions(name, 1), 2).q
        print(f"{name}: compiled stepper built in {time.perf_counter() - t:.2f} s (C compile {fast.compile_seconds:.2f} s, "
              f"once per process and Lagrangian)")
        rates = {}
        for batch in (1, 100, 1000, 10_000):
            q0, v0 = initial_conditions(name, batch)
            qc, wc = time_solve(fast, q0, v0, compiled_steps[batch])
            qe, we = time_solve(slow, q0, v0, eager_steps[batch])
            rc, re_ = batch * compiled_steps[batch] / wc, batch * eager_steps[batch] / we
            diff = float((qc[: eager_steps[batch] + 1] - qe).abs().max())
            line = f"{name:9s} {batch:6d} {rc:11.0f} {re_:9.0f} {rc / re_:9.0f}x"
            rj = None
            if jx:
                qj, tj_compile, tj = jx.timed(name, args.scheme, h, q0.numpy(), v0.numpy(), compiled_steps[batch])
                rj = batch * compiled_steps[batch] / tj
                dj = float(np.abs(np.asarray(qj) - qc.numpy()).max())
                line += f" {rj:11.0f} {rc / rj:8.2f}x {tj_compile:9.2f} {dj:9.1e}"
            rates[batch] = (rc, re_, rj)
            print(line + f" {diff:11.1e}")
        # the peer-code loop, same equations (with fsolve's finite-difference Jacobian, and with autograd's)
        q0, v0 = initial_conditions(name, fsolve_traj, seed=1)
        ours = fast.solve(q0, v0, fsolve_steps).q.numpy()
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
        summary.append((name, rates, loop_rate))
    print()
    print("ratios in this run (targets: pendulum batch 1 >= 0.05x the JAX scan; batch 1000 >= 1x the JAX vmap; "
          "compiled batch 1000 >= 50x the fsolve loop)")
    for name, rates, loop in summary:
        parts = [f"batch 1 compiled/eager {rates[1][0] / rates[1][1]:.0f}x"]
        if rates[1][2]:
            parts += [f"batch 1 compiled/jax-scan {rates[1][0] / rates[1][2]:.2f}x",
                      f"batch 1000 compiled/jax-vmap {rates[1000][0] / rates[1000][2]:.2f}x"]
        parts.append(f"batch 1000 compiled/fsolve-loop {rates[1000][0] / loop:.0f}x")
        print(f"{name:9s} " + "; ".join(parts))


if __name__ == "__main__":
    main()
