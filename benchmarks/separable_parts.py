"""Where a two-body fit's energy error comes from: the separately conserved parts' weights, and each part's own error.

The planar two-body problem in a trap proportional to the masses separates into three separately conserved energies:
the centre of mass along x, along y, and the relative motion. ``a E_x + b E_y + c E_rel`` has the data's motions for
every ``a, b, c``, so the learned ``H_rec[N]`` differences at the 40 held-out states of the acceptance test are fitted
by least squares on the three parts' differences:

* the weights ``a, b, c`` (relative to their mean) show how far the parts' relative scales are off;
* the residual of that fit is the error *within* the parts (the GP's error of each part's shape);
* ``dE`` is the acceptance metric (one scale for all), ``dE free`` the same after the free three-weight fit, so
  ``dE`` against ``dE free`` splits the error into the parts' scales and their shapes.

Also printed: the learned mass matrix at the data's centre (velocity 0) against the true one, both divided by their
trace over ``n``. Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 nice -n 5 python3 benchmarks/separable_parts.py --system two_body4
    PYTHONPATH=. OMP_NUM_THREADS=1 nice -n 5 python3 benchmarks/separable_parts.py --system two_body_unequal4
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch

#: masses, trap stiffness per unit mass: the parts of each system (their sum is the system's energy)
PARTS = {"two_body4": ((1.0, 1.0), 1 / 5), "two_body_unequal4": ((1.0, 2.0), 1 / 8)}


def parts(name, system, q, v):
    """(E_cm_x, E_cm_y, E_rel) at states ``q, v`` (k, 4): the centre of mass's energies, the rest relative."""
    (m1, m2), w2 = PARTS[name]
    M = m1 + m2
    Q, W = (m1 * q[:, 0:2] + m2 * q[:, 2:4]) / M, (m1 * v[:, 0:2] + m2 * v[:, 2:4]) / M
    cm = M * W ** 2 / 2 + M * w2 * Q ** 2 / 2
    rel = system.energy(q, v) - cm.sum(1)
    return torch.stack([cm[:, 0], cm[:, 1], rel], 1)


def mass_matrices(model, system, data):
    """Learned (posterior mean) and true mass matrices at the data's mean position and velocity 0, each / (trace/n)."""
    q0 = data.reshape(-1, data.shape[-1]).mean(0)
    v0 = torch.zeros_like(q0)
    out = []
    for L in (model.lagrangian, system):
        H = torch.autograd.functional.hessian(lambda u: L(q0, u), v0)
        out.append(H / (torch.trace(H) / H.shape[0]))
    return out


def main(argv=None) -> None:
    import benchmarks.identification_acceptance as B
    import tests.test_learners_shadow_auto as A
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP

    systems = {make.__name__: (make, h, T) for make, h, T in A.SYSTEMS + A.UNTUNED + B.UNTUNED}
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=sorted(PARTS), required=True)
    ap.add_argument("--traj", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    make, h, T = systems[args.system]
    system = make()
    data = snapshots(system, h, args.traj or T, 5, seed=args.seed)
    c = time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = InverseModifiedLagrangianGP(h, progress=False).fit(data)
    print(f"fit {time.process_time() - c:.0f} s cpu; principal {m.history.get('principal', {}).get('kept')}; "
          f"mass target {m.history.get('mass_target')}")
    hq, hv = A.held_out_states(system, 40)
    true = (system.energy(hq[1:], hv[1:]) - system.energy(hq[:1], hv[:1])).detach()
    P = parts(args.system, system, hq, hv)
    D = (P[1:] - P[:1]).detach()
    for N in (2, 4):
        H = m.energy(N)
        mean = (H(hq[1:], hv[1:]) - H(hq[:1], hv[:1])).detach()
        s = float((mean * true).sum() / (true * true).sum())
        w = torch.linalg.lstsq(D, mean[:, None]).solution.flatten()
        free = float((D @ w - mean).norm() / mean.norm())
        print(f"N = {N}: dE {float((mean - s * true).norm() / (s * true).norm()):.3g}, weights (cm x, cm y, rel) / mean "
              f"{(w / w.mean()).numpy().round(4)}, dE free {free:.3g}; parts' RMS differences "
              f"{D.pow(2).mean(0).sqrt().numpy().round(4)}")
    learned, exact = mass_matrices(m, system, data)
    print(f"mass matrix at the centre / (trace/n): learned\n{learned.detach().numpy().round(4)}\ntrue\n{exact.numpy().round(4)}")
    for w in caught:
        print(f"    warning: {w.category.__name__}: {w.message}")


if __name__ == "__main__":
    main()
