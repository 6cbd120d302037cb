r"""One eager time step of :class:`~integrators.variational.VariationalIntegrator`, and what it does on failure.

Step :math:`j \to j + 1` of the active trajectories solves :math:`D_1L_\Delta(q_j, q_{j+1}) + p_j = 0`
for :math:`q_{j+1}` by the batched Newton method of :mod:`integrators.newton`, from a polynomial
extrapolation of the previous positions (:func:`extrapolate`). Elements that fail from that guess are
retried from :math:`q_j` itself (:func:`retry`); roots farther than ``max_step`` from :math:`q_j` count
as failures (:func:`far_roots`). What remains failed either raises
:class:`~integrators.newton.ConvergenceError` naming the step and batch indices, or (``on_failure="mask"``)
stops those trajectories. The driver (:meth:`VariationalIntegrator._march`) owns the loop over steps.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import torch

from ._checks import check_lagrangian_output
from .newton import (ConvergenceError, NewtonOptions, NewtonResult, autograd_system, batch_index, describe_failure, newton,
                     vmap_system)

__all__ = ["extrapolate", "eager_step", "velocity_guess", "velocity_system", "solve_velocities"]


def extrapolate(out: torch.Tensor, j: int, rows: Optional[torch.Tensor], order: int = 6) -> torch.Tensor:
    r"""Polynomial extrapolation of q_{j+1} from up to ``order`` previous positions (error O(h^order)).

    Order k is the interpolating polynomial through :math:`q_{j-k+1}, \dots, q_j` evaluated one step on,
    :math:`q_{j+1} \approx \sum_{i=0}^{k-1} (-1)^i \binom{k}{i+1} q_{j-i}` (the k-th backward difference set
    to zero). Its coefficients sum to :math:`2^k - 1` in magnitude, so rounding in the positions is amplified
    that much: order 10 reaches about 1e-13 on smooth unit-scale motion with h |q'| small, where order 6
    leaves 1e-8 (h = 0.05), and one chord correction then reaches rounding level (:mod:`integrators.compiled_func`
    uses it; the eager and C paths keep order 6). Fewer previous positions than ``order``: order 6 and below."""
    def q(k):
        return out[k] if rows is None else out[k, rows]
    if order > 6 and j >= order - 1:
        guess = order * q(j)
        for i in range(1, order):
            guess = guess + ((-1) ** i * math.comb(order, i + 1)) * q(j - i)
        return guess
    if j >= 5:
        return 6 * (q(j) + q(j - 4)) - 15 * (q(j - 1) + q(j - 3)) + 20 * q(j - 2) - q(j - 5)
    if j >= 3:
        return 4 * q(j) - 6 * q(j - 1) + 4 * q(j - 2) - q(j - 3)
    if j == 2:
        return 3 * q(j) - 3 * q(j - 1) + q(j - 2)
    return 2 * q(j) - q(j - 1)


def eager_step(integ, out: torch.Tensor, j: int, p: torch.Tensor, jac: Optional[torch.Tensor], rows: Optional[torch.Tensor],
               first_guess: Optional[torch.Tensor], batch, on_failure: str, valid_until: torch.Tensor, stats: dict):
    """Step ``j -> j + 1`` of the active ``rows`` (None: all) of ``out`` ``(steps + 1, B, n)`` by the eager path
    of the integrator ``integ``; returns ``(rows, p, jac, all_failed)``. Failed trajectories raise, or with
    ``on_failure="mask"`` get ``valid_until = j`` and leave ``rows``."""
    B = out.shape[1]
    a = out[j] if rows is None else out[j, rows]
    if integ.jacobian == "autograd":
        a = a.detach().requires_grad_(True)
    guess = first_guess if j == 0 else extrapolate(out, j, rows)
    res = newton(integ._step_eval, guess, (a, p), options=integ.options, jac0=jac)
    if not bool(res.converged.all()):
        res = retry(integ._step_eval, integ.options, res, a, p)
    stats["newton_iterations"] += res.iterations
    far = far_roots(res, a, integ.max_step)
    if far is not None and on_failure == "raise":
        raise_far(res, a, far, j, batch, rows, integ.max_step)
    if far is not None:
        res = dataclasses.replace(res, converged=res.converged & ~far)
    if not bool(res.converged.all()):
        if on_failure == "raise":
            raise_not_converged(res, j, batch, rows, B, integ.h, integ.options)
        ok = res.converged
        failed_rows = (torch.arange(B, device=out.device) if rows is None else rows)[~ok]
        valid_until[failed_rows] = j
        rows = torch.nonzero(ok).flatten() if rows is None else rows[ok]
        if rows.numel() == 0:
            return rows, p, jac, True
        res_x, p = res.x[ok], res.aux[ok]
        jac = None if res.jacobian is None else res.jacobian[ok]
    else:
        res_x, p, jac = res.x, res.aux, res.jacobian
    if rows is None:
        out[j + 1] = res_x
    else:
        out[j + 1, rows] = res_x
    return rows, p, jac, False


def retry(step_eval, options, res: NewtonResult, a: torch.Tensor, p: torch.Tensor) -> NewtonResult:
    """Elements that failed from the extrapolated guess get a second chance, with plain Newton
    steps from the most conservative guess: the previous position."""
    bad = torch.nonzero(~res.converged).flatten()
    guess = a[bad]
    again = newton(step_eval, guess, (a[bad], p[bad]), options=options)
    x, aux = res.x.clone(), res.aux.clone()
    conv, failed, resid = res.converged.clone(), res.failed.clone(), res.residual.clone()
    x[bad], aux[bad], conv[bad], failed[bad], resid[bad] = again.x, again.aux, again.converged, again.failed, again.residual
    jac = res.jacobian.clone() if res.jacobian is not None else None
    if jac is not None and again.jacobian is not None:
        jac[bad] = again.jacobian
    return NewtonResult(x=x, aux=aux, converged=conv, failed=failed, residual=resid, correction=res.correction,
                        jacobian=jac, iterations=res.iterations + again.iterations)


def far_roots(res: NewtonResult, a: torch.Tensor, max_step: Optional[float]) -> Optional[torch.Tensor]:
    """Converged elements whose root lies beyond ``max_step`` from ``q_j`` (None if there are none)."""
    if max_step is None:
        return None
    with torch.no_grad():
        far = res.converged & ((res.x.detach() - a.detach()).abs().amax(-1) > max_step)
    return far if bool(far.any()) else None


def raise_far(res: NewtonResult, a: torch.Tensor, far: torch.Tensor, j: int, batch, rows, max_step: float) -> None:
    k = int(torch.nonzero(far)[0, 0])
    b = k if rows is None else int(rows[k])
    index = batch_index(b, tuple(batch))
    jump = float((res.x[k].detach() - a[k].detach()).abs().max())
    raise ConvergenceError(
        f"at step {j + 1} (solving for q_{j + 1} from q_{j}) Newton's method converged to a root {jump:.3g} away from "
        f"q_{j} for {int(far.sum())} trajectories (first at batch index {index}), beyond max_step={max_step:g}: "
        f"another root of the implicit step equation, not the continuation of the motion. Reduce h, check the "
        f"Lagrangian in this region, or pass on_failure='mask' to stop those trajectories there.",
        step=j + 1, indices=[index], residuals=[float(res.residual[k])])


def raise_not_converged(res: NewtonResult, j: int, batch, rows, B: int, h: float, options) -> None:
    if rows is not None:  # map back to the original batch positions
        dev = res.converged.device
        full = torch.ones(B, dtype=torch.bool, device=dev)
        full[rows] = res.converged
        resid = torch.zeros(full.shape, dtype=res.residual.dtype, device=dev)
        resid[rows] = res.residual
        failed = torch.zeros_like(full)
        failed[rows] = res.failed
        res = NewtonResult(x=res.x, aux=None, converged=full, failed=failed, residual=resid, correction=res.correction,
                           jacobian=None, iterations=res.iterations)
    idx, resids, text = describe_failure(res, tuple(batch))
    total = res.converged.numel()
    raise ConvergenceError(
        f"Newton's method did not converge at step {j + 1} (solving for q_{j + 1} from q_{j}) for {len(idx)} of {total} "
        f"trajectories {text}, residual = max-norm of the discrete Euler-Lagrange residual. The step size h={h} is probably too "
        f"large for this Lagrangian, or the motion left the region where it is regular: reduce h, raise maxiter "
        f"(now {options.maxiter}) or loosen xtol (now {options.xtol:g}); pass on_failure='mask' to keep the "
        f"partial trajectories.",
        step=j + 1, indices=idx, residuals=resids)


def velocity_guess(qs: torch.Tensor, h: float) -> torch.Tensor:
    r"""Finite-difference velocities along ``qs`` (time first), Newton's starting guess in
    :meth:`VariationalIntegrator.velocities`: fourth-order central differences
    :math:`(8(q_{j+1} - q_{j-1}) - (q_{j+2} - q_{j-2}))/(12h)` where there are two neighbours on each
    side, second-order ones elsewhere (one-sided at the ends). Why fourth order: each Newton iteration
    is a pass over the whole batch, and from the second-order guess (error :math:`h^2|\dddot q|/6`, a
    few percent at the coarse steps of learned models) Newton needs one more than from this one
    (error :math:`h^4|q^{(5)}|/30`); for a sinusoid sampled at :math:`\omega h < \pi` it is the closer
    of the two."""
    T1 = qs.shape[0]
    guess = torch.empty_like(qs)
    if T1 == 2:
        guess[:] = (qs[1] - qs[0]) / h
        return guess
    guess[1:-1] = (qs[2:] - qs[:-2]) / (2 * h)
    guess[0] = (4 * qs[1] - 3 * qs[0] - qs[2]) / (2 * h)
    guess[-1] = (3 * qs[-1] - 4 * qs[-2] + qs[-3]) / (2 * h)
    if T1 >= 5:
        guess[2:-2] = (8 * (qs[3:-1] - qs[1:-3]) - (qs[4:] - qs[:-4])) / (12 * h)
    return guess


def velocity_system(L, jacobian: str):
    r"""Newton's system for the velocity at a state's position and momentum:
    :math:`r(v) = \partial_vL(q, v) - p`, Jacobian :math:`\partial_v^2L(q, v)`, batched over the rows of ``q, p``;
    ``jacobian="vmap"`` differentiates one row with :func:`torch.func.grad` under :func:`torch.func.vmap`
    (``L`` must be functorch-compatible), otherwise by batched autograd (rows independent)."""
    if jacobian == "vmap":
        def single(v, q, p):
            return torch.func.grad(L, argnums=1)(q, v) - p, None
        return vmap_system(single)

    def fun(v, q, p):
        val = check_lagrangian_output(L(q, v), q)
        (gv,) = torch.autograd.grad(val.sum(), v, create_graph=True)
        return gv - p, None
    return autograd_system(fun)


def solve_velocities(L, jacobian: str, q: torch.Tensor, p: torch.Tensor, guess: torch.Tensor, options: NewtonOptions,
                     batch_shape: tuple, where: str = "(time step, batch...)", chunk: Optional[int] = None) -> torch.Tensor:
    r"""The velocities :math:`v_b` solving :math:`\partial_vL(q_b, v_b) = p_b` (:func:`velocity_system`) from ``guess``,
    rows (B, n) of ``q, p``, by Newton in passes of ``chunk`` rows (all at once by default; each row's solve is its
    own, so the pass size changes only the rounding of batched evaluations). Rows that do not converge raise
    :class:`~integrators.newton.ConvergenceError` with their indices into ``batch_shape`` (named ``where``)."""
    evaluate = velocity_system(L, jacobian)
    B = q.shape[0]
    step = chunk or max(B, 1)
    parts = [newton(evaluate, guess[a:a + step], (q[a:a + step], p[a:a + step]), options=options)
             for a in range(0, max(B, 1), step)]
    if len(parts) == 1:
        res = parts[0]
    else:
        res = NewtonResult(torch.cat([r.x for r in parts]), None, torch.cat([r.converged for r in parts]),
                           torch.cat([r.failed for r in parts]), torch.cat([r.residual for r in parts]),
                           torch.cat([r.correction for r in parts]), None, max(r.iterations for r in parts))
    if not bool(res.converged.all()):
        idx, _, text = describe_failure(res, batch_shape)
        raise ConvergenceError(
            f"could not solve dL/dv(q_j, v) = p_j for the velocity at {len(idx)} of {res.converged.numel()} points "
            f"{text}, index = {where}. Is the Lagrangian regular (d^2L/dv^2 invertible) there?", indices=idx)
    return res.x
