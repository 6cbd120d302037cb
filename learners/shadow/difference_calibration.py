r"""Calibration of the energy std on differences between distant states, by cross-validated re-conditioning.

The ``"energy"`` calibration (:mod:`learners.shadow.calibration`) checks energy conservation along held-back
trajectories: differences between states of one orbit. Every function of the energy is conserved as well, so an
error of the recovered energy of the form :math:`f(H)` (a relabelling of the level sets) passes that check unseen,
and it is what dominates the differences between *distant* states that :meth:`energy` reports with ``reference=``
(issue 23: on a 3-dof oscillator 1/3 of the error variance of 40 such differences is explained by
:math:`(\Delta H)^2`, and their RMS z-score was 2.05 under the conservation scale). No positions measure such a
difference directly. What they do measure is how far the posterior mean of a difference moves when a group of
trajectories is added to the data:

For a GP that is right up to the scale :math:`s` of its variances, let :math:`d` be a difference
:math:`H(x) - H(x')`, :math:`m, s v` its posterior mean and variance given all data :math:`D`, and
:math:`m_k, s v_k` given :math:`D` without the trajectories of fold :math:`k` (same hyperparameters). Then
:math:`m = E[d \mid D]` and :math:`m_k = E[d \mid D_{-k}]`, so :math:`E[m - m_k \mid D_{-k}] = 0` and (law of
total variance) :math:`\mathrm{Var}(m - m_k \mid D_{-k}) = s v_k - E[s v \mid D_{-k}] = s (v_k - v)`: the
*innovations* :math:`z = (m - m_k)/\sqrt{v_k - v}` have variance :math:`s`, for every pair of states and fold.
The fold partition is by whole trajectories (trajectory :math:`t` in fold :math:`t \bmod K`), the pairs are of
data states far apart (interior snapshots paired at random, velocities from the model at order 2; positions
only), the quantity is :math:`H_{rec}[2]` (the GP part of higher orders uses the same scale), and :math:`s` is
matched by :func:`~learners.shadow.calibration.scale_for` (90% of :math:`|z|` below 1.645). The truncation term
does not enter: both posteriors share it. Each posterior variance is known only to :math:`\kappa(R)\,\epsilon` of the
prior (:func:`~learners.shadow.uncertainty.posterior_variance`'s rounding floor), so a pair whose :math:`v_k - v` is
below the sum of the two floors is left out: with more data the variances of :math:`H_{rec}` differences reach that
floor (anharmonic3, mechanical kernel, 120 trajectories: :math:`v` 3.7e-12 in the GP's units, at its floor), and
dividing by rounding gave innovations of any size (scales 324 to 19,000 between folds, where 40 held-out differences
at known states asked for 3.6).

The estimate holds where the GP's form is right; where it is not, the measured factor between it and the scale
that the true differences ask for was 0.3-4 on the systems of issue 23 (benchmarks/RESULTS_calibration.md). The
model uses this scale for ``energy`` (states given with their velocities) and the conservation one, at least the DEL
one, for what is computed along positions (:mod:`learners.shadow.calibration`).
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch

import bea

from .uncertainty import LinearisedQuantity, Reference, posterior_variance

__all__ = ["CALIBRATION_FOLDS", "FOLD_BUDGET", "CALIBRATION_PAIRS", "difference_innovations", "fold_groups"]

#: folds of trajectories left out in turn (at most; see :data:`FOLD_BUDGET`)
CALIBRATION_FOLDS = 5
#: the folds times the training functionals stay below this (each fold is one more Cholesky factorisation): 5
#: folds up to 2,000 functionals (n = 3, 150 trajectories), 2 at n = 6 with 200 trajectories (4,800)
FOLD_BUDGET = 10_000
#: pairs of data states whose differences are compared per fold
CALIBRATION_PAIRS = 60


def fold_groups(model, count: int) -> Optional[torch.Tensor]:
    r"""The trajectory of each of the first functionals of ``model``'s training set (the DEL residuals, trajectory
    by trajectory and :math:`(m - 2) n` per trajectory as :meth:`~learners.shadow.lsi.InverseModifiedLagrangianGP.fit`
    builds them; the normalisation follows), or None when ``count`` functionals do not fit that layout."""
    T, m, n = model.snapshots.shape
    per = (m - 2) * n
    if T < 2 or T * per > count:
        return None
    return torch.arange(T, device="cpu").repeat_interleave(per)  # indices: on the CPU, as the other search state


def _pairs(model, gen: torch.Generator) -> Tuple[torch.Tensor, torch.Tensor]:
    """Pairs of standardised data states (x, x_ref), each (P, 2n): interior snapshots at random, velocities of the
    model at order 2."""
    S = model._to_standard(model.snapshots).transpose(0, 1)  # (m, T, n), time first
    v = model._velocities_std(S, 2, None)
    x = torch.cat([S[1:-1], v[1:-1]], -1).reshape(-1, 2 * model.n).detach()
    P = min(CALIBRATION_PAIRS, x.shape[0] // 2)
    idx = torch.randperm(x.shape[0], generator=gen)[: 2 * P]
    return x[idx[:P]], x[idx[P:]]


def _differences(model, gp, x: torch.Tensor, x_ref: torch.Tensor, order: int) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""Posterior mean and raw variance (``gp.variance_scale`` 1) of :math:`H_{rec}[N](x) - H_{rec}[N](x_{ref})` under
    ``gp`` (standardised units); the model's own posterior is restored afterwards."""
    saved, scale = (model.gp, model._recovered, model._jet), gp.variance_scale
    model.gp, model._recovered, model._jet, gp.variance_scale = gp, {}, None, 1.0
    try:
        n = model.n
        H = bea.energy(model._recovered_std(order, jets=False))
        mean = (H(x[:, :n], x[:, n:]) - H(x_ref[:, :n], x_ref[:, n:])).detach()
        G = LinearisedQuantity(model._quantity("energy", order), x, 1, model._jet_order("energy", order))
        var = posterior_variance(gp, G, Reference(x_ref))[:, 0, 0]
    finally:
        (model.gp, model._recovered, model._jet), gp.variance_scale = saved, scale
    return mean, var


def difference_innovations(model, order: int = 2) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
    r"""The innovations :math:`m - m_k` of energy differences between pairs of data states and their raw variances
    :math:`v_k - v` (module docstring), pooled over the folds; None where the data have too few trajectories. Each
    fold re-conditions a copy of the final GP (same hyperparameters) on the data without its trajectories."""
    final = model.gp
    F_all = final.train_functionals
    groups = fold_groups(model, F_all.count)
    if groups is None:
        return None
    T = int(groups.max()) + 1
    folds = max(2, min(CALIBRATION_FOLDS, T, FOLD_BUDGET // max(F_all.count, 1)))
    x, x_ref = _pairs(model, torch.Generator().manual_seed(model.seed))
    mean, var = _differences(model, final, x, x_ref, order)
    rest = torch.arange(groups.numel(), F_all.count, device="cpu")  # the normalisation: always kept
    # the prior of the differences (given the normalisation only), for the rounding floor below
    prior = _differences(model, _conditioned(model, F_all.subset(rest)), x, x_ref, order)[1] if rest.numel() else 0 * var
    eps = torch.finfo(torch.float64).eps
    d, w = [], []
    for k in range(folds):
        gp = _conditioned(model, F_all.subset(torch.cat([torch.nonzero(groups % folds != k).flatten(), rest])))
        m_k, v_k = _differences(model, gp, x, x_ref, order)
        d.append(mean - m_k)
        # v and v_k are each known to kappa(R) eps of the prior (uncertainty.posterior_variance's rounding floor): a
        # smaller v_k - v is rounding, and dividing by it made innovations of any size (NaN: left out)
        noise = eps * (math.sqrt(final.info.cond_estimate) + math.sqrt(gp.info.cond_estimate)) * prior
        w.append(torch.where(v_k - var > noise, v_k - var, torch.full_like(var, float("nan"))))
    return torch.cat(d), torch.cat(w)


def _conditioned(model, F):
    """A copy of ``model``'s final GP (same hyperparameters, frozen) conditioned on the functionals ``F``."""
    gp = model._make_gp(2 * model.n)
    gp.load_state_dict(model.gp.state_dict())
    for p in gp.parameters():
        p.requires_grad_(False)
    with torch.no_grad():
        gp.condition(F)
    return gp
