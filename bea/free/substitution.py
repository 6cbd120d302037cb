r"""Substitution of a series :math:`X = L + \sum_{j \ge 1} h^j Y_j` for the Lagrangian in tree
series: the step of the inverse modified Lagrangian (:mod:`bea.free.derive`).

Every node :math:`L^{(a,b)}` becomes :math:`X^{(a,b)}`, every edge :math:`M^{-1}` becomes
:math:`(M + \delta M)^{-1}`, and every acceleration leaf :math:`A` becomes :math:`A_X`.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

from ..hseries import HSeries, Poly, Q
from .algebra import _acc
from .trees import A, PORT, V, Forest, Graph, connect, copy_graph, find_leaf, merge_graphs
from .surgery import partial_parts


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


def _compositions(budget: int, powers: List[int]):
    """Ordered tuples of ``powers`` whose sum is at most ``budget`` (non-empty)."""
    for j in powers:
        if j <= budget:
            yield (j,)
            for rest in _compositions(budget - j, powers):
                yield (j,) + rest
