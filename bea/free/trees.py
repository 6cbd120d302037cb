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
from ..errors import InternalError

V = 1
A = 102
OPEN = 100
UPPER = 101
PORT = 200

Graph = List[list]  # list of nodes; node = list of [kind, content]
Tree = tuple


class TreeError(InternalError, ArithmeticError):
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


def _encode(g: Graph, x: int, ps: Optional[int]) -> tuple:
    qs, vs = [], []
    s = 0
    for k, c in g[x]:
        if s != ps:
            ch = _encode(g, c[0], c[1]) if type(c) is tuple else (0, c)
            if k:
                vs.append(ch)
            else:
                qs.append(ch)
        s += 1
    qs.sort()
    vs.sort()
    if ps is None:
        return (2, tuple(qs), tuple(vs))
    return (1, g[x][ps][0], tuple(qs), tuple(vs))


def _adjacency(g: Graph) -> Dict[int, List[int]]:
    """Neighbours of each remaining node (removed nodes, ``None``, are skipped)."""
    return {x: [c[0] for _, c in node if type(c) is tuple] for x, node in enumerate(g) if node is not None}


def _components(adj: Dict[int, List[int]]) -> List[List[int]]:
    seen = set()
    comps = []
    for start in adj:
        if start in seen:
            continue
        stack, comp = [start], []
        seen.add(start)
        while stack:
            x = stack.pop()
            comp.append(x)
            for y in adj[x]:
                if y not in seen:
                    seen.add(y)
                    stack.append(y)
        comps.append(comp)
    return comps


def _centres(adj: Dict[int, List[int]], comp: List[int]) -> List[int]:
    """The one or two central nodes of a tree (peeling leaves layer by layer)."""
    if len(comp) <= 2:
        return comp
    deg = {x: len(adj[x]) for x in comp}
    layer = [x for x in comp if deg[x] <= 1]
    left = len(comp)
    while left > 2:
        left -= len(layer)
        nxt = []
        for x in layer:
            for y in adj[x]:
                deg[y] -= 1
                if deg[y] == 1:
                    nxt.append(y)
        layer = nxt
    return layer


def canonical(g: Graph) -> List[Tree]:
    """Canonical tuples of the connected components of ``g`` (``g`` is modified)."""
    bare = _reduce_mass(g)
    adj = _adjacency(g)
    if len(adj) == 1:
        (x,) = adj
        out = [_encode(g, x, None)]
    else:
        out = [min(_encode(g, x, None) for x in _centres(adj, comp)) for comp in _components(adj)]
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



