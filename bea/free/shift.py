r"""Tree polynomials at shifted arguments: :math:`Y(q + \delta x,\, v + \delta y)` as a series in ``h``.

A scheme evaluates its Lagrangian at points :math:`x = q + \delta x`, :math:`y = v + \delta y`
whose increments are series in ``h`` of the jets :math:`q^{(k)}` (:class:`~bea.free.vectors.VecSeries`).
For the generic node :math:`L` that expansion is :func:`~bea.free.algebra.lagrangian_at`; this
module does the same for any scalar tree polynomial :math:`Y` (a correction term of an inverse
modified Lagrangian):

.. math::
    Y(q + \delta x, v + \delta y) = \sum_{m \ge 0} \frac{1}{m!}\, \mathcal D^m Y, \qquad
    \mathcal D = \delta x \cdot \partial_q + \delta y \cdot \partial_v,

with the increments held constant (``D`` acts on :math:`Y`'s nodes, edges :math:`M^{-1}`, leaves
:math:`v` and accelerations :math:`A`, never on what an earlier application inserted). Each
application is one partial derivative per tree (:func:`~bea.free.surgery.partial_parts`), memoised per
tree and per pair of increments, so repeated factors cost nothing.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

from ..errors import InconsistentSchemeError
from ..hseries import EXACT, HSeries, Poly, Q
from .algebra import ACC_A, Algebra, _acc
from .surgery import partial_parts
from .trees import OPEN, PORT, V, copy_graph, find_leaf
from .vectors import POSITION, VecSeries

# A velocity that an increment inserted: a constant of the expansion, turned back into v at the end.
FROZEN_V = ACC_A - 1

Increments = Tuple[Tuple[Tuple[int, int, object], ...], Tuple[Tuple[int, int, object], ...]]


def increments(x: VecSeries, y: VecSeries, order: int) -> Increments:
    r"""``(δx, δy)`` as sorted ``(degree, leaf, coefficient)`` tuples to ``h^order``; a velocity
    leaf in an increment becomes :data:`FROZEN_V`."""
    out = []
    for vec, base in ((x, POSITION), (y, V)):
        if vec[0].get(base) != 1 or any(k != base for k in vec[0]):
            raise InconsistentSchemeError("inconsistent scheme: its arguments do not tend to (q, v) as h -> 0")
        terms = []
        for deg in range(1, min(len(vec.c), order + 1)):
            for leaf, c in vec.c[deg].items():
                if leaf in (POSITION, OPEN):
                    raise InconsistentSchemeError("inconsistent scheme: an argument of L contains q or a variation beyond h^0")
                terms.append((deg, FROZEN_V if leaf == V else leaf, c))
        out.append(tuple(sorted(terms, key=lambda t: (t[0], t[1]))))
    return out[0], out[1]


class Shift:
    """Expansions :math:`Y(q + \\delta x, v + \\delta y)` of one derivation, memoised per tree."""

    def __init__(self, alg: Algebra):
        self.alg = alg
        self.forest = alg.forest
        self._memo: Dict[Tuple[Increments, int], HSeries] = {}
        self._unfreeze = {FROZEN_V: HSeries([{(self.forest.id((3, V)),): Q(1)}], EXACT)}

    def at(self, Y: Poly, x: VecSeries, y: VecSeries, order: int) -> HSeries:
        """The scalar tree polynomial ``Y`` at ``(x, y)``, to ``h^order``."""
        inc = increments(x, y, order)
        term = HSeries([dict(Y)], order)
        out = term
        m = 0
        while not term.is_zero():
            m += 1
            term = self.alg.leibniz(term, lambda i, prec: self._tree(i, inc, prec), order) * Q(1, m)
            out = out + term
        return self.alg.substitute_jets(out, self._unfreeze, order)

    def _tree(self, i: int, inc: Increments, prec: int) -> HSeries:
        r""":math:`\mathcal D` of tree ``i`` to ``h^prec``."""
        key = (inc, i)
        done = self._memo.get(key)
        if done is not None and done.order >= prec:
            return done.truncate_soft(prec)
        f = self.forest
        out: List[Poly] = [{} for _ in range(prec + 1)]
        g = f.graph(i)
        for kind, terms in enumerate(inc):
            terms = [t for t in terms if t[0] <= prec]
            if not terms:
                continue
            for coef, h in partial_parts(g, kind, PORT, constant_jets=True):
                (x, s), = find_leaf(h, PORT)
                for deg, leaf, c in terms:
                    h2 = copy_graph(h)
                    h2[x][s][1] = leaf
                    _acc(out, deg, f.monomial(h2), coef * c)
        res = self.alg.normalize(HSeries(out, prec))
        self._memo[key] = res
        return res
