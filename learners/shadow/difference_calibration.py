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
does not enter: both posteriors share it. Each posterior variance is known only to its rounding bound
(:func:`~learners.shadow.variance_rounding.resolved_variance`), so a pair whose :math:`v_k - v` is below the sum of the
two bounds is left out, each bound with its factorisation term (the two variances are exact for two different nearby
GPs, the final one's and the fold's, so their difference carries both factorisations' rounding): the worst case
:func:`~learners.shadow.variance_rounding.factorisation_bound`, or, where that drops innovations the solve bounds
keep, the worst case times an estimate of the share of it realised (not a bound: 10x the 90% quantile of the moves of
one fold's variances when that fold is factorised with its functionals permuted,
:func:`~learners.shadow.variance_rounding.realised_share`; the worst case alone was 7x the variances and dropped all
240 innovations of two_body_morse4). Dividing by rounding gave innovations of
any size (with the earlier worst-case floor
:math:`\kappa(R)\,\epsilon P`, reached by the variances of :math:`H_{rec}` differences under the mechanical kernel at
120 trajectories, scales of 324 to 19,000 between folds).

*Cost.* Run on first demand (``model.calibration``, a std, ``model.save``). The folds' posteriors share one
pass over the training atoms for their variances (:func:`_raw_variances`), and the pairs' velocities are solved at
the chosen snapshots only (:func:`_velocities_at`); both give the numbers of the plain per-fold computation
(tests/test_learners_shadow_auto.py). At n = 6 with 200 trajectories the plain computation's cost was 2/3 the
velocities of every data state (benchmarks/RESULTS_identification.md). The factorisation share
(:func:`_factorisation_share`) costs nothing where the worst case drops no innovation the solve bounds keep; where it
does, one more factorisation of the first fold's matrix (its functionals permuted; outside :data:`FOLD_BUDGET`, up to
(1 - 1/K) F functionals: at n = 6, F ~ 4,800-12,000 and K = 2, a 2,400-6,000 square factor, 46-290 MB, plus its
assembly) and one more pass over the training atoms for two posteriors.

The estimate holds where the GP's form is right; where it is not, the measured factor between it and the scale
that the true differences ask for was 0.3-4 on the systems of issue 23 (benchmarks/RESULTS_calibration.md). The
model uses this scale for ``energy`` (states given with their velocities) and the conservation one, at least the DEL
one, for what is computed along positions (:mod:`learners.shadow.calibration`).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch

import bea

from ..saving import ModelFileError
from .element_uncertainty import on_mean
from .uncertainty import LinearisedQuantity, _feature_map, _jet_and_atoms, _kernel
from .variance_rounding import factorisation_bound, floored, realised_share, solve_with_bound

__all__ = ["CALIBRATION_FOLDS", "FOLD_BUDGET", "CALIBRATION_PAIRS", "difference_innovations", "innovation_variances",
           "fold_groups", "data_pairs", "pairs_state", "restore_pairs"]

#: folds of trajectories left out in turn (at most; see :data:`FOLD_BUDGET`)
CALIBRATION_FOLDS = 5
#: the folds times the training functionals stay below this (each fold is one more Cholesky factorisation): 5
#: folds up to 2,000 functionals (n = 3, 150 trajectories), 2 at n = 6 with 200 trajectories (4,800); the guard's
#: measured share may add one more fold-sized factorisation (module docstring, *Cost*), not counted here
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


def data_pairs(model) -> Tuple[torch.Tensor, torch.Tensor]:
    """The pairs of :func:`_pairs` under the model's seed, cached on the model until its next fit and saved with it
    (the calibration's innovations and the truncation term's unit fit, :mod:`learners.shadow.truncation`, use the
    same states; each takes velocities by Newton's method, 12 s CPU at n = 4 with the mechanical kernel)."""
    key = ("pairs", _pair_count(model))
    if key not in model._recovered:
        model._recovered[key] = _pairs(model, torch.Generator().manual_seed(model.seed))
    return model._recovered[key]


def pairs_state(model) -> Optional[torch.Tensor]:
    """The cached pairs' states (2P, 2n) to save (None where not computed)."""
    pairs = model._recovered.get(("pairs", _pair_count(model)))
    return None if pairs is None else torch.cat(pairs)


def restore_pairs(model, x) -> None:
    """Put saved pairs' states (:func:`pairs_state`) into the model's cache (the model's snapshots and ``n`` restored
    first). A file's pairs that :func:`pairs_state` cannot have written -- not a float64 tensor of shape
    (2P, 2n) with :func:`_pair_count`'s P, or not finite -- are a :class:`~learners.saving.ModelFileError` here,
    not a shape error or a NaN std later."""
    P, n = _pair_count(model), model.n
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float64 or tuple(x.shape) != (2 * P, 2 * n):
        what = f"a {x.dtype} tensor of shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise ModelFileError(f"the model file's calibration_pairs are {what}, not the float64 (2 x {P} pairs, "
                             f"2n = {2 * n}) states this model saves; save the model again")
    if not bool(torch.isfinite(x).all()):
        raise ModelFileError("the model file's calibration_pairs hold non-finite entries; save the model again")
    model._recovered[("pairs", P)] = (x[:P], x[P:])


def _pair_count(model) -> int:
    m, T = model.snapshots.shape[1], model.snapshots.shape[0]
    return min(CALIBRATION_PAIRS, (m - 2) * T // 2)


def _pairs(model, gen: torch.Generator) -> Tuple[torch.Tensor, torch.Tensor]:
    """Pairs of standardised data states (x, x_ref), each (P, 2n): interior snapshots at random, velocities of the
    model at order 2 (:func:`_velocities_at`: only at the chosen snapshots)."""
    S = model._to_standard(model.snapshots).transpose(0, 1)  # (m, T, n), time first
    m, T, _ = S.shape
    count, P = (m - 2) * T, _pair_count(model)  # interior snapshots, time-major: index (j - 1) T + t
    idx = torch.randperm(count, generator=gen)[: 2 * P]
    j, t = idx // T + 1, idx % T
    x = torch.cat([S[j, t], _velocities_at(model, S, j, t)], -1).detach()
    return x[:P], x[P:]


def _velocities_at(model, S: torch.Tensor, j: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    r"""The model's order-2 velocities at the snapshots ``(j, t)`` of the standardised trajectories ``S`` (m, T, n),
    the same numbers as along the whole trajectories (to rounding), at a fraction of the cost (at n = 6 with 200
    trajectories the whole data's velocities were 2/3 of the calibration). Each velocity solves
    :math:`\partial_v L_{rec}(q_j, \dot q_j) = p_j` by its own Newton iteration (the batch's elements are
    independent), with :math:`p_j` from :math:`q_{j-1}, q_j` and the starting guess from at most two neighbours
    on each side (:func:`integrators._stepping.velocity_guess`), so a window of 5 snapshots around each (shifted
    inside the trajectory at its ends, where the guess is one-sided in the whole trajectory and in the window
    alike) gives the same inputs; only the chosen snapshots are solved (:func:`_window_centres`), so the windows cost
    their momenta and guesses alone even where they hold more snapshots than the data (few trajectories, where the
    whole data's velocities were solved before)."""
    m, T, _ = S.shape
    W = min(m, 5)
    start = (j - 2).clamp(0, m - W)
    window = S[start[None] + torch.arange(W)[:, None], t[None]]  # (W, B, n)
    return _window_centres(model, window, j - start)


def _window_centres(model, window: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    r"""The order-2 velocities of ``model`` at the rows ``rows`` (B,) of the windows ``window`` (W, B, n): the discrete
    momenta and Newton's starting guesses (:func:`integrators._stepping.velocity_guess`) of the whole windows, the Newton
    solves at the asked rows only (each solve is its own: the numbers of :meth:`VariationalIntegrator.velocities
    <integrators.variational.VariationalIntegrator.velocities>` over the whole windows, to rounding; 1/W of its solves,
    which were 1/4 of the first energy std at bodies2), by the integrator's own velocity solver
    (:func:`integrators._stepping.solve_velocities`). Element models in passes of ``model._velocity_chunk()`` states."""
    from integrators._stepping import solve_velocities, velocity_guess

    from .newton_inputs import newton_inputs

    W, B, n = window.shape
    L, p = newton_inputs(model, window, 2, W, probe_row=int(rows[0]))  # RecoveryMixin._velocities_std's, at order 2
    integ = model._integrator_std()
    pick = (rows, torch.arange(B))
    q, p, guess = window[pick], p[pick], velocity_guess(window, integ.h)[pick]
    step = model._velocity_chunk() if _is_element(model) else None
    return solve_velocities(L, integ.jacobian, q, p, guess, integ.options, (B,), "(calibration pair state)", step)


def _is_element(model) -> bool:
    """Whether ``model`` has the element kernel (:mod:`~learners.shadow.element_energy`'s entries count, 0 otherwise)."""
    return bool(getattr(model, "_element_entries", lambda: 0)())


def _mean_differences(model, gp, x: torch.Tensor, x_ref: torch.Tensor, order: int) -> torch.Tensor:
    r"""Posterior mean of :math:`H_{rec}[N](x) - H_{rec}[N](x_{ref})` under ``gp`` (standardised units); the model's own
    posterior is restored afterwards."""
    if _is_element(model):  # the element kernel: on the mean's jet table (exact; element_uncertainty.on_mean)
        Q, p = model._quantity("energy", order), model._jet_order("energy", order)
        H = on_mean(gp, [Q], torch.cat([x, x_ref]), p)[0][:, 0]
        return H[:x.shape[0]] - H[x.shape[0]:]
    saved = (model.gp, model._recovered, model._jet)
    model.gp, model._recovered, model._jet = gp, {}, None
    try:
        n = model.n
        H = bea.energy(model._recovered_std(order, jets=False))
        return (H(x[:, :n], x[:, n:]) - H(x_ref[:, :n], x_ref[:, n:])).detach()
    finally:
        model.gp, model._recovered, model._jet = saved


def _differences(model, gp, x: torch.Tensor, x_ref: torch.Tensor, order: int) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""Posterior mean and raw variance (``gp.variance_scale`` 1) of :math:`H_{rec}[N](x) - H_{rec}[N](x_{ref})` under
    ``gp`` alone (standardised units)."""
    G = LinearisedQuantity(model._quantity("energy", order), x, 1, model._jet_order("energy", order))
    all_ = torch.arange(gp.train_functionals.count, device="cpu")
    return _mean_differences(model, gp, x, x_ref, order), _raw_variances([gp], [all_], G, x_ref)[0][0]


def _raw_variances(gps: Sequence, subsets: Sequence[torch.Tensor], G: LinearisedQuantity, x_ref: torch.Tensor,
                   means: Optional[List[List[torch.Tensor]]] = None) -> List[torch.Tensor]:
    r"""Raw posterior variances (``variance_scale`` 1), their rounding bounds
    (:func:`~learners.shadow.variance_rounding.resolved_variance`) and the worst case of factorising apart
    (:func:`~learners.shadow.variance_rounding.factorisation_bound`: the innovations compare these variances between
    posteriors factorised apart), (3, B) each, of the scalar jet quantity ``G`` at ``G.x`` minus
    the same at ``x_ref``, under each posterior of ``gps``: one kernel and one set of hyperparameters, posterior ``j``
    conditioned on the functionals ``subsets[j]`` of ``gps[0]``'s. The same numbers as
    :func:`~learners.shadow.uncertainty.posterior_variance` (``Reference(x_ref)``) for each posterior in turn, with its
    dominant cost shared: the kernel sections at the training atoms (:meth:`SplitLayout.sections`) do not depend on
    the posterior, only the jet values they are contracted with do, so every posterior's jet values go through one
    pass over all atoms and each posterior takes its own columns. ``means``: one list per posterior, to which the
    quantity's differences on that posterior's mean are appended per pass (the linearisation's values, the mean's
    Taylor polynomial for the element kernel: :func:`_mean_differences`' numbers to rounding)."""
    base, s2 = _kernel(gps[0])
    F = gps[0].train_functionals
    layout = _feature_map(base, G.x.shape[-1], G.p).split()
    chunk = layout.chunk_rows(G.k)  # the rows posterior_variance takes per pass (same rounding)
    out: List[List[torch.Tensor]] = [[] for _ in gps]
    for a in range(0, G.x.shape[0], chunk):
        x, xr = G.x[a:a + chunk], x_ref[a:a + chunk]
        priors, J_b, J_r = [], [], []
        for j, gp in enumerate(gps):
            values: list = []
            prior_r, _, Jr, c_r, _ = _jet_and_atoms(gp, G, xr, None, layout, s2, with_sections=False, values=values)
            prior_b, _, Jb, _, _ = _jet_and_atoms(gp, G, x, None, layout, s2, with_sections=False, values=values)
            if means is not None:
                means[j].append((values[1] - values[0])[:, 0])
            cross = s2 * layout.apply_to_sections(Jb, x, xr, c_r[:, 0])[:, 0]  # Cov(T_b, T_ref)
            priors.append((prior_b[:, 0, 0] + prior_r[:, 0, 0] - 2 * cross,
                           prior_b[:, 0, 0].abs() + prior_r[:, 0, 0].abs() + 2 * cross.abs()))
            J_b.append(Jb)
            J_r.append(Jr)
        K_b, K_r = s2 * layout.sections(torch.cat(J_b, 1), x, F), s2 * layout.sections(torch.cat(J_r, 1), xr, F)
        for j, (gp, idx) in enumerate(zip(gps, subsets)):
            # the formation scales of the reference difference, as posterior_variance passes them
            V, bound = solve_with_bound(gp._chol, (K_b - K_r)[:, j, idx], priors[j][0], priors[j][1],
                                        (K_b.abs() + K_r.abs())[:, j, idx])
            var = floored((priors[j][0] - (V * V).sum(0))[:, None, None], bound[:, None])[:, 0, 0]
            out[j].append(torch.stack([var, bound, factorisation_bound(gp._chol, V)]))
    return [torch.cat(o, 1) for o in out]


def difference_innovations(model, order: int = 2) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
    r"""The innovations :math:`m - m_k` of energy differences between pairs of data states and their raw variances
    :math:`v_k - v` (module docstring), pooled over the folds (NaN: within rounding); None where the data have too
    few trajectories (:func:`innovation_variances`, its two variances subtracted)."""
    values = innovation_variances(model, order)
    return None if values is None else (values[0], values[1] - values[2])


def innovation_variances(model, order: int = 2) -> Optional[Tuple[torch.Tensor, ...]]:
    r"""The innovations :math:`m - m_k` of energy differences between pairs of data states, the fold and final raw
    variances :math:`v_k` (NaN where :math:`v_k - v` is within rounding) and :math:`v`, and each one's pair index,
    pooled over the folds (fold-major); None where the data have too few trajectories. Each fold re-conditions a
    copy of the final GP (same hyperparameters) on the data without its trajectories; the variances of all folds
    share one pass over the training atoms (:func:`_raw_variances`). The factorisation term of the rounding guard is
    the worst case times :func:`_factorisation_share` (1 unless the worst case drops innovations; then estimated on
    the first fold factorised with its functionals permuted; ``model.history["innovation_factorisation_share"]``)."""
    final = model.gp
    F_all = final.train_functionals
    groups = fold_groups(model, F_all.count)
    if groups is None:
        return None
    T = int(groups.max()) + 1
    folds = max(2, min(CALIBRATION_FOLDS, T, FOLD_BUDGET // max(F_all.count, 1)))
    x, x_ref = data_pairs(model)
    rest = torch.arange(groups.numel(), F_all.count, device="cpu")  # the normalisation: always kept
    gps, subsets = [final], [torch.arange(F_all.count, device="cpu")]
    for k in range(folds):
        subsets.append(torch.cat([torch.nonzero(groups % folds != k).flatten(), rest]))
        gps.append(_conditioned(model, F_all.subset(subsets[-1])))
    # the jet order is the quantity's (which derivatives of L it reads), probed once under the final posterior
    G = LinearisedQuantity(model._quantity("energy", order), x, 1, model._jet_order("energy", order))
    # the element kernel: the means' differences from the variances' own linearisation passes (on each posterior's
    # Taylor polynomial, as _mean_differences; 1/10 of the first energy std at bodies2 when taken again there)
    means: Optional[List[List[torch.Tensor]]] = [[] for _ in gps] if _is_element(model) else None
    (v, b, f), *folded = _raw_variances(gps, subsets, G, x_ref, means)
    share = _factorisation_share(model, gps[1], G, x_ref, [(v, b, f)] + folded)
    mean = ([torch.cat(m) for m in means] if means is not None else
            [_mean_differences(model, gp, x, x_ref, order) for gp in gps])
    kept = []
    for v_k, b_k, f_k in folded:
        # v and v_k are each known to their solve bounds, and their difference to both factorisations' (the
        # estimated share of the worst case): a smaller v_k - v is rounding, and dividing by it made innovations of
        # any size (share 1: the worst case, main's sums bit for bit)
        guard = (b + share * f) + (b_k + share * f_k)
        kept.append(torch.where(v_k - v > guard, v_k, torch.full_like(v, float("nan"))))
    pair = torch.arange(v.numel(), device=v.device).repeat(folds)
    return torch.cat([mean[0] - m for m in mean[1:]]), torch.cat(kept), v.repeat(folds), pair


def _factorisation_share(model, fold, G: LinearisedQuantity, x_ref: torch.Tensor,
                         rows: Sequence[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> float:
    r"""The share of the worst-case factorisation term that the innovations' guard uses: 1 (the worst case, nothing
    measured) where it drops no innovation that the solve bounds alone keep; else
    :func:`~learners.shadow.variance_rounding.realised_share` between fold ``fold`` (the matrix guarded) and the
    same fold factorised with its functionals permuted (seed ``model.seed + 1``, apart from :func:`data_pairs`'
    draw). ``rows``: :func:`_raw_variances`' (variance, solve bound, worst case) of the final posterior, then the
    folds'. ``model.history["innovation_factorisation_share"]``: (share, measuring pairs, reason). The share measured
    on one fold is applied to every posterior's worst case, the final one's included: an assumption (the same kernel,
    a matrix (K - 1)/K the size), not a measurement of each."""
    (v, b, f), *folded = rows
    if not any(bool(((v_k - v > b + b_k) & ~(v_k - v > (b + f) + (b_k + f_k))).any()) for v_k, b_k, f_k in folded):
        model.history["innovation_factorisation_share"] = (1.0, 0, "the worst case drops no innovation: not measured")
        return 1.0
    F = fold.train_functionals
    perm = torch.randperm(F.count, generator=torch.Generator().manual_seed(model.seed + 1))
    (v1, b1, f1), (vp, bp, fp) = _raw_variances([fold, _conditioned(model, F.subset(perm))],
                                                [torch.arange(F.count), perm], G, x_ref)
    measured = model.history["innovation_factorisation_share"] = realised_share(v1, b1, f1, vp, bp, fp)
    return measured[0]


def _conditioned(model, F):
    """A copy of ``model``'s final GP (same hyperparameters, frozen) conditioned on the functionals ``F``."""
    gp = model._make_gp(2 * model.n)
    gp.load_state_dict(model.gp.state_dict())
    for p in gp.parameters():
        p.requires_grad_(False)
    with torch.no_grad():
        gp.condition(F)
    return gp
