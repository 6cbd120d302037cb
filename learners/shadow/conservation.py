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
flat or degenerate fit cannot win: where :math:`H_{rec}` does not tell the trajectories apart (its values along them
independent wiggles about one level), the mean variance along :math:`K` snapshots is :math:`(K-1)/K` of the wiggles'
and that of the means :math:`1/K`, so :math:`c_N \approx \log(K-1) > 0`, far above a fit that conserves (-7 to -8
on the FPU chain of 6 masses, -12 on a pendulum).
"""

from __future__ import annotations

import math

import torch

__all__ = ["conservation_score", "score_of_energies"]


def conservation_score(model, qs: torch.Tensor, order: int) -> float:
    r""":math:`c_N` (module docstring) of the fitted ``model`` along held-out positions ``qs`` ``(steps + 1, J, n)``
    in the data's units (``J >= 2`` trajectories); ``+inf`` where the fit's velocities cannot be solved there."""
    from bea.errors import NotRegularError
    from integrators.newton import ConvergenceError

    try:
        E = model.energies(qs, order).detach()
    except (ConvergenceError, NotRegularError):  # no velocity solves dL_rec/dv = p at some held-out state: not conserved
        return math.inf
    return score_of_energies(E)


def score_of_energies(E: torch.Tensor) -> float:
    r""":math:`c_N` of the energies ``E`` ``(steps + 1, J)`` along ``J`` trajectories; ``+inf`` where an energy is not
    finite (e.g. Newton failed on the velocities) or the trajectories' means are all equal, so such a fit never wins."""
    if not bool(torch.isfinite(E).all()):
        return math.inf
    within = E.var(0, unbiased=False).mean()
    across = E.mean(0).var(unbiased=False)
    if not float(across) > 0:
        return math.inf
    return math.log(max(float(within), 1e-300) / float(across))
