r"""How far the exact inverse modified Lagrangian of a two-body system is from the element structure ``bodies(2, 2)``
(issue 23 item 2, session 19, branch cal9; a diagnostic, not a test).

``bodies(2, 2)`` with identical bodies models :math:`L(a, b) = u(a) + u(b) + p(a - b)`, :math:`a = (q_1, v_1)`,
:math:`b = (q_2, v_2)`. For such an :math:`L` the interaction of a displacement :math:`\delta` of body 1 and
:math:`\epsilon` of body 2,

.. math::  I(a, b) = L(a + \delta, b + \epsilon) - L(a + \delta, b) - L(a, b + \epsilon) + L(a, b)
           = p(a - b + \delta - \epsilon) - p(a - b + \delta) - p(a - b - \epsilon) + p(a - b),

depends on :math:`a - b` only, so :math:`I(a + c, b + c) - I(a, b) = 0` for every common shift :math:`c` (a
finite-difference form of :math:`(\partial_a + \partial_b)\partial_a\partial_b L = 0`). The script prints, for the
:math:`h^2` and :math:`h^4` parts of the exact :math:`L_{inv}` (bea series, midpoint, ``(L_inv[N] - L_inv[N-2]) /
h^N``) and for :math:`L` itself, at 200 random states of the system's box with displacements and shifts of 0.2 of the
box, the RMS of :math:`I(a + c, b + c) - I(a, b)` over the RMS of :math:`I(a, b)` (0 for an element-additive function,
up to rounding), and the same for a control that is not additive (:math:`L + x_1 x_2 y_1`). For two equal bodies in
the same quadratic trap the centre of mass and the relative motion separate, the centre's part is quadratic and a
quadratic in :math:`(q_1 + q_2, v_1 + v_2)` is element-additive, so every order is additive: the ratio is rounding.

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/element_additivity.py --system two_body_morse4
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", default="two_body_morse4")
    ap.add_argument("--h", type=float, default=None)
    ap.add_argument("--states", type=int, default=200)
    args = ap.parse_args(argv)
    root = Path(__file__).resolve().parent
    sys.path[:0] = [str(root), str(root.parent)]
    import torch

    import bea
    from _acceptance_fit import acceptance_system

    system, h, _ = acceptance_system(args.system, args.h)
    n = system.n
    lo = torch.tensor([b[0] for b in system.domain], dtype=torch.float64)
    hi = torch.tensor([b[1] for b in system.domain], dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    B = args.states
    z = lo + (0.15 + 0.7 * torch.rand(B, 2 * n, generator=g, dtype=torch.float64)) * (hi - lo)

    def body(i):  # body i's coordinates in z = (q, v): its position pair and velocity pair
        return [2 * i, 2 * i + 1, n + 2 * i, n + 2 * i + 1]

    def shift(i):  # a random displacement of body i, 0.2 of the box
        d = torch.zeros(B, 2 * n, dtype=torch.float64)
        d[:, body(i)] = 0.2 * (torch.rand(B, 4, generator=g, dtype=torch.float64) - 0.5) * (hi - lo)[body(i)]
        return d

    delta, eps = shift(0), shift(1)
    c = torch.zeros(B, 2 * n, dtype=torch.float64)
    c[:, body(0)] = 0.2 * (torch.rand(B, 4, generator=g, dtype=torch.float64) - 0.5) * (hi - lo)[body(0)]
    c[:, body(1)] = c[:, body(0)]
    series = {N: bea.series_function("inverse_modified_lagrangian", "midpoint", N, n) for N in (0, 2, 4)}

    def L_inv(N, x):
        with torch.no_grad():
            return series[N](system, x[:, :n], x[:, n:], h).detach()

    parts = {"L": lambda x: L_inv(0, x), "h^2 part": lambda x: (L_inv(2, x) - L_inv(0, x)) / h ** 2,
             "h^4 part": lambda x: (L_inv(4, x) - L_inv(2, x)) / h ** 4,
             "control L + x1 x2 y1": lambda x: L_inv(0, x) + x[:, 0] * x[:, 2] * x[:, 1]}

    def interaction(f, x):
        return f(x + delta + eps) - f(x + delta) - f(x + eps) + f(x)

    print(f"{args.system}, h {h}, {B} states; RMS[I(a+c, b+c) - I(a, b)] / RMS[I(a, b)] (0: element-additive)")
    for name, f in parts.items():
        I0, I1 = interaction(f, z), interaction(f, z + c)
        rms = lambda t: float(t.pow(2).mean().sqrt())  # noqa: E731
        print(f"  {name}: {rms(I1 - I0) / rms(I0):.3g} (RMS I {rms(I0):.3g}, RMS of the part {rms(f(z)):.3g})")


if __name__ == "__main__":
    main()
