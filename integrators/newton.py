r"""Batched Newton's method for many independent small systems :math:`r_b(x_b) = 0`.

Each batch element ``b`` has its own unknown :math:`x_b \in \mathbb R^n` and residual
:math:`r_b`; one call solves all of them at once with vectorised torch operations:

.. math::  x_b \leftarrow x_b - J_b^{-1} r_b(x_b), \qquad J_b = \partial r_b/\partial x_b,

with :math:`J_b` from automatic differentiation (no finite differences, nothing problem-specific).

*Per-sample convergence.* Element ``b`` has converged when the correction that the most recent
Jacobian predicts is negligible, :math:`\max_i |(J_b^{-1} r_b(x_b))_i| / (1 + |x_{b,i}|) \le
\mathrm{xtol}`, or when :math:`\|r_b\|_\infty \le \mathrm{ftol}` (off by default); it is then
frozen with its last evaluated iterate, and the remaining elements iterate on (the batch is
compacted). The default ``xtol = 1e-16`` asks for convergence to rounding level: an element whose
correction is below ``STALL_FACTOR * xtol`` and shrank by less than 10x in the last iteration
(after two corrections; quadratic convergence would shrink it far more) has reached the rounding
floor and is accepted too. Non-finite residuals (e.g. after a singular Jacobian) mark
an element *failed*; elements not converged after ``maxiter`` corrections are reported as not
converged.

*Jacobian reuse.* The first correction may reuse a Jacobian supplied by the caller (``jac0``, e.g.
that of the previous time step): a *chord* step, as in implicit Runge--Kutta codes, taken by every
element whose predicted correction is small (below 0.1). All later corrections are Newton steps with
a fresh Jacobian, so convergence stays quadratic. ``reuse_jacobian=False`` disables chord steps.

Jacobians:

* :func:`autograd_system` -- batched reverse mode: ``fun`` acts pointwise over the batch, so the
  gradient of :math:`\sum_b r_{b,i}` with respect to all :math:`x_b` is row ``i`` of every
  :math:`J_b` (``n`` backward passes, any ``n``). Works with any differentiable torch code,
  including code that calls :func:`torch.autograd.grad` itself (e.g. :mod:`bea` series).
* :func:`vmap_system` -- :func:`torch.func.jacrev` under :func:`torch.func.vmap`, for a function
  written for one sample (functorch-compatible code only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Tuple

import torch
from bea.errors import BeaValueError

__all__ = ["NewtonOptions", "NewtonResult", "ConvergenceError", "newton", "autograd_system", "vmap_system", "describe_failure"]

#: ``evaluate(x, *args) -> (r, aux, jacobian)``: residual ``(B, n)``, auxiliary output ``(B, m)`` or
#: ``None``, and a function returning ``J`` ``(B, n, n)`` at the same ``x`` (called only when needed)
#: corrections below STALL_FACTOR * xtol that no longer decrease count as converged (rounding floor)
STALL_FACTOR = 1e6

Evaluator = Callable[..., Tuple[torch.Tensor, Optional[torch.Tensor], Callable[[], torch.Tensor]]]


@dataclass(frozen=True)
class NewtonOptions:
    """Tolerances of :func:`newton` (see the module docstring for the test)."""

    xtol: float = 1e-16
    ftol: float = 0.0
    maxiter: int = 20
    reuse_jacobian: bool = True

    def __post_init__(self):
        for name in ("xtol", "ftol"):
            val = getattr(self, name)
            if isinstance(val, bool) or not isinstance(val, (int, float)) or not val >= 0 or val == float("inf"):
                raise BeaValueError(f"{name} must be a finite number >= 0, got {val!r}")
        if self.xtol == 0 and self.ftol == 0:
            raise BeaValueError("xtol and ftol are both 0: no iterate could ever be accepted; set xtol (e.g. 1e-13)")
        if isinstance(self.maxiter, bool) or not isinstance(self.maxiter, int) or self.maxiter < 1:
            raise BeaValueError(f"maxiter must be an integer >= 1, got {self.maxiter!r}")


@dataclass
class NewtonResult:
    """Outcome of :func:`newton` for a batch of ``B`` systems."""

    x: torch.Tensor  #: (B, n) last iterate (the solution where ``converged``)
    aux: Optional[torch.Tensor]  #: (B, m) auxiliary output of the evaluator at ``x``
    converged: torch.Tensor  #: (B,) bool
    failed: torch.Tensor  #: (B,) bool: non-finite values or singular Jacobian
    residual: torch.Tensor  #: (B,) max-norm of the residual at ``x``
    correction: torch.Tensor  #: (B,) max-norm of the last predicted correction
    jacobian: Optional[torch.Tensor]  #: (B, n, n) most recent Jacobian per element (reusable as ``jac0``)
    iterations: int  #: Jacobian evaluations made


class ConvergenceError(BeaValueError):
    """Newton's method did not converge for some batch elements.

    Attributes: ``step`` (time step, if known), ``indices`` (batch indices, tuples), ``residuals``
    (max-norm residual per listed index).
    """

    def __init__(self, message: str, step: Optional[int] = None, indices: Sequence[tuple] = (), residuals: Sequence[float] = ()):
        super().__init__(message)
        self.step = step
        self.indices = list(indices)
        self.residuals = list(residuals)


def batch_index(b: int, batch_shape: Tuple[int, ...]) -> tuple:
    """The flat (C-order) batch position ``b`` as an index into ``batch_shape`` (``()`` when it is empty);
    integer arithmetic, so no tensor (and no device) is involved."""
    out = []
    for size in reversed(batch_shape):
        b, r = divmod(b, size)
        out.append(r)
    return tuple(reversed(out))


def describe_failure(result: NewtonResult, batch_shape: Tuple[int, ...], limit: int = 8) -> Tuple[list, list, str]:
    """Batch indices (unflattened to ``batch_shape``) and residuals of the elements that did not
    converge, and a short text listing the first ``limit`` of them."""
    bad = torch.nonzero(~result.converged).flatten()
    idx = [batch_index(int(b), batch_shape) for b in bad]
    res = [float(result.residual[b]) for b in bad]
    shown = ", ".join(f"{i if len(i) != 1 else i[0]}: {r:.3g}" + (" (non-finite/singular)" if bool(result.failed[b]) else "")
                      for i, r, b in zip(idx[:limit], res[:limit], bad[:limit]))
    more = f" and {len(idx) - limit} more" if len(idx) > limit else ""
    return idx, res, f"(batch index: residual) {shown}{more}"


def _solve(J: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """Solve ``J d = r`` per element. A singular ``J`` gives non-finite entries in ``d`` (no
    exception), which the next residual evaluation reports as a failure of that element only.
    Graph-safe (no data-dependent branch): :mod:`integrators.compiled_func` compiles it into its Newton step."""
    if J.shape[-1] == 1:
        return r / J[..., 0]
    d, info = torch.linalg.solve_ex(J, r.unsqueeze(-1))
    return torch.where((info == 0)[..., None], d.squeeze(-1), float("nan"))


# integrators.compiled_func.FuncStepper._chord_fn takes this test (iteration 0, ftol = 0) and _correction's chord
# admission (err <= 0.1) in one compiled graph: a change here must be made there too
# (tests/test_integrators_compiled_func.py checks that the two agree)
def _convergence_test(J_act: Optional[torch.Tensor], r: torch.Tensor, x_act: torch.Tensor, rn: torch.Tensor,
                      finite: torch.Tensor, it: int, prev_err: Optional[torch.Tensor], xtol: float, ftol: float):
    """The acceptance test of the module docstring for the active elements: ``(d, err, ok)`` with ``d`` the
    correction that the latest Jacobian ``J_act`` predicts (None without one), ``err`` its scaled size and
    ``ok`` whether the element has converged."""
    if J_act is not None:
        d = _solve(J_act, r)  # NaN where J_act is singular: never accepted
        err = (d.abs() / (1 + x_act.abs())).amax(-1)
        ok = err <= xtol
        if it >= 2:  # stalled at rounding level: tiny, and no longer shrinking quadratically
            ok = ok | ((err <= STALL_FACTOR * xtol) & (err >= 0.1 * prev_err))
    else:
        d = None
        err = torch.full_like(rn, float("inf"))
        ok = torch.zeros_like(finite)
    if ftol > 0:
        ok = ok | (rn <= ftol)
    return d, err, ok


def _correction(it: int, d: Optional[torch.Tensor], err: torch.Tensor, keep: torch.Tensor, J_act: Optional[torch.Tensor],
                r: torch.Tensor, jac_fn: Callable[[], torch.Tensor], reuse_jacobian: bool):
    """The next correction ``dx`` of the active elements and the Jacobian ``J`` it used: ``(J, dx, fresh)``,
    ``fresh`` telling whether a new Jacobian was evaluated.

    The first correction is a chord step with ``jac0`` (no new Jacobian) for every element whose predicted
    correction is small; a Newton step with a fresh Jacobian for the others and for all later corrections.
    Decided per element: a trajectory's iterates never depend on its batch."""
    chord = err <= 0.1 if it == 0 and d is not None and reuse_jacobian else None
    if chord is not None and bool(chord[keep].all()):
        return J_act, d, False
    J = jac_fn()
    dx = _solve(J, r)
    if chord is not None and bool(chord.any()):
        dx = torch.where(chord.unsqueeze(-1), d, dx)
        J = torch.where(chord[:, None, None], J_act, J)
    return J, dx, True


def newton(evaluate: Evaluator, x0: torch.Tensor, args: Sequence[torch.Tensor] = (), *, options: NewtonOptions = NewtonOptions(),
           jac0: Optional[torch.Tensor] = None) -> NewtonResult:
    """Solve ``B`` independent systems ``r(x_b; args_b) = 0`` from the starting guesses ``x0`` (B, n).

    ``args`` are tensors with leading dimension ``B`` (per-element data, e.g. the previous
    position and momentum). ``jac0`` (B, n, n), e.g. the Jacobian of the previous time step, is
    used to test the starting guess and for a first chord correction (if ``reuse_jacobian``);
    every later correction is a Newton step with a fresh Jacobian.
    Never raises for non-convergence: inspect ``converged`` and ``failed``.
    """
    B, n = x0.shape
    xtol, ftol = float(options.xtol), float(options.ftol)
    x = x0.detach().clone()
    # residual, correction, converged, failed and aux_out are first set by iteration 0 (all elements active)
    jac_store = None if jac0 is None else jac0.detach()
    ids: Optional[torch.Tensor] = None  # indices of the active elements; None while all are active
    x_act, args_act, J_act = x, list(args), jac_store
    prev_err: Optional[torch.Tensor] = None  # size of the last correction, same measure as err
    jacobians = 0
    for it in range(options.maxiter + 1):
        r, aux, jac_fn = evaluate(x_act, *args_act)
        rn = r.abs().amax(-1)  # NaN propagates through amax
        finite = torch.isfinite(rn) & torch.isfinite(x_act).all(-1)
        d, err, ok = _convergence_test(J_act, r, x_act, rn, finite, it, prev_err, xtol, ftol)
        if ids is None:
            residual, correction, converged, failed, aux_out = rn, err, ok, ~finite, aux
        else:
            residual[ids], correction[ids] = rn, err
            converged[ids[ok]] = True
            failed[ids[~finite]] = True
            if aux is not None:
                aux_out[ids] = aux
        keep = finite & ~ok
        if it == options.maxiter or not bool(keep.any()):
            break
        J, dx, fresh = _correction(it, d, err, keep, J_act, r, jac_fn, options.reuse_jacobian)
        if fresh:
            jacobians += 1
            jac_store = J if ids is None else jac_store.index_put_((ids,), J)
        all_kept = ids is None and bool(keep.all())
        if all_kept:  # everyone iterates on: no indexing
            x = x_act = x - dx
            J_act = J
            prev_err = (dx.abs() / (1 + x.abs())).amax(-1) if it >= 1 else None
            continue
        if ids is None:
            ids = torch.arange(B, device=x.device)
            residual, correction, converged, failed, jac_store, aux_out = (
                None if t is None else t.clone() for t in (residual, correction, converged, failed, jac_store, aux_out))
        new_ids = ids[keep]
        x[new_ids] = x_act[keep] - dx[keep]
        ids = new_ids
        x_act = x[ids]
        args_act = [a[ids] for a in args]
        J_act = J[keep]
        prev_err = (dx[keep].abs() / (1 + x_act.abs())).amax(-1)
    return NewtonResult(x=x, aux=aux_out, converged=converged, failed=failed, residual=residual, correction=correction,
                        jacobian=jac_store, iterations=jacobians)


def autograd_system(fun: Callable[..., Tuple[torch.Tensor, Optional[torch.Tensor]]]) -> Evaluator:
    """Evaluator for ``fun(x, *args) -> (r, aux)`` acting pointwise over the batch (row ``b`` of
    ``r`` depends only on row ``b`` of the inputs), with ``r`` differentiable in ``x``. The
    Jacobian comes from batched reverse-mode autograd: row ``i`` of every :math:`J_b` is the
    gradient of :math:`\\sum_b r_{b,i}`."""

    def evaluate(x: torch.Tensor, *args: torch.Tensor):
        x = x.detach().requires_grad_(True)
        with torch.enable_grad():
            r, aux = fun(x, *args)
        n = x.shape[-1]

        def jacobian() -> torch.Tensor:
            if not r.requires_grad:
                return torch.zeros(*r.shape, n, dtype=r.dtype, device=r.device)
            rows = []
            with torch.enable_grad():  # called later, possibly under the caller's no_grad
                for i in range(r.shape[-1]):
                    (g,) = torch.autograd.grad(r[..., i].sum(), x, retain_graph=i < r.shape[-1] - 1, allow_unused=True)
                    rows.append(torch.zeros_like(x) if g is None else g)
            return torch.stack(rows, -2)

        return r.detach(), None if aux is None else aux.detach(), jacobian

    return evaluate


def vmap_system(fun_single: Callable[..., Tuple[torch.Tensor, Optional[torch.Tensor]]]) -> Evaluator:
    """Evaluator for ``fun_single(x, *args) -> (r, aux)`` written for one element (``x`` of shape
    ``(n,)``), vectorised with :func:`torch.func.vmap`; the Jacobian is
    :func:`torch.func.jacrev` (``fun_single`` must be functorch-compatible)."""

    no_aux = []

    def with_value(x, *args):
        r, aux = fun_single(x, *args)
        if aux is None:  # functorch outputs must be tensors
            no_aux.append(True)
            aux = r
        return r, (r, aux)

    jac = torch.func.vmap(torch.func.jacrev(with_value, argnums=0, has_aux=True))

    def evaluate(x: torch.Tensor, *args: torch.Tensor):
        no_aux.clear()
        J, (r, aux) = jac(x.detach(), *args)
        return r.detach(), None if no_aux else aux.detach(), lambda: J.detach()

    return evaluate
