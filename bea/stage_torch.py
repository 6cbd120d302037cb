r"""Newton's method for the interior points of a stage scheme on torch tensors (all stages at once).

For a batch of end points ``a, b`` of shape ``(..., n)`` the unknowns are the ``m`` interior points,
``Z`` of shape ``(m, ..., n)``; each batch element has its own ``m n``-dimensional system
:math:`g(Z) = \partial_Z \Phi = 0`, solved with the exact Hessian :math:`H = \partial_Z^2 \Phi`
(``m n`` reverse passes) from the straight line between ``a`` and ``b``.

The discrete Lagrangian must also have the right derivatives in ``a, b``: the integrators
differentiate it twice. The iteration runs detached; one last Newton step
:math:`Z = \bar Z - H^{-1} g` is taken *with* the graph. At the converged :math:`\bar Z`
(:math:`g = 0`) it leaves the value unchanged and gives :math:`\partial Z/\partial a =
-H^{-1}\Phi_{Za}`, the implicit-function derivative, so :math:`\Phi(a, Z(a, b), b)` has the first
derivatives of the stationary value (:math:`\Phi_a`, by stationarity) and the second ones
(:math:`\Phi_{aa} + \Phi_{aZ}\,\partial Z/\partial a`).
"""

from __future__ import annotations

from typing import Tuple

import torch

from .errors import BeaRuntimeError

__all__ = ["stationary_value", "solve_interior"]

MAXITER = 30
#: relative size below which corrections that stop decreasing count as converged (a stall at rounding level): a
#: Lagrangian given as a sum of many terms, such as a GP posterior mean, has rounding noise that stalls Newton's
#: corrections near 5e-11 (learners.shadow.lsi.DEFAULT_NEWTON); an exact one converges to 4e-16 before stalling
STALL = 1e-9


def _grad_hess(scheme, L, a, b, Z, h, create_graph: bool) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Value, gradient ``(..., m n)`` and Hessian ``(..., m n, m n)`` of the stage action in ``Z``."""
    m, n = Z.shape[0], Z.shape[-1]
    phi = scheme.stage_action(L, a, list(Z.unbind(0)), b, h)
    (g,) = torch.autograd.grad(phi.sum(), Z, create_graph=True)
    rows = []
    for k in range(m):
        for i in range(n):
            (r,) = torch.autograd.grad(g[k, ..., i].sum(), Z, retain_graph=True, create_graph=create_graph)
            rows.append(torch.movedim(r, 0, -2).flatten(-2))  # (..., m n)
    H = torch.stack(rows, -2)
    gf = torch.movedim(g, 0, -2).flatten(-2)
    return phi, gf, H


def _step(g: torch.Tensor, H: torch.Tensor, shape) -> torch.Tensor:
    """:math:`H^{-1} g` reshaped to ``Z``'s shape ``(m, ..., n)``."""
    d, info = torch.linalg.solve_ex(H, g.unsqueeze(-1))
    if bool((info != 0).any()):
        raise BeaRuntimeError("the stage action's Hessian in the interior points is singular at some step: the Lagrangian "
                              "is not regular there (its mass matrix d^2L/dv^2 is singular), or the step h is too large")
    d = d.squeeze(-1)
    m, n = shape[0], shape[-1]
    return torch.movedim(d.unflatten(-1, (m, n)), -2, 0)


def _converged_interior(scheme, L, a, b, h, start=None) -> torch.Tensor:
    """The interior points to rounding, detached, shape ``(m, ..., n)``; Newton starts from ``start`` if given, else
    from the straight line."""
    a0, b0 = a.detach(), b.detach()
    Z = torch.stack(scheme.interior_guess(a0, b0)).detach() if start is None else start.detach().clone()
    scale = 1 + Z.abs().amax()
    last = None
    with torch.enable_grad():
        for _ in range(MAXITER):
            Zv = Z.detach().requires_grad_(True)
            _, g, H = _grad_hess(scheme, L, a0, b0, Zv, h, create_graph=False)
            d = _step(g.detach(), H.detach(), Z.shape)
            if not torch.isfinite(d).all():
                raise BeaRuntimeError(f"{scheme!r}: Newton's method for the interior points gave non-finite values (is the "
                                      "Lagrangian regular here, and the step h small enough?)")
            Z = Z - d
            size = float(d.abs().amax())
            if size <= 4e-16 * float(scale) or (last is not None and size >= last and size <= STALL * float(scale)):
                return Z.detach()
            last = size
    raise BeaRuntimeError(f"{scheme!r}: Newton's method for the interior points did not converge in {MAXITER} iterations "
                          f"(last correction {last:.3g}); reduce the step h")


def solve_interior(L, a: torch.Tensor, b: torch.Tensor, h, scheme, start=None) -> torch.Tensor:
    """The stationary interior points, detached, shape ``(m, ..., n)``; ``start`` (same shape): Newton's first iterate
    (e.g. the points of a nearby Lagrangian), else the straight line from ``a`` to ``b``."""
    a, b = torch.broadcast_tensors(a, b)
    if not scheme.n_interior:
        return a.new_zeros((0, *a.shape))
    return _converged_interior(scheme, L, a, b, h, start)


def stationary_value(L, a: torch.Tensor, b: torch.Tensor, h, scheme) -> torch.Tensor:
    r""":math:`L_\Delta(a, b) = \Phi(a, Q^*, b)`, differentiable twice in ``a, b`` (module docstring)."""
    a, b = torch.broadcast_tensors(a, b)
    if not scheme.n_interior:  # no interior points: Phi itself
        return scheme.stage_action(L, a, [], b, h)
    Zbar = _converged_interior(scheme, L, a, b, h)
    differentiable = torch.is_grad_enabled() and (a.requires_grad or b.requires_grad)
    if not differentiable:
        with torch.no_grad():
            return scheme.stage_action(L, a, list(Zbar.unbind(0)), b, h)
    with torch.enable_grad():
        Zv = Zbar.clone().requires_grad_(True)
        _, g, H = _grad_hess(scheme, L, a, b, Zv, h, create_graph=True)
        Z = Zbar - _step(g, H, Zbar.shape)
    return scheme.stage_action(L, a, list(Z.unbind(0)), b, h)
