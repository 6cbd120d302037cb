r"""Calibration of the reported uncertainties of the LSI GP on held-out trajectories, from positions only.

The posterior of the GP has one free scale, the outputscale :math:`\sigma_f^2`: every variance it reports is
proportional to it, and the hyperparameter search does not fix it well (the ``"positions"`` objective does not
look at it; the likelihood is ruled by :math:`\log\det`). So every reported std is scaled by a factor fitted on
held-back trajectories, on a quantity as close as possible to the reported one:

* ``"del"`` -- the DEL residuals of the held-back triples (:meth:`FunctionalLagrangianModel._calibrate`): what
  ``predict(..., return_std=True)`` and ``del_residuals`` report.
* ``"energy"`` -- energy conservation along held-back trajectories. The recovered energy
  :math:`H_{rec}[N]` along the snapshots of one trajectory (velocities from the discrete momenta,
  :meth:`~learners.shadow.recovery.RecoveryMixin.energies`) must be constant, so its differences to the first
  snapshot have true value 0, and their z-scores need no velocity or energy data. The std is the GP part
  times :math:`\sqrt s` and the first omitted term :math:`H_{rec}[N+2] - H_{rec}[N]` at the same states in
  quadrature (as :meth:`~learners.shadow.recovery.RecoveryMixin.energy`'s ``truncation``; re-solving the velocities at
  order ``N + 2`` instead costs minutes at ``n = 3``); :math:`s` is chosen so that a fraction
  :data:`TARGET_COVERAGE` of the :math:`|z|` lie below :data:`TARGET_Z` (the Gaussian's 90% point): between the
  95.4% point, which heavy tails (a few held-back orbits leave the data) push far out, and the root mean square,
  which the same tails dominate; never below the ``"del"`` scale (where the truncation term alone covers the
  held-back differences, as at large steps, they do not determine the GP's scale). Used for what is computed along
  positions: ``energies`` and ``velocities`` (both through the discrete momenta), at ``N = 2``; the GP part of
  higher orders uses the same scale.
* ``"energy_differences"`` -- differences of :math:`H_{rec}[2]` between distant data states, which conservation
  cannot check (every :math:`f(H)` is conserved): the innovations of their posterior mean over folds of trajectories
  (:mod:`learners.shadow.difference_calibration`). Used for ``energy`` (states given with their velocities, with or
  without ``reference=``); the ``"energy"`` scale where the data have too few trajectories for folds.

Why two scales, not the largest: along positions the energy is :math:`E = v\cdot p - L_{rec}(q, v)` with :math:`p`
the discrete momentum of :math:`\bar L_{inv}` and :math:`v` solved from it, so a conservation residual carries the
error of the momenta and of the velocity solve, which ``energy(N)(q, v)`` at given states does not. Measured (issue
23; anharmonic3, 40 trajectories, mechanical kernel of degree 2): the conservation residuals are 5.4x the first
omitted term and correlated with it at -0.89 (a truncation-shaped error of the momenta that the first omitted term
of the energy under-states), and ask for a scale of 321, where the innovations ask for 140 and 40 held-out
differences at known states for 167. Taking the largest scale for every quantity made ``energy``'s std 1.4x too
wide there (100% within :math:`2\sigma`); with the RBF at that size the two agreed to 0.2%
(benchmarks/RESULTS_identification.md, Session 5).

Each entry of :attr:`InverseModifiedLagrangianGP.calibration` is a :class:`Calibration`: the scale (relative to
the raw posterior variance), and on the held-back values the RMS z-score, the fraction within :math:`2\sigma`
and their count.
"""

from __future__ import annotations

import math
import warnings
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Dict, Optional, Tuple

import torch

import bea

from .functionals import Functionals
from .guards import ExtrapolationWarning, StaleCalibrationWarning, caller_level
from .variance_rounding import VARIANCE_RULE

__all__ = ["ensure_energy_calibration", "del_calibration", "calibration_state", "restore_calibration", "restored_calibration", "Calibration", "conservation_values", "summary", "difference_calibration", "TARGET_Z", "TARGET_COVERAGE", "CALIBRATION_TRAJECTORIES", "scale_for", "energy_calibration",
           "CALIBRATION_FAILURES"]

#: |z| quantile matched by the energy calibration: a Gaussian has 90% of |z| below 1.645
TARGET_Z, TARGET_COVERAGE = 1.6449, 0.90
#: held-back trajectories used for the energy calibration (each costs an energy std per snapshot)
CALIBRATION_TRAJECTORIES = 8

#: the errors a calibration (or a std that rests on one) may end with: caught, recorded in the model's history, and
#: the quantity left uncalibrated, rather than the fit lost
CALIBRATION_FAILURES = (RuntimeError, ValueError, ArithmeticError, TypeError)


@dataclass
class Calibration:
    """One quantity's calibration: ``scale`` multiplies the raw posterior variance; ``rms_z`` and ``coverage``
    (fraction with |z| <= 2) of the ``count`` held-back values after scaling; ``truncation_ratio``: median of the
    first omitted term over the calibrated GP std (energy only; below 1 the GP error dominates)."""

    scale: float
    rms_z: float
    coverage: float
    count: int
    truncation_ratio: Optional[float] = None

    def as_dict(self) -> Dict[str, float]:
        return asdict(self)


def _z(err: torch.Tensor, gp_var: torch.Tensor, trunc: torch.Tensor, s: float) -> torch.Tensor:
    return err.abs() / (s * gp_var + trunc ** 2).sqrt()


def scale_for(err: torch.Tensor, gp_var: torch.Tensor, trunc: torch.Tensor) -> float:
    r"""The variance scale :math:`s` with a fraction :data:`TARGET_COVERAGE` of :math:`|e|/\sqrt{s v + t^2}` below
    :data:`TARGET_Z` (bisection in :math:`\log s`; every z decreases in s). Where the truncation term alone
    already gives that, the smallest scale tried (1e-12 of the geometric mean of ``err**2 / gp_var``)."""
    ref = float(torch.exp(torch.log(err.pow(2) + 1e-300).mean() - torch.log(gp_var + 1e-300).mean()))
    lo, hi = math.log(max(ref, 1e-300) * 1e-12), math.log(max(ref, 1e-300) * 1e12)

    def excess(log_s: float) -> float:
        return float(torch.quantile(_z(err, gp_var, trunc, math.exp(log_s)), TARGET_COVERAGE)) - TARGET_Z

    if excess(lo) <= 0:
        return math.exp(lo)
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
    return math.exp(hi)


def conservation_values(model, qs: torch.Tensor, order: int = 2):
    r"""The held-back values of the ``"energy"`` calibration (module docstring) of ``model`` on snapshots ``qs``
    ``(steps + 1, batch, n)`` in the data's units: the differences of :math:`H_{rec}[N]` to the first snapshot (true
    value 0), their raw GP variances and the first omitted term, flattened and finite only; None when fewer than 10."""
    from .element_uncertainty import energies_at
    from .recovery import next_order

    # the velocities solved once, for the energies, their std and the next order's energy alike (energies(...,
    # return_std=True) solved them again, in the energies' smaller passes: 1/4 of this function's cost at bodies2)
    with warnings.catch_warnings():  # held-back orbits may leave the data (module docstring): no user's call to warn
        warnings.simplefilter("ignore", ExtrapolationWarning)
        q_std, v_std = model._to_standard(qs), model._vector_to_standard(model.velocities(qs, order))
    H = energies_at(model, bea.energy(model._recovered_std(order)), q_std, v_std)
    E = model._speed ** 2 * (H - H[0])  # energies scale as (sigma / tau)^2
    sd = model._speed ** 2 * model._along_positions_std(q_std, v_std, order, "lagrangian", 1, 0)
    # the first omitted term as energy(order, return_std=True) takes it: the next order's energy at the same states,
    # by autograd (the closed-form jet of that order is compiled C: 2 minutes at n = 3, for 48 states taking 0.5 s)
    H_next = energies_at(model, bea.energy(model._recovered_std(next_order(order, model.scheme), jets=False)), q_std, v_std)
    H_next = model._speed ** 2 * H_next
    err, var, trunc = E[1:].reshape(-1), sd[1:].reshape(-1) ** 2, ((H_next - H_next[0]) - E)[1:].reshape(-1)
    ok = torch.isfinite(err) & torch.isfinite(var) & torch.isfinite(trunc) & (var + trunc ** 2 > 0)
    if int(ok.sum()) < 10:
        return None
    return err[ok], var[ok], trunc[ok]


def summary(err: torch.Tensor, var: torch.Tensor, trunc: torch.Tensor, s: float, fitted: Optional[float] = None,
            with_ratio: bool = True) -> Calibration:
    """A :class:`Calibration` of held-back values at the scale ``s`` in use (``scale``: ``fitted`` if given, the scale
    these values alone ask for)."""
    z = _z(err, var, trunc, s)
    ratio = float(torch.median(trunc.abs() / (s * var).sqrt().clamp_min(1e-300))) if with_ratio else None
    return Calibration(s if fitted is None else fitted, float(z.pow(2).mean().sqrt()), float((z <= 2).double().mean()),
                       int(z.numel()), ratio)


def energy_calibration(model, qs: torch.Tensor, order: int = 2, floor: float = 0.0) -> Optional[Calibration]:
    r"""The ``"energy"`` calibration (module docstring) of ``model`` -- conditioned on its training functionals
    only, with ``gp.variance_scale`` 1 -- on held-back snapshots ``qs`` ``(steps + 1, batch, n)`` in the data's
    units; the scale is at least ``floor`` (the ``"del"`` scale: where the truncation term alone covers the held-back
    differences, as at large steps, they do not determine the GP's scale). None when fewer than 10 differences are
    finite."""
    values = conservation_values(model, qs, order)
    if values is None:
        return None
    return summary(*values, max(scale_for(*values), floor))


def difference_calibration(model, floor: float = 0.0) -> Optional[Tuple[Calibration, float]]:
    r"""The ``"energy_differences"`` calibration (:mod:`learners.shadow.difference_calibration`) of the fitted
    ``model``: its :class:`Calibration` (``scale``: the one its innovations ask for, at least ``floor``; RMS z and
    coverage of the innovations at that scale) and that scale; None without enough trajectories or with fewer than 10
    innovations outside the rounding bound (the reason in ``model.history["energy_differences_calibration_skipped"]``).
    ``energy`` uses it
    as it is (``floor`` 0): the innovations are of the reported quantity itself, where the ``"del"`` scale is of
    another one."""
    from .difference_calibration import difference_innovations

    values = difference_innovations(model)
    if values is None:
        model.history["energy_differences_calibration_skipped"] = (
            "fewer than 2 trajectories, or functionals not in the per-trajectory layout")
        return None
    d, w = values
    ok = torch.isfinite(d) & torch.isfinite(w) & (w > 0)
    if int(ok.sum()) < 10:
        # silent before: energy then fell back to the "del" scale, another quantity's (two_body_morse4: all 240 dropped
        # by the worst-case rounding guard, RMS z 1.6; benchmarks/RESULTS_calibration.md, Session 15)
        model.history["energy_differences_calibration_skipped"] = (
            f"{int(ok.sum())} of {d.numel()} innovations finite and resolved (fewer than 10; the rest within the rounding "
            "bound or non-finite): energy's std uses the 'energy' / 'del' scale")
        return None
    d, w = d[ok], w[ok]
    zero = torch.zeros_like(w)
    s = max(scale_for(d, w, zero), floor)
    return summary(d, w, zero, s, with_ratio=False), s


def del_calibration(model, F_tr, F_va) -> None:
    r"""Scale the posterior variances (``gp.variance_scale``: :math:`\sigma_f^2` and the nugget together, the mean
    is unchanged) so that 95.4% of the validation residuals lie within two posterior standard deviations, as for a
    calibrated Gaussian. (The residuals are heavy-tailed -- largest where validation orbits leave the data -- so
    matching their mean square instead would leave most of them at a fraction of a standard deviation.)"""
    gp = model.gp
    with torch.no_grad():  # a positions search's fit: its solves' symmetric assembly (symmetric_covariance)
        gp.condition(F_tr, symmetric=getattr(model, "objective_used", None) == "positions")
        gp.variance_scale = 1.0
        mean, var = gp.functional_posterior(F_va)
        ok = var > 0
        if int(ok.sum()) < 5:
            return
        z = mean[ok].abs() / var[ok].sqrt()
        s = float((torch.quantile(z, 0.954) / 2) ** 2)
        if math.isfinite(s) and s > 0:
            model.history["calibration_factor"] = s
            model._variance_scale = s
            zs = z / math.sqrt(s)
            model._calibration["del"] = Calibration(s, float(zs.pow(2).mean().sqrt()), float((zs <= 2).double().mean()),
                                                    int(zs.numel()))


def ensure_energy_calibration(model) -> None:
    r"""Run the energy calibrations of ``model``'s last fit if still pending (on the first std of an energy or
    velocity, or ``model.calibration``): ``"energy"``, conservation along up to :data:`CALIBRATION_TRAJECTORIES` of
    the held-back trajectories under the GP conditioned on the training functionals of the search only (one more
    solve), at least the ``"del"`` scale, for ``energies`` and ``velocities``; and ``"energy_differences"``, the
    innovations of differences between distant data states over folds of trajectories
    (:mod:`learners.shadow.difference_calibration`), for ``energy``. Then the warning of
    :func:`~learners.shadow.identifiability.check_orders` (where the conservation calibration ran) and of
    :func:`~learners.shadow.identifiability.check_energy` (always: its std is the calibrated one where either calibration
    ran, otherwise the ``"del"`` scale, which its warning then calls uncalibrated, naming no remedy that a truncation ratio
    would have to support). The model's own posterior is restored afterwards. On failure (e.g. a kernel without a
    feature expansion) the reason goes to ``model.history["energy_calibration_error"]`` (conservation) or
    ``model.history["energy_differences_calibration_error"]``, each independently, and the quantities that calibration
    serves keep the ``"del"`` scale."""
    from .identifiability import check_energy, check_orders

    pending = getattr(model, "_pending_calibration", None)
    if pending is None:
        return
    model.gp.require_dense()  # a low-rank posterior: refused here, not after the folds' dense solves
    model._pending_calibration = None
    floor = model.gp.variance_scale
    failures = CALIBRATION_FAILURES
    values = differences = None
    with _stages(model) as stage:
        try:  # the two calibrations serve different quantities: one failing must not drop the other
            stage("energy calibration: conservation")
            values = _conservation(model, *pending)
        except failures as err:
            model.history["energy_calibration_error"] = repr(err)
        try:
            stage("energy calibration: differences")
            differences = difference_calibration(model)
        except failures as err:
            model.history["energy_differences_calibration_error"] = repr(err)
        if differences is not None:
            model._calibration["energy_differences"] = differences[0]
        stage("energy calibration: checks")
        if values is not None:
            model._calibration["energy"] = summary(*values, max(scale_for(*values), floor))
            check_orders(model)
        check_energy(model, pending[1])


#: training functionals from which the pending energy calibrations count as long (a bar by default): notebook 07's
#: bodies2 at 40 trajectories (~650) took 40-80 CPU s, a fresh mass_chain4 fit's model.save over 500 s
LONG_CALIBRATION = 500


@contextmanager
def _stages(model):
    """A bar over the three stages of :func:`ensure_energy_calibration` (``model.progress``: True always, False never,
    None where the model has at least :data:`LONG_CALIBRATION` training functionals; off a terminal, plain lines,
    :func:`integrators.progress.progress_bar`): ``stage(name)`` ends the previous stage and names the next, so a
    ``save`` or a first std is not silent for minutes."""
    from integrators.progress import progress_bar

    F = getattr(model.gp, "train_functionals", None)
    long = F is not None and F.count >= LONG_CALIBRATION
    bar = progress_bar(3, "energy calibration", unit="stage", show=getattr(model, "progress", None), long=long)
    started = []

    def stage(name: str) -> None:
        if started:
            bar.update(1)
        started.append(name)
        bar.set_description(name, refresh=True)

    try:
        yield stage
    finally:
        bar.update(3 - bar.n)
        bar.close()


def _conservation(model, F_tr, S: torch.Tensor):
    """:func:`conservation_values` on the first held-back snapshots ``S`` (standardised) under a copy of the final
    GP conditioned on ``F_tr``; the model's posterior is restored afterwards."""
    final, caches = model.gp, (model._recovered, model._jet)
    gp = model._make_gp(2 * model.n)
    gp.load_state_dict(final.state_dict())
    for p in gp.parameters():
        p.requires_grad_(False)
    try:
        with torch.no_grad():
            gp.condition(_final_targets(model, F_tr))
        model.gp, model._recovered, model._jet = gp, {}, None
        return conservation_values(model, model._from_standard(S[:CALIBRATION_TRAJECTORIES]).transpose(0, 1))
    finally:
        model.gp, (model._recovered, model._jet) = final, caches


def _final_targets(model, F_tr):
    """``F_tr`` (training functionals, the normalisation's last) with the final solve's normalisation targets, which
    :mod:`~learners.shadow.mass_target` may have moved after ``F_tr`` was formed: the calibrated posterior is then the
    final model's on fewer data."""
    k, final = model._norm_count, model.gp.train_functionals.targets
    y = F_tr.targets.clone()
    y[F_tr.count - k:] = final[final.numel() - k:].to(y)
    return Functionals(F_tr.dim, F_tr.count, F_tr.atoms, y)


def calibration_state(model) -> Dict[str, object]:
    """The calibration of ``model`` to save (pending ones run first), tagged with the variance rule it was fitted
    under (:data:`~learners.shadow.variance_rounding.VARIANCE_RULE`)."""
    from .difference_calibration import pairs_state

    ensure_energy_calibration(model)
    state = {"calibration": {k: c.as_dict() for k, c in model._calibration.items()}, "variance_rule": VARIANCE_RULE}
    pairs = pairs_state(model)
    if pairs is not None:  # the distant-difference pairs' states: the truncation term's unit fit reuses them after load
        state["calibration_pairs"] = pairs
    return state


def restore_calibration(model, extra: Dict[str, object]) -> None:
    """Put the calibration saved in ``extra`` (:func:`calibration_state`) back on ``model``: its scales
    (:func:`restored_calibration`) and the distant-difference pairs' states where saved (files before Session 8 have
    none: recomputed on demand by :func:`~learners.shadow.difference_calibration.data_pairs`)."""
    from .difference_calibration import restore_pairs

    model._calibration = restored_calibration(extra)
    if extra.get("calibration_pairs") is not None:
        restore_pairs(model, extra["calibration_pairs"])


def restored_calibration(extra: Dict[str, object]) -> Dict[str, Calibration]:
    """The calibration saved in ``extra`` (:func:`calibration_state`). One fitted under another variance rule (files
    without the tag: the old worst-case floor) is kept, with a :class:`~learners.shadow.guards.StaleCalibrationWarning`:
    the held-back data it needs are not saved, so only a refit can recalibrate."""
    calibration = {k: Calibration(**c) for k, c in extra.get("calibration", {}).items()}
    rule = extra.get("variance_rule")
    if calibration and rule != VARIANCE_RULE:
        warnings.warn(f"this model's calibration scales ({', '.join(sorted(calibration))}) were fitted to posterior "
                      f"variances computed under the variance rule {rule or 'before the a-posteriori rounding bound'!r}, "
                      f"not {VARIANCE_RULE!r}: its reported stds may be off; refit it (model.fit(model.snapshots)) to "
                      "recalibrate", StaleCalibrationWarning, stacklevel=caller_level())
    return calibration

