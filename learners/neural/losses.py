r"""Losses for Lagrangian networks (ModLaNet and the neural baselines), used by :func:`learners.neural.training.train`.

Two losses (docs/theory/mechanics.md, docs/theory/modlanet.md):

``"acceleration"`` (the paper's)
    data :math:`(q, v, a)`, each ``(N, n)``; :math:`\ell = \operatorname{mean}\,|\hat a(q, v) - a|^2` with
    :math:`\hat a` = ``model.acceleration(q, v)`` (every model of the project exposes it).

``"del"`` (positions only, new here)
    data: snapshots ``(n_traj, n_steps + 1, n)`` at step ``h``, nothing else. The model is taken as the
    *inverse modified* Lagrangian :math:`L_{inv}` of ``scheme``: for each triple
    :math:`(q_{j-1}, q_j, q_{j+1})` the discrete Euler–Lagrange residual of the scheme's
    :math:`L_\Delta` (:func:`bea.get_scheme`, the same definition the integrators use)

    .. math::  r_j = D_2L_\Delta(q_{j-1}, q_j) + D_1L_\Delta(q_j, q_{j+1})
                   = \partial_{q_j}\big[L_\Delta(q_{j-1}, q_j) + L_\Delta(q_j, q_{j+1})\big]

    (autograd with ``create_graph``, so the loss is differentiable in the parameters) vanishes exactly
    when the scheme applied to the model reproduces the data. :math:`r_j = O(h)` (it is :math:`h` times a
    force), so it is divided by :math:`h`. Non-triviality: :math:`L \equiv 0`, or any
    :math:`sL` with :math:`s \to 0`, has :math:`r = 0`. ModLaNet's kinetic term is structural and one
    mass is fixed, so with given transforms the scale is pinned; a learned transform can still shrink
    (:math:`x \to \epsilon x` scales :math:`T` by :math:`\epsilon^2`). The default normalisation
    ``del_normalisation="momentum"`` divides by the mean squared discrete momentum
    :math:`p_j = D_2L_\Delta(q_{j-1}, q_j)` of the same batch,

    .. math::  \ell = \frac{\operatorname{mean}_j |r_j/h|^2}{\operatorname{mean}_j |p_j|^2},

    which is invariant under :math:`L \to sL`: no scale, of the masses or of a learned transform, can
    lower it, while :math:`L \equiv 0` is excluded by the structure. ``"h"`` uses the numerator alone.
"""

from __future__ import annotations

from typing import Callable

import torch

import bea

__all__ = ["del_residual_values", "del_loss", "acceleration_loss"]

TorchLagrangian = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def acceleration_loss(model, q: torch.Tensor, v: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    r""":math:`\operatorname{mean}|\hat a - a|^2` over the batch and the coordinates."""
    return (model.acceleration(q, v) - a).pow(2).mean()


def del_residual_values(lagrangian: TorchLagrangian, triples: torch.Tensor, h: float, scheme="midpoint"):
    r"""The *values* of the DEL residuals :math:`r_j` and discrete momenta :math:`p_j = D_2L_\Delta(q_{j-1}, q_j)` of ``lagrangian``
    at ``triples`` ``(B, 3, n)``; both ``(B, n)``, differentiable in the Lagrangian's parameters. (The DEL residuals
    as linear *functionals* of an unknown Lagrangian, for the GP, are :func:`learners.shadow.functionals.del_residuals`.)"""
    sch = bea.get_scheme(scheme)
    a, c = triples[:, 0], triples[:, 2]
    b = triples[:, 1].detach().clone().requires_grad_(True)
    L = lambda q, v: lagrangian(q.view_as(q), v.view_as(v))  # partial derivatives when v is computed from q
    with torch.enable_grad():
        (p,) = torch.autograd.grad(sch(L, a, b, h).sum(), b, create_graph=True)
        (m,) = torch.autograd.grad(sch(L, b, c, h).sum(), b, create_graph=True)
    return p + m, p


def del_loss(lagrangian: TorchLagrangian, triples: torch.Tensor, h: float, scheme="midpoint",
             normalisation: str = "momentum") -> torch.Tensor:
    r"""The ``"del"`` loss of the module docstring on a batch of triples (``normalisation``: ``"momentum"`` or ``"h"``)."""
    r, p = del_residual_values(lagrangian, triples, h, scheme)
    num = (r / h).pow(2).sum(-1).mean()
    if normalisation == "h":
        return num
    return num / p.pow(2).sum(-1).mean()
