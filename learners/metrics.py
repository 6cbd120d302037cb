r"""Error measures of docs/theory/lsi.md: trajectory error, level-set error of an energy, energy band,
velocity error, calibration of predicted uncertainties.

Lagrangians and energies are determined by the dynamics only up to scale, constants and (for
Lagrangians) total derivatives, so energies are compared through their *level sets*: at a state
:math:`x` the level-set error is the area of the parallelogram spanned by the normalised gradients,

.. math::  \mu(x) = \Big|\det\Big(\frac{\nabla H_{ref}}{\|\nabla H_{ref}\|}, \frac{\nabla H}{\|\nabla H\|}\Big)\Big|
           = \sin\angle(\nabla H_{ref}, \nabla H),

(the second form for any dimension), averaged over a grid (the paper: 30 x 30 points of
:math:`[-1.2, 1.2] \times [-0.6, 0.6]` in :math:`(q, \dot q)`).
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Tuple, Union

import torch

from bea.errors import BeaValueError
from integrators.trajectory import positions

__all__ = ["grid_states", "level_set_error", "level_set_field", "max_trajectory_error", "energy_band", "calibration"]

Energy = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

#: the paper's grid box for the pendulum: q in [-1.2, 1.2], qdot in [-0.6, 0.6]
PENDULUM_BOX = ((-1.2, 1.2), (-0.6, 0.6))


def grid_states(box: Sequence[Tuple[float, float]] = PENDULUM_BOX, points: int = 30, *,
                device: Union[str, torch.device, None] = None, dtype: torch.dtype = torch.float64
                ) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""A tensor grid over ``box`` (2n intervals: positions, then velocities) with ``points`` per axis,
    as ``(q, v)`` of shape ``(points^{2n}, n)``, on ``device`` (default: the CPU) in ``dtype``."""
    if len(box) % 2:
        raise BeaValueError(f"box needs 2n intervals (positions, then velocities), got {len(box)}")
    axes = [torch.linspace(lo, hi, points, dtype=dtype, device=device or "cpu") for lo, hi in box]
    mesh = torch.stack(torch.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(box))
    n = len(box) // 2
    return mesh[:, :n].contiguous(), mesh[:, n:].contiguous()


def _gradient(H: Energy, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    q = q.detach().clone().requires_grad_(True)
    v = v.detach().clone().requires_grad_(True)
    val = H(q, v)
    gq, gv = torch.autograd.grad(val.sum(), (q, v))
    return torch.cat([gq, gv], -1)


def level_set_field(H: Energy, H_ref: Energy, q: torch.Tensor, v: torch.Tensor, chunk: int = 256) -> torch.Tensor:
    r""":math:`\mu(x) = \sin\angle(\nabla H_{ref}(x), \nabla H(x))` at the states ``(q, v)`` (B, n) -> (B,)."""
    out = []
    for s in range(0, q.shape[0], chunk):
        g = _gradient(H, q[s:s + chunk], v[s:s + chunk])
        g0 = _gradient(H_ref, q[s:s + chunk], v[s:s + chunk])
        a = g0 / g0.norm(dim=-1, keepdim=True)
        b = g / g.norm(dim=-1, keepdim=True)
        cos = (a * b).sum(-1).clamp(-1, 1)
        out.append(torch.sqrt((1 - cos * cos).clamp_min(0)))
    return torch.cat(out).detach()


def level_set_error(H: Energy, H_ref: Energy, box: Sequence[Tuple[float, float]] = PENDULUM_BOX, points: int = 30,
                    states: Optional[Tuple[torch.Tensor, torch.Tensor]] = None) -> float:
    r"""Mean of :math:`\mu` over the grid ``points^{2n}`` of ``box`` (or over given ``states = (q, v)``)."""
    q, v = states if states is not None else grid_states(box, points)
    return float(level_set_field(H, H_ref, q, v).mean())


def max_trajectory_error(qs: torch.Tensor, q_ref: torch.Tensor) -> float:
    r""":math:`\max_j \|q_j - q_{ref}(t_j)\|_\infty` (same shapes; each a :class:`~integrators.Trajectory` or its positions)."""
    qs, q_ref = positions(qs), positions(q_ref)
    if qs.shape != q_ref.shape:
        raise BeaValueError(f"trajectories of different shapes: {tuple(qs.shape)} and {tuple(q_ref.shape)}")
    return float((qs - q_ref).abs().max())


def energy_band(values: torch.Tensor) -> float:
    """Width ``max - min`` of an energy along a trajectory (per batch element: the largest)."""
    v = values.detach()
    if v.dim() == 1:
        return float(v.max() - v.min())
    return float((v.amax(0) - v.amin(0)).max())


def calibration(residuals: torch.Tensor, std: torch.Tensor, k: float = 2.0) -> float:
    r"""Fraction of residuals within ``k`` posterior standard deviations (0.954 for a calibrated
    Gaussian at ``k = 2``)."""
    if residuals.shape != std.shape:
        raise BeaValueError(f"residuals {tuple(residuals.shape)} and std {tuple(std.shape)} differ in shape")
    return float((residuals.abs() <= k * std).double().mean())
