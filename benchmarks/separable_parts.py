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
    PYTHONPATH=. OMP_NUM_THREADS=1 nice -n 5 python3 benchmarks/separable_parts.py --system two_body_unequal4 [--diagonal]
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


def part_error(model, system, name, q, v, which):
    """Relative error of the learned ``H_rec[2]`` differences along one part alone, after that part's own best scale:
    ``which = 0`` moves the centre of mass (the relative state the reference's), ``1`` the relative state (the centre
    of mass the reference's), the held-out states' values of the moved part."""
    (m1, m2), _ = PARTS[name]
    M = m1 + m2
    cq, cv = (m1 * q[:, 0:2] + m2 * q[:, 2:4]) / M, (m1 * v[:, 0:2] + m2 * v[:, 2:4]) / M
    rq, rv = q[:, 0:2] - q[:, 2:4], v[:, 0:2] - v[:, 2:4]
    if which == 0:
        rq, rv = rq[:1].expand_as(rq), rv[:1].expand_as(rv)
    else:
        cq, cv = cq[:1].expand_as(cq), cv[:1].expand_as(cv)
    qs = torch.cat([cq + m2 / M * rq, cq - m1 / M * rq], 1)
    vs = torch.cat([cv + m2 / M * rv, cv - m1 / M * rv], 1)
    true = (system.energy(qs[1:], vs[1:]) - system.energy(qs[:1], vs[:1])).detach()
    H = model.energy(2)
    mean = (H(qs[1:], vs[1:]) - H(qs[:1], vs[:1])).detach()
    s = float((mean * true).sum() / (true * true).sum())
    return float((mean - s * true).norm() / (s * true).norm())


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
    from learners.shadow.normalisation import MassNormalisation

    systems = {make.__name__: (make, h, T) for make, h, T in A.SYSTEMS + A.UNTUNED + B.UNTUNED}
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=sorted(PARTS), required=True)
    ap.add_argument("--traj", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--diagonal", action="store_true", help='normalisation=MassNormalisation(matrix="diagonal")')
    args = ap.parse_args(argv)
    make, h, T = systems[args.system]
    system = make()
    data = snapshots(system, h, args.traj or T, 5, seed=args.seed)
    c = time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kw = {"normalisation": MassNormalisation(matrix="diagonal")} if args.diagonal else {}
        m = InverseModifiedLagrangianGP(h, progress=False, **kw).fit(data)
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
    for k, part in enumerate(("centre of mass", "relative")):
        err = part_error(m, system, args.system, hq, hv, k)
        print(f"{part} alone (the other part at the reference state's): relative error {err:.3g} after its own scale")
    learned, exact = mass_matrices(m, system, data)
    print(f"mass matrix at the centre / (trace/n): learned\n{learned.detach().numpy().round(4)}\ntrue\n{exact.numpy().round(4)}")
    for w in caught:
        print(f"    warning: {w.category.__name__}: {w.message}")


if __name__ == "__main__":
    main()
