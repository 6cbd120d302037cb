r"""The public result object: a truncated series in ``h`` with SymPy coefficients.

>>> import bea
>>> s = bea.modified_lagrangian("midpoint", 2)          # generic L(q, v), n = 1
>>> s.coefficients[2]                                   # SymPy expression of L's derivatives
>>> s.latex()                                           # readable LaTeX (L^{(i,j)} notation)
>>> f = s.to_torch()                                    # f(L, q, v, h) for any torch Lagrangian

Display: ``repr(s)`` is a one-line summary (kind, scheme, order, terms per power of ``h``); ``str(s)``
and ``s.latex()`` show at most :data:`MAX_TERMS` terms of each coefficient and say how many they leave
out, because a high order or dimension gives coefficients of millions of characters. Long output is
opt-in: ``s.text(max_terms=None)``, ``s.latex(max_terms=None)``, or ``s.coefficients`` itself.
"""

from __future__ import annotations

import warnings
from typing import Callable, Dict, Optional

import sympy

from .codegen import generate_source, load_source
from .derive import Raw
from .errors import BeaTypeError, BeaValueError, SeriesError
from .symbolic import Frame, poly_to_sympy

H = sympy.Symbol("h", positive=True)

_TORCH_FUNCS: Dict[str, str] = {
    name: name for name in ("sin", "cos", "tan", "exp", "log", "sqrt", "sinh", "cosh", "tanh", "atan", "asin", "acos")
}


#: terms of one coefficient that ``str()`` and :meth:`Series.latex` show by default
MAX_TERMS = 20


def _check_max_terms(max_terms) -> None:
    if max_terms is not None and (isinstance(max_terms, bool) or not isinstance(max_terms, int) or max_terms < 1):
        raise BeaValueError(f"max_terms must be a positive integer or None (all terms), got {max_terms!r}")


def shorten(c, max_terms: Optional[int]):
    """``(shown, left_out)``: ``c`` (a SymPy expression or column ``Matrix``) with at most ``max_terms`` terms
    per entry, in printing order, and the number of terms left out (``max_terms=None``: all)."""
    _check_max_terms(max_terms)
    if max_terms is None:
        return c, 0
    if isinstance(c, sympy.MatrixBase):
        parts = [shorten(e, max_terms) for e in c]
        return sympy.Matrix(c.shape[0], c.shape[1], [e for e, _ in parts]), sum(k for _, k in parts)
    terms = c.as_ordered_terms() if isinstance(c, sympy.Add) else [c]
    if len(terms) <= max_terms:
        return c, 0
    return sympy.Add(*terms[:max_terms]), len(terms) - max_terms


def more_terms(left_out: int, latex: bool = False) -> str:
    """The marker appended to a shortened coefficient."""
    if not left_out:
        return ""
    note = f"{left_out} more term{'s' if left_out > 1 else ''}"
    return rf" + \dots\ \text{{({note})}}" if latex else f" + ... ({note}; max_terms=None shows all)"


class Series:
    r"""A truncated series :math:`\sum_{k=0}^{N} h^k c_k` produced by a derivation.

    Attributes
    ----------
    kind : ``"modified_equation"``, ``"modified_lagrangian"`` or ``"inverse_modified_lagrangian"``.
    scheme : the :class:`~bea.schemes.Scheme`.
    order : the highest power of ``h`` kept.
    n : the number of degrees of freedom (``dim`` is its deprecated alias).
    generic : ``True`` for the generic Lagrangian ``L(q, v)``, ``False`` for a concrete one.
    q, v : the coordinate and velocity symbols; ``lagrangian`` the Lagrangian they refer to.
    """

    def __init__(self, raw: Raw, scheme, frame: Frame, generic_frame: Optional[Frame] = None):
        self._raw = raw
        self.kind = raw.kind
        self.scheme = scheme
        self.order = raw.order
        self.n = frame.n
        self.symmetric = raw.symmetric
        self._frame = frame
        self.generic = frame.generic
        self.q = frame.q
        self.v = frame.v
        self.lagrangian = frame.L
        self.h = H
        self._coefficients: Optional[Dict[int, object]] = None
        self._torch: Optional[Callable] = None
        self._source: Optional[str] = None

    @property
    def dim(self) -> Optional[int]:
        """Deprecated alias of :attr:`n` (the number of degrees of freedom); removed in the next release."""
        warnings.warn("Series.dim is deprecated and will be removed in the next release; use Series.n",
                      DeprecationWarning, stacklevel=2)
        return self.n

    # ------------------------------------------------------------------ SymPy
    @property
    def coefficients(self) -> Dict[int, object]:
        """``{k: c_k}`` for every non-zero coefficient (a SymPy expression; a column
        ``Matrix`` for the modified equation)."""
        if self._coefficients is None:
            value = self._frame.value(self._raw.jets)
            out: Dict[int, object] = {}
            for k, c in sorted(self._raw.coeffs.items()):
                if isinstance(c, list):
                    if any(c):
                        out[k] = sympy.Matrix([self._tidy(poly_to_sympy(p, value)) for p in c])
                elif c:
                    out[k] = self._tidy(poly_to_sympy(c, value))
            self._coefficients = out
        return self._coefficients

    def _tidy(self, e: sympy.Expr) -> sympy.Expr:
        if self.generic:
            return e
        e = sympy.expand(e)
        if e.has(sympy.Pow) and any(p.exp.is_negative for p in e.atoms(sympy.Pow)):
            e = sympy.cancel(sympy.together(e))
        return e

    @property
    def expr(self):
        """The truncated series as one SymPy expression in ``h``."""
        zero = sympy.zeros(self.n, 1) if self.kind == "modified_equation" else sympy.S.Zero
        return sum((H**k * c for k, c in self.coefficients.items()), zero)

    def coefficient(self, k: int):
        """Coefficient of ``h^k`` (zero if absent); ``k`` may not exceed :attr:`order`."""
        if k > self.order:
            raise SeriesError(f"this series was truncated at h^{self.order}; h^{k} is not known")
        c = self.coefficients.get(k)
        if c is None:
            return sympy.zeros(self.n, 1) if self.kind == "modified_equation" else sympy.S.Zero
        return c

    def truncate(self, order: int) -> "Series":
        """The same series truncated at ``h^order`` (``order <= self.order``)."""
        if not isinstance(order, int) or order < 0:
            raise BeaValueError(f"order must be a non-negative integer, got {order!r}")
        if order > self.order:
            raise SeriesError(f"cannot truncate at h^{order}: the series is only known to h^{self.order}")
        raw = Raw(self.kind, self._raw.jets, order, {k: c for k, c in self._raw.coeffs.items() if k <= order}, self.symmetric)
        return Series(raw, self.scheme, self._frame)

    # ------------------------------------------------------------------ display
    def _display_expr(self, e):
        """Replace ``Derivative(L(q, v), ...)`` by readable symbols: returns the expression with
        plain-text names (``L_qv``, ``L_q1v2``) and a map from those symbols to LaTeX names."""
        if not self.generic:
            return e, {}
        n = self.n
        subs: Dict[sympy.Basic, sympy.Symbol] = {}
        names: Dict[sympy.Symbol, str] = {}
        for d in e.atoms(sympy.Derivative):
            counts = {s: k for s, k in d.variable_count}
            if n == 1:
                i, j = counts.get(self.q[0], 0), counts.get(self.v[0], 0)
                label = f"L^{{({i},{j})}}"
                text = "L_" + "q" * i + "v" * j
            else:
                parts, tparts = [], []
                for s in (*self.q, *self.v):
                    k = counts.get(s, 0)
                    parts.extend([sympy.latex(s)] * k)
                    tparts.extend([str(s).replace("_", "")] * k)
                label = "L_{" + " ".join(parts) + "}"
                text = "L_" + "".join(tparts)
            sym = sympy.Symbol(text)
            subs[d] = sym
            names[sym] = label
        Lsym = sympy.Symbol("L")
        subs[self.lagrangian] = Lsym
        names[Lsym] = "L"
        return e.xreplace(subs), names

    def latex(self, max_terms: Optional[int] = MAX_TERMS) -> str:
        r"""LaTeX of the whole series, with :math:`L^{(i,j)} = \partial_q^i\partial_v^j L` (1-D) or
        :math:`L_{q_1 v_2}` (n-D) instead of ``Derivative`` objects. At most ``max_terms`` terms of each
        coefficient are shown, followed by how many were left out; ``max_terms=None`` gives all of them."""
        parts = []
        for k, c in self.coefficients.items():
            c, left = shorten(c, max_terms)
            disp, names = self._display_expr(c)
            body = sympy.latex(disp, symbol_names=names) + more_terms(left, latex=True)
            if k == 0:
                parts.append(body)
            else:
                hk = "h" if k == 1 else f"h^{{{k}}}"
                parts.append(f"{hk} \\left({body}\\right)")
        lhs = {"modified_equation": r"\ddot q", "modified_lagrangian": r"L_{\mathrm{mod}}", "inverse_modified_lagrangian": r"L_{\mathrm{inv}}"}[self.kind]
        return f"{lhs} = " + " + ".join(parts) + f" + \\mathcal{{O}}(h^{{{self.order + 1}}})"

    def _repr_latex_(self) -> str:
        return f"$\\displaystyle {self.latex()}$"

    @property
    def n_terms(self) -> Dict[int, int]:
        """Number of monomials per power of ``h`` (summed over the components of the modified equation)."""
        out = {}
        for k, c in sorted(self._raw.coeffs.items()):
            size = sum(len(p) for p in c) if isinstance(c, list) else len(c) if hasattr(c, "__len__") else 1
            if size:
                out[k] = size
        return out

    def __repr__(self) -> str:
        what = "L(q, v)" if self.generic else str(self.lagrangian)
        if len(what) > 60:
            what = what[:57] + "..."
        sizes = ", ".join(f"h^{k}: {n}" for k, n in self.n_terms.items())
        return f"<Series {self.kind} of {what}, scheme={self.scheme!r}, n={self.n}, to h^{self.order}; terms {sizes}>"

    def text(self, max_terms: Optional[int] = MAX_TERMS) -> str:
        """Plain text: the summary line, then one line per power of ``h`` with at most ``max_terms`` terms
        (``None``: all). ``str(series)`` is ``series.text()``."""
        lines = [repr(self)]
        if self.generic:
            lines.append("  (L_qv = d^2 L / dq dv, ...; all derivatives at (q, v))")
        for k, c in self.coefficients.items():
            c, left = shorten(c, max_terms)
            disp, _ = self._display_expr(c)
            lines.append(f"  h^{k}: {disp}{more_terms(left)}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()

    # ------------------------------------------------------------------ torch
    @property
    def source(self) -> str:
        """The generated torch source (generic series only)."""
        if not self.generic:
            raise BeaTypeError("generated source exists for generic series; a concrete series compiles with lambdify")
        if self._source is None:
            meta = {"kind": self.kind, "scheme": repr(self.scheme), "order": self.order, "n": self.n}
            self._source = generate_source(self._raw.jets, self.kind, self._raw.coeffs, "generated", meta)
        return self._source

    def to_torch(self) -> Callable:
        """A differentiable torch function.

        Generic series: ``f(L, q, v, h)`` for any torch Lagrangian ``L(q, v) -> (...)``, with the
        derivatives of ``L`` taken by autograd. Concrete series: ``f(q, v, h)``.
        Lagrangians return shape ``(...)``; the modified equation returns ``(..., n)``.
        """
        if self._torch is None:
            if self.generic:
                self._torch = load_source(self.source, "generated")
            else:
                self._torch = self._lambdify()
        return self._torch

    def _lambdify(self) -> Callable:
        import torch

        from .autodiff import check_state, check_step

        mods = [{k: getattr(torch, v) for k, v in _TORCH_FUNCS.items()}, "math"]
        args = [*self.q, *self.v, H]
        e = self.expr
        if self.kind == "modified_equation":
            comps = [sympy.lambdify(args, e[i], modules=mods) for i in range(self.n)]
        else:
            comps = [sympy.lambdify(args, e, modules=mods)]
        n = self.n
        params = self._frame.params
        if params:
            raise BeaTypeError(f"substitute numbers for the parameters {params} before compiling to torch")

        def f(q, v, h):
            check_state(q, v, n)
            h = check_step(h, q)
            xs = [q[..., i] for i in range(n)] + [v[..., i] for i in range(n)] + [h]
            outs = [c(*xs) + torch.zeros_like(q[..., 0]) for c in comps]
            return torch.stack(outs, -1) if self.kind == "modified_equation" else outs[0]

        return f
