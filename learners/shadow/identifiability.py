r"""Warnings of the LSI fit where the data do not determine the model well, each with its reason and remedy.

Checked on the held-back trajectories of the hyperparameter search, so from positions only:

* **Held-out one-step prediction error** (``"positions"`` objective): its value is the mean of
  :math:`\log\|\delta c\|^2` (:mod:`learners.shadow.position_objective`); compared with the mean of
  :math:`\log\|q_{j+1} - q_j\|^2` it gives the typical error of a predicted position relative to a step. Above
  :data:`ONE_STEP_LIMIT` the learned dynamics are not determined by the data (too few trajectories for the
  dimension, or a region the data barely cover): on the systems of the tests a usable fit is at 1e-4..1e-3.
* **Higher orders that cannot help**: where the first omitted term of :math:`\mathrm{mod}_2`,
  :math:`H_{rec}[4] - H_{rec}[2]`, is below the calibrated GP std of the energy (median ratio < 1,
  :class:`~learners.shadow.calibration.Calibration` ``truncation_ratio``), the GP's own error dominates, and
  :math:`H_{rec}[4]` is no more accurate than :math:`H_{rec}[2]`.
"""

from __future__ import annotations

import math
import warnings

import torch

__all__ = ["ONE_STEP_LIMIT", "check_one_step", "check_orders"]

#: relative one-step position error (to the typical step) above which the fit warns
ONE_STEP_LIMIT = 0.05


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
