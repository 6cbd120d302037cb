r"""Graph surgery on trees (:mod:`bea.free.trees`): gluing a vector into a slot, and the terms of a
total or partial derivative of a forest. Each function returns new graphs; inputs are not modified.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from .trees import A, OPEN, UPPER, V, Graph, Tree, TreeError, connect, copy_graph, find_leaf, merge_graphs


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


def partial_parts(g: Graph, kind: int, port: int, constant_jets: bool = False) -> List[Tuple[int, Graph]]:
    r"""Terms of the partial derivative :math:`\partial_q` (``kind`` 0) or :math:`\partial_v`
    (``kind`` 1) of the forest ``g`` in a direction given by the leaf ``port`` (to be glued later).

    A node gains a slot holding ``port``; an edge :math:`M^{-1}` gives
    :math:`-M^{-1}(\partial M)M^{-1}` (a node :math:`L^{(1,2)}` or :math:`L^{(0,3)}` inserted);
    for :math:`\partial_v` a leaf :math:`v` becomes ``port``. Jet leaves :math:`q^{(k)}` are an
    error unless ``constant_jets`` (they are then independent of :math:`(q, v)`: a Taylor
    expansion in which the jets are substituted afterwards).
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
                if not constant_jets:
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
