r"""The true energy to judge rollouts by, and velocities from momenta to evaluate it on Hamiltonian rollouts
(ModLaNet paper, §5.2; docs/theory/modlanet.md).

* :func:`true_energy` -- the exact energy of an :mod:`integrators.systems` system (or of any torch
  Lagrangian through :func:`bea.energy`);
* :func:`velocities_from_momenta` -- the inverse Legendre map, so that an HNN rollout in
  :math:`(q, p)` can be compared through :math:`E(q, v)`.
"""

from __future__ import annotations

from typing import Callable

import torch

import bea
from bea.errors import BeaTypeError, BeaValueError

from .._checks import as_tensor

__all__ = ["true_energy", "velocities_from_momenta"]

#: a torch callable E(q, v) of positions and velocities
Energy = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def true_energy(system) -> Energy:
    r"""A torch callable :math:`E(q, v)` for the exact energy :math:`p\cdot v - L`: ``system.energy`` of
    an :mod:`integrators.systems` system (symbolic, exact), else :func:`bea.energy` of a torch
    Lagrangian (autograd), returned detached."""
    if hasattr(system, "energy") and callable(system.energy) and hasattr(system, "expr"):
        return system.energy
    if not callable(system):
        raise BeaTypeError(f"true_energy needs a System or a torch Lagrangian L(q, v), got {type(system).__name__}")
    H = bea.energy(system)
    return lambda q, v: H(q, v).detach()


def velocities_from_momenta(lagrangian, q, p, *, tol: float = 1e-12, maxiter: int = 30) -> torch.Tensor:
    r"""Invert the Legendre map: :math:`v` with :math:`\partial L/\partial v(q, v) = p`, by Newton's
    method from :math:`v = 0` (one step is exact for mechanical Lagrangians, quadratic in :math:`v`).
    Used to compare HNN rollouts in :math:`(q, p)` with the true energy :math:`E(q, v)`."""
    q, p = as_tensor(q, "q"), as_tensor(p, "p")
    if q.shape != p.shape or q.dim() < 1:
        raise BeaValueError(f"q and p must have the same shape (..., n), got {tuple(q.shape)} and {tuple(p.shape)}")
    n = q.shape[-1]
    qf, pf = q.reshape(-1, n), p.reshape(-1, n)
    ok = torch.isfinite(qf).all(-1) & torch.isfinite(pf).all(-1)   # failed rollouts (NaN) stay NaN
    out = torch.full_like(qf, float("nan"))
    qo, po = qf[ok], pf[ok]
    v = torch.zeros_like(qo)
    for _ in range(maxiter if qo.numel() else 0):
        with torch.enable_grad():
            vv = v.detach().requires_grad_(True)
            (gv,) = torch.autograd.grad(lagrangian(qo, vv).sum(), vv, create_graph=True)
            r = gv - po
            M = torch.stack([torch.autograd.grad(r[..., i].sum(), vv, retain_graph=True)[0] for i in range(n)], -2)
        dv = torch.linalg.solve(M.detach(), r.detach().unsqueeze(-1)).squeeze(-1)
        v = v - dv
        if float(dv.abs().max()) <= tol * (1 + float(v.abs().max())):
            break
    out[ok] = v.detach()
    return out.reshape(q.shape)
