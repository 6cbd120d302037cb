r"""Compiled stepping for :class:`~integrators.variational.VariationalIntegrator`: the whole march in C, Python
entered once per chunk of steps. For a Lagrangian with a C form (:class:`CLagrangian`: gradient :math:`g` and Hessian
:math:`H` at :math:`x = (q, v)`) and a scheme :math:`L_\Delta(a, b) = \sum_k w_k L(y_k)`, :math:`y_k = o_k + A_k a + B_k b`
(:func:`scheme_points`), :math:`D_1L_\Delta = \sum_k w_k A_k^\top g(y_k)`, :math:`D_2L_\Delta = \sum_k w_k B_k^\top g(y_k)`,
:math:`D_{12}L_\Delta = \sum_k w_k A_k^\top H(y_k) B_k`; otherwise, and at any step that fails in C, the eager path runs
(docs/theory/codegen.md, "The compiled march").
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Tuple

import numpy as np
import sympy
import torch

from bea.deprecation import h_before_scheme
from bea.errors import BeaError, BeaRuntimeError, BeaValueError
from ._march_c import inline_lagrangian, march_source
from .ccompile import F64P, I32P, I64P, load_library, ptr
from .newton import STALL_FACTOR, NewtonOptions

__all__ = ["CLagrangian", "CompiledStepper", "lower_lagrangian", "scheme_points", "NotLowerable", "MAX_N", "check_n"]

#: largest number of coordinates the compiled loop handles (fixed-size work arrays in C)
MAX_N = 32

class NotLowerable(BeaError):
    """The Lagrangian or scheme has no C form here (the eager path is used); the message says why."""


def check_n(n) -> None:
    """:class:`NotLowerable` unless the compiled loop handles ``n`` coordinates (1 to :data:`MAX_N`)."""
    if not isinstance(n, int) or not 1 <= n <= MAX_N:
        raise NotLowerable(f"n = {n} coordinates; the compiled loop handles 1 to {MAX_N}")


@dataclass(frozen=True)
class CLagrangian:
    r"""A Lagrangian in C, for the compiled path.

    ``source`` defines ``static void lag_derivs(const double *x, const double *P, double *g, double *H)``
    writing the gradient ``g`` (``2n``) and the row-major Hessian ``H`` (``2n x 2n``) of :math:`L` at
    ``x = (q_1..q_n, v_1..v_n)``, ``P`` = ``params``. ``cost``: relative cost of one evaluation (sizes chunks).
    ``refresh``: returns the current ``params``, called before every chunk. ``vectorise``: build with
    :data:`integrators.ccompile.VECTOR_FLAGS`. ``auto_max_batch``: under ``execution="auto"`` larger batches take
    the eager path (None: no limit). The source must come from code, never from data read at run time."""

    n: int
    source: str
    params: np.ndarray = field(default_factory=lambda: np.zeros(1))
    cost: int = 1
    refresh: Optional[Callable[[], np.ndarray]] = None
    vectorise: bool = False
    auto_max_batch: Optional[int] = None


# ---------------------------------------------------------------------------------- lowering
def lower_lagrangian(L: Any) -> CLagrangian:
    """The :class:`CLagrangian` of a :class:`~integrators.symbolic.SymbolicLagrangian`, or :class:`NotLowerable`:
    its expression's terms on second-order jets in ``x = (q, v)`` (:mod:`integrators.codegen.from_sympy`)."""
    from .codegen import Jet, Program, Val, emit_c, lower_terms
    from .symbolic import SymbolicLagrangian

    if not isinstance(L, SymbolicLagrangian):
        raise NotLowerable(f"a {type(L).__name__} is not a SymPy Lagrangian")
    # a subclass computing something else (a System's vectorised torch form equals its expression: tested)
    if type(L).__call__ is not SymbolicLagrangian.__call__ and not getattr(L, "computes_expr", False):
        raise NotLowerable(f"{type(L).__name__} overrides __call__: its SymPy expression may not be what it computes")
    check_n(L.n)
    try:
        values = np.array(L._param_values() or (0.0,), dtype=np.float64)
    except ValueError as err:
        raise NotLowerable(str(err)) from None
    prog = Program(2 * L.n, 2)
    names = {s: prog.seed(i) for i, s in enumerate((*L.q, *L.v))}
    names.update({s: Val(f"P[{j}]") for j, s in enumerate(L.params)})
    # the sum of L's terms formed at the output: each term's jet stays in the few variables it depends on
    terms = lower_terms(prog, names, L.expr)
    if not any(isinstance(j, Jet) for _, j in terms):
        raise NotLowerable("the Lagrangian does not depend on the state")
    source, ops, _ = emit_c(prog, terms)
    return CLagrangian(n=L.n, source=source, params=values, cost=max(1, ops // 20))


@h_before_scheme("scheme", "n", "h")
def scheme_points(h: float, scheme, n: int) -> np.ndarray:
    r"""Evaluation points of ``scheme`` at step ``h`` for ``n`` coordinates, as rows
    ``(w, o (D), A (D x n), B (D x n), S = A + B (D x n))`` (:class:`NotLowerable` if not affine)."""
    D = 2 * n
    a = sympy.Matrix(sympy.symbols(f"a0:{n}", real=True))
    b = sympy.Matrix(sympy.symbols(f"b0:{n}", real=True))
    calls = []

    def probe(q, v):
        s = sympy.Symbol(f"_L{len(calls)}")
        calls.append((q, v))
        return s

    try:
        value = sympy.expand(sympy.sympify(scheme(probe, a, b, h), strict=True))  # strict: never parses a string
    except Exception as err:  # a scheme written for torch only: not symbolic
        raise NotLowerable(f"the scheme {scheme!r} cannot be run on SymPy symbols ({type(err).__name__})") from None
    if not calls:
        raise NotLowerable(f"the scheme {scheme!r} never evaluates the Lagrangian")
    syms = [sympy.Symbol(f"_L{k}") for k in range(len(calls))]
    slots = list(a) + list(b)
    rows = []
    rest = value
    for k, (q, v) in enumerate(calls):
        w = value.coeff(syms[k])
        if w.free_symbols:
            raise NotLowerable(f"the scheme {scheme!r} weighs the Lagrangian with a position-dependent factor")
        rest = rest - w * syms[k]
        y = sympy.Matrix([sympy.expand(sympy.sympify(yi, strict=True)) for yi in (*q, *v)])
        if y.shape[0] != D:
            raise NotLowerable(f"the scheme {scheme!r} evaluates L at states of unexpected size")
        dya, dyb = y.jacobian(a), y.jacobian(b)
        if y.free_symbols - set(slots) or dya.free_symbols or dyb.free_symbols:
            raise NotLowerable(f"the scheme {scheme!r} evaluates L at points that are not affine in the slots")
        A, B = np.array(dya.tolist(), dtype=float), np.array(dyb.tolist(), dtype=float)
        off = np.array(y.subs({s: 0 for s in slots}).tolist(), dtype=float).reshape(D)
        rows.append(np.concatenate([[float(w)], off, A.ravel(), B.ravel(), (A + B).ravel()]))
    if sympy.simplify(rest) != 0:
        raise NotLowerable(f"the scheme {scheme!r} is not a weighted sum of Lagrangian values")
    return np.ascontiguousarray(np.stack(rows), dtype=np.float64)


# ---------------------------------------------------------------------------------- stepping
def _require_cpu(**tensors: Optional[torch.Tensor]) -> None:
    """The C loop reads and writes host memory: tensors on another device are refused by name (the
    integrator's ``execution="auto"`` never gets here with them; it takes the eager path)."""
    for name, t in tensors.items():
        if t is not None and t.device.type != "cpu":
            raise BeaValueError(f"the compiled stepper runs in C on the CPU, but {name} is on {t.device}: move the data "
                             "with .cpu(), or integrate on that device with execution='eager' (or 'auto')")


class CompiledStepper:
    """The compiled march for one Lagrangian (or its :class:`CLagrangian`, else
    :func:`integrators.model_protocol.compiled_form`'s; ``trace=False``: no tracing front-end), scheme, ``h`` and
    ``n``. ``compile_seconds``: time spent compiling when it was built (0 if the library was already loaded)."""

    @h_before_scheme("self", "lagrangian", "scheme", "h", "n")
    def __init__(self, lagrangian: Any, h: float, scheme, n: int, *, trace: bool = True):
        t0 = time.perf_counter()
        if isinstance(lagrangian, CLagrangian):
            clag = lagrangian
        else:  # the one dispatch of the model protocol (integrators.model_protocol)
            from .model_protocol import compiled_form

            clag = compiled_form(lagrangian, n, trace=trace)
        if clag.n != n:
            raise NotLowerable(f"the Lagrangian's C form has n = {clag.n}, the data n = {n}")
        check_n(n)
        self.points = scheme_points(h, scheme, n)
        self.params = np.ascontiguousarray(clag.params, dtype=np.float64).reshape(-1)
        if self.params.size == 0:
            self.params = np.zeros(1)
        self._refresh = clag.refresh
        self.auto_max_batch = clag.auto_max_batch
        self.cost = max(1, int(clag.cost)) * self.points.shape[0]
        inline = inline_lagrangian(n, clag.cost, clag.source)
        lib = load_library(march_source(clag.source, n, inline=inline), vectorise=clag.vectorise)
        self.lower_seconds = time.perf_counter() - t0 - lib.compile_seconds
        self.compile_seconds = lib.compile_seconds
        i, d = ctypes.c_int, ctypes.c_double
        self._fn = lib.function("bea_march", i, i, i, i, i, F64P, ctypes.c_long, I64P, F64P, F64P, i, F64P, i, F64P, F64P,
                                d, d, i, i, d, d, F64P, F64P, F64P, I32P, F64P, F64P)
        self._derivs = lib.function("bea_lag_derivs", None, i, i, F64P, F64P, F64P, F64P)
        self.n = n

    def lagrangian_derivatives(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Gradient ``(m, 2n)`` and Hessian ``(m, 2n, 2n)`` of the C form of :math:`L` at states ``x``
        ``(m, 2n)`` (to check it against autograd); CPU tensors only, other shapes a :class:`~bea.errors.BeaValueError`."""
        _require_cpu(x=x)
        if x.dim() != 2 or x.shape[1] != 2 * self.n:  # the C code reads 2n numbers per state
            raise BeaValueError(f"states must have shape (m, 2n) = (m, {2 * self.n}) for n = {self.n}, got {tuple(x.shape)}")
        self._refresh_params()
        x_np = np.ascontiguousarray(x.detach().numpy(), dtype=np.float64)
        m, D = x_np.shape
        g, H = np.empty((m, D)), np.empty((m, D, D))
        self._derivs(m, D, ptr(x_np), ptr(self.params), ptr(g), ptr(H))
        return torch.from_numpy(g), torch.from_numpy(H)

    def _refresh_params(self) -> None:
        if self._refresh is None:
            return
        params = np.ascontiguousarray(self._refresh(), dtype=np.float64).reshape(-1)
        if params.shape != self.params.shape:
            raise BeaRuntimeError(f"internal: refreshed parameters have {params.size} numbers, the C form {self.params.size}")
        self.params = params

    def chunk_steps(self, batch: int, work: int = 1 << 18) -> int:
        """Steps per call: about ``work`` element-evaluations, at most 65,536 (docs/theory/codegen.md)."""
        return int(min(1 << 16, max(1, work // max(1, batch * self.cost))))

    def advance(self, out: torch.Tensor, j: int, j_end: int, p: torch.Tensor, jac: Optional[torch.Tensor],
                rows: Optional[torch.Tensor], first_guess: Optional[torch.Tensor], options: NewtonOptions,
                max_step: Optional[float], pout: Optional[torch.Tensor] = None
                ) -> Tuple[int, torch.Tensor, Optional[torch.Tensor], Optional[torch.Tensor]]:
        """March ``out`` (``(T1, B_all, n)``, contiguous float64) from step ``j`` towards ``j_end``; ``pout`` (the
        layout of ``out``), if given, receives the momenta p_{k+1} = D2 L_d(q_k, q_{k+1}) of each step taken.

        Returns ``(j_stop, p, jac, status)``: the step reached, the momenta and Jacobians there, and,
        if ``j_stop < j_end``, the per-element status of the failed step (nonzero = failed)."""
        _require_cpu(out=out, p=p, jac=jac, rows=rows, first_guess=first_guess, pout=pout)
        self._refresh_params()
        n = self.n
        B = p.shape[0]
        out_np = out.detach().numpy()
        if not out.is_contiguous() or (pout is not None and (not pout.is_contiguous() or pout.shape != out.shape
                                                             or pout.dtype != torch.float64)):
            raise BeaValueError("internal: the output arrays must be contiguous float64 of the same shape")
        pout_np = None if pout is None else pout.detach().numpy()  # shares memory: C writes into the tensor
        p_np = np.ascontiguousarray(p.detach().numpy(), dtype=np.float64).copy()
        has_jac = jac is not None
        jac_np = (np.ascontiguousarray(jac.detach().numpy(), dtype=np.float64).copy() if has_jac
                  else np.zeros((B, n, n)))
        rows_np = None if rows is None else np.ascontiguousarray(rows.numpy(), dtype=np.int64)
        fg = None if (first_guess is None or j != 0) else np.ascontiguousarray(first_guess.detach().numpy(), dtype=np.float64)
        xnew, pnew, jnew = np.empty((B, n)), np.empty((B, n)), np.empty((B, n, n))
        status = np.zeros(B, dtype=np.int32)
        hessians = np.empty(self.points.shape[0] * 4 * n * n)  # the march's work array (one per call: re-entrant)
        j_stop = self._fn(B, n, j, j_end, ptr(out_np), out.shape[1], ptr(rows_np, I64P), ptr(p_np), ptr(jac_np), int(has_jac),
                          ptr(fg), self.points.shape[0], ptr(self.points), ptr(self.params), float(options.xtol),
                          float(options.ftol), int(options.maxiter), int(options.reuse_jacobian), float(STALL_FACTOR),
                          -1.0 if max_step is None else float(max_step), ptr(xnew), ptr(pnew), ptr(jnew), ptr(status, I32P),
                          ptr(pout_np), ptr(hessians))
        jac_t = torch.from_numpy(jac_np) if (has_jac or j_stop > j) else None
        st = torch.from_numpy(status) if j_stop < j_end else None
        return j_stop, torch.from_numpy(p_np), jac_t, st
