r"""Benchmark helper (not the library): a held-out criterion that sees the order-``N`` content of a fit: how
well the recovered energy :math:`H_{rec}[N]` is conserved along held-out trajectories (issue 23;
benchmarks/RESULTS_identification.md, Session 11, branch gain).

The held-out trajectories are exact trajectories of the system, so the energy recovered from a good fit -- evaluated
at the held-out positions with the fit's own velocities (:meth:`~learners.shadow.recovery.RecoveryMixin.energies`:
:math:`\partial_vL_{rec}(q_j, \dot q_j) = p_j`, positions only) -- is constant along each of them, up to the
truncation of :math:`\mathrm{mod}_N` and the GP's error. The score

.. math::

    c_N = \frac1J\sum_j \log \operatorname{var}_k E_{jk} - \log \operatorname{var}_j \bar E_j,
    \qquad E_{jk} = H_{rec}[N](q_{jk}, \dot q_{jk}),\ \bar E_j = \tfrac1K\sum_k E_{jk},

is the mean log variance along a trajectory relative to the variance of the trajectories' mean energies (lower is
better). It is unchanged by :math:`H \to aH + b` (the energy's unit and constant, which positions do not fix). The
mean of logs, as the one-step criterion takes it (:mod:`learners.shadow.position_objective`), weighs each trajectory
alike (the log of the mean variance is set by the few trajectories of highest energy, near the data's edge).
A flat or degenerate fit cannot win: where :math:`H_{rec}` does not tell the trajectories apart (its
values along them independent wiggles about one level), the log variance along :math:`K` snapshots averages
:math:`\log\sigma^2 + \psi(\tfrac{K-1}2) + \log\tfrac2K` and that of the means is :math:`\log\sigma^2 - \log K`, so
:math:`c_N \approx 1.4` for :math:`K = 6`, far above a fit that conserves (-8.6 to -13 on the FPU chain of 6 masses).

A diagnostic, not a selection criterion: on the FPU chain of 6 masses (h = 0.40, three seeds) it did not rank
``kernel="auto"``'s candidates by their level-set errors of :math:`H_{rec}[4]` (degree 4, the lowest error on each,
ranked first once and last twice; degree 2 with 1.7-2.5x the RBF's error ranked ahead of it on one seed;
benchmarks/RESULTS_identification.md, Session 11, branch gain). A likely reason: at these amplitudes the chain is close
to its harmonic part, whose normal-mode energies are each nearly conserved over a 5-step trajectory, so an energy
with wrongly weighted modes is conserved too, with wrong level sets. ``kernel="auto"`` does not use it.
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
    finite (e.g. Newton failed on the velocities) or the trajectories' means are all equal, so such a fit never wins.
    A variance along a trajectory is taken at least the square of the float64 rounding of the energies (a constant
    trajectory must not give :math:`\log 0`)."""
    if not bool(torch.isfinite(E).all()):
        return math.inf
    across = float(E.mean(0).var(unbiased=False))
    if not across > 0:
        return math.inf
    rounding = (torch.finfo(E.dtype).eps * float(E.abs().max())) ** 2
    within = E.var(0, unbiased=False).clamp_min(rounding)
    return float(within.log().mean()) - math.log(across)

