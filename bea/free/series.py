r"""The result object of a dimension-free derivation.

>>> import bea
>>> s = bea.modified_lagrangian("midpoint", 4)      # no n: one formula for every n
>>> s.coefficients[2]                                # SymPy, in vector notation
>>> print(s.latex())                                 # L_{qq}[v, v], L_{q}[M^{-1} L_{qv}[v]], ...
>>> s.components(2)                                  # the component form for n = 2
>>> f = s.to_torch()                                 # f(L, q, v, h) for q, v of shape (..., n), any n
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

import sympy

from ..errors import BeaTypeError, BeaValueError, SeriesError
from ..field_element import FieldElement
from ..series import MAX_TERMS, H, Series, more_terms, shorten
from ..symbolic import Frame
from .components import to_components
from .derive import FreeRaw
from .display import tree_name
from .evaluate import TreeFunction

_LHS = {"modified_equation": r"\ddot q", "modified_lagrangian": r"L_{\mathrm{mod}}", "inverse_modified_lagrangian": r"L_{\mathrm{inv}}"}


class FreeSeries(Series):
    r"""A truncated series :math:`\sum_{k \le N} h^k c_k` valid in every dimension.

    Each coefficient is a polynomial in *trees*: contractions of the derivative tensors
    :math:`L^{(a,b)} = \partial_q^a\partial_v^b L` at :math:`(q, v)` with :math:`v` and
    :math:`M^{-1}` (:math:`M = L_{vv}`), written e.g. :math:`L_{qq}[v, v]` or
    :math:`L_{q}[M^{-1} L_{q}]` (see :mod:`bea.free.display`). ``n`` is ``None``.
    """

    def __init__(self, raw: FreeRaw, scheme):  # noqa: D107 - documented on the class
        self._free = raw
        self.kind = raw.kind
        self.scheme = scheme
        self.order = raw.order
        self.n = None
        self.symmetric = raw.symmetric
        self.generic = True
        self.q = self.v = None
        self.lagrangian = sympy.Function("L")
        self.h = H
        self._coefficients: Optional[Dict[int, object]] = None
        self._torch: Optional[Callable] = None
        self._symbols: Dict[int, sympy.Symbol] = {}
        self._names: Dict[sympy.Symbol, str] = {}

    @property
    def raw(self) -> FreeRaw:
        """The trees and rational coefficients behind this series."""
        return self._free

    def _symbol(self, i: int) -> sympy.Symbol:
        s = self._symbols.get(i)
        if s is None:
            t = self._free.forest.trees[i]
            s = sympy.Symbol(tree_name(t))
            self._symbols[i] = s
            self._names[s] = tree_name(t, latex=True)
        return s

    @property
    def coefficients(self) -> Dict[int, object]:
        """``{k: c_k}`` for every non-zero coefficient, as SymPy expressions whose symbols are
        trees in vector notation (vector-valued for the modified equation)."""
        if self._coefficients is None:
            out: Dict[int, object] = {}
            for k, p in sorted(self._free.coeffs.items()):
                if p:
                    terms = []
                    for m, c in p.items():
                        e = c._sympy_() if isinstance(c, FieldElement) else sympy.Rational(int(c.numerator), int(c.denominator))
                        for x in m:
                            e = e * self._symbol(x)
                        terms.append(e)
                    out[k] = sympy.Add(*terms)
            self._coefficients = out
        return self._coefficients

    @property
    def n_terms(self) -> Dict[int, int]:
        """Number of terms per power of ``h`` (independent of the dimension)."""
        return {k: len(p) for k, p in sorted(self._free.coeffs.items()) if p}

    @property
    def expr(self):
        return sum((H**k * c for k, c in self.coefficients.items()), sympy.S.Zero)

    def coefficient(self, k: int):
        if k > self.order:
            raise SeriesError(f"this series was truncated at h^{self.order}; h^{k} is not known")
        return self.coefficients.get(k, sympy.S.Zero)

    def truncate(self, order: int) -> "FreeSeries":
        if not isinstance(order, int) or order < 0:
            raise BeaValueError(f"order must be a non-negative integer, got {order!r}")
        if order > self.order:
            raise SeriesError(f"cannot truncate at h^{order}: the series is only known to h^{self.order}")
        r = self._free
        return FreeSeries(FreeRaw(r.kind, r.forest, order, {k: p for k, p in r.coeffs.items() if k <= order}, r.symmetric), self.scheme)

    def components(self, n: int) -> Series:
        """The same series written in components for dimension ``n`` (a component :class:`Series`)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise BeaValueError(f"n must be a positive integer, got {n!r}")
        return Series(to_components(self._free, n), self.scheme, Frame.generic_frame(n))

    # ------------------------------------------------------------------ display
    def latex(self, max_terms: Optional[int] = MAX_TERMS) -> str:
        r"""LaTeX of the whole series in vector notation, at most ``max_terms`` terms of each coefficient
        (``None``: all)."""
        parts = []
        for k, c in self.coefficients.items():
            c, left = shorten(c, max_terms)
            body = sympy.latex(c, symbol_names=self._names) + more_terms(left, latex=True)
            parts.append(body if k == 0 else f"{'h' if k == 1 else f'h^{{{k}}}'} \\left({body}\\right)")
        return f"{_LHS[self.kind]} = " + " + ".join(parts) + f" + \\mathcal{{O}}(h^{{{self.order + 1}}})"

    def __repr__(self) -> str:
        sizes = ", ".join(f"h^{k}: {n}" for k, n in self.n_terms.items())
        return f"<Series {self.kind} of L(q, v), scheme={self.scheme!r}, any n, to h^{self.order}; terms {sizes}>"

    def text(self, max_terms: Optional[int] = MAX_TERMS) -> str:
        """Plain text, at most ``max_terms`` terms of each coefficient (``None``: all); ``str()`` uses it."""
        lines = [repr(self), "  (L_qv[v, .] = d^2L/dq dv applied to v; Minv = (d^2L/dv^2)^-1; all at (q, v))"]
        for k, c in self.coefficients.items():
            c, left = shorten(c, max_terms)
            lines.append(f"  h^{k}: {c}{more_terms(left)}")
        return "\n".join(lines)

    # ------------------------------------------------------------------ torch
    @property
    def source(self) -> str:
        raise BeaTypeError("a dimension-free series is evaluated from its trees; there is no generated source")

    def to_torch(self) -> Callable:
        """``f(L, q, v, h)`` for ``q, v`` of shape ``(..., n)`` with any ``n`` (see :class:`TreeFunction`)."""
        if self._torch is None:
            r = self._free
            desc = f"{self.kind.replace('_', ' ')} of {self.scheme!r} to h^{self.order}, any dimension"
            self._torch = TreeFunction(r.kind, r.forest.trees, r.coeffs, desc)
        return self._torch
