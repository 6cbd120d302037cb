"""Which separately conserved part a learned energy misses (session 12 branch trial): two_body_lj6 (benchmarks/
identification_acceptance.py) splits into three centre-of-mass oscillators X_k (mass 2, energy V_k^2 + X_k^2 / 4) and the
relative motion (u = v_1 - v_2: |u|^2 / 4 + phi(r) + |r|^2 / 16); each is conserved on its own, so the data fix the
energy only up to a weight per part. Least-squares weights of the learned H_rec[2] differences (held-out states of
tests/test_learners_shadow_auto, to their reference) on the four parts' differences, and the residual. Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/element_parts.py [--kernel default] [--seed 0]
"""

from __future__ import annotations

import argparse


def parts(q, v):
    """The four conserved energies (columns) of two_body_lj6 at states (q, v)."""
    import torch

    X, V = (q[:, :3] + q[:, 3:]) / 2, (v[:, :3] + v[:, 3:]) / 2
    r, u = q[:, :3] - q[:, 3:], v[:, :3] - v[:, 3:]
    s2 = (r * r).sum(1) + 0.5
    rel = (u * u).sum(1) / 4 + (1 / s2**2 - 2 / s2) / 4 + (r * r).sum(1) / 16
    return torch.cat([V * V + X * X / 4, rel[:, None]], 1)


def main(argv=None) -> None:
    import identification_acceptance as I
    import tests.test_learners_shadow_auto as A
    import torch
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernel", choices=["element", "default"], default="element")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    system, h = I.two_body_lj6(), 0.2
    data = snapshots(system, h, 150, 5, seed=args.seed)
    ns = argparse.Namespace(system="two_body_lj6", kernel="element", element_degree=None, no_correction=False)
    kw = {} if args.kernel == "default" else {"kernel": I._element_kernel(ns)}
    m = InverseModifiedLagrangianGP(h, progress=False, **kw).fit(data)
    q, v = A.held_out_states(system, 40)
    P = parts(q, v)
    dP = P[1:] - P[:1]
    true = (system.energy(q[1:], v[1:]) - system.energy(q[:1], v[:1])).detach()
    print(f"parts sum to the energy: {float((dP.sum(1) - true).abs().max()):.2e}")
    H = m.energy(2)
    d = (H(q[1:], v[1:]) - H(q[:1], v[:1])).detach()
    w = torch.linalg.lstsq(dP, d[:, None]).solution[:, 0]
    res = float((dP @ w - d).norm() / d.norm())
    print(f"{args.kernel}, seed {args.seed}: weights (X, Y, Z, relative) {[round(float(x), 4) for x in w]}, "
          f"residual {res:.3g} of |d|; hyperparameters {m.hyperparameters}")


if __name__ == "__main__":
    main()
