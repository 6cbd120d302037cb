r"""Separately conserved parts: where the learned Lagrangian splits into independent parts, and why that matters.

A Lagrangian that separates, :math:`L = L_1(x_1) + \dots + L_k(x_k)` (each :math:`x_i` the positions and velocities
of a set of directions), has the motions of :math:`a_1 L_1 + \dots + a_k L_k` for every :math:`a_i \ne 0`: positions
determine each part's energy only up to its own factor, and the fit takes the parts' relative factors from the
normalisation's assumption about the mass matrix at one point (:mod:`learners.shadow.normalisation`), not from the
data. The planar two-body problem in a trap proportional to the masses is the example: the centre of mass along x,
along y, and the relative motion are three separately conserved parts (benchmarks/RESULTS_identification.md).

The parts are found on the fitted mean :math:`\bar L'` (the fit's coordinates), in the principal directions
:math:`r_1..r_n` of the data's second differences (:func:`~learners.shadow.principal.principal_directions`: for
separated parts with different forces these are the parts' own directions). At the data's states (velocities from
central differences), with :math:`B` one of the four blocks :math:`qq, qv, vq, vv` of the Hessian of :math:`\bar L'`
in these directions,

.. math::  c_{kl} = \max_B \frac{\mathrm{RMS}\,B_{kl}}{(\mathrm{RMS}\,B^{d}_{kk}\;\mathrm{RMS}\,B^{d}_{ll})^{1/2}}

(:math:`B^d` the diagonal block of the same kind as the row or column: :math:`qq` for a position, :math:`vv` for a
velocity) is the coupling of directions :math:`k \ne l`; the parts are the connected components of the graph with
an edge where :math:`c_{kl} >` :data:`COUPLING_LIMIT`.
"""

from __future__ import annotations

from typing import List

import torch

from .principal import principal_directions

__all__ = ["COUPLING_LIMIT", "STATES", "coupling", "parts"]

#: coupling below which two directions count as separate parts (module docstring)
COUPLING_LIMIT = 0.05
#: data states (spread evenly over the snapshots) at which the Hessians are taken
STATES = 24


def _states(S_std: torch.Tensor, h_std: float, count: int) -> torch.Tensor:
    """``count`` states ``(q, v)`` of standardised snapshots (n_traj, m, n): midpoints of triples, central-difference
    velocities, spread evenly over the data."""
    q = S_std[:, 1:-1].reshape(-1, S_std.shape[-1])
    v = ((S_std[:, 2:] - S_std[:, :-2]) / (2 * h_std)).reshape(-1, S_std.shape[-1])
    pick = torch.linspace(0, q.shape[0] - 1, min(count, q.shape[0]), device=q.device).round().long()
    return torch.cat([q[pick], v[pick]], -1)


def coupling(lagrangian_std, S_std: torch.Tensor, h_std: float) -> torch.Tensor:
    """The coupling matrix ``c`` (n, n; zero diagonal) of the module docstring for the mean ``lagrangian_std(q, v)``
    of the fit's coordinates and its standardised snapshots ``S_std`` (n_traj, m, n) at step ``h_std``."""
    n = S_std.shape[-1]
    _, R = principal_directions(S_std)
    T = torch.block_diag(R, R)  # the directions for positions and velocities alike
    with torch.enable_grad():
        H = torch.stack([torch.autograd.functional.hessian(lambda x: lagrangian_std(x[None, :n], x[None, n:]).sum(), x)
                         for x in _states(S_std, h_std, STATES)])
    H = T.T @ H @ T
    rms = H.pow(2).mean(0).sqrt()  # (2n, 2n)
    d = rms.diagonal().clamp_min(1e-300)
    c = rms / (d[:, None] * d[None, :]).sqrt()
    blocks = torch.stack([c[:n, :n], c[:n, n:], c[n:, :n], c[n:, n:]])
    out = blocks.amax(0)
    return out - torch.diag(out.diagonal())


def parts(c: torch.Tensor, limit: float = COUPLING_LIMIT) -> List[List[int]]:
    """Connected components (lists of direction indices, ascending) of the graph ``c > limit``."""
    n = c.shape[0]
    label = list(range(n))
    for k in range(n):
        for l in range(n):
            if c[k, l] > limit and label[k] != label[l]:
                old, new = max(label[k], label[l]), min(label[k], label[l])
                label = [new if x == old else x for x in label]
    groups: dict = {}
    for k, g in enumerate(label):
        groups.setdefault(g, []).append(k)
    return list(groups.values())
