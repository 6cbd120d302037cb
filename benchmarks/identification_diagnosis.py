"""Why the library defaults miss issue 23's 3e-3 on two_body4 and morse3: the diagnostics behind
benchmarks/RESULTS_identification.md (session 5, branch id-sym), one system per run.

* ``coverage``: are the 40 held-out states of tests/test_learners_shadow_auto.py inside the data? Distance to the nearest
  data state (phase space, each coordinate by its spread) against the data's own nearest-neighbour distance (other
  trajectories), and how many lie in the convex hull of the data states (a linear program per state).
* ``stiffness``: ``h * omega_max`` over the data states, ``omega_max**2`` the largest eigenvalue of the energy's
  position Hessian at rest (unit masses assumed: a diagnostic of how far the modified-equation series is from
  converging, which needs ``h * omega`` well below 2, the midpoint rule's stability limit).
* ``anisotropy``: eigenvalues of the covariance of the positions' second differences / h**2 (the accelerations):
  a direction whose accelerations are far weaker than the others' is smooth on a much longer scale.
* ``--floor ORDER``: the energy differences of the exact inverse modified Lagrangian (the bea series of order ORDER
  applied to the true L), what a GP without error would give: the truncation floor of H_rec[N].
* ``--principal``: fit with the data rotated to the principal directions of the second differences and the search's
  position (and velocity) lengthscales multiplied per direction by ``(lambda_max / lambda_i) ** power`` (geometric
  mean 1), the scale on which a GP sample's gradient has the data's acceleration variance; ``--mechanical`` with
  ``MechanicalKernel(degree=2)`` and the whole mass matrix. For two_body4 also the least-squares weights of the learned
  H_rec[2] differences on the centre of mass's x and y energies and the relative energy (each part is separately
  conserved, so ``a L_x + b L_y + c L_rel`` has the data's motions for every ``a, b, c``).

Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/identification_diagnosis.py --system two_body4
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/identification_diagnosis.py --system morse3 --floor 4
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/identification_diagnosis.py --system two_body4 --principal --mechanical

The ``--principal`` fit replaces ``learners.shadow.position_search.tied_theta`` in this process only (a diagnostic,
not a library option).
"""

from __future__ import annotations

import argparse
import contextlib
import warnings

import numpy as np
import torch


def _data(A, name, traj, steps=5):
    from integrators.data import snapshots
    from integrators.reference import reference_flow

    make, h, T = {m.__name__: (m, h, T) for m, h, T in A.SYSTEMS + A.UNTUNED}[name]
    system = make()
    q, (q0, v0) = snapshots(system, h, traj or T, steps, seed=0, return_initial=True)
    flow = reference_flow(system, q0, v0, h * np.arange(steps + 1))
    return system, h, q, flow.q.transpose(0, 1), flow.v.transpose(0, 1)


def coverage(A, system, Q, V) -> str:
    from scipy.optimize import linprog

    n, per = system.n, Q.shape[1]
    X = torch.cat([Q.reshape(-1, n), V.reshape(-1, n)], 1)
    hq, hv = A.held_out_states(system, 40)
    s = X.std(0)
    Z, Zh = X / s, torch.cat([hq, hv], 1) / s
    near = torch.cdist(Zh, Z).min(1).values
    dd = torch.cdist(Z, Z)
    traj = torch.arange(Z.shape[0]) // per
    dd[traj[:, None] == traj[None, :]] = float("inf")  # neighbours on other trajectories only
    m = Z.shape[0]
    eq = np.vstack([Z.numpy().T, np.ones(m)])
    inside = sum(linprog(np.zeros(m), A_eq=eq, b_eq=np.append(x, 1), bounds=(0, None), method="highs").status == 0
                 for x in Zh.numpy())
    return (f"coverage: held-out nearest data state median {float(near.median()):.3f} (max {float(near.max()):.3f}), "
            f"data nearest other trajectory median {float(dd.min(1).values.median()):.3f}; inside the hull "
            f"{inside}/{Zh.shape[0]}; |v| max data {float(V.abs().max()):.2f}, held-out {float(hv.abs().max()):.2f}")


def stiffness(system, h, Q) -> str:
    n = system.n
    rest = torch.zeros(1, n, dtype=torch.float64)
    w = []
    for x in Q.reshape(-1, n)[::3]:
        K = torch.autograd.functional.hessian(lambda y: system.energy(y[None], rest).sum(), x.clone())
        w.append(float(torch.linalg.eigvalsh(K).max().clamp(min=0).sqrt()))
    w = h * torch.tensor(w)
    return (f"stiffness: h*omega_max median {float(w.median()):.3f}, 99% {float(torch.quantile(w, 0.99)):.3f}, "
            f"max {float(w.max()):.3f}")


def principal_axes(q, h):
    """Eigenvalues (ascending) and eigenvectors of the covariance of the second differences / h**2 of ``q``."""
    a = (q[:, 2:] - 2 * q[:, 1:-1] + q[:, :-2]).reshape(-1, q.shape[-1]) / h ** 2
    return torch.linalg.eigh(a.T @ a / a.shape[0])


def floor(A, system, h, order) -> str:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from identification_default import _ExactInverse

    exact = _ExactInverse(system, h, order, system.n)
    rel = [A.energy_differences(exact, system, N, return_std=False)[0] for N in (0, 2, 4)]
    return f"truncation floor (exact L_inv, series order {order}): dE0 {rel[0]:.3g}, dE2 {rel[1]:.3g}, dE4 {rel[2]:.3g}"


@contextlib.contextmanager
def _per_direction(fq, fv):
    """The search's tied lengthscales times ``fq`` (positions) and ``fv`` (velocities), this process only."""
    import learners.shadow.position_search as PS

    tied = PS.tied_theta

    def scaled(lq, lv, n):
        th = tied(lq, lv, n).clone()
        th[:n] += fq.log()
        th[n:2 * n] += fv.log()
        return th

    PS.tied_theta = scaled
    try:
        yield
    finally:
        PS.tied_theta = tied


def _two_body_parts(q, v):
    """Centre-of-mass x and y energies and the relative energy of tests' two_body4 (they sum to its energy)."""
    Q, W = q[:, 0:2] + q[:, 2:4], v[:, 0:2] + v[:, 2:4]
    r, u = q[:, 0:2] - q[:, 2:4], v[:, 0:2] - v[:, 2:4]
    cm = W ** 2 / 4 + Q ** 2 / 20
    rel = (u ** 2).sum(1) / 4 - 1 / ((r ** 2).sum(1) + 0.5).sqrt() + (r ** 2).sum(1) / 20
    return torch.stack([cm[:, 0], cm[:, 1], rel], 1)


def principal_fit(A, system, h, q, power, mechanical, velocities) -> None:
    from learners import InverseModifiedLagrangianGP
    from learners.shadow.mechanical import MechanicalKernel
    from learners.shadow.normalisation import MassNormalisation

    n = system.n
    lam, U = principal_axes(q, h)
    f = (lam.max() / lam) ** power
    f = f / f.prod() ** (1 / n)
    fv = f if velocities else torch.ones_like(f)
    kw = dict(kernel=MechanicalKernel(degree=2), normalisation=MassNormalisation(matrix=True)) if mechanical else {}
    with warnings.catch_warnings(record=True) as caught, _per_direction(f, fv):
        warnings.simplefilter("always")
        m = InverseModifiedLagrangianGP(h, progress=False, **kw).fit(q @ U)
    print(f"principal directions: eigenvalues {lam.numpy()}, lengthscale factors {f.numpy().round(3)}; held-out "
          f"(trace, matrix) {m.history.get('normalisation_values')}, objective {m.history['objective']:.3f}, one-step "
          f"{m.history.get('one_step_relative_error'):.3g}, lengthscales {np.round(m.hyperparameters['lengthscale'], 3)}")
    hq, hv = A.held_out_states(system, 40)
    true = (system.energy(hq[1:], hv[1:]) - system.energy(hq[:1], hv[:1])).detach()
    for N in (2, 4):
        H = m.energy(N)
        mean = (H(hq[1:] @ U, hv[1:] @ U) - H(hq[:1] @ U, hv[:1] @ U)).detach()
        s = float((mean * true).sum() / (true * true).sum())
        print(f"dE{N} {float((mean - s * true).norm() / (s * true).norm()):.3g}")
        if N == 2 and system.name == "two_body4":
            P = _two_body_parts(hq, hv)
            D = P[1:] - P[:1]
            w = torch.linalg.lstsq(D, mean[:, None]).solution.flatten()
            print(f"  weights of (cm x, cm y, relative) {w.numpy().round(3)}, residual "
                  f"{float((D @ w - mean).norm() / mean.norm()):.3g} of the differences")
    for w in caught:
        print(f"    warning: {w.message}")


def main(argv=None) -> None:
    import tests.test_learners_shadow_auto as A

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", required=True)
    ap.add_argument("--traj", type=int, default=None, help="trajectories (default: the acceptance test's)")
    ap.add_argument("--floor", type=int, default=None, help="series order of the exact L_inv (truncation floor)")
    ap.add_argument("--principal", action="store_true", help="fit with per-direction lengthscales (docstring)")
    ap.add_argument("--power", type=float, default=0.5, help="exponent of the lengthscale factors")
    ap.add_argument("--mechanical", action="store_true", help="with --principal: degree-2 kernel, whole mass matrix")
    ap.add_argument("--tied-velocities", action="store_true", help="with --principal: no factors on the velocities")
    args = ap.parse_args(argv)
    system, h, q, Q, V = _data(A, args.system, args.traj)
    print(coverage(A, system, Q, V))
    print(stiffness(system, h, Q))
    lam, U = principal_axes(q, h)
    print(f"anisotropy: second-difference eigenvalues {lam.numpy()} (max/min {float(lam.max() / lam.min()):.1f})")
    if args.floor is not None:
        print(floor(A, system, h, args.floor), flush=True)
    if args.principal:
        principal_fit(A, system, h, q, args.power, args.mechanical, not args.tied_velocities)


if __name__ == "__main__":
    main()
