r"""The total derivative along an arbitrary curve, on trees that hold :math:`M^{-1}`, the acceleration :math:`A` and
jets (the meshed Lagrangian of a stage scheme, before its jets are substituted).

Along a curve :math:`q(t)` with jets :math:`v = \dot q, q^{(2)}, q^{(3)}, \dots` (no equation of motion imposed) a
tree is a function of :math:`(q, v)` -- through its nodes :math:`L^{(a,b)}`, its edges :math:`M^{-1}` and its leaves
:math:`v` and :math:`A = M^{-1}(L_q - L_{qv}[v])` -- and of the jet leaves themselves, so

.. math::  D = v \cdot \partial_q + q^{(2)} \cdot \partial_v + \sum_{k \ge 2} q^{(k+1)} \cdot \partial_{q^{(k)}} .

The partial derivatives are those of :func:`~bea.free.surgery.partial_parts` (a node gains a slot, an edge gives
:math:`-M^{-1}(\partial M)M^{-1}`, :math:`v` and :math:`A` their derivatives) with the direction glued in as the leaf
:math:`v` or :math:`q^{(2)}`; a jet leaf :math:`q^{(k)}` becomes :math:`q^{(k+1)}`. It is
:meth:`~bea.free.algebra.Algebra.jet_derivative` extended to trees with :math:`M^{-1}` and :math:`A`. On the solutions
of :math:`\ddot q = F` it is :math:`D_F` once the jets are replaced by :math:`D_F^{k-2}F`, so an operator in
:math:`D` may be applied before that substitution, on the far smaller series in the jets
(:meth:`bea.free.derive.FreeDerivation._modified_on_shell`).
"""

from __future__ import annotations

from typing import Dict

from ..hseries import EXACT, HSeries, Poly, Q
from .algebra import Algebra, _acc
from .surgery import partial_parts
from .trees import OPEN, PORT, V, TreeError, copy_graph, find_leaf

JERK = 2  # the leaf q^(2), the direction of the partial derivative in v


class CurveDerivative:
    """:math:`D` along an arbitrary curve (module docstring), memoised per tree; results are normalised
    (:meth:`~bea.free.algebra.Algebra.normalize`: a node that gains a q-slot may become :math:`L_q`)."""

    def __init__(self, alg: Algebra):
        self.alg = alg
        self.forest = alg.forest
        self._memo: Dict[int, HSeries] = {}

    def tree(self, i: int, prec: int = EXACT) -> HSeries:
        """:math:`D` of tree ``i``, exact (it holds no ``h``); ``prec`` is accepted for
        :meth:`~bea.free.algebra.Algebra.leibniz`."""
        res = self._memo.get(i)
        if res is None:
            f = self.forest
            if f.is_bare(i):
                raise TreeError("the curve derivative acts on scalar trees")
            g = f.graph(i)
            out: Poly = {}
            for kind, fill in ((0, V), (1, JERK)):
                for coef, h in partial_parts(g, kind, PORT, constant_jets=True):
                    (x, s), = find_leaf(h, PORT)
                    h[x][s][1] = fill
                    _acc([out], 0, f.monomial(h), Q(coef))
            for x, node in enumerate(g):
                for s, (_, c) in enumerate(node):
                    if isinstance(c, int) and JERK <= c < OPEN:
                        h = copy_graph(g)
                        h[x][s][1] = c + 1
                        _acc([out], 0, f.monomial(h), Q(1))
            res = self.alg.normalize(HSeries([out], EXACT))
            self._memo[i] = res
        return res

    def series(self, S: HSeries, order: int) -> HSeries:
        """:math:`D` of a scalar tree series, to ``h^order`` (Leibniz over the factors)."""
        return self.alg.leibniz(S, self.tree, order)
