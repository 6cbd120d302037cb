r"""Dimension-free terms: contraction trees of derivative tensors of a generic Lagrangian.

Every term of a modified (inverse modified) Lagrangian or modified equation is, for every
dimension :math:`n` at once, a product of *trees*:

* a **node** is a derivative tensor :math:`L^{(a,b)} = \partial_q^a \partial_v^b L` at
  :math:`(q, \dot q)`, with ``a`` q-slots and ``b`` v-slots (symmetric within each kind);
* each **slot** holds either a *leaf* -- the velocity :math:`v`, the Euler-Lagrange acceleration
  :math:`A = M^{-1}(L_q - L_{qv}[v])`, a jet :math:`q^{(k)}`, or the free index of a
  vector-valued term -- or an **edge** :math:`M^{-1}`, :math:`M = L^{(0,2)}`, to a slot of
  another node.

The algebra of the derivations maps trees to trees (no cycles ever arise), so a tree is the
whole data of a term. This module gives trees a canonical form (isomorphic trees compare equal),
registers each canonical connected tree as a *variable* of the sparse polynomials in
:mod:`bea.hseries`, and implements the graph surgery that the derivations are built from.

Representations
---------------
*Flat graph* (for surgery): a list of nodes, each a list of slots ``[kind, content]`` with
``kind`` 0 (q) or 1 (v) and ``content`` a leaf code (``int``) or an edge ``(node, slot)``.

*Canonical tuple* (for identity): a tree rooted at its centre,
``(2, q_children, v_children)``, where a child is ``(0, leaf)`` or, for an edge,
``(1, kind_of_far_slot, q_children, v_children)`` of the node at the far end; children are
sorted. A *bare vector* -- a vector-valued term that is just a leaf, such as :math:`v` --
is ``(3, leaf)``.

Leaf codes: :data:`V` (= 1) the velocity, :data:`A` the acceleration, ``k >= 2`` the jet :math:`q^{(k)}`, :data:`OPEN` a
covector free index (the slot itself is free), :data:`UPPER` a vector free index (the slot is
joined by :math:`M^{-1}` to the free index); codes from :data:`PORT` on are temporary
attachment points used while gluing graphs.

The reduction rule of :func:`canonical` is :math:`M M^{-1} = I`: a node :math:`L^{(0,2)}` one of
whose slots is joined by an edge (or is an :data:`UPPER` leaf) disappears, and its other slot's
content takes its place. :func:`eliminate_lq` adds the second rule, :math:`L_q = M A + L_{qv}[v]`:
no node :math:`L^{(1,0)}` is kept, the acceleration leaf :math:`A` stands in its place. Because
this is an invertible change of variables (:math:`L^{(1,0)} \leftrightarrow A`), distinct normal
forests are still distinct functions for generic ``L`` and large ``n``, so cancellations are
complete -- and the terms are far fewer, since every :math:`A` stands for two trees without it.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

V = 1
A = 102
OPEN = 100
UPPER = 101
PORT = 200

Graph = List[list]  # list of nodes; node = list of [kind, content]
Tree = tuple


class TreeError(ArithmeticError):
    """Internal inconsistency of a tree computation (a bug, not bad input)."""


def copy_graph(g: Graph) -> Graph:
    return [None if node is None else [[k, c] for k, c in node] for node in g]


def merge_graphs(a: Graph, b: Graph) -> Tuple[Graph, int]:
    """Disjoint union (copies); returns the graph and the index offset of ``b``'s nodes."""
    off = len(a)
    out = copy_graph(a)
    for node in b:
        out.append([[k, (c[0] + off, c[1]) if isinstance(c, tuple) else c] for k, c in node])
    return out, off


def connect(g: Graph, x: int, s: int, y: int, t: int) -> None:
    g[x][s][1] = (y, t)
    g[y][t][1] = (x, s)


def find_leaf(g: Graph, code: int) -> List[Tuple[int, int]]:
    return [(x, s) for x, node in enumerate(g) if node is not None for s, (_, c) in enumerate(node) if c == code]


# --------------------------------------------------------------------------- canonical form


def _reduce_mass(g: Graph) -> Optional[int]:
    """Apply :math:`M M^{-1} = I` everywhere (in place; removed nodes become ``None``).

    Returns a leaf code if the whole term reduced to a bare vector (``M[UPPER, leaf]``).
    """
    bare = None
    changed = True
    while changed:
        changed = False
        for x, node in enumerate(g):
            if node is None or len(node) != 2 or node[0][0] != 1 or node[1][0] != 1:
                continue
            c0, c1 = node[0][1], node[1][1]
            if isinstance(c0, tuple):
                a, b = c0, c1
            elif isinstance(c1, tuple):
                a, b = c1, c0
            elif c0 == UPPER or c1 == UPPER:
                other = c1 if c0 == UPPER else c0
                if other >= OPEN and other != A:
                    raise TreeError("M[free, free] is an identity matrix, not a term")
                g[x] = None
                bare = other
                changed = True
                continue
            else:
                continue
            y, s = a
            if isinstance(b, tuple):
                z, t = b
                g[y][s][1] = (z, t)
                g[z][t][1] = (y, s)
            else:
                g[y][s][1] = b
            g[x] = None
            changed = True
    return bare


def _compact(g: Graph) -> Graph:
    keep = [i for i, node in enumerate(g) if node is not None]
    new = {old: i for i, old in enumerate(keep)}
    out = []
    for old in keep:
        out.append([[k, (new[c[0]], c[1]) if isinstance(c, tuple) else c] for k, c in g[old]])
    return out


def _encode(g: Graph, x: int, ps: Optional[int]) -> tuple:
    qs, vs = [], []
    for s, (k, c) in enumerate(g[x]):
        if s == ps:
            continue
        ch = _encode(g, c[0], c[1]) if isinstance(c, tuple) else (0, c)
        (qs if k == 0 else vs).append(ch)
    qs.sort()
    vs.sort()
    if ps is None:
        return (2, tuple(qs), tuple(vs))
    return (1, g[x][ps][0], tuple(qs), tuple(vs))


def _components(g: Graph) -> List[List[int]]:
    seen = [False] * len(g)
    comps = []
    for start in range(len(g)):
        if seen[start]:
            continue
        stack, comp = [start], []
        seen[start] = True
        while stack:
            x = stack.pop()
            comp.append(x)
            for _, c in g[x]:
                if isinstance(c, tuple) and not seen[c[0]]:
                    seen[c[0]] = True
                    stack.append(c[0])
        comps.append(comp)
    return comps


def _centres(g: Graph, comp: List[int]) -> List[int]:
    if len(comp) <= 2:
        return comp
    deg = {x: sum(isinstance(c, tuple) for _, c in g[x]) for x in comp}
    layer = [x for x in comp if deg[x] <= 1]
    left = len(comp)
    while left > 2:
        left -= len(layer)
        nxt = []
        for x in layer:
            for _, c in g[x]:
                if isinstance(c, tuple):
                    y = c[0]
                    deg[y] -= 1
                    if deg[y] == 1:
                        nxt.append(y)
        layer = nxt
    return layer


def canonical(g: Graph) -> List[Tree]:
    """Canonical tuples of the connected components of ``g`` (``g`` is modified)."""
    bare = _reduce_mass(g)
    g = _compact(g)
    out = [min(_encode(g, x, None) for x in _centres(g, comp)) for comp in _components(g)]
    if bare is not None:
        out.append((3, bare))
    return out


def decode(t: Tree) -> Graph:
    """Flat graph of one canonical tree (a bare vector decodes to an empty graph)."""
    g: Graph = []
    if t[0] == 3:
        return g
    _build(t, g, None)
    return g


def _build(t: tuple, g: Graph, parent) -> int:
    idx = len(g)
    node: list = []
    g.append(node)
    if t[0] == 1:
        node.append([t[1], parent])
    for kind, group in ((0, t[-2]), (1, t[-1])):
        for ch in group:
            if ch[0] == 0:
                node.append([kind, ch[1]])
            else:
                s = len(node)
                node.append([kind, None])
                j = _build(ch, g, (idx, s))
                node[s][1] = (j, 0)
    return idx


def single_node(q_leaves: Sequence[int], v_leaves: Sequence[int]) -> Tree:
    """Canonical tuple of one node whose slots are all leaves."""
    return (2, tuple(sorted((0, c) for c in q_leaves)), tuple(sorted((0, c) for c in v_leaves)))


# --------------------------------------------------------------------------- registry


class Forest:
    """Registry of canonical trees: each gets a variable index for :mod:`bea.hseries` polynomials.

    One registry serves one derivation (no global state). ``info[i]`` caches, per tree, the
    leaf codes it contains, so that operations can skip trees they do not touch.
    """

    def __init__(self):
        self.trees: List[Tree] = []
        self.index: Dict[Tree, int] = {}
        self.leaves: List[frozenset] = []
        self._graphs: Dict[int, Graph] = {}
        self._normal: Dict[int, list] = {}

    def id(self, t: Tree) -> int:
        i = self.index.get(t)
        if i is None:
            i = len(self.trees)
            self.trees.append(t)
            self.index[t] = i
            self.leaves.append(frozenset(_leaf_codes(t)))
        return i

    def graph(self, i: int) -> Graph:
        """A fresh copy of tree ``i``'s flat graph."""
        g = self._graphs.get(i)
        if g is None:
            g = decode(self.trees[i])
            self._graphs[i] = g
        return copy_graph(g)

    def monomial(self, g: Graph, extra: Sequence[int] = ()) -> Tuple[int, ...]:
        """Canonicalise ``g`` (modified in place) and return the sorted monomial of its trees."""
        ids = [self.id(t) for t in canonical(g)]
        return tuple(sorted(ids + list(extra)))

    def normal(self, i: int) -> List[Tuple[int, Tuple[int, ...]]]:
        """Tree ``i`` without :math:`L_q` nodes (:func:`eliminate_lq`): ``[(coefficient, monomial)]``."""
        out = self._normal.get(i)
        if out is None:
            if not has_lq(self.trees[i]):
                out = [(1, (i,))]
            else:
                out = [(c, self.monomial(g)) for c, g in eliminate_lq(self.graph(i))]
            self._normal[i] = out
        return out

    def is_bare(self, i: int) -> bool:
        return self.trees[i][0] == 3

    def is_vector(self, i: int) -> bool:
        """Carries the free index of a vector-valued term."""
        return self.trees[i][0] == 3 or UPPER in self.leaves[i]

    def is_covector(self, i: int) -> bool:
        return OPEN in self.leaves[i]


def _leaf_codes(t: tuple):
    if t[0] == 3:
        yield t[1]
        return
    for group in (t[-2], t[-1]):
        for ch in group:
            if ch[0] == 0:
                yield ch[1]
            else:
                yield from _leaf_codes(ch)


def node_count(t: Tree) -> int:
    if t[0] == 3:
        return 0
    return 1 + sum(node_count(ch) for group in (t[-2], t[-1]) for ch in group if ch[0] == 1)


# --------------------------------------------------------------------------- surgery


def attach_vector(g: Graph, x: int, s: int, vec: Graph, bare: Optional[int]) -> Graph:
    """Fill slot ``(x, s)`` of ``g`` with a vector term: a bare leaf, or the graph ``vec``
    whose :data:`UPPER` leaf becomes an :math:`M^{-1}` edge to the slot. Returns a new graph."""
    if bare is not None:
        out = copy_graph(g)
        out[x][s][1] = bare
        return out
    out, off = merge_graphs(g, vec)
    ups = [(y, t) for (y, t) in find_leaf(out, UPPER) if y >= off]
    if len(ups) != 1:
        raise TreeError("a vector term must have exactly one free index")
    y, t = ups[0]
    connect(out, x, s, y, t)
    return out


def total_derivative_parts(
    g: Graph, acc_code: int, accel_code: Optional[int] = None
) -> List[Tuple[int, Graph, Optional[Tuple[int, int]]]]:
    r"""Terms of :math:`D` applied to the forest ``g`` on the solutions of :math:`\ddot q = F`.

    Returns ``(coefficient, graph, slot)`` where ``slot`` (or ``None``) holds the placeholder leaf
    ``acc_code`` that stands for :math:`\ddot q = F`, or ``accel_code`` that stands for
    :math:`DA` (the caller attaches those series' terms there). With ``accel_code=None`` the
    leaves :math:`A` are held fixed (a partial total derivative). Jet leaves :math:`q^{(k)}` with
    ``k >= 2`` must be gone (substituted) before.

    * a node gains a q-slot holding :math:`v`, or a v-slot holding :math:`\ddot q`;
    * a leaf :math:`v` becomes :math:`\ddot q`;
    * an edge (or an :data:`UPPER` leaf) :math:`M^{-1}` gives :math:`-M^{-1}(DM)M^{-1}` with
      :math:`DM = L^{(1,2)}[v] + L^{(0,3)}[\ddot q]`.
    """
    out = []
    for x, node in enumerate(g):
        h1 = copy_graph(g)
        h1[x].append([0, V])
        out.append((1, h1, None))
        h2 = copy_graph(g)
        h2[x].append([1, acc_code])
        out.append((1, h2, (x, len(h2[x]) - 1)))
        for s, (k, c) in enumerate(node):
            if c == V or (c == A and accel_code is not None):
                h3 = copy_graph(g)
                h3[x][s][1] = acc_code if c == V else accel_code
                out.append((1, h3, (x, s)))
            elif not isinstance(c, tuple) and 2 <= c < OPEN:
                raise TreeError("total derivative of a tree with unsubstituted jets")
            elif (isinstance(c, tuple) and (x, s) < c) or c == UPPER:
                for extra in ((0, V), (1, acc_code)):
                    h = copy_graph(g)
                    z = len(h)
                    h.append([[1, None], [1, None], list(extra)])
                    if c == UPPER:
                        h[z][1][1] = UPPER
                    else:
                        y, t = c
                        connect(h, z, 1, y, t)
                    connect(h, z, 0, x, s)
                    out.append((-1, h, (z, 2) if extra[1] == acc_code else None))
    return out


def partial_parts(g: Graph, kind: int, port: int) -> List[Tuple[int, Graph]]:
    r"""Terms of the partial derivative :math:`\partial_q` (``kind`` 0) or :math:`\partial_v`
    (``kind`` 1) of the forest ``g`` in a direction given by the leaf ``port`` (to be glued later).

    A node gains a slot holding ``port``; an edge :math:`M^{-1}` gives
    :math:`-M^{-1}(\partial M)M^{-1}` (a node :math:`L^{(1,2)}` or :math:`L^{(0,3)}` inserted);
    for :math:`\partial_v` a leaf :math:`v` becomes ``port``.
    """
    out = []
    for x, node in enumerate(g):
        h1 = copy_graph(g)
        h1[x].append([kind, port])
        out.append((1, h1))
        for s, (k, c) in enumerate(node):
            if c == V and kind == 1:
                h3 = copy_graph(g)
                h3[x][s][1] = port
                out.append((1, h3))
            elif (isinstance(c, tuple) and (x, s) < c) or c == UPPER:
                h = copy_graph(g)
                z = len(h)
                h.append([[1, None], [1, None], [kind, port]])
                if c == UPPER:
                    h[z][1][1] = UPPER
                else:
                    connect(h, z, 1, c[0], c[1])
                connect(h, z, 0, x, s)
                out.append((-1, h))
            elif not isinstance(c, tuple) and 2 <= c < OPEN:
                raise TreeError("partial derivative of a tree with jets")
            elif c == A:
                for sign, vec in _accel_partials(kind, port):
                    out.append((sign, attach_vector(g, x, s, vec, None)))
    return out


def _accel_partials(kind: int, port: int) -> List[Tuple[int, Graph]]:
    r"""Partial derivative of the acceleration, :math:`\partial A[p] = M^{-1}\partial^*(L_q - L_{qv}[v] - M[A])[p]`
    (:math:`\partial^*` holds :math:`A` fixed), as signed vector graphs whose free index is ``UPPER``."""
    if kind == 0:
        return [
            (1, [[[0, UPPER], [0, port]]]),
            (-1, [[[0, V], [0, port], [1, UPPER]]]),
            (-1, [[[0, port], [1, A], [1, UPPER]]]),
        ]
    return [
        (1, [[[0, UPPER], [1, port]]]),
        (-1, [[[0, V], [1, UPPER], [1, port]]]),
        (-1, [[[0, port], [1, UPPER]]]),
        (-1, [[[1, A], [1, UPPER], [1, port]]]),
    ]


def eliminate_lq(g: Graph) -> List[Tuple[int, Graph]]:
    r"""Rewrite every node :math:`L_q = L^{(1,0)}` of ``g`` by :math:`L_q[x] = M[A, x] + L_{qv}[v, x]`.

    For an edge ``x`` the first term is the acceleration leaf at the far end of the edge
    (:math:`M M^{-1} = I`). Returns ``[(coefficient, graph)]``; ``g`` is not modified.
    """
    for x, node in enumerate(g):
        if node is not None and len(node) == 1 and node[0][0] == 0:
            c = node[0][1]
            first = copy_graph(g)
            if isinstance(c, tuple):
                first[c[0]][c[1]][1] = A
                first[x] = None
            else:
                first[x] = [[1, A], [1, c]]
            second = copy_graph(g)
            second[x] = [[0, V], [1, c]]
            if isinstance(c, tuple):
                second[c[0]][c[1]][1] = (x, 1)
            return eliminate_lq(first) + eliminate_lq(second)
    return [(1, g)]


def has_lq(t: Tree) -> bool:
    """Whether a canonical tree contains a node :math:`L_q` (one q-slot and nothing else)."""
    if t[0] == 3:
        return False
    if t[0] == 2 and len(t[1]) == 1 and not t[2]:
        return True
    for group in (t[-2], t[-1]):
        for ch in group:
            if ch[0] == 1 and ((len(ch[2]) == 0 and len(ch[3]) == 0 and ch[1] == 0) or has_lq(ch)):
                return True
    return False
