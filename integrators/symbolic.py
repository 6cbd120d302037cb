r"""A Lagrangian given once as a SymPy expression, evaluated as torch and as NumPy.

:class:`SymbolicLagrangian` holds :math:`L(q, v)` (with optional constant parameters such as the
step size ``h`` of a modified Lagrangian) and derives from it, symbolically,

* the energy :math:`H = \sum_i v_i\, \partial L/\partial v_i - L`,
* the Euler--Lagrange data :math:`M = \partial^2 L/\partial v^2` and
  :math:`b = \partial L/\partial q - L_{vq} v`, so that :math:`\ddot q = M^{-1} b`
  (``M`` is solved numerically, pointwise, never inverted symbolically),

and compiles them to torch callables (differentiable, batched over leading dimensions) and to
vectorised NumPy functions (for :func:`integrators.reference.reference_flow`).
"""

from __future__ import annotations

import math
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np
import sympy
import torch

from bea.errors import BeaTypeError, BeaValueError
from bea.symbolic import check_expression

__all__ = ["SymbolicLagrangian", "TORCH_FUNCTIONS"]

#: SymPy function names and their torch implementations (used by :func:`sympy.lambdify`)
TORCH_FUNCTIONS: Dict[str, Callable] = {
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "exp": torch.exp, "log": torch.log,
    "sqrt": torch.sqrt, "Abs": torch.abs, "sinh": torch.sinh, "cosh": torch.cosh, "tanh": torch.tanh,
    "atan": torch.atan, "asin": torch.asin, "acos": torch.acos, "atan2": torch.atan2, "sign": torch.sign,
}


def _symbols(seq, what: str) -> Tuple[sympy.Symbol, ...]:
    if isinstance(seq, sympy.Symbol):
        seq = [seq]
    try:
        out = tuple(seq)
    except TypeError:
        raise BeaTypeError(f"{what} must be a sequence of SymPy symbols, got {seq!r}") from None
    for s in out:
        if not isinstance(s, sympy.Symbol):
            raise BeaTypeError(f"{what} must contain SymPy symbols, got {s!r} ({type(s).__name__})")
    return out


class SymbolicLagrangian:
    r"""A Lagrangian :math:`L(q, v; \theta)` as a SymPy expression.

    Parameters
    ----------
    expr : SymPy expression in ``q``, ``v`` and ``params``.
    q, v : sequences of SymPy symbols (positions and velocities), the same length ``n``.
    params : SymPy symbols whose numbers are supplied later with :meth:`bind` (e.g. ``h``).
    name : a label for messages.

    Calling the object, ``L(q, v)`` with torch tensors of shape ``(..., n)``, evaluates it (the
    parameters must be bound first).
    """

    def __init__(self, expr, q: Sequence, v: Sequence, params: Sequence = (), name: Optional[str] = None,
                 values: Optional[Mapping] = None):
        # bea's gate: a string is refused, never parsed (sympify would run eval on it)
        self.expr = check_expression(expr)
        self.q = _symbols(q, "q")
        self.v = _symbols(v, "v")
        self.params = _symbols(params, "params")
        if len(self.q) != len(self.v) or not self.q:
            raise BeaValueError(f"q and v must list the same positive number of symbols, got {len(self.q)} and {len(self.v)}")
        if len(set(self.q + self.v + self.params)) != 2 * len(self.q) + len(self.params):
            raise BeaValueError("the symbols in q, v and params must be distinct")
        free = self.expr.free_symbols - set(self.q + self.v + self.params)
        if free:
            names = ", ".join(sorted(map(str, free)))
            raise BeaValueError(f"the Lagrangian contains undeclared symbols {names}: substitute numbers or list them in params=")
        self.n = len(self.q)
        self.name = name or "L"
        self.values: Dict[sympy.Symbol, float] = {}
        self._compiled: Dict[str, Callable] = {}
        if values:
            self._set_values(values)

    # ------------------------------------------------------------------ parameters
    def _set_values(self, values: Mapping) -> None:
        for k, val in values.items():
            sym = k if isinstance(k, sympy.Symbol) else sympy.Symbol(str(k))
            match = [p for p in self.params if p == sym or p.name == sym.name]
            if not match:
                raise BeaValueError(f"{k!r} is not a parameter of {self.name} (parameters: {list(self.params)})")
            x = float(val)
            if not math.isfinite(x):
                raise BeaValueError(f"parameter {k} must be finite, got {val!r}")
            self.values[match[0]] = x

    def bind(self, values: Optional[Mapping] = None, **kwargs) -> "SymbolicLagrangian":
        """A copy with numbers for (some of) the parameters, e.g. ``Lmod.bind(h=0.1)``; shares the
        compiled functions, so binding new values is free."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.values = dict(self.values)
        new._set_values({**(values or {}), **kwargs})
        return new

    def _param_values(self) -> Tuple[float, ...]:
        missing = [p for p in self.params if p not in self.values]
        if missing:
            raise BeaValueError(f"give numbers for the parameters {missing} of {self.name} first, e.g. .bind({missing[0]}=...)")
        return tuple(self.values[p] for p in self.params)

    # ------------------------------------------------------------------ symbolic derived quantities
    @property
    def energy_expr(self) -> sympy.Expr:
        r""":math:`H = \sum_i v_i\,\partial L/\partial v_i - L`."""
        return sum(vi * sympy.diff(self.expr, vi) for vi in self.v) - self.expr

    @property
    def momentum_exprs(self) -> Tuple[sympy.Expr, ...]:
        r""":math:`p_i = \partial L/\partial v_i`."""
        return tuple(sympy.diff(self.expr, vi) for vi in self.v)

    def euler_lagrange_data(self) -> Tuple[sympy.Matrix, sympy.Matrix]:
        r""":math:`(M, b)` with :math:`M = \partial^2L/\partial v^2`, :math:`b = \partial L/\partial q - L_{vq}v`."""
        L = self.expr
        n = self.n
        dv = [sympy.diff(L, vi) for vi in self.v]
        M = sympy.Matrix(n, n, lambda i, j: sympy.diff(dv[i], self.v[j]))
        b = sympy.Matrix([sympy.diff(L, self.q[i]) - sum(sympy.diff(dv[i], self.q[j]) * self.v[j] for j in range(n)) for i in range(n)])
        return M, b

    # ------------------------------------------------------------------ torch
    def _torch_fn(self, key: str, expr) -> Callable:
        if key not in self._compiled:
            self._compiled[key] = sympy.lambdify([*self.q, *self.v, *self.params], expr, modules=[TORCH_FUNCTIONS, "math"])
        return self._compiled[key]

    def _eval_torch(self, key: str, expr, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if not isinstance(q, torch.Tensor) or not isinstance(v, torch.Tensor):
            raise BeaTypeError("q and v must be torch tensors of shape (..., n)")
        if q.shape[-1:] != (self.n,) or v.shape != q.shape:
            raise BeaValueError(f"{self.name} needs q and v of the same shape (..., {self.n}); got {tuple(q.shape)} and {tuple(v.shape)}")
        fn = self._torch_fn(key, expr)
        out = fn(*q.unbind(-1), *v.unbind(-1), *self._param_values())
        if not isinstance(out, torch.Tensor):
            out = torch.tensor(float(out), dtype=q.dtype, device=q.device)
        return out.expand(q.shape[:-1]) if out.shape != q.shape[:-1] else out

    def __call__(self, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """The Lagrangian on torch tensors ``q, v`` of shape ``(..., n)``; returns shape ``(...)``."""
        return self._eval_torch("L", self.expr, q, v)

    def energy(self, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """The exact energy :math:`H(q, v)` on torch tensors (shape ``(...)``)."""
        return self._eval_torch("H", self.energy_expr, q, v)

    # ------------------------------------------------------------------ NumPy
    def acceleration_numpy(self) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        r"""A vectorised NumPy function ``A(q, v)`` (arrays ``(B, n)``) returning :math:`M^{-1}b`
        (``(B, n)``), with the parameters bound now. Raises ``ValueError`` where ``M`` is singular."""
        if "EL" not in self._compiled:
            M, b = self.euler_lagrange_data()
            self._compiled["EL"] = sympy.lambdify([*self.q, *self.v, *self.params], [*M, *b], modules="numpy", cse=True)
        fn = self._compiled["EL"]
        n = self.n
        params = self._param_values()

        def A(q: np.ndarray, v: np.ndarray) -> np.ndarray:
            B = q.shape[0]
            vals = fn(*q.T, *v.T, *params)
            vals = [np.broadcast_to(np.asarray(x, dtype=np.float64), (B,)) for x in vals]
            Mn = np.stack(vals[: n * n], -1).reshape(B, n, n)
            bn = np.stack(vals[n * n:], -1)
            try:
                return np.linalg.solve(Mn, bn[..., None])[..., 0]
            except np.linalg.LinAlgError:
                raise BeaValueError(f"the mass matrix d^2L/dv^2 of {self.name} is singular at some state: "
                                 "the Euler-Lagrange equations do not determine the acceleration") from None

        return A

    def __repr__(self) -> str:
        bound = f", {dict((str(k), v) for k, v in self.values.items())}" if self.values else ""
        return f"<{type(self).__name__} {self.name}: {self.expr}{bound}>"
