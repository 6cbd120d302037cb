r"""Expansion of dimension-free series into components for a given dimension ``n``.

Each tree is contracted index by index: a slot holding :math:`v` contributes :math:`v_i`, an edge
:math:`M^{-1}` contributes :math:`(M^{-1})_{ij} = \operatorname{adj}(M)_{ij}\,\delta`, and a node
with slot indices :math:`(i_1, \dots)` is the symbol :math:`\partial_{i_1}\cdots L` of
:mod:`bea.jets`. The result is the component engine's own representation (a :class:`bea.derive.Raw`
over a :class:`bea.jets.Jets`), in its normal form, so it can be compared with a component
derivation exactly and printed with everything that exists for component series.
"""

from __future__ import annotations

import itertools
from typing import Dict, List, Optional

from ..errors import BeaValueError, InternalError
from ..derive import Raw
from ..field_element import FieldElement
from ..hseries import Poly, Q, padd, pmul, radical_poly
from ..jets import Jets
from .derive import FreeRaw
from .trees import A, OPEN, UPPER, V, Graph, decode, find_leaf


class _Expander:
    def __init__(self, jets: Jets, forest):
        self.J = jets
        self.n = jets.n
        self.forest = forest
        self._memo: Dict[tuple, object] = {}

    def _slot_vector(self, g: Graph, x: int, s: int, free: Optional[int]) -> List[Poly]:
        J, n = self.J, self.n
        c = g[x][s][1]
        if isinstance(c, tuple):
            y, t = c
            cov = [self._value(g, y, t, j, free) for j in range(n)]
            return [_sum(pmul(J.W_poly(i, j), cov[j], J.rules) for j in range(n)) for i in range(n)]
        if c == V:
            return [{(J.vel(i),): Q(1)} for i in range(n)]
        if c == A:
            return [self._accel(i) for i in range(n)]
        if c == UPPER:
            return [J.W_poly(i, free) for i in range(n)]
        raise InternalError(f"internal: cannot expand leaf {c} into components")

    def _accel(self, i: int) -> Poly:
        r""":math:`A_i = \sum_j (M^{-1})_{ij} (L_{q_j} - \sum_k L_{q_k v_j} v_k)`."""
        key = ("A", i)
        if key not in self._memo:
            J, n = self.J, self.n
            cov = [
                padd({(J.L((j,)),): Q(1)}, _sum(pmul({(J.L((k, j + n)),): Q(1)}, {(J.vel(k),): Q(1)}, J.rules) for k in range(n)), Q(-1))
                for j in range(n)
            ]
            self._memo[key] = _sum(pmul(J.W_poly(i, j), cov[j], J.rules) for j in range(n))
        return self._memo[key]

    def _value(self, g: Graph, x: int, ps: Optional[int], i_open: Optional[int], free: Optional[int]) -> Poly:
        """Node ``x`` contracted with all its slots except ``ps`` (which takes index ``i_open``)."""
        J, n = self.J, self.n
        slots = [s for s in range(len(g[x])) if s != ps]
        vecs = [self._slot_vector(g, x, s, free) for s in slots]
        out: Poly = {}
        base = [] if ps is None else [i_open + (n if g[x][ps][0] == 1 else 0)]
        for idx in itertools.product(range(n), repeat=len(slots)):
            term: Poly = {(): Q(1)}
            for s, i, vec in zip(slots, idx, vecs):
                if not vec[i]:
                    term = {}
                    break
                term = pmul(term, vec[i], J.rules)
            if not term:
                continue
            m = base + [i + (n if g[x][s][0] == 1 else 0) for s, i in zip(slots, idx)]
            out = padd(out, pmul({(J.L(tuple(m)),): Q(1)}, term, J.rules))
        return out

    def tree(self, t: int, free: Optional[int] = None) -> Poly:
        key = (t, free)
        if key in self._memo:
            return self._memo[key]
        tr = self.forest.trees[t]
        if tr[0] == 3:
            if tr[1] not in (V, A):
                raise InternalError("internal: a bare jet in a result")
            res = {(self.J.vel(free),): Q(1)} if tr[1] == V else self._accel(free)
        else:
            g = decode(tr)
            ups = find_leaf(g, UPPER)
            if find_leaf(g, OPEN):
                raise InternalError("internal: a covector in a result")
            if ups:
                x, s = ups[0]
                res = _sum(pmul(self.J.W_poly(free, j), self._value(g, x, s, j, free), self.J.rules) for j in range(self.n))
            else:
                res = self._value(g, 0, None, None, None)
        self._memo[key] = res
        return res

    def monomial(self, m, free: Optional[int] = None) -> Poly:
        out: Poly = {(): Q(1)}
        for x in m:
            f = free if self.forest.is_vector(x) else None
            out = pmul(out, self.tree(x, f), self.J.rules)
        return out

    def poly(self, p: Poly, free: Optional[int] = None) -> Poly:
        out: Poly = {}
        for m, c in p.items():
            if isinstance(c, FieldElement):  # theta is a variable of the component polynomials (bea.poly.Rules)
                out = padd(out, pmul(self.monomial(m, free), radical_poly(c, self.J.rules), self.J.rules))
            else:
                out = padd(out, self.monomial(m, free), c)
        return out


def _sum(polys) -> Poly:
    out: Poly = {}
    for p in polys:
        out = padd(out, p)
    return out


def to_components(raw: FreeRaw, n: int, jets: Optional[Jets] = None) -> Raw:
    """The component form of a dimension-free result in dimension ``n``."""
    J = jets or Jets(n, radical=field_of(raw.coeffs))
    if J.n != n:
        raise BeaValueError(f"jets of dimension {J.n} given for n={n}")
    ex = _Expander(J, raw.forest)
    coeffs: Dict[int, object] = {}
    for k, p in raw.coeffs.items():
        if raw.kind == "modified_equation":
            coeffs[k] = [ex.poly(p, r) for r in range(n)]
        else:
            coeffs[k] = ex.poly(p)
    return Raw(raw.kind, J, raw.order, coeffs, raw.symmetric)


def field_of(coeffs: Dict[int, Poly]):
    """The radical field ``(c, d)`` of the coefficients (:class:`~bea.field_element.FieldElement`), or None when all
    are rational."""
    return next((c.field for p in coeffs.values() for c in p.values() if isinstance(c, FieldElement)), None)
