r"""Operations on series of tree polynomials: Taylor expansion of ``L``, total derivative along
:math:`\ddot q = F`, jet substitution, raising the free index with :math:`M^{-1}`, and the normal
form without :math:`L_q` (the substitution :math:`L \to L + \sum_j h^j Y_j` of the inverse
iteration is :mod:`bea.free.substitution`).

A *tree polynomial* is a :mod:`bea.hseries` polynomial whose variables are canonical trees of a
:class:`~bea.free.trees.Forest`; a product of trees is a forest. A *vector* (*covector*)
polynomial has exactly one factor per monomial that carries the free index
(:data:`~bea.free.trees.UPPER` or a bare leaf; :data:`~bea.free.trees.OPEN`).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from ..errors import InconsistentSchemeError, UnsupportedSchemeError
from ..hseries import EXACT, HSeries, Poly, Q
from .surgery import attach_vector, eliminate_lq, has_lq, total_derivative_parts
from .trees import A, OPEN, PORT, UPPER, V, Forest, Graph, TreeError, copy_graph, find_leaf, single_node
from .vectors import POSITION, VecSeries

ACC = PORT - 1  # placeholder leaf for q'' = F while differentiating
ACC_A = PORT - 2  # placeholder leaf for DA while differentiating


def _acc(out: List[Poly], k: int, m, c) -> None:
    d = out[k]
    x = d.get(m, 0) + c
    if x:
        d[m] = x
    else:
        d.pop(m, None)


def split_vector(forest: Forest, m: Tuple[int, ...]) -> Tuple[int, Tuple[int, ...]]:
    """The factor of a vector monomial that carries the free index, and the scalar rest."""
    for i, x in enumerate(m):
        if forest.is_vector(x):
            return x, m[:i] + m[i + 1 :]
    raise TreeError("a vector monomial without a free index")


# --------------------------------------------------------------------------- Taylor expansion


def lagrangian_at(forest: Forest, x: VecSeries, y: VecSeries) -> HSeries:
    r"""Series of :math:`L(x, y)` for argument vectors near :math:`(q, v)`:
    :math:`\sum_{a,b} \frac{1}{a!\,b!} L^{(a,b)}[\delta x^a, \delta y^b]`, each term one node
    whose slots hold the leaves of :math:`\delta x = x - q`, :math:`\delta y = y - v`. A scheme's ``L`` on trees is
    this function: anything but the vectors built from ``a``, ``b`` and ``h`` is refused, typed."""
    if not isinstance(x, VecSeries) or not isinstance(y, VecSeries):
        raise UnsupportedSchemeError("L must be called with the position and velocity built from a, b and h")
    if x[0] != {POSITION: 1}:
        raise InconsistentSchemeError(
            "inconsistent scheme: the position argument of L does not tend to q(t) as h -> 0 "
            "(a discrete Lagrangian must approximate the action over one step)"
        )
    base_v = {k: c for k, c in y[0].items() if k != OPEN}
    if base_v != {V: 1}:
        raise InconsistentSchemeError(
            "inconsistent scheme: the velocity argument of L does not tend to the velocity as h -> 0 "
            "(a discrete Lagrangian must approximate the action over one step)"
        )
    order = min(x.order, y.order)
    items: List[Tuple[int, int, int, object]] = []  # (kind, degree, leaf, coefficient)
    for kind, vec, base in ((0, x, POSITION), (1, y, V)):
        for deg in range(min(len(vec.c), order + 1)):
            for leaf, c in vec.c[deg].items():
                if deg == 0 and leaf == base:
                    continue
                if leaf == POSITION:
                    raise InconsistentSchemeError("inconsistent scheme: L is evaluated at a point whose expansion contains q beyond h^0")
                items.append((kind, deg, leaf, c))
    out: List[Poly] = [{} for _ in range(order + 1)]

    def rec(i: int, budget: int, eps: bool, qs: list, vs: list, coef) -> None:
        if i == len(items):
            deg = order - budget
            _acc(out, deg, (forest.id((2, tuple(sorted((0, c) for c in qs)), tuple(sorted((0, c) for c in vs)))),), coef)
            return
        kind, deg, leaf, c = items[i]
        rec(i + 1, budget, eps, qs, vs, coef)
        m, cm, fact = 0, Q(1), 1
        while True:
            m += 1
            if deg * m > budget or (leaf == OPEN and (eps or m > 1)):
                break
            cm *= c
            fact *= m
            group = (qs + [leaf] * m, vs) if kind == 0 else (qs, vs + [leaf] * m)
            rec(i + 1, budget - deg * m, eps or leaf == OPEN, group[0], group[1], coef * cm / fact)

    rec(0, order, False, [], [], Q(1))
    return HSeries(out, order)


# --------------------------------------------------------------------------- the operations


class Algebra:
    """Tree-series operations of one derivation, with memoised per-tree results."""

    def __init__(self, forest: Forest):
        self.forest = forest
        self._d_memo: Dict[int, HSeries] = {}
        self._d_token: Optional[int] = None
        self._da_memo: Dict[int, HSeries] = {}
        self._group_memo: Dict[Tuple[int, int], Dict[int, list]] = {}
        self._raise_memo: Dict[int, Tuple[int, ...]] = {}
        self._normal: Dict[int, list] = {}
        self._jet_memo: Dict[int, HSeries] = {}

    # ----------------------------------------------------------- total derivative
    def _vector_terms(self, F: HSeries, prec: int) -> Dict[int, list]:
        """``F``'s terms to ``h^prec`` grouped by the factor that carries the free index:
        ``{w: [(k, scalar_rest, coefficient)]}`` (many terms share ``w``, and only ``w`` takes
        part in graph surgery)."""
        out: Dict[int, list] = {}
        for k in range(min(len(F.c), prec + 1)):
            for m, c in F.c[k].items():
                w, rest = split_vector(self.forest, m)
                out.setdefault(w, []).append((k, rest, c))
        return out

    def _attach(self, g: Graph, x: int, s: int, w: int) -> Graph:
        f = self.forest
        if f.is_bare(w):
            return attach_vector(g, x, s, [], f.trees[w][1])
        return attach_vector(g, x, s, f.graph(w), None)

    def normal(self, i: int) -> List[Tuple[int, Tuple[int, ...]]]:
        """Tree ``i`` without :math:`L_q` nodes (:func:`~bea.free.surgery.eliminate_lq`): ``[(coefficient, monomial)]``."""
        out = self._normal.get(i)
        if out is None:
            f = self.forest
            out = [(1, (i,))] if not has_lq(f.trees[i]) else [(c, f.monomial(g)) for c, g in eliminate_lq(f.graph(i))]
            self._normal[i] = out
        return out

    def normalize(self, S: HSeries) -> HSeries:
        r"""``S`` with every :math:`L_q` node eliminated in favour of the acceleration :math:`A`
        (:meth:`normal`)."""
        out: List[Poly] = [{} for _ in range(len(S.c))]
        for k, p in enumerate(S.c):
            for m, c in p.items():
                parts = [self.normal(x) for x in m]
                if all(len(q) == 1 and q[0][1] == (x,) for q, x in zip(parts, m)):
                    _acc(out, k, m, c)
                    continue
                acc = [((), c)]
                for q in parts:
                    acc = [(m1 + m2, c1 * c2) for m1, c1 in acc for c2, m2 in q]
                for m1, c1 in acc:
                    _acc(out, k, tuple(sorted(m1)), c1)
        return HSeries(out, S.order)

    def _d_graph(self, g: Graph, F: HSeries, order: int, accel: bool) -> List[Poly]:
        """Terms of :math:`D_F` of the forest ``g`` to ``h^order`` (``accel``: differentiate
        the acceleration leaves too)."""
        f = self.forest
        out: List[Poly] = [{} for _ in range(order + 1)]
        for coef, h, slot in total_derivative_parts(g, ACC, ACC_A if accel else None):
            if slot is None:
                _acc(out, 0, f.monomial(h), Q(coef))
                continue
            code = h[slot[0]][slot[1]][1]
            for w, group in self._grouped(code, F, order).items():
                base = f.monomial(self._attach(h, slot[0], slot[1], w))
                for k, rest, c in group:
                    _acc(out, k, tuple(sorted(base + rest)), coef * c)
        return out

    def _grouped(self, code: int, F: HSeries, order: int) -> Dict[int, list]:
        """:meth:`_vector_terms` of :math:`F` (``code`` ACC) or :math:`D_F A` (ACC_A), memoised."""
        key = (code, order)
        out = self._group_memo.get(key)
        if out is None:
            out = self._vector_terms(F if code == ACC else self.accel_derivative(F, order), order)
            self._group_memo[key] = out
        return out

    def _check_token(self, F: HSeries) -> None:
        if self._d_token != id(F):
            self._d_memo.clear()
            self._da_memo.clear()
            self._group_memo.clear()
            self._d_token = id(F)

    def accel_derivative(self, F: HSeries, prec: int) -> HSeries:
        r""":math:`D_F A` to ``h^prec``, as a vector series.

        Differentiating :math:`M A = L_q - L_{qv}[v]` along the flow gives
        :math:`D_F A = M^{-1} D^*_F (L_q - L_{qv}[v] - M[A])`, where :math:`D^*_F` holds :math:`A` fixed.
        """
        self._check_token(F)
        order = min(prec, F.order)
        if order in self._da_memo:
            return self._da_memo[order]
        total: List[Poly] = [{} for _ in range(order + 1)]
        for sign, tree in ((1, single_node((OPEN,), ())), (-1, single_node((V,), (OPEN,))), (-1, single_node((), (A, OPEN)))):
            g = self.forest.graph(self.forest.id(tree))
            for k, p in enumerate(self._d_graph(g, F, order, accel=False)):
                for m, c in p.items():
                    _acc(total, k, m, sign * c)
        res = self.raise_index(HSeries(total, order))
        self._da_memo[order] = res
        return res

    def d_tree(self, i: int, F: HSeries, prec: int) -> HSeries:
        r""":math:`D_F` of tree ``i`` to ``h^prec`` (``F``: the vector series :math:`\ddot q = F`)."""
        self._check_token(F)
        f = self.forest
        order = min(prec, F.order)
        # one computation per tree, at the highest precision asked for; lower ones are truncations
        done = self._d_memo.get(i)
        if done is not None and done.order >= order:
            return done.truncate_soft(order)
        if f.is_bare(i):
            leaf = f.trees[i][1]
            if leaf == V:
                res = F.truncate_soft(order)
            elif leaf == A:
                res = self.accel_derivative(F, order)
            else:
                raise TreeError("total derivative of a bare jet")
            self._d_memo[i] = res
            return res
        res = self.normalize(HSeries(self._d_graph(f.graph(i), F, order, accel=True), order))
        self._d_memo[i] = res
        return res

    def derivative(self, S: HSeries, F: HSeries, limit: int = EXACT) -> HSeries:
        """Total derivative of a tree series along :math:`\\ddot q = F` (Leibniz over factors)."""
        val = S.valuation()
        order = min(S.order, limit) if val == EXACT else min(S.order, limit, F.order + val)
        return self.leibniz(S, lambda i, prec: self.d_tree(i, F, prec), order)

    @staticmethod
    def leibniz(S: HSeries, d_tree, order: int) -> HSeries:
        """A derivation applied to a tree series by the Leibniz rule over the factors of each
        monomial; ``d_tree(i, prec)`` is its value on tree ``i`` as a series to ``h^prec``."""
        val = S.valuation()
        if val == EXACT:
            return HSeries([], order)
        out: List[Poly] = [{} for _ in range(order + 1)]
        for hk in range(val, min(len(S.c), order + 1)):
            for m, c in S.c[hk].items():
                for idx, x in enumerate(m):
                    if idx and m[idx - 1] == x:
                        continue
                    r = m.count(x)
                    rest = m[:idx] + m[idx + 1 :]
                    dx = d_tree(x, order - hk)
                    for k2 in range(min(len(dx.c), order - hk + 1)):
                        for m2, c2 in dx.c[k2].items():
                            _acc(out, hk + k2, tuple(sorted(rest + m2)), r * c * c2)
        return HSeries(out, order)

    def jet_derivative(self, S: HSeries, order: int) -> HSeries:
        r"""The total derivative :math:`D = v\cdot\partial_q + \ddot q\cdot\partial_v + \sum_k q^{(k+1)}\cdot\partial_{q^{(k)}}`
        of a series in the jets of an arbitrary curve (no equation of motion imposed): a node gains
        a q-slot holding :math:`v` or a v-slot holding :math:`\ddot q`, and a leaf :math:`q^{(k)}`
        becomes :math:`q^{(k+1)}`. The trees must be plain nodes with jet leaves (no
        :math:`M^{-1}`, no acceleration :math:`A`: the series before normalisation)."""
        f = self.forest

        def d_tree(i: int, prec: int) -> HSeries:
            res = self._jet_memo.get(i)
            if res is None:
                g = f.graph(i)
                out: Poly = {}
                for x, node in enumerate(g):
                    variants = []
                    for extra in ((0, V), (1, 2)):
                        h = copy_graph(g)
                        h[x].append(list(extra))
                        variants.append(h)
                    for s, (_, c) in enumerate(node):
                        if not isinstance(c, int) or not V <= c < OPEN:
                            raise TreeError("jet derivative of a tree with edges, A or free indices")
                        h = copy_graph(g)
                        h[x][s][1] = c + 1
                        variants.append(h)
                    for h in variants:
                        m = f.monomial(h)
                        out[m] = out.get(m, 0) + 1
                res = HSeries([{m: Q(c) for m, c in out.items() if c}], EXACT)
                self._jet_memo[i] = res
            return res

        return self.leibniz(S, d_tree, order)

    # ----------------------------------------------------------- jets
    def jet_tree(self, i: int, values: Dict[int, HSeries], prec: int, memo: Optional[dict] = None) -> HSeries:
        r"""Tree ``i`` with every leaf ``k`` of ``values`` (a jet :math:`q^{(k)}`, or :math:`A`)
        replaced by the vector series ``values[k]``. ``memo``: a dict kept by the caller across calls with the same
        ``values`` (codes naming fixed values), which holds their grouped terms and the canonical form of each glued
        graph by its shape -- the tree's graph with the slots marked, and the vector factor glued into each -- so
        that trees differing only in codes whose values share terms (successive interior corrections) glue those
        terms once."""
        f = self.forest
        if f.is_bare(i):
            code = f.trees[i][1]
            return values[code].truncate_soft(prec) if code in values else HSeries([{(i,): Q(1)}], prec)
        g0 = f.graph(i)
        slots = [(x, s, c) for x, node in enumerate(g0) for s, (_, c) in enumerate(node) if isinstance(c, int) and c in values]
        order = min([prec] + [values[c].order for _, _, c in slots])
        out: List[Poly] = [{} for _ in range(order + 1)]
        memo = {} if memo is None else memo
        terms, lows = {}, {}
        for c in {c for _, _, c in slots}:
            if (c, order) not in memo:
                t = self._vector_terms(values[c], order)
                # groups by their lowest power of h, so that a slot's loop stops at the first group out of
                # reach (scanning all groups per slot costs the product of their numbers, 10^10 at order 8)
                memo[(c, order)] = t, sorted((min(k for k, _, _ in g), w) for w, g in t.items())
            terms[c], lows[c] = memo[(c, order)]
        marks = {(x, s): j for j, (x, s, _) in enumerate(slots)}
        shape = tuple(tuple((k, -1 - marks[(x, s)] if (x, s) in marks else c) for s, (k, c) in enumerate(node))
                      for x, node in enumerate(g0))

        # the graph depends only on the vector factors chosen; expand the scalar parts afterwards
        def rec(j: int, ws: tuple, mindeg: int) -> None:
            if j == len(slots):
                key = (shape, ws)
                base = memo.get(key)
                if base is None:
                    g = g0
                    for (x, s, _), w in zip(slots, ws):
                        g = self._attach(g, x, s, w)
                    base = memo[key] = f.monomial(copy_graph(g) if g is g0 else g)
                for deg, scal, coef in _products([terms[slots[t][2]][w] for t, w in enumerate(ws)], order):
                    _acc(out, deg, tuple(sorted(base + scal)), coef)
                return
            for low, w in lows[slots[j][2]]:
                if mindeg + low > order:
                    break
                rec(j + 1, ws + (w,), mindeg + low)

        rec(0, (), 0)
        return HSeries(out, order)

    def substitute_jets(self, S: HSeries, values: Dict[int, HSeries], order: int) -> HSeries:
        """``S`` with the leaves of ``values`` (codes to vector series) substituted, to ``h^order``."""
        from ..hseries import substitute

        need = self.trees_holding(S, lambda c: c in values, order)
        vals = {x: self.jet_tree(x, values, p) for x, p in need.items()}
        return substitute(S, vals, order)

    def trees_holding(self, S: HSeries, is_leaf, order: int) -> Dict[int, int]:
        """The trees of ``S`` (to ``h^order``) with a leaf code ``c`` where ``is_leaf(c)``, each with the precision
        its substituted value needs (``order`` less the lowest power of ``h`` it occurs at)."""
        f = self.forest
        need: Dict[int, int] = {}
        for hk in range(min(len(S.c), order + 1)):
            for m in S.c[hk]:
                for x in m:
                    if any(is_leaf(c) for c in f.leaves[x]):
                        need[x] = max(need.get(x, -1), order - hk)
        return need

    def expand_accel(self, S: HSeries) -> HSeries:
        r"""``S`` with every acceleration leaf written out, :math:`A = M^{-1}(L_q - L_{qv}[v])`
        (the form without :math:`A` that :class:`LagrangianSubstitution` works on)."""
        f = self.forest
        a = {(f.id(single_node((UPPER,), ())),): Q(1), (f.id(single_node((V,), (UPPER,))),): Q(-1)}
        return self.substitute_jets(S, {A: HSeries([a], EXACT)}, S.order)

    # ----------------------------------------------------------- M^{-1}
    def raise_index(self, S: HSeries) -> HSeries:
        r""":math:`M^{-1}` applied to a covector series (the free slot becomes an edge to the free index)."""
        f = self.forest
        out: List[Poly] = [{} for _ in range(len(S.c))]
        for k, p in enumerate(S.c):
            for m, c in p.items():
                pos = [j for j, x in enumerate(m) if f.is_covector(x)]
                if len(pos) != 1:
                    raise TreeError("a covector monomial must have exactly one free slot")
                x = m[pos[0]]
                if x not in self._raise_memo:
                    g = f.graph(x)
                    (y, t), = find_leaf(g, OPEN)
                    g[y][t][1] = UPPER
                    self._raise_memo[x] = f.monomial(g)
                rest = m[: pos[0]] + m[pos[0] + 1 :]
                _acc(out, k, tuple(sorted(rest + self._raise_memo[x])), c)
        return HSeries(out, S.order)


def _products(groups: list, order: int):
    """All ``(degree, scalar_monomial, coefficient)`` picking one term from each group."""
    acc = [(0, (), Q(1))]
    for group in groups:
        acc = [(d + k, m + rest, c * c2) for d, m, c in acc for k, rest, c2 in group if d + k <= order]
    return acc
