r"""Checks made once per integrator or per initial state: a consistent scheme, a regular Lagrangian.

*Consistency.* A scheme is consistent when its discrete Euler--Lagrange equations tend to the
Euler--Lagrange equations of :math:`L`, normalised so that :math:`L_\Delta(q(t), q(t+h))/h \to L` as
:math:`h \to 0`. ``2*h*L(...)`` is not: it is the midpoint rule of :math:`2L`, whose discrete momenta
:math:`D_2L_\Delta` are twice :math:`\partial L/\partial v`, so a start from
:math:`p_0 = \partial L/\partial v(q_0, \dot q_0)` follows the wrong trajectory. :mod:`bea` decides this while
deriving the order-0 modified equation (``scheme.check_consistent()`` where the scheme offers it);
the answer is remembered on the scheme object, so the check costs once per scheme.

*Regularity.* One time step solves :math:`D_1L_\Delta(q_j, q_{j+1}) + p_j = 0` for
:math:`q_{j+1}`; its Jacobian is :math:`D_{12}L_\Delta \approx -\tfrac1h\big(M - h\,(\ldots)L_{qv}
- h^2(\ldots)L_{qq}\big)` with :math:`M = \partial^2L/\partial v^2`. The step is well posed -- and
its solution tends to :math:`q_j` as :math:`h \to 0` -- only where :math:`M` is invertible. The test
compares the smallest singular value of :math:`M` with the size of the step-scaled Hessian

.. math::  \mathcal H_h = \begin{pmatrix} h^2 L_{qq} & h L_{qv} \\ h L_{vq} & M \end{pmatrix}

(the entries in the units of :math:`M`), and calls :math:`L` *not regular* at a state where
:math:`\sigma_{\min}(M) \le 10^{-12}\,\lVert\mathcal H_h\rVert_2`: about :math:`5000\,\varepsilon`, the
rounding level at which autograd computes these entries, so a mass matrix that vanishes (``L = q v - q^2``)
or is below rounding against the rest (``L = v^4/12 + \cos q`` at ``v = 1e-100``) is caught, and a stiff
but regular system (:math:`h^2 k/m` up to :math:`10^{12}`) is not.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Callable, Optional

import torch

import bea
from bea.errors import InconsistentSchemeError, NotRegularError, UnverifiedSchemeWarning  # one class per condition across the packages

if TYPE_CHECKING:  # the annotation only: integrators.compiled imports much more
    from .compiled import CompiledStepper

__all__ = ["NotRegularError", "InconsistentSchemeError", "REGULARITY_RTOL", "check_scheme", "check_regular_at"]

#: sigma_min(M) <= REGULARITY_RTOL * ||H_h||_2 counts as singular (module docstring)
REGULARITY_RTOL = 1e-12


def check_scheme(scheme: bea.Scheme) -> None:
    """Raise :class:`InconsistentSchemeError` if ``scheme`` is not consistent (see the module docstring)."""
    if getattr(scheme, "_integrators_consistent", False):
        return
    check = getattr(scheme, "check_consistent", None)
    try:
        if callable(check):
            check()
        else:
            bea.modified_equation(scheme, 0, n=1, cache=False)
    except InconsistentSchemeError as err:
        raise InconsistentSchemeError(f"{err}; the integrator would converge to the wrong dynamics (or none). A scheme "
                                      "must satisfy L_Delta(q(t), q(t+h))/h -> L(q, q') as h -> 0, e.g. h*L((a+b)/2, (b-a)/h)") from None
    except ValueError:  # another bad value (as before the check was typed): the caller's to see, not a warning
        raise
    except Exception as err:  # a scheme that bea cannot expand symbolically (torch-only code): say so, do not block
        warnings.warn(f"could not verify that the scheme {scheme!r} is consistent ({type(err).__name__}: {err}); "
                      "bea's symbolic expansion of it failed", UnverifiedSchemeWarning, stacklevel=3)
        return
    try:
        scheme._integrators_consistent = True  # remembered on the instance: one check per scheme object
    except AttributeError:  # pragma: no cover - schemes with __slots__
        pass


def check_regular_at(lagrangian: Callable, q: torch.Tensor, v: torch.Tensor, h: float, where: str,
                     stepper: Optional["CompiledStepper"] = None) -> None:
    """Raise :class:`NotRegularError` naming the first state of the batch ``(q, v)`` (each ``(B, n)``)
    where ``lagrangian`` is not regular at step ``h`` (see the module docstring). ``stepper``: the compiled stepper
    of this Lagrangian if one is built (CPU data): the Hessian from its C form (the form the march integrates;
    a traced form is verified against autograd when built, a declared one is trusted) in microseconds, where autograd took 0.5 ms of a solve's 0.9 ms fixed cost (System pendulum)."""
    B, n = q.shape
    H = _autograd_hessian(lagrangian, q, v) if stepper is None else stepper.lagrangian_derivatives(torch.cat([q, v], -1))[1]
    if not bool(torch.isfinite(H).all()):
        return  # non-finite derivatives: the step's own checks name them
    scale = torch.ones(2 * n, dtype=H.dtype, device=H.device)
    scale[:n] = h
    Hh = H * scale[:, None] * scale[None, :]
    M = H[:, n:, n:]
    smin = torch.linalg.svdvals(M)[:, -1]
    bad = smin <= REGULARITY_RTOL * torch.linalg.matrix_norm(Hh, ord=2)
    if bool(bad.any()):
        b = int(torch.nonzero(bad)[0])
        raise NotRegularError(
            f"the Lagrangian is not regular at {int(bad.sum())} of {B} {where} (first at flat batch index {b}: q={q[b].tolist()}, "
            f"v={v[b].tolist()}): its mass matrix d^2L/dv^2 has smallest singular value {float(smin[b]):.3g}, "
            f"below {REGULARITY_RTOL:g} x the size of its other second derivatives (scaled by h={h:g}), so a time step "
            "does not determine the next position. Use a Lagrangian whose d^2L/dv^2 is invertible there")


def _autograd_hessian(lagrangian: Callable, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The Hessian ``(B, 2n, 2n)`` of ``lagrangian`` at the states ``(q, v)`` (each ``(B, n)``), by autograd."""
    B, n = q.shape
    with torch.enable_grad():
        x = torch.cat([q, v], -1).detach().requires_grad_(True)
        val = lagrangian(x[:, :n], x[:, n:])
        if not isinstance(val, torch.Tensor) or not val.requires_grad:
            H = x.new_zeros(B, 2 * n, 2 * n)
        else:
            (g,) = torch.autograd.grad(val.sum(), x, create_graph=True)
            rows = []
            for i in range(2 * n):
                if g.requires_grad:
                    (r,) = torch.autograd.grad(g[:, i].sum(), x, retain_graph=True, allow_unused=True)
                else:
                    r = None
                rows.append(torch.zeros_like(x) if r is None else r)
            H = torch.stack(rows, -2).detach()
    return H
