r"""Warnings of the LSI fit where the data do not determine the model well, each with its reason and remedy.

Checked on the held-back trajectories of the hyperparameter search, so from positions only:

* **Held-out one-step prediction error** (``"positions"`` objective): its value is the mean of
  :math:`\log\|\delta c\|^2` (:mod:`learners.shadow.position_objective`); compared with the mean of
  :math:`\log\|q_{j+1} - q_j\|^2` it gives the typical error of a predicted position relative to a step. Above
  :data:`ONE_STEP_LIMIT` the learned dynamics are not determined by the data (too few trajectories for the
  dimension, or a region the data barely cover): on the systems of the tests a usable fit is at 1e-4..1e-3.
* **The energy's own resolution** (``"positions"`` objective; checked with the energy calibration, on its first
  demand): the calibrated std of :math:`H_{rec}[2]` differences to a reference state, RMS over up to 40 states of the
  held-back trajectories, relative to the RMS of those differences. The states (midpoints of triples with central-difference
  velocities, :mod:`learners.shadow.held_states`) are spread across the trajectories -- one per trajectory first, then
  more at times spread along each -- and those on the reference's own trajectory are left out, since a conserved energy
  barely changes along it; with fewer than :data:`ENERGY_MIN_TRAJECTORIES` held-back trajectories the check is skipped
  (the reason in ``history["energy_resolution_error"]``). Above :data:`ENERGY_LIMIT` the data do not
  determine the energy to two digits, even where the motion is predicted well: the planar two-body problem
  (``two_body4``, 150 trajectories) predicts held-out positions within the one-step limit, yet its energy differences
  are off by 2.1e-2 -- each separately conserved part (centre of mass, relative motion) learned only to its own few percent
  (benchmarks/RESULTS_identification.md, session 10). The remedy follows the calibration's truncation ratio: where
  the GP's error dominates, more trajectories; where the truncation of :math:`\mathrm{mod}_N` does, a smaller step;
  both where the ratio is unknown (the conservation calibration failed). Where both energy calibrations failed the std
  is the DEL residuals' scale, and the warning says it is uncalibrated.
* **Higher orders that cannot help**: where the first omitted term of :math:`\mathrm{mod}_2`,
  :math:`H_{rec}[4] - H_{rec}[2]`, is below the calibrated GP std of the energy (median ratio < 1,
  :class:`~learners.shadow.calibration.Calibration` ``truncation_ratio``), the GP's own error dominates, and
  :math:`H_{rec}[4]` is no more accurate than :math:`H_{rec}[2]`.
"""

from __future__ import annotations

import math
import warnings

import torch

__all__ = ["ONE_STEP_LIMIT", "ENERGY_LIMIT", "ENERGY_STATES", "ENERGY_MIN_TRAJECTORIES", "check_one_step", "check_orders",
           "check_energy"]

#: relative one-step position error (to the typical step) above which the fit warns
ONE_STEP_LIMIT = 0.05
#: calibrated std of energy differences relative to their RMS above which the energy warns (module docstring): 1%,
#: "not determined to two digits", a choice, not fitted; measured (session 10) two_body4 5.7e-2 (energy error 2.1e-2),
#: anharmonic3 8.8e-5, toda4 2.8e-4, mass_chain4 4.9e-4 (errors 3.4e-5 .. 4.3e-4)
ENERGY_LIMIT = 1e-2
#: held-back states at which the energy's resolution is measured (the first is the reference; spread across the
#: trajectories, those on the reference's own left out: :func:`_energy_states`)
ENERGY_STATES = 41
#: held-back trajectories below which the resolution is not judged (recorded why): the reference's and two others,
#: two energy levels to measure the differences by (a choice: the held-back set is sized in functionals, so long
#: trajectories give few -- anharmonic3 at 40 x 30 steps holds back 3 -- and a larger minimum would skip them all; a
#: false warning needs both levels 100x closer to the reference's than typical, as the acceptance systems' ratios lie
#: 1e-4 against the 1e-2 limit)
ENERGY_MIN_TRAJECTORIES = 3


def check_one_step(model, snapshots_std: torch.Tensor) -> None:
    """Warn (:class:`~learners.shadow.hyperparameters.IdentifiabilityWarning`) on the held-out one-step error (module
    docstring); ``snapshots_std``: the held-back trajectories in the standardised coordinates."""
    from .guards import IdentifiabilityWarning, caller_level

    T = snapshots_std.shape[0]
    obj = model.history.get("objective")
    if model.objective_used == "positions" and obj is not None and math.isfinite(obj):
        steps = torch.diff(snapshots_std, dim=1).pow(2).sum(-1)
        rel = math.exp(0.5 * (obj - float(torch.log(steps + 1e-300).mean())))
        model.history["one_step_relative_error"] = rel
        if rel > ONE_STEP_LIMIT:
            warnings.warn(f"the learned dynamics are poorly determined by the data: on {T} held-back trajectories a "
                          f"predicted position is off by {rel:.2g} of a step (limit {ONE_STEP_LIMIT:g}). Give more "
                          f"trajectories (the dimension is n = {model.n}), or trajectories that cover the region of "
                          "interest", IdentifiabilityWarning, stacklevel=caller_level())


def check_orders(model) -> None:
    """Warn where the first omitted term of mod_2 is below the calibrated GP std of the energy (module docstring)."""
    from .guards import IdentifiabilityWarning, caller_level

    cal = model._calibration.get("energy")
    if cal is not None and cal.truncation_ratio is not None and cal.truncation_ratio < 1:
        warnings.warn(f"H_rec[4] will be no more accurate than H_rec[2]: the first omitted term of mod_2 is "
                      f"{cal.truncation_ratio:.2g}x the GP's own std of the energy (median over {cal.count} held-back "
                      "states), so the GP's error dominates. More trajectories lower the GP's error; a larger step h "
                      "raises the term that order 4 corrects", IdentifiabilityWarning, stacklevel=caller_level())


def _energy_states(model, snapshots_std: torch.Tensor):
    """The reference state and the compared states of :func:`check_energy` in data units, or the reason why too few
    trajectories are held back to judge: :data:`ENERGY_STATES` states spread across the held-back trajectories
    (:func:`~learners.shadow.held_states.spread_picks`), the first the reference, compared only with states of the
    other trajectories (along the reference's own a conserved energy barely changes, which would shrink the differences
    the std is measured against)."""
    from .held_states import midpoint_states, spread_picks

    T = snapshots_std.shape[0]
    if T < ENERGY_MIN_TRAJECTORIES:
        return f"not judged: held-back trajectories {T}, fewer than the {ENERGY_MIN_TRAJECTORIES} needed"
    q, v = midpoint_states(model._from_standard(snapshots_std), model.h)
    t, j = spread_picks(T, q.shape[1], ENERGY_STATES)
    t, j = t.to(q.device), j.to(q.device)
    other = t != t[0]
    return (q[t[0], j[0]], v[t[0], j[0]]), (q[t[other], j[other]], v[t[other], j[other]])


def _remedy(model) -> str:
    """The remedy the calibration's truncation ratio supports (module docstring), or both where it is unknown."""
    cal = model._calibration.get("energy")
    if cal is None or cal.truncation_ratio is None:
        return ("more trajectories, or a smaller step h (which of the GP's error and the truncation of mod_N dominates is "
                "unknown: the conservation calibration, which measures it, did not run; see model.history)")
    if cal.truncation_ratio >= 1:
        return "the truncation of mod_N dominates the std: a smaller step h"
    return (f"the GP's error dominates: more trajectories (the dimension is n = {model.n}; where the motion separates into "
            "parts conserved each on its own, such as a centre of mass and a relative motion, each part is learned from its "
            "own few directions and needs its own coverage)")


def check_energy(model, snapshots_std: torch.Tensor) -> None:
    """Warn where the std of energy differences between held-back states exceeds :data:`ENERGY_LIMIT` of their RMS
    (module docstring); ``snapshots_std``: the held-back trajectories of the calibration, standardised. Records the
    ratio in ``model.history["energy_resolution"]``, or why it was not measured in
    ``model.history["energy_resolution_error"]`` (too few held-back trajectories, no std; a non-finite ratio also
    warns: the energy is then not determined at all)."""
    from .calibration import CALIBRATION_FAILURES
    from .guards import IdentifiabilityWarning, caller_level

    if model.objective_used != "positions" or snapshots_std.shape[1] < 3:
        return
    states = _energy_states(model, snapshots_std)
    if isinstance(states, str):
        model.history["energy_resolution_error"] = states
        return
    (q0, v0), (q, v) = states
    try:
        mean, std = model.energy(2, return_std=True, reference=(q0, v0))(q, v)
    except CALIBRATION_FAILURES as err:  # no std (the calibrations' failures)
        model.history["energy_resolution_error"] = repr(err)
        return
    rel = float(std.pow(2).mean().sqrt() / mean.pow(2).mean().sqrt().clamp_min(1e-300))
    kind = ("calibrated std" if {"energy", "energy_differences"} & set(model._calibration) else
            "std (uncalibrated, on the DEL residuals' scale: both energy calibrations failed, see model.history)")
    if not math.isfinite(rel):
        model.history["energy_resolution_error"] = f"non-finite ratio {rel} (std or mean of the differences not finite)"
        warnings.warn(f"the energy is not determined by the data: energy differences between {q.shape[0] + 1} held-back "
                      f"states gave a non-finite {kind} or value ({rel}). Check the data and the fit's one-step error "
                      "(model.history)", IdentifiabilityWarning, stacklevel=caller_level())
        return
    model.history["energy_resolution"] = rel
    if rel > ENERGY_LIMIT:
        warnings.warn(f"the energy is poorly determined by the data: energy differences between {q.shape[0] + 1} held-back "
                      f"states have a {kind} of {rel:.2g} of their size (limit {ENERGY_LIMIT:g}), although the fit may "
                      f"predict the motion well. Remedy: {_remedy(model)}", IdentifiabilityWarning, stacklevel=caller_level())
