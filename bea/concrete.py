r"""Concrete polynomial Lagrangians with a constant mass matrix: a fast, independent path.

For :math:`L` polynomial in :math:`(q, v)` (constants allowed as parameters) with constant,
invertible :math:`M = \partial^2 L/\partial v^2` -- harmonic and coupled oscillators, quartic
potentials -- the derivations can run directly on ``L``'s own derivatives instead of on generic
symbols. All higher derivatives of ``L`` vanish, :math:`M^{-1}` is a number, and the results are
exact polynomials. This path shares no formula with the generic one (only the algorithms), so
comparing the two is a genuine check of both.
"""

from __future__ import annotations

from typing import Dict, List, Optional

import sympy

from .errors import InternalError
from .hseries import EXACT, HSeries, Poly, Q, dot, pdiff
from .jets import Jets
from .symbolic import Frame


class PolynomialLagrangian:
    """Derivatives of a concrete Lagrangian given as a series ``X`` (polynomial in q, v, h)."""

    def __init__(self, jets: Jets, series: HSeries, W0: List[List[Poly]]):
        self.jets = jets
        self.series = series
        self.n = jets.n
        self._cache: Dict[tuple, HSeries] = {(): series}
        self.W0 = W0
        self.W = self._inverse_mass(series.order)

    @classmethod
    def from_frame(cls, jets: Jets, frame: Frame) -> Optional["PolynomialLagrangian"]:
        """Build from a validated concrete frame, or ``None`` if ``L`` is not eligible."""
        n = frame.n
        gens = [*frame.q, *frame.v, *frame.params]
        try:
            P = sympy.Poly(sympy.expand(frame.L), *gens, domain="QQ")
        except (sympy.PolynomialError, sympy.CoercionFailed, sympy.GeneratorsNeeded):
            return None
        var = [jets.jet(i, 0) for i in range(n)] + [jets.jet(i, 1) for i in range(n)] + [jets.param(k) for k in range(len(frame.params))]
        poly: Poly = {}
        for exps, c in P.terms():
            mono = tuple(sorted(x for x, e in zip(var, exps) for _ in range(e)))
            poly[mono] = Q(int(c.p), int(c.q))
        M = sympy.Matrix(n, n, lambda i, j: sympy.diff(frame.L, frame.v[i], frame.v[j]))
        if M.free_symbols or M.det() == 0:
            return None  # non-constant (or parameter-dependent) mass: use the generic formula
        Minv = M.inv()
        W0 = [[({(): Q(int(sympy.Rational(Minv[i, j]).p), int(sympy.Rational(Minv[i, j]).q))} if Minv[i, j] != 0 else {})
                for j in range(n)] for i in range(n)]
        return cls(jets, HSeries([poly], EXACT, jets.nil), W0)

    def with_series(self, X: HSeries, order: int) -> "PolynomialLagrangian":
        """The same machinery for another Lagrangian ``X`` (e.g. a candidate inverse), to ``h^order``."""
        return PolynomialLagrangian(self.jets, X.truncate_soft(order), self.W0)

    def _slot_var(self, s: int) -> int:
        n = self.n
        return self.jets.jet(s, 0) if s < n else self.jets.jet(s - n, 1)

    def derivative(self, m: tuple) -> HSeries:
        m = tuple(sorted(m))
        if m not in self._cache:
            parent = self.derivative(m[:-1])
            var = self._slot_var(m[-1])
            self._cache[m] = HSeries([pdiff(p, var) for p in parent.c], parent.order, parent.nil)
        return self._cache[m]

    def _inverse_mass(self, order: int) -> List[List[HSeries]]:
        r""":math:`(M_0 + \delta M)^{-1} = \sum_r (-W_0 \delta M)^r W_0`, :math:`\delta M = O(h)`."""
        n, J = self.n, self.jets
        W0 = [[HSeries([self.W0[i][j]], EXACT, J.nil) for j in range(n)] for i in range(n)]
        M = [[self.derivative(J.mass_slots(i, j)) for j in range(n)] for i in range(n)]
        for i in range(n):
            for j in range(n):
                lead = M[i][j][0]
                if any(len(mono) for mono in lead):
                    raise InternalError("internal: the mass matrix of a concrete polynomial Lagrangian must be constant")
        dM = [[HSeries([{}] + M[i][j].c[1:], M[i][j].order, J.nil) for j in range(n)] for i in range(n)]
        top = min(order, min(x.order for row in dM for x in row))
        total = [row[:] for row in W0]
        term = W0
        if all(x.is_zero() for row in dM for x in row):
            return total
        for _ in range(top):
            WdM = [[dot(W0[i], [dM[k][l] for k in range(n)], top) for l in range(n)] for i in range(n)]
            term = [[-dot(WdM[i], [term[k][j] for k in range(n)], top) for j in range(n)] for i in range(n)]
            total = [[(total[i][j] + term[i][j]).truncate_soft(top) for j in range(n)] for i in range(n)]
        return total
