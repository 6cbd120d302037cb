r"""The centre-of-mass / relative-motion mass ratio of a fitted two-body model across the data (issue 23 item 2,
session 19, branch cal9; a diagnostic).

For two equal bodies, in coordinates :math:`Q = (q_1 + q_2)/2`, :math:`r = q_1 - q_2`, the matrix
:math:`M_F = \partial_v^2 L - \kappa\,\partial_q^2 L` (:math:`\kappa = h^2/12`, the whole-matrix normalisation's
condition) of :math:`a L_{com} + b L_{rel}` has diagonal :math:`2a(1 + e_Q)` along :math:`Q` and
:math:`b(1 + e_r)/2` along :math:`r`. The ratio of the two (each over the unit-mass value), minus 1, is printed at the
fit's normalisation point and at interior data states (velocities by central differences), for the saved model and
for the exact :math:`L_{inv}` (bea series, midpoint, order 6); their difference estimates :math:`a/b - 1` where the
fitted parts have the exact shape. It uses positions only (and the fitted model), so where it agrees with the
held-out regression (benchmarks/separate_parts_error.py) it is a candidate for a calibration term.

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/parts_mass_ratio.py /tmp/cal9-morse4.pt --system two_body_morse4
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path")
    ap.add_argument("--system", default="two_body_morse4")
    ap.add_argument("--h", type=float, default=None)
    ap.add_argument("--states", type=int, default=20)
    args = ap.parse_args(argv)
    root = Path(__file__).resolve().parent
    sys.path[:0] = [str(root), str(root.parent)]
    import torch

    import bea
    from _acceptance_fit import acceptance_system
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP

    system, h, T = acceptance_system(args.system, args.h)
    m = InverseModifiedLagrangianGP.load(args.path)
    n = m.n
    S = torch.as_tensor(snapshots(system, h, T, 5, seed=0))
    qs, vs = S[:, 2], (S[:, 3] - S[:, 1]) / (2 * h)  # interior states, central-difference velocities
    F = m.gp.train_functionals
    pts = torch.cat([a.points[a.owner == F.count - 1] for a in F.atoms.values()])[:1]
    q0, v0 = m._from_standard(pts[:, :n]).detach(), m._vector_from_standard(pts[:, n:]).detach()
    states = [(q0, v0)] + [(qs[k:k + 1], vs[k:k + 1]) for k in range(args.states)]
    exact = bea.series_function("inverse_modified_lagrangian", "midpoint", 6, n)
    A_inv = torch.tensor([[1, 0, .5, 0], [0, 1, 0, .5], [1, 0, -.5, 0], [0, 1, 0, -.5]], dtype=torch.float64)
    unit = torch.tensor([2, 2, .5, .5], dtype=torch.float64)
    kappa = h ** 2 / 12

    def ratio(L, q, v):
        Hv = torch.autograd.functional.hessian(lambda x: L(q, x).sum(), v)[0, :, 0, :]
        Hq = torch.autograd.functional.hessian(lambda x: L(x, v).sum(), q)[0, :, 0, :]
        d = torch.diagonal(A_inv.T @ (Hv - kappa * Hq) @ A_inv) / unit
        return float(d[:2].mean() / d[2:].mean()) - 1, [float(x) for x in d / d.mean() - 1]

    rows = []
    for k, (q, v) in enumerate(states):
        fitted, fd = ratio(m.lagrangian, q, v)
        true, td = ratio(lambda a, b: exact(system, a, b, h), q, v)
        rows.append(fitted - true)
        label = "normalisation point" if k == 0 else f"data state {k}"
        print(f"{label}: fitted {fitted:.3e} (Qx, Qy, rx, ry {[f'{x:.2e}' for x in fd]}), exact {true:.3e}, "
              f"difference {fitted - true:.3e}", flush=True)
    d = torch.tensor(rows[1:], dtype=torch.float64)
    print(f"fitted - exact over the data states: mean {float(d.mean()):.3e}, std {float(d.std()):.3e}")


if __name__ == "__main__":
    main()
