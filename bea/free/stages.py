r"""Stationary interior points of a stage scheme (:mod:`bea.stages`) on trees, for every dimension.

The end points ``a, b`` of a step are Taylor series of a curve in the jets (:class:`VecSeries`). The
interior points are sought as

.. math::  Q_k = a + \theta_k (b - a) + \sum_{j \ge 1} h^j P_{k,j},

where each :math:`P_{k,j}` is a *vector tree polynomial*: a combination of vector-valued trees
(:math:`M^{-1}` applied to contractions of derivatives of ``L`` with the jets, :math:`v` and :math:`A`),
the same for every ``n``. Three pieces make the component engine's iteration (:mod:`bea.stage_series`)
run on trees:

(i) *L at a tree-shifted point.* Each :math:`P_{k,j}` enters the argument vectors as a placeholder
    leaf of degree ``j``; :func:`~bea.free.algebra.lagrangian_at` then Taylor-expands ``L`` around
    :math:`(q, v)` as for any scheme, and the placeholder slots are filled with the trees of
    :math:`P_{k,j}` afterwards (:meth:`~bea.free.algebra.Algebra.substitute_jets` glues a vector tree
    into a slot by an :math:`M^{-1}` edge). Every power of every increment is thereby expanded, so this
    is the full multivariate Taylor series of ``L`` with tree-valued increments.
(ii) *The gradient and* :math:`M^{-1}`. A variation :math:`h\varepsilon` (the free covector slot
    :data:`~bea.free.trees.OPEN`) added to :math:`Q_k` gives :math:`g_k = h\,\partial_{Q_k}\Phi` as a
    covector tree series, the part of :math:`\Phi` linear in the open slot;
    :meth:`~bea.free.algebra.Algebra.raise_index` turns it into the vector :math:`M^{-1} g_k`.
(iii) *The iteration.* The Hessian of :math:`\Phi` in the interior points is
    :math:`h^{-1}(K \otimes M)(1 + O(h))` (:attr:`bea.stages.StageScheme.stiffness`), so
    :math:`P \leftarrow P - (K^{-1} \otimes M^{-1})\, g` multiplies the residual by :math:`O(h)` and fixes
    the expansion one power of ``h`` at a time, as on components.

The stationary value is then :math:`\Phi(a, Q^*, b)` with the variations of ``a, b`` kept: by
stationarity, :math:`Q^*` need not follow them (the envelope theorem).
"""

from __future__ import annotations

from typing import Dict, List

from ..errors import InternalError, UnsupportedSchemeError
from ..field_element import coefficient
from ..hseries import EXACT, HSeries, Poly, Q, substitute
from ..stage_series import _inverse
from .algebra import Algebra, _acc, lagrangian_at
from .trees import OPEN
from .vectors import VecSeries

# leaf codes standing for the interior corrections P_{k,j} (above the ports of bea.free.substitution): a fresh
# code for every new value, so that a tree holding placeholders names its substituted value for good
PLACEHOLDER = 1000


def supported(scheme) -> bool:
    """Whether the dimension-free engine derives this stage scheme: its constants must be exact, rational or in one
    radical extension (``galerkin3``, the triple jump), whose elements are then the tree coefficients
    (:class:`~bea.field_element.FieldElement`)."""
    return scheme.exact_constants


def check_supported(scheme) -> None:
    """:func:`supported`, or a typed refusal naming the way out."""
    if not scheme.exact_constants:  # no exact engine represents them, n=... would refuse them too
        raise UnsupportedSchemeError(
            f"{scheme!r} has constants given only as floats, which no exact series engine can represent; give them "
            "exactly (rational, or in one radical such as (5 - bea.radical(5)) / 10), or integrate it in torch with "
            "integrators.VariationalIntegrator")
    scheme.radical_field  # two different radicals: refused, typed (bea.stages)


def _strip_open(x: VecSeries) -> VecSeries:
    return VecSeries([{k: c for k, c in d.items() if k != OPEN} for d in x.c], x.order)


def _low(x: VecSeries, precision: int) -> VecSeries:
    return VecSeries(x.c, min(x.order, precision))


class StageSolver:
    """The stationary value of one stage scheme on tree series (module docstring)."""

    def __init__(self, scheme, alg: Algebra):
        check_supported(scheme)
        self.scheme = scheme
        self.alg = alg
        self.forest = alg.forest
        self.Kinv = [[coefficient(x) for x in row] for row in _inverse(scheme.stiffness)]
        self.h = HSeries.h_power(1, 1, EXACT)
        self._values: Dict[int, HSeries] = {}  # placeholder code -> its vector tree polynomial
        self._filled: Dict[int, HSeries] = {}  # tree with placeholders -> substituted and normalised

    def _code(self, poly: Poly) -> int:
        code = PLACEHOLDER + len(self._values)
        self._values[code] = HSeries([poly], EXACT)
        return code

    def _L(self, x: VecSeries, y: VecSeries) -> HSeries:
        return lagrangian_at(self.forest, x, y)

    def _points(self, a: VecSeries, b: VecSeries, P: List[Dict[int, int]], precision: int) -> List[VecSeries]:
        r""":math:`Q_k` to ``h^precision`` with placeholder leaves (codes ``P[k][j]``) for the corrections."""
        out = []
        for k, q in enumerate(self.scheme.interior_guess(a, b)):
            c = [dict(d) for d in q.c[: precision + 1]]
            c += [{} for _ in range(precision + 1 - len(c))]
            for j, code in P[k].items():
                if j <= precision:
                    c[j][code] = Q(1)
            out.append(VecSeries(c, min(q.order, precision)))
        return out

    def _fill(self, S: HSeries, order: int) -> HSeries:
        """``S`` with the placeholder leaves replaced by their vector tree polynomials, normalised. A tree's
        substituted value is kept (its codes name fixed values), so the passes share the unchanged corrections."""
        need = self.alg.trees_holding(S, lambda c: c >= PLACEHOLDER, order)
        vals = {}
        for x, prec in need.items():
            done = self._filled.get(x)
            if done is None or done.order < prec:
                done = self.alg.normalize(self.alg.jet_tree(x, self._values, prec))
                self._filled[x] = done
            vals[x] = done.truncate_soft(prec)
        return self.alg.normalize(substitute(S, vals, order))

    def _gradient(self, a, b, P, precision: int) -> List[HSeries]:
        r""":math:`g_k = h\,\partial_{Q_k}\Phi` to ``h^precision``, covector tree series."""
        a, b = _low(a, precision), _low(b, precision)
        Qs = self._points(a, b, P, precision)
        out = []
        for k in range(len(Qs)):
            var = Qs[k] + VecSeries([{}, {OPEN: Q(1)}], EXACT)
            phi = self.scheme.stage_action(self._L, a, [*Qs[:k], var, *Qs[k + 1:]], b, self.h)
            lin = _first_variation(self.forest, phi)
            out.append(self._fill(lin, lin.order))
        return out

    def _correct(self, g: List[HSeries], P: List[Dict[int, int]]) -> None:
        r""":math:`P \leftarrow P - (K^{-1} \otimes M^{-1})\, g`, the known terms of ``g`` taken as exact; every
        changed :math:`P_{k,j}` gets a new placeholder code."""
        raised = [self.alg.raise_index(x) for x in g]
        for k in range(len(P)):
            new: Dict[int, Poly] = {}
            for l, r in enumerate(raised):
                c = self.Kinv[k][l]
                if not c:
                    continue
                for j in range(min(len(r.c), r.order + 1)):
                    if not r.c[j]:
                        continue
                    if j == 0:
                        raise InternalError("internal: an interior correction at h^0 (the straight line is not the leading term)")
                    if j not in new:
                        new[j] = dict(self._values[P[k][j]][0]) if j in P[k] else {}
                    for m, x in r.c[j].items():
                        _acc([new[j]], 0, m, -c * x)
            for j, p in new.items():
                if p:
                    P[k][j] = self._code(p)
                else:
                    P[k].pop(j, None)

    def interior(self, a: VecSeries, b: VecSeries) -> List[Dict[int, int]]:
        """The corrections :math:`P_{k,j}` of the stationary interior points, to the precision of ``a, b``, as
        placeholder codes (their values: ``self._values``)."""
        a, b = _strip_open(a), _strip_open(b)
        limit = min(a.order, b.order)
        P: List[Dict[int, int]] = [{} for _ in range(self.scheme.n_interior)]
        precision = min(3, limit)
        for _ in range(3 * limit + 10):
            g = self._gradient(a, b, P, precision)
            if all(not any(x.c[: x.order + 1]) for x in g):
                if precision >= limit:
                    return P
                precision = min(limit, precision + 2)
                continue
            self._correct(g, P)
            # the lowest power is cancelled exactly, the next one too when the Hessian is even in h
            precision = min(limit, min(x.valuation() for x in g) + 3)
        raise InternalError(f"internal: the interior points of {self.scheme!r} did not settle in {3 * limit + 10} passes")

    def stationary_value(self, a: VecSeries, b: VecSeries) -> HSeries:
        r""":math:`L_\Delta(a, b) = \Phi(a, Q^*, b)` as a tree series, normalised. When ``a`` or ``b`` carries the
        variation (the open slot), only the first variation is returned: the terms free of it are dropped before
        the interior corrections are glued in, which is most of the work."""
        P = self.interior(a, b)
        precision = min(a.order, b.order)
        Qs = self._points(_strip_open(a), _strip_open(b), P, precision)
        phi = self.scheme.stage_action(self._L, a, Qs, b, self.h)
        if any(OPEN in d for x in (a, b) for d in x.c):
            phi = _first_variation(self.forest, phi)
        return self._fill(phi, phi.order)


def _first_variation(forest, S: HSeries) -> HSeries:
    """The monomials of ``S`` with a factor that holds the open slot (a covector)."""
    return HSeries([{m: c for m, c in p.items() if any(forest.is_covector(x) for x in m)} for p in S.c], S.order)
