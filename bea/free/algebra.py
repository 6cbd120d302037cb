r"""Operations on series of tree polynomials: total derivative along :math:`\ddot q = F`, jet
substitution, raising the free index with :math:`M^{-1}`, and substitution of a series
:math:`X = L + \sum_j h^j Y_j` for the Lagrangian (used by the inverse iteration).

A *tree polynomial* is a :mod:`bea.hseries` polynomial whose variables are canonical trees of a
:class:`~bea.free.trees.Forest`; a product of trees is a forest. A *vector* (*covector*)
polynomial has exactly one factor per monomial that carries the free index
(:data:`~bea.free.trees.UPPER` or a bare leaf; :data:`~bea.free.trees.OPEN`).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from ..errors import InconsistentSchemeError
from ..hseries import EXACT, HSeries, Poly, Q
from .trees import (
    A,
    OPEN,
    PORT,
    UPPER,
    V,
    Forest,
    Graph,
    TreeError,
    attach_vector,
    connect,
    copy_graph,
    find_leaf,
    merge_graphs,
    partial_parts,
    single_node,
    total_derivative_parts,
)
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
    whose slots hold the leaves of :math:`\delta x = x - q`, :math:`\delta y = y - v`."""
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

    def normalize(self, S: HSeries) -> HSeries:
        r"""``S`` with every :math:`L_q` node eliminated in favour of the acceleration :math:`A`
        (:meth:`Forest.normal`)."""
        f = self.forest
        out: List[Poly] = [{} for _ in range(len(S.c))]
        for k, p in enumerate(S.c):
            for m, c in p.items():
                parts = [f.normal(x) for x in m]
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
        if val == EXACT:
            return HSeries([], min(S.order, limit))
        order = min(S.order, limit, F.order + val)
        out: List[Poly] = [{} for _ in range(order + 1)]
        for hk in range(val, min(len(S.c), order + 1)):
            for m, c in S.c[hk].items():
                for idx, x in enumerate(m):
                    if idx and m[idx - 1] == x:
                        continue
                    r = m.count(x)
                    rest = m[:idx] + m[idx + 1 :]
                    dx = self.d_tree(x, F, order - hk)
                    for k2 in range(min(len(dx.c), order - hk + 1)):
                        for m2, c2 in dx.c[k2].items():
                            _acc(out, hk + k2, tuple(sorted(rest + m2)), r * c * c2)
        return HSeries(out, order)

    # ----------------------------------------------------------- jets
    def jet_tree(self, i: int, values: Dict[int, HSeries], prec: int) -> HSeries:
        r"""Tree ``i`` with every leaf ``k`` of ``values`` (a jet :math:`q^{(k)}`, or :math:`A`)
        replaced by the vector series ``values[k]``."""
        f = self.forest
        if f.is_bare(i):
            code = f.trees[i][1]
            return values[code].truncate_soft(prec) if code in values else HSeries([{(i,): Q(1)}], prec)
        g0 = f.graph(i)
        slots = [(x, s, c) for x, node in enumerate(g0) for s, (_, c) in enumerate(node) if isinstance(c, int) and c in values]
        order = min([prec] + [values[c].order for _, _, c in slots])
        out: List[Poly] = [{} for _ in range(order + 1)]
        terms = {c: self._vector_terms(values[c], order) for c in {c for _, _, c in slots}}

        # the graph depends only on the vector factors chosen; expand the scalar parts afterwards
        def rec(j: int, g: Graph, ws: tuple, mindeg: int) -> None:
            if j == len(slots):
                base = f.monomial(g)
                for combo in _products([terms[slots[t][2]][w] for t, w in enumerate(ws)], order):
                    deg, scal, coef = combo
                    _acc(out, deg, tuple(sorted(base + scal)), coef)
                return
            x, s, code = slots[j]
            for w, group in terms[code].items():
                low = min(k for k, _, _ in group)
                if mindeg + low > order:
                    continue
                rec(j + 1, self._attach(g, x, s, w), ws + (w,), mindeg + low)

        rec(0, g0, (), 0)
        return HSeries(out, order)

    def substitute_jets(self, S: HSeries, values: Dict[int, HSeries], order: int) -> HSeries:
        """``S`` with the leaves of ``values`` (codes to vector series) substituted, to ``h^order``."""
        from ..hseries import substitute

        f = self.forest
        need: Dict[int, int] = {}
        for hk in range(min(len(S.c), order + 1)):
            for m in S.c[hk]:
                for x in m:
                    if any(c in values for c in f.leaves[x]):
                        need[x] = max(need.get(x, -1), order - hk)
        vals = {x: self.jet_tree(x, values, p) for x, p in need.items()}
        return substitute(S, vals, order)

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


class LagrangianSubstitution:
    r"""Substitution :math:`L \to X = L + \sum_{j \ge 1} h^j Y_j` in tree series.

    Each node :math:`L^{(a,b)}[\dots]` becomes :math:`X^{(a,b)}[\dots]`, each edge
    :math:`M^{-1}` becomes :math:`(M + \Delta M)^{-1} = \sum_r (-1)^r M^{-1}(\Delta M M^{-1})^r`
    with :math:`\Delta M = \sum_j h^j \partial_v^2 Y_j`. Derivatives of the :math:`Y_j` are
    built once per shape ``(j, a, b)`` with *ports* -- placeholder leaves later glued to the slots
    they replace.
    """

    def __init__(self, forest: Forest):
        self.forest = forest
        self.Y: Dict[int, Poly] = {}
        self._pieces: Dict[Tuple[int, int, int], list] = {}
        self._memo: Dict[Tuple[int, int], HSeries] = {}

    def set_term(self, j: int, poly: Poly) -> None:
        """Set :math:`Y_j`; results already computed only used lower powers, so they stay valid."""
        self.Y[j] = poly

    def pieces(self, j: int, a: int, b: int) -> list:
        r""":math:`\partial_q^a\partial_v^b Y_j` as ``[(coefficient, graph)]``; ports ``PORT..PORT+a-1``
        are the q-directions, the next ``b`` the v-directions."""
        key = (j, a, b)
        if key in self._pieces:
            return self._pieces[key]
        f = self.forest
        cur: List[Tuple[object, Graph]] = []
        for m, c in self.Y.get(j, {}).items():
            g: Graph = []
            for x in m:
                g, _ = merge_graphs(g, f.graph(x))
            cur.append((c, g))
        for p, kind in enumerate([0] * a + [1] * b):
            nxt = []
            for c, g in cur:
                for c2, g2 in partial_parts(g, kind, PORT + p):
                    nxt.append((c * c2, g2))
            cur = nxt
        self._pieces[key] = cur
        return cur

    def residual_pieces(self, j: int) -> list:
        r"""The covector :math:`c_j = \partial_q Y_j - \partial_v\partial_q Y_j[v] - \partial_v^2 Y_j[A]`
        with its free slot at port ``PORT``: the change of :math:`L_q - L_{qv}[v] - M A` when
        :math:`L \to L + h^j Y_j` at fixed :math:`A`, so that :math:`\delta A = (M + \delta M)^{-1} \sum_j h^j c_j`."""
        key = (j, "c")
        if key in self._pieces:
            return self._pieces[key]
        out = list(self.pieces(j, 1, 0))
        for fill, (a, b) in ((V, (1, 1)), (A, (0, 2))):
            for c, g in self.pieces(j, a, b):
                h = copy_graph(g)
                (x, s), = find_leaf(h, PORT)
                h[x][s][1] = fill
                (y, t), = find_leaf(h, PORT + 1)
                h[y][t][1] = PORT
                out.append((-c, h))
        self._pieces[key] = out
        return out

    def tree(self, i: int, prec: int) -> HSeries:
        """Tree ``i`` with :math:`L \\to X`, to ``h^prec`` (only :math:`Y_j`, ``j <= prec``, enter)."""
        key = (i, prec)
        if key in self._memo:
            return self._memo[key]
        f = self.forest
        g = f.graph(i)
        out: List[Poly] = [{} for _ in range(prec + 1)]
        powers = sorted(j for j, p in self.Y.items() if p and j <= prec)
        edges = [(x, s, c[0], c[1]) for x, node in enumerate(g) for s, (_, c) in enumerate(node) if isinstance(c, tuple) and (x, s) < c]
        accels = [(x, s) for x, node in enumerate(g) for s, (_, c) in enumerate(node) if c == A]
        items = [("node", x) for x in range(len(g))] + [("edge", e) for e in edges] + [("accel", a) for a in accels]
        _acc(out, 0, (i,), Q(1))

        def options(item, budget):
            if item[0] == "node":
                node = g[item[1]]
                a = sum(1 for k, _ in node if k == 0)
                b = len(node) - a
                for j in powers:
                    if j <= budget:
                        yield j, [("n", j, a, b)]
            elif item[0] == "edge":
                for chain in _compositions(budget, powers):
                    yield sum(chain), [("e", j) for j in chain]
            else:
                # A -> A + (M + dM)^{-1} dc: one residual piece c_j and a chain of mass corrections
                for jc in powers:
                    if jc > budget:
                        continue
                    yield jc, [("c", jc)]
                    for chain in _compositions(budget - jc, powers):
                        yield jc + sum(chain), [("c", jc)] + [("e", j) for j in chain]

        def rec(idx: int, budget: int, chosen: list) -> None:
            if idx == len(items):
                if chosen:
                    self._glue(g, chosen, prec - budget, out)
                return
            rec(idx + 1, budget, chosen)
            for deg, spec in options(items[idx], budget):
                rec(idx + 1, budget - deg, chosen + [(items[idx], spec)])

        rec(0, prec, [])
        res = HSeries(out, prec)
        self._memo[key] = res
        return res

    def _glue(self, g: Graph, chosen: list, deg: int, out: List[Poly]) -> None:
        """Add every term of one choice of replacements (nodes and edges of ``g``) to ``out[deg]``."""
        lists = []
        for item, spec in chosen:
            if item[0] == "node":
                _, j, a, b = spec[0]
                lists.append(self.pieces(j, a, b))
            else:
                for what, j in spec:
                    lists.append(self.residual_pieces(j) if what == "c" else self.pieces(j, 0, 2))
        sign = 1
        for item, spec in chosen:
            if item[0] != "node":
                sign *= (-1) ** sum(1 for what, _ in spec if what == "e")

        def rec(t: int, picked: list, coef) -> None:
            if t == len(lists):
                self._assemble(g, chosen, picked, sign * coef, deg, out)
                return
            for c, piece in lists[t]:
                rec(t + 1, picked + [piece], coef * c)

        rec(0, [], Q(1))

    def _assemble(self, g: Graph, chosen: list, picked: list, coef, deg: int, out: List[Poly]) -> None:
        replaced = {item[1]: None for item, _ in chosen if item[0] == "node"}
        R: Graph = []
        where: Dict[Tuple[int, int], Tuple[int, int]] = {}  # original slot -> slot in R
        kept = [x for x in range(len(g)) if x not in replaced]
        pos = {x: i for i, x in enumerate(kept)}
        for x in kept:
            R.append([[k, None] for k, _ in g[x]])
            for s in range(len(g[x])):
                where[(x, s)] = (pos[x], s)
        it = iter(picked)
        edge_chains = {}
        accel_ends = {}
        for item, spec in chosen:
            if item[0] == "node":
                x = item[1]
                R, off = merge_graphs(R, next(it))
                node = g[x]
                order_slots = [s for s, (k, _) in enumerate(node) if k == 0] + [s for s, (k, _) in enumerate(node) if k == 1]
                for p, s in enumerate(order_slots):
                    (loc,) = [l for l in find_leaf(R, PORT + p) if l[0] >= off]
                    where[(x, s)] = loc
            else:
                chain = []
                end = None
                for what, _ in spec:
                    R, off = merge_graphs(R, next(it))
                    if what == "c":
                        (end,) = [l for l in find_leaf(R, PORT) if l[0] >= off]
                        continue
                    (a,) = [l for l in find_leaf(R, PORT) if l[0] >= off]
                    (b,) = [l for l in find_leaf(R, PORT + 1) if l[0] >= off]
                    chain.append((a, b))
                if item[0] == "edge":
                    edge_chains[item[1][:2]] = chain
                else:
                    accel_ends[item[1]] = (chain, end)
        for x, node in enumerate(g):
            for s, (_, c) in enumerate(node):
                if (x, s) in accel_ends:
                    chain, end = accel_ends[(x, s)]
                    a = where[(x, s)]
                    for p0, p1 in chain:
                        connect(R, a[0], a[1], p0[0], p0[1])
                        a = p1
                    connect(R, a[0], a[1], end[0], end[1])
                elif not isinstance(c, tuple):
                    y, t = where[(x, s)]
                    R[y][t][1] = c
                elif (x, s) < c:
                    a = where[(x, s)]
                    b = where[c]
                    for p0, p1 in edge_chains.get((x, s), []):
                        connect(R, a[0], a[1], p0[0], p0[1])
                        a = p1
                    connect(R, a[0], a[1], b[0], b[1])
        _acc(out, deg, self.forest.monomial(R), coef)

    def series(self, S: HSeries, order: int) -> HSeries:
        """``S`` with :math:`L \\to X`, to ``h^order``."""
        from ..hseries import substitute

        need: Dict[int, int] = {}
        for hk in range(min(len(S.c), order + 1)):
            for m in S.c[hk]:
                for x in m:
                    need[x] = max(need.get(x, -1), order - hk)
        vals = {x: self.tree(x, p) for x, p in need.items() if p > 0}
        return substitute(S, vals, order)


def _products(groups: list, order: int):
    """All ``(degree, scalar_monomial, coefficient)`` picking one term from each group."""
    acc = [(0, (), Q(1))]
    for group in groups:
        acc = [(d + k, m + rest, c * c2) for d, m, c in acc for k, rest, c2 in group if d + k <= order]
    return acc


def _compositions(budget: int, powers: List[int]):
    """Ordered tuples of ``powers`` whose sum is at most ``budget`` (non-empty)."""
    for j in powers:
        if j <= budget:
            yield (j,)
            for rest in _compositions(budget - j, powers):
                yield (j,) + rest
