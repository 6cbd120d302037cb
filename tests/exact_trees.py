r"""Exact evaluation of dimension-free series on a concrete polynomial Lagrangian (a test oracle).

A tree (:mod:`bea.free.trees`) is contracted at a rational point :math:`x_0 = (q_0, v_0)` in exact
arithmetic, by the definition of its notation and independently of :mod:`bea.free.evaluate` and
:mod:`bea.free.components`:

* a node :math:`L^{(a,b)}` with slot directions :math:`d_1, \dots, d_k` is
  :math:`D_{d_k} \cdots D_{d_1} L\,(x_0)`, where :math:`D_d p = \sum_i d_i\, \partial_{x_i} p` is the
  derivative of a polynomial along a *constant* direction (the directions are numbers at
  :math:`x_0`, so only :math:`L` is differentiated); a q-slot puts :math:`d` in the q-half of
  :math:`x`, a v-slot in the v-half;
* the leaf :math:`v` is :math:`v_0`; the leaf :math:`A` is
  :math:`M^{-1}(L_q - L_{qv}[v])` at :math:`x_0`, with :math:`M = L_{vv}(x_0)` inverted exactly;
* an edge :math:`M^{-1}` to a subtree gives its parent slot the direction :math:`M^{-1} g`, where
  :math:`g` is the gradient, in the kind (q or v) of the subtree's joining slot, of the subtree's
  node contracted with all its other slots;
* a vector-valued tree (one leaf :data:`UPPER`, the free index raised by :math:`M^{-1}`) is
  :math:`M^{-1} c` with :math:`c_j` the scalar tree with :math:`e_j` in the free slot; a bare
  vector ``(3, leaf)`` is :math:`v_0` or :math:`A`.

Polynomials are dictionaries of exponents to ``Fraction``; every value is a ``Fraction``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Dict, List, Sequence, Tuple

import sympy

from bea.free.trees import A, UPPER, V

_V, _A, _W, _EDGE = 0, 1, 2, 3  # direction keys: (_V,), (_A,), (_W, j), (_EDGE, j, subtree)

Poly = Dict[Tuple[int, ...], Fraction]  # exponents of (q_1..q_n, v_1..v_n) -> coefficient


def _poly(L: sympy.Expr, gens) -> Poly:
    P = sympy.Poly(L, *gens, domain="QQ")
    return {e: Fraction(int(c.numerator), int(c.denominator)) for e, c in P.terms()}


def _diff(p: Poly, i: int) -> Poly:
    out: Poly = {}
    for e, c in p.items():
        if e[i]:
            out[e[:i] + (e[i] - 1,) + e[i + 1:]] = c * e[i]
    return out


def _axpy(acc: Poly, p: Poly, a: Fraction) -> None:
    for e, c in p.items():
        x = acc.get(e, 0) + a * c
        if x:
            acc[e] = x
        else:
            acc.pop(e, None)


class ExactTrees:
    """Tree values of one polynomial Lagrangian ``L(q, v)`` at one rational point."""

    def __init__(self, L: sympy.Expr, q: Sequence[sympy.Symbol], v: Sequence[sympy.Symbol], q0, v0):
        n = len(q)
        self.n = n
        self.x0 = [Fraction(str(x)) for x in (*q0, *v0)]
        self.P = _poly(L, [*q, *v])
        self.v0 = self.x0[n:]
        d = [_diff(self.P, i) for i in range(2 * n)]
        M = sympy.Matrix(n, n, lambda i, j: sympy.Rational(self._at(_diff(d[n + i], n + j))))
        if M.det() == 0:
            raise ValueError("the mass matrix is singular at this point; choose another point")
        self.Minv = [[Fraction(int(x.p), int(x.q)) for x in M.inv().row(i)] for i in range(n)]
        lq = [self._at(d[i]) for i in range(n)]
        lqv = [sum(self._at(_diff(d[k], n + j)) * self.v0[k] for k in range(n)) for j in range(n)]
        self.A = self._raise([a - b for a, b in zip(lq, lqv)])
        self._chains: Dict[tuple, Poly] = {(): self.P}
        self._dirs: Dict[tuple, List[Fraction]] = {}
        self._trees: Dict[tuple, object] = {}

    def _at(self, p: Poly) -> Fraction:
        total = Fraction(0)
        for e, c in p.items():
            for x, k in zip(self.x0, e):
                if k:
                    c = c * x**k
            total += c
        return total

    def _raise(self, g: Sequence[Fraction]) -> List[Fraction]:
        return [sum(w * x for w, x in zip(row, g)) for row in self.Minv]

    # ------------------------------------------------------------------ chains of directional derivatives
    def _chain(self, prefix: tuple) -> Poly:
        p = self._chains.get(prefix)
        if p is None:
            parent = self._chain(prefix[:-1])
            kind, key = prefix[-1]
            d = self._direction(key)
            off = 0 if kind == 0 else self.n
            p = {}
            for i in range(self.n):
                if d[i] and parent:
                    _axpy(p, _diff(parent, off + i), d[i])
            self._chains[prefix] = p
        return p

    def _key(self, ch: tuple, j: int) -> tuple:
        if ch[0] == 0:
            if ch[1] == V:
                return (_V,)
            if ch[1] == A:
                return (_A,)
            if ch[1] == UPPER:
                return (_W, j)
            raise ValueError(f"leaf {ch[1]} cannot occur in a result")
        return (_EDGE, j, ch)

    def _prefix(self, qs, vs, j: int) -> tuple:
        return tuple(sorted([(0, self._key(ch, j)) for ch in qs] + [(1, self._key(ch, j)) for ch in vs]))

    def _direction(self, key: tuple) -> List[Fraction]:
        if key[0] == _V:
            return self.v0
        if key[0] == _A:
            return self.A
        if key[0] == _W:
            return [Fraction(int(i == key[1])) for i in range(self.n)]
        d = self._dirs.get(key)
        if d is None:
            _, j, (_, kind, qs, vs) = key
            p = self._chain(self._prefix(qs, vs, j))
            off = 0 if kind == 0 else self.n
            d = self._raise([self._at(_diff(p, off + i)) for i in range(self.n)])
            self._dirs[key] = d
        return d

    # ------------------------------------------------------------------ trees and series
    def tree(self, t: tuple):
        """A Fraction (scalar tree) or a list of ``n`` Fractions (vector tree)."""
        out = self._trees.get(t)
        if out is not None:
            return out
        if t[0] == 3:
            if t[1] not in (V, A):
                raise ValueError(f"bare leaf {t[1]} cannot occur in a result")
            out = self.v0 if t[1] == V else self.A
        elif _has_upper(t):
            out = self._raise([self._at(self._chain(self._prefix(t[1], t[2], j))) for j in range(self.n)])
        else:
            out = self._at(self._chain(self._prefix(t[1], t[2], -1)))
        self._trees[t] = out
        return out

    def coefficients(self, raw) -> List[object]:
        """``[c_0, ..., c_N]`` of a :class:`bea.free.derive.FreeRaw` at this point: Fractions, or lists
        of ``n`` Fractions for the modified equation (each monomial has exactly one vector tree); elements of
        the scheme's field (:class:`bea.field_element.FieldElement`) where the coefficients are irrational."""
        trees = raw.forest.trees
        vector = raw.kind == "modified_equation"
        out = []
        for k in range(raw.order + 1):
            total = [Fraction(0)] * self.n if vector else Fraction(0)
            for m, c in raw.coeffs.get(k, {}).items():
                # an element of a radical field (bea.field_element) stays one: its arithmetic with Fractions is exact
                scalar = Fraction(int(c.numerator), int(c.denominator)) if hasattr(c, "numerator") else c
                vec = None
                for x in m:
                    val = self.tree(trees[x])
                    if isinstance(val, list):
                        if vec is not None or not vector:
                            raise ValueError("a vector tree where a scalar is expected")
                        vec = val
                    else:
                        scalar *= val
                if vector:
                    if vec is None:
                        raise ValueError("a term of the modified equation without a vector tree")
                    total = [a + scalar * b for a, b in zip(total, vec)]
                else:
                    total += scalar
            out.append(total)
        return out


def _has_upper(t: tuple) -> bool:
    return any((ch[0] == 0 and ch[1] == UPPER) or (ch[0] == 1 and _has_upper(ch)) for group in (t[-2], t[-1]) for ch in group)
