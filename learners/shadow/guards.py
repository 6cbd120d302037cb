r"""Checks that a GP Lagrangian model never returns a non-finite or runaway answer silently.

* :func:`check_fitted`, at the end of every fit: the weights :math:`\beta = \Theta^{-1}y` of the posterior mean,
  the hyperparameters and the posterior mean at (up to :data:`FIT_PROBES`) data states must be finite, else
  :class:`NonFiniteModelError` names what is not finite, the hyperparameters and the conditioning of the solve.
* :func:`check_prediction`, on predicted positions in the standardised coordinates
  (:mod:`learners.shadow.units`, where the data have zero mean and unit RMS spread): a non-finite position is
  a :class:`NonFiniteModelError` (the step where it starts, and the last finite position); :func:`runaway`
  gives the positions farther than :data:`RUNAWAY_FACTOR` data spreads from the data's centre, which the
  models report as an extrapolation (:class:`~learners.shadow.lsi.ExtrapolationWarning`).
* :func:`caller_level`: the ``stacklevel`` that makes a fit's warning name the user's line, however deep in the
  library it arises.
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from typing import Callable, Optional, Tuple

import torch

from bea.errors import BeaError, BeaValueError, BeaWarning

__all__ = ["NonFiniteModelError", "IdentifiabilityWarning", "ExtrapolationWarning", "ToleranceRelaxedWarning", "ExtrapolationError", "check_fitted", "check_prediction", "report_extrapolation", "caller_level", "runaway", "data_region", "RUNAWAY_FACTOR", "FIT_PROBES"]

#: a predicted position farther than this many data spreads (RMS standard deviation of the positions) from the
#: data's centre has left the data's region by orders of magnitude. Why 100: standardised data lie within a few
#: spreads of the centre (the CI pendulum's reach 4.3, rotating orbits included), and a GP mean is determined
#: within a few lengthscales of its data (at most 16 spreads on the search's grid), so 100 is more than an order
#: of magnitude beyond both.
RUNAWAY_FACTOR = 100.0
#: data states at which the posterior mean is evaluated at the end of a fit
FIT_PROBES = 256


class ExtrapolationWarning(BeaWarning):
    """A prediction left the region where the data determine the learned dynamics."""


class ExtrapolationError(BeaValueError):
    """Raised instead of :class:`ExtrapolationWarning` with ``predict(..., on_extrapolation="raise")``."""


class IdentifiabilityWarning(BeaWarning):
    """The data do not determine the learned model well (a collapsed hyperparameter search, held-out positions
    predicted badly, a recovered series whose higher order does not help); the message names the remedy."""


class StaleCalibrationWarning(BeaWarning):
    """A loaded model's calibration scales were fitted to posterior variances computed under an older rounding rule
    (before :data:`~learners.shadow.variance_rounding.VARIANCE_RULE`), so they may not match the variances computed
    now; refitting the model recalibrates it."""


class ToleranceRelaxedWarning(BeaWarning, RuntimeWarning):
    """A prediction's Newton solve stalled at the rounding level of the learned Lagrangian and was repeated with a
    looser tolerance (also a ``RuntimeWarning``, the class it was issued as before)."""


class NonFiniteModelError(BeaError, FloatingPointError):
    """A fit ended with a non-finite model, or a prediction became non-finite."""


def check_fitted(model, states: torch.Tensor) -> None:
    r"""Raise :class:`NonFiniteModelError` unless the fitted ``model``'s weights, hyperparameters and posterior mean
    at ``states`` (K, 2n; standardised, the first :data:`FIT_PROBES` evenly spaced ones are used) are finite."""
    gp = model.gp
    hyper = {name: p.detach().reshape(-1).tolist() for name, p in gp.named_parameters()}  # raw (unconstrained) values
    cause = None
    if not bool(torch.isfinite(gp._beta).all()):
        cause = f"{int((~torch.isfinite(gp._beta)).sum())} of the {gp._beta.numel()} weights of the posterior mean"
    elif not all(math.isfinite(x) for values in hyper.values() for x in values):
        cause = "the hyperparameters"
    else:
        idx = torch.unique(torch.linspace(0, states.shape[0] - 1, min(FIT_PROBES, states.shape[0]), dtype=torch.float64,
                                         device=states.device).round().long())
        with torch.no_grad():
            mean = gp.mean(states[idx])
        if not bool(torch.isfinite(mean).all()):
            cause = f"the posterior mean at {int((~torch.isfinite(mean)).sum())} of {idx.numel()} data states"
    if cause is not None:
        raise NonFiniteModelError(
            f"the fit of {type(model).__name__} ended with a non-finite model: {cause} are not finite (raw hyperparameters "
            f"{hyper}; solve: {gp.info}). The kernel or the hyperparameters overflow on these data: "
            "let the model learn them, or fix other values with lengthscale= and noise=")


def check_prediction(qs: torch.Tensor, what: str, to_data: Optional[Callable] = None) -> None:
    """Raise :class:`NonFiniteModelError` if the predicted positions ``qs`` (steps + 1, batch..., n) are not all finite."""
    ok = torch.isfinite(qs.reshape(qs.shape[0], -1)).all(-1)
    if bool(ok.all()):
        return
    k = int(torch.nonzero(~ok)[0])
    last = qs[k - 1] if k > 0 else None
    if last is not None and to_data is not None:
        last = to_data(last)
    raise NonFiniteModelError(
        f"{what}: the predicted positions are not finite from step {k} on (last finite positions: "
        f"{None if last is None else last.reshape(-1).tolist()[:6]}). The learned dynamics are not determined there "
        "(a prediction that left the data, or a learned Lagrangian that is not regular): start inside the data's "
        "region, predict fewer steps, or add data there")


def report_extrapolation(msg: str, mode: str, stacklevel: int) -> None:
    """The ``on_extrapolation`` policy of both GP models' ``predict``: ``"raise"`` raises :class:`ExtrapolationError`,
    otherwise an :class:`ExtrapolationWarning` naming the caller's line (``stacklevel`` counted from the caller of this
    function)."""
    if mode == "raise":
        raise ExtrapolationError(msg)
    warnings.warn(msg, ExtrapolationWarning, stacklevel=stacklevel + 1)


#: the directory of the ``learners`` package: frames there are the library's own
_LIBRARY = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def caller_level() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` in the function that calls this one that names the first frame
    outside the ``learners`` package (the user's call of ``fit``, ...). Counted, not fixed: a fit's warnings arise
    at depths that differ by path (principal-direction candidate, stage schemes, LGP)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_LIBRARY):
        frame, level = frame.f_back, level + 1
    return level


def runaway(qs: torch.Tensor, region: Optional[Tuple[torch.Tensor, float]] = None) -> torch.Tensor:
    """Mask ``(steps + 1, batch...)`` of positions farther than :data:`RUNAWAY_FACTOR` data spreads from the data's
    centre: ``qs`` standardised, or in the data's units with ``region`` = :func:`data_region` of the data."""
    if region is not None:
        qs = (qs - region[0]) / region[1]
    return qs.abs().amax(-1) > RUNAWAY_FACTOR


def data_region(q: torch.Tensor) -> Tuple[torch.Tensor, float]:
    """Centre (n,) and RMS spread of positions ``q`` (..., n), for :func:`runaway` on a model fitted in the data's units."""
    flat = q.reshape(-1, q.shape[-1])
    center = flat.mean(0)
    return center, max(float((flat - center).pow(2).mean().sqrt()), 1e-300)
