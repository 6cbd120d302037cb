r"""A held-out criterion that sees the order-``N`` content of a fit: how well the recovered energy
:math:`H_{rec}[N]` is conserved along held-out trajectories (issue 23; benchmarks/RESULTS_identification.md,
Session 11, branch gain).

The held-out trajectories are exact trajectories of the system, so the energy recovered from a good fit -- evaluated
at the held-out positions with the fit's own velocities (:meth:`~learners.shadow.recovery.RecoveryMixin.energies`:
:math:`\partial_vL_{rec}(q_j, \dot q_j) = p_j`, positions only) -- is constant along each of them, up to the
truncation of :math:`\mathrm{mod}_N` and the GP's error. The score

.. math::

    c_N = \log \frac{\tfrac1J\sum_j \operatorname{var}_k E_{jk}}{\operatorname{var}_j \bar E_j},
    \qquad E_{jk} = H_{rec}[N](q_{jk}, \dot q_{jk}),\ \bar E_j = \tfrac1K\sum_k E_{jk},

is the mean variance along a trajectory relative to the variance of the trajectories' mean energies (lower is
better). It is unchanged by :math:`H \to aH + b` (the energy's unit and constant, which positions do not fix), and a
flat or degenerate fit cannot win: where :math:`H_{rec}` does not tell the trajectories apart, the two variances are
alike and :math:`c_N \approx 0`, far above a fit that conserves (:math:`c_4` of -6 to -9 on the FPU chain).
"""

from __future__ import annotations

import math

import torch

__all__ = ["conservation_score"]


def conservation_score(model, qs: torch.Tensor, order: int) -> float:
    r""":math:`c_N` (module docstring) of the fitted ``model`` along held-out positions ``qs`` ``(steps + 1, J, n)``
    in the data's units (``J >= 2`` trajectories); ``+inf`` where an energy is not finite (e.g. Newton failed on the
    velocities), so such a fit never wins."""
    E = model.energies(qs, order).detach()
    if not bool(torch.isfinite(E).all()):
        return math.inf
    within = E.var(0, unbiased=False).mean()
    across = E.mean(0).var(unbiased=False)
    if not float(across) > 0:
        return math.inf
    return math.log(max(float(within), 1e-300) / float(across))
