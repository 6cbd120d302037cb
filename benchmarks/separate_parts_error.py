r"""How much of the held-out energy-difference error of a two-body element fit is a wrong *relative scale* of the
separately conserved centre-of-mass and relative energies (issue 23 item 2, session 19, branch cal9; a diagnostic).

Two equal bodies in the same quadratic trap: :math:`L = L_{com}(Q, \dot Q) + L_{rel}(r, \dot r)`, and so is every
order of :math:`L_{inv}` (benchmarks/element_additivity.py). Positions determine each part's Lagrangian only up to its
own factor (:math:`a L_{com} + b L_{rel}` has the same motions); only the normalisation ties :math:`a` to :math:`b`.
The acceptance fits one common scale. Here, on a saved model (benchmarks/correction_scale_calibration.py ``--save``),
the 40 held-out differences' means are regressed on the true parts :math:`\Delta E_{com}, \Delta E_{rel}`: the two
factors, the error left after the best common scale and after the two-factor fit, and the RMS z of the latter
residual under the model's std (what the std would cover if the ratio were right); also the std of the model's
energy along the directions :math:`\Delta E_{com}` and :math:`\Delta E_{rel}`, i.e. whether the posterior knows the
ratio is uncertain: the posterior std of ``a/b - 1`` as a linear functional is not available, so its proxy is the
RMS z of the set ``com`` (differences of the centre's energy alone) under the common scale.

``--exact-target``: the same after re-targeting the final GP (same factor, same std) on the whole-matrix conditions
that the *exact* :math:`L_{inv}` (bea series, midpoint, order 6) meets at the fit's normalisation point -- its
:math:`\partial_v^2 L_{inv} - \kappa\,\partial_q^2 L_{inv}` scaled to the fit's trace, in place of :math:`c I` --
to test whether the condition's own :math:`O(h^4)` miss is the error every fold shares.

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/separate_parts_error.py /tmp/cal9-morse4.pt --system two_body_morse4
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _exact_target(m, system, h) -> None:
    """Re-target ``m``'s whole-matrix conditions on the exact L_inv's (module docstring)."""
    import torch

    import bea

    F = m.gp.train_functionals
    n, count = m.n, F.count
    first = count - m._norm_count + n + 1  # value, gradient (n + 1 conditions), then the matrix entries i <= j
    pts = torch.cat([a.points[a.owner == count - 1] for a in F.atoms.values()])
    x0 = pts[:1]
    q0, v0 = m._from_standard(x0[:, :n]).detach(), m._vector_from_standard(x0[:, n:]).detach()
    f = bea.series_function("inverse_modified_lagrangian", "midpoint", 6, n)
    kappa = h ** 2 / 12
    Hv = torch.autograd.functional.hessian(lambda v: f(system, q0, v, h).sum(), v0)[0, :, 0, :]
    Hq = torch.autograd.functional.hessian(lambda q: f(system, q, v0, h).sum(), q0)[0, :, 0, :]
    M = Hv - kappa * Hq
    i, j = torch.triu_indices(n, n)
    y = F.targets.clone()
    old = y[first:].clone()
    trace = float(old[i == j].sum())
    y[first:] = (M * trace / torch.trace(M))[i, j]
    print(f"exact target at q0 {q0.tolist()}, v0 {v0.tolist()}: relative move of the matrix targets "
          f"{((y[first:] - old) / (trace / n)).tolist()}")
    m.gp.retarget(y)
    m._recovered, m._jet = {}, None


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path")
    ap.add_argument("--system", default="two_body_morse4")
    ap.add_argument("--orders", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--exact-target", action="store_true")
    ap.add_argument("--h", type=float, default=None)
    args = ap.parse_args(argv)
    root = Path(__file__).resolve().parent
    sys.path[:0] = [str(root), str(root.parent)]
    import torch

    import correction_scale_calibration as C
    import tests.test_learners_shadow_auto as A
    from _acceptance_fit import acceptance_system
    from learners import InverseModifiedLagrangianGP

    system, h, _ = acceptance_system(args.system)
    m = InverseModifiedLagrangianGP.load(args.path)
    print(f"mass_target: {m.history.get('mass_target')}; normalisation functionals {m._norm_count}")
    if args.exact_target:
        _exact_target(m, system, args.h or h)
    sets = C._parts(system, A)
    dE = {k: (system.energy(*qv)[1:] - system.energy(*qv)[:1]).detach() for k, qv in sets.items()}
    rms = lambda t: float(t.pow(2).mean().sqrt())  # noqa: E731
    q, v = sets["held"]
    for N in args.orders:
        mean, std = m.energy(N, return_std=True, reference=(q[0], v[0]))(q[1:], v[1:])
        mean, std = mean.detach(), std.detach()
        c = float((mean * dE["held"]).sum() / dE["held"].pow(2).sum())
        X = torch.stack([dE["com"], dE["rel"]], 1)
        ab = torch.linalg.lstsq(X, mean[:, None]).solution[:, 0]
        e1, e2 = mean - c * dE["held"], mean - X @ ab
        print(f"N = {N}: common scale {c:.5g}: RMS err {rms(e1):.3g}, RMS z {rms(e1 / std):.2f}, 2σ "
              f"{float(((e1 / std).abs() <= 2).double().mean()):.3f}; two factors a {float(ab[0]):.5g}, b {float(ab[1]):.5g} "
              f"(a/b - 1 = {float(ab[0] / ab[1]) - 1:.3g}): RMS err {rms(e2):.3g} ({rms(e2) ** 2 / rms(e1) ** 2:.2f} of the "
              f"variance), RMS z {rms(e2 / std):.2f}, 2σ {float(((e2 / std).abs() <= 2).double().mean()):.3f}", flush=True)
        for k in ("com", "rel"):
            qk, vk = sets[k]
            mk, sk = m.energy(N, return_std=True, reference=(qk[0], vk[0]))(qk[1:], vk[1:])
            ek = mk.detach() - c * dE[k]
            fk = float((mk.detach() * dE[k]).sum() / dE[k].pow(2).sum())
            print(f"    {k}: own best scale / common {fk / c:.5g}; under the common scale RMS err {rms(ek):.3g}, RMS z "
                  f"{rms(ek / sk.detach()):.2f}, 2σ {float(((ek / sk.detach()).abs() <= 2).double().mean()):.3f}; RMS std "
                  f"{rms(sk.detach()):.3g}, RMS true {rms(dE[k]):.3g}", flush=True)


if __name__ == "__main__":
    main()
