r"""The public result object: a truncated series in ``h`` with SymPy coefficients.

>>> import bea
>>> s = bea.modified_lagrangian("midpoint", 2)          # generic L(q, v), n = 1
>>> s.coefficients[2]                                   # SymPy expression of L's derivatives
>>> s.latex()                                           # readable LaTeX (L^{(i,j)} notation)
>>> f = s.to_torch()                                    # f(L, q, v, h) for any torch Lagrangian
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

import sympy

from .codegen import generate_source, load_source
from .derive import Raw
from .errors import BeaTypeError, BeaValueError
from .symbolic import Frame, poly_to_sympy

H = sympy.Symbol("h", positive=True)

_TORCH_FUNCS: Dict[str, str] = {
    name: name for name in ("sin", "cos", "tan", "exp", "log", "sqrt", "sinh", "cosh", "tanh", "atan", "asin", "acos")
}


class Series:
    r"""A truncated series :math:`\sum_{k=0}^{N} h^k c_k` produced by a derivation.

    Attributes
    ----------
    kind : ``"modified_equation"``, ``"modified_lagrangian"`` or ``"inverse_modified_lagrangian"``.
    scheme : the :class:`~bea.schemes.Scheme`.
    order : the highest power of ``h`` kept.
    dim : the dimension ``n``.
    generic : ``True`` for the generic Lagrangian ``L(q, v)``, ``False`` for a concrete one.
    q, v : the coordinate and velocity symbols; ``lagrangian`` the Lagrangian they refer to.
    """

    def __init__(self, raw: Raw, scheme, frame: Frame, generic_frame: Optional[Frame] = None):
        self._raw = raw
        self.kind = raw.kind
        self.scheme = scheme
        self.order = raw.order
        self.dim = frame.n
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
        zero = sympy.zeros(self.dim, 1) if self.kind == "modified_equation" else sympy.S.Zero
        return sum((H**k * c for k, c in self.coefficients.items()), zero)

    def coefficient(self, k: int):
        """Coefficient of ``h^k`` (zero if absent); ``k`` may not exceed :attr:`order`."""
        if k > self.order:
            raise BeaValueError(f"this series was truncated at h^{self.order}; h^{k} is not known")
        c = self.coefficients.get(k)
        if c is None:
            return sympy.zeros(self.dim, 1) if self.kind == "modified_equation" else sympy.S.Zero
        return c

    def truncate(self, order: int) -> "Series":
        """The same series truncated at ``h^order`` (``order <= self.order``)."""
        if not isinstance(order, int) or order < 0:
            raise BeaValueError(f"order must be a non-negative integer, got {order!r}")
        if order > self.order:
            raise BeaValueError(f"cannot truncate at h^{order}: the series is only known to h^{self.order}")
        raw = Raw(self.kind, self._raw.jets, order, {k: c for k, c in self._raw.coeffs.items() if k <= order}, self.symmetric)
        return Series(raw, self.scheme, self._frame)

    # ------------------------------------------------------------------ display
    def _display_expr(self, e):
        """Replace ``Derivative(L(q, v), ...)`` by readable symbols: returns the expression with
        plain-text names (``L_qv``, ``L_q1v2``) and a map from those symbols to LaTeX names."""
        if not self.generic:
            return e, {}
        n = self.dim
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

    def latex(self) -> str:
        r"""LaTeX of the whole series, with :math:`L^{(i,j)} = \partial_q^i\partial_v^j L` (1-D) or
        :math:`L_{q_1 v_2}` (n-D) instead of ``Derivative`` objects."""
        parts = []
        for k, c in self.coefficients.items():
            disp, names = self._display_expr(c)
            body = sympy.latex(disp, symbol_names=names)
            if k == 0:
                parts.append(body)
            else:
                hk = "h" if k == 1 else f"h^{{{k}}}"
                parts.append(f"{hk} \\left({body}\\right)")
        lhs = {"modified_equation": r"\ddot q", "modified_lagrangian": r"L_{\mathrm{mod}}", "inverse_modified_lagrangian": r"L_{\mathrm{inv}}"}[self.kind]
        return f"{lhs} = " + " + ".join(parts) + f" + \\mathcal{{O}}(h^{{{self.order + 1}}})"

    def _repr_latex_(self) -> str:
        return f"$\\displaystyle {self.latex()}$"

    def __repr__(self) -> str:
        what = "L(q, v)" if self.generic else str(self.lagrangian)
        return f"<Series {self.kind} of {what}, scheme={self.scheme!r}, n={self.dim}, to h^{self.order}>"

    def __str__(self) -> str:
        lines = [repr(self)]
        if self.generic:
            lines.append("  (L_qv = d^2 L / dq dv, ...; all derivatives at (q, v))")
        for k, c in self.coefficients.items():
            disp, _ = self._display_expr(c)
            lines.append(f"  h^{k}: {disp}")
        return "\n".join(lines)

    # ------------------------------------------------------------------ torch
    @property
    def source(self) -> str:
        """The generated torch source (generic series only)."""
        if not self.generic:
            raise BeaTypeError("generated source exists for generic series; a concrete series compiles with lambdify")
        if self._source is None:
            meta = {"kind": self.kind, "scheme": repr(self.scheme), "order": self.order, "dim": self.dim}
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
            comps = [sympy.lambdify(args, e[i], modules=mods) for i in range(self.dim)]
        else:
            comps = [sympy.lambdify(args, e, modules=mods)]
        n = self.dim
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
