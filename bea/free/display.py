r"""Readable names of trees, in vector notation.

A node :math:`L^{(a,b)}` is written :math:`L_{q\dots v\dots}` followed by its arguments in
brackets (q-slots first): :math:`v`, a jet :math:`q^{(k)}`, or :math:`M^{-1} X` for an edge to
the covector ``X`` (the subtree hanging from it, whose joining slot is left out). Examples:
:math:`L_{qq}[v, v]`, :math:`L_{q}[M^{-1} L_{qv}[v]]` (that is
:math:`L_q \cdot M^{-1} L_{qv} v`). A vector-valued term is :math:`M^{-1}` applied to a covector,
or a bare vector such as :math:`v`. Where the hanging node has slots of both kinds, ``~`` marks the
slot the edge joins (first of its kind), e.g. :math:`L_{qv}[\sim, v]` joined at its q-slot, so that
distinct trees have distinct names. The leaf :math:`A = M^{-1}(L_q - L_{qv}[v])` is the
acceleration of the Euler-Lagrange equation of ``L``; the formulas use it in place of :math:`L_q`,
e.g. the midpoint :math:`h^2` term is :math:`(L_{vv}[A, A] - L_{qq}[v, v])/24`.
"""

from __future__ import annotations

from typing import Optional

from .trees import OPEN, UPPER, V, A, Graph, Tree, decode, find_leaf
from ..errors import InternalError


def _leaf(code: int, latex: bool) -> str:
    if code == V:
        return "v"
    if code == A:
        return "A"
    if code == OPEN:
        return r"\cdot" if latex else "."
    if 2 <= code < OPEN:
        if latex:
            return r"\ddot q" if code == 2 else (r"\dddot q" if code == 3 else f"q^{{({code})}}")
        return "q" + "'" * code
    raise InternalError(f"leaf {code} has no name")


_JOIN, _JOIN_LATEX = "~", r"\sim"


def _join_first(arg: str):
    return (arg not in (_JOIN, _JOIN_LATEX), arg)


def _minv(latex: bool) -> str:
    return "M^{-1} " if latex else "Minv "


def _node(g: Graph, x: int, ps: Optional[int], latex: bool) -> str:
    kinds = [k for s, (k, _) in enumerate(g[x])]
    a, b = kinds.count(0), kinds.count(1)
    sub = "q" * a + "v" * b
    name = f"L_{{{sub}}}" if latex else f"L_{sub}"
    if not sub:
        name = "L"
    groups = {0: [], 1: []}
    for s, (k, c) in enumerate(g[x]):
        if s == ps:
            continue
        if isinstance(c, tuple):
            groups[k].append(_minv(latex) + _node(g, c[0], c[1], latex))
        elif c == UPPER:
            continue
        else:
            groups[k].append(_leaf(c, latex))
    if ps is not None and a and b:
        # the joining slot's kind is not implied by the name: mark it, so that names stay distinct
        groups[g[x][ps][0]].append(_JOIN_LATEX if latex else _JOIN)
    args = sorted(groups[0], key=_join_first) + sorted(groups[1], key=_join_first)
    return name + (("[" + ", ".join(args) + "]") if args else "")


def tree_name(t: Tree, latex: bool = False) -> str:
    """Text (or LaTeX) of one canonical tree."""
    if t[0] == 3:
        return _leaf(t[1], latex)
    g = decode(t)
    ups = find_leaf(g, UPPER)
    if ups:
        x, s = ups[0]
        return _minv(latex) + _node(g, x, s, latex)
    return _node(g, 0, None, latex)
