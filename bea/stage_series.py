r"""The interior points of a stage scheme order by order in ``h`` (component engine, :mod:`bea.derive`).

On the series of :mod:`bea.hseries` the end points ``a, b`` are Taylor series of a curve in jet
variables, and ``L`` is the generic Lagrangian (or a concrete polynomial one). The interior points
are series :math:`Q_k = \sum_j h^j Q_k^{(j)}` whose coefficients are polynomials in the jets, the
derivatives of ``L`` and :math:`\delta = 1/\det M`. From the straight-line start
:math:`Q_k = a + \theta_k (b - a)` the iteration

.. math::  Q \leftarrow Q - (K^{-1} \otimes M^{-1})\, h\,\partial_Q \Phi(a, Q, b)

solves :math:`\partial_Q\Phi = 0`: the Hessian of :math:`\Phi` is :math:`h^{-1}(K \otimes M)(1 + O(h))`
(:attr:`bea.stages.StageScheme.stiffness`), so each pass multiplies the residual by :math:`O(h)` and
fixes one more power of ``h`` of the :math:`Q_k` -- the expansion of the interior points from their
stationarity conditions, term by term. ``M^{-1}`` is the generic
:math:`\operatorname{adj}(M)\,\delta` (or the constant inverse mass of a concrete Lagrangian).
The gradient is the coefficient of nilpotent variations :math:`\varepsilon_i` added to one interior
point at a time (as in the discrete Euler--Lagrange equations of :mod:`bea.derive`).

When the end points carry a variation (the discrete Euler--Lagrange equations vary ``q_j``), the
interior points are solved without it: by stationarity, the first variation of
:math:`\Phi(a, Q^*(a, b), b)` is :math:`\partial_a\Phi\,\delta a + \partial_b\Phi\,\delta b`, so
:math:`Q^*` need not follow the variation.
"""

from __future__ import annotations

from typing import List

from .errors import InternalError, UnsupportedSchemeError
from .hseries import EXACT, HSeries, SeriesVector
from .schemes import exact

__all__ = ["stationary_series", "interior_series"]


def _strip(v: SeriesVector, nil: int) -> SeriesVector:
    """``v`` without its terms in the nilpotent variations (variables with index below ``nil``)."""
    out = []
    for s in v:
        out.append(HSeries([{m: c for m, c in p.items() if not (m and m[0] < nil)} for p in s.c], s.order, s.nil))
    return SeriesVector(out)


def _inverse(K) -> List[List[object]]:
    """Exact inverse of the stiffness matrix (Gauss--Jordan on its exact entries: rationals or elements of the
    scheme's radical extension, :mod:`bea.radicals`)."""
    m = len(K)
    A = [list(K[i]) + [exact(int(i == j)) for j in range(m)] for i in range(m)]
    for c in range(m):
        p = next(r for r in range(c, m) if A[r][c] != 0)
        A[c], A[p] = A[p], A[c]
        piv = A[c][c]
        A[c] = [x / piv for x in A[c]]
        for r in range(m):
            if r != c and A[r][c] != 0:
                f = A[r][c]
                A[r] = [x - f * y for x, y in zip(A[r], A[c])]
    return [row[m:] for row in A]


def _gradient(scheme, L, a, Q, b, h, jets) -> List[List[HSeries]]:
    r""":math:`h\,\partial\Phi/\partial Q_k` per interior point ``k``, per component ``i`` (the variation is
    :math:`h\varepsilon`, so that the velocities, divided by ``h``, stay series)."""
    n = jets.n
    out = []
    for k in range(len(Q)):
        var = SeriesVector(Q[k][i] + HSeries([{}, {(jets.eps(i),): 1}], EXACT, jets.nil) for i in range(n))
        phi = scheme.stage_action(L, a, [*Q[:k], var, *Q[k + 1:]], b, h)
        out.append([jets.eps_coefficient(phi, i) for i in range(n)])
    return out


def _apply_W(g: List[HSeries], jets, W) -> List[HSeries]:
    """:math:`M^{-1} g` on series (``M^{-1}`` does not depend on ``h``: coefficient by coefficient)."""
    top = max((len(x.c) for x in g), default=0)
    order = min(x.order for x in g)
    cols = [jets.apply_W([x[d] if d < len(x.c) else {} for x in g], W) for d in range(top)]
    return [HSeries([cols[d][i] for d in range(top)], order, jets.nil) for i in range(jets.n)]


def _known_zero(s: HSeries) -> bool:
    return all(not p for p in s.c[: s.order + 1])


def _low(v: SeriesVector, precision: int) -> SeriesVector:
    return SeriesVector(x.truncate_soft(precision) for x in v)


def _correction(g, Kinv, jets, W) -> List[List[HSeries]]:
    r""":math:`-(K^{-1} \otimes M^{-1})\, g` with its known terms taken as exact: a correction computed at a low
    precision is right in its lowest term and is refined by the later passes, so it must not lower the precision
    to which the interior points are known (that is set by the end points)."""
    m = len(g)
    Wg = [_apply_W(gk, jets, W) for gk in g]
    out = []
    for k in range(m):
        row = []
        for i in range(jets.n):
            c = sum((Wg[l][i] * Kinv[k][l] for l in range(m) if Kinv[k][l]), HSeries([], EXACT, jets.nil))
            row.append(HSeries([{x: -y for x, y in p.items()} for p in c.c[: c.order + 1]], EXACT, jets.nil))
        out.append(row)
    return out


def interior_series(L, a: SeriesVector, b: SeriesVector, h: HSeries, scheme, jets, W=None) -> List[SeriesVector]:
    """The stationary interior points as series, to the precision of ``a, b`` (module docstring).

    Each pass needs the gradient only to the power of ``h`` that it fixes, so it runs on the end points and
    interior points truncated just above that power (a pass at ``h^t`` costs far less than one at the full
    precision); the last pass runs at full precision and confirms that the whole known gradient vanishes."""
    if not scheme.exact_constants:
        raise UnsupportedSchemeError(
            f"{scheme!r} has constants given only as floats, which the exact series engine cannot represent; give "
            "irrational nodes and weights exactly in one radical, e.g. (5 - bea.radical(5)) / 10 or (5 - sympy.sqrt(5)) / 10 "
            "(bea.galerkin_lobatto(3) and bea.triple_jump() do), or integrate it in torch with integrators.VariationalIntegrator")
    a, b = _strip(a, jets.nil.nil), _strip(b, jets.nil.nil)
    Q = scheme.interior_guess(a, b)
    Kinv = _inverse(scheme.stiffness)
    limit = min(x.order for x in (*a, *b))
    precision = min(3, limit)  # of the arguments; the gradient is then known to the same power
    for _ in range(3 * limit + 10):
        g = _gradient(scheme, L, _low(a, precision), [_low(x, precision) for x in Q], _low(b, precision), h, jets)
        if all(_known_zero(x) for gk in g for x in gk):
            if precision >= limit:
                return Q
            precision = min(limit, precision + 2)
            continue
        corr = _correction(g, Kinv, jets, W)
        Q = [SeriesVector(Q[k][i] + corr[k][i] for i in range(jets.n)) for k in range(len(Q))]
        # the correction cancels the lowest power ``v`` exactly (the leading Hessian, K x M at h^0, is exact
        # there) and the next one too when the Hessian is even in h; the next pass looks two powers beyond it
        lowest = min(x.valuation() for gk in g for x in gk)
        precision = min(limit, lowest + 3)
    raise InternalError(f"internal: the interior points of {scheme!r} did not settle in {3 * limit + 10} passes")


def stationary_series(L, a, b, h, scheme, jets, W=None) -> HSeries:
    r""":math:`L_\Delta(a, b) = \Phi(a, Q^*, b)` on series (the variations of ``a, b`` kept)."""
    Q = interior_series(L, a, b, h, scheme, jets, W)
    return scheme.stage_action(L, a, Q, b, h)
