r"""A warning where :meth:`~learners.shadow.recovery.RecoveryMixin.velocities` is asked at positions the data do not
determine (issue 23, Session 25, branch vsolve15).

The velocity solve :math:`\partial_vL_{rec}(q_j, \dot q_j) = p_j` itself is benign there: along the held-out orbits where
per-body fits returned velocities off by 0.4-1.8 of their RMS (coulomb_unequal4 s1, morse_unequal4 s0) the Hessian
:math:`\partial^2_vL_{rec}` is positive definite with eigenvalues 0.2-1.7, the root is unique (Newton started from the true
velocity returns the same one) and the finite-difference start lies within 1e-2 of the truth. The true velocity
leaves a residual of 0.16-0.77 of :math:`|p|` in the model's equation: the model's :math:`L` is wrong there -- a pair's
separation (coulomb) or the light body's position (morse) beyond the data's range. The posterior std of the DEL
residual at the same positions orders that error (benchmarks/RESULTS_identification.md, Session 25, branch vsolve15):
relative velocity errors of median 2e-4 where it is below 10x its level on the data (:meth:`data_level`), 1e-2 to 9e-2
at 100-1000x, 0.1-1.1 above 1000x.
"""

from __future__ import annotations

import warnings

import torch

from bea.errors import BeaTypeError

from .guards import ExtrapolationWarning, caller_level

__all__ = ["VELOCITY_FACTOR", "warn_off_data"]

#: positions whose DEL residual's posterior std exceeds this multiple of its level on the data get a warning from
#: ``velocities``. Why 1000, not predict's 100: on fresh data-like trajectories (40 x 5 interior states, two per-body
#: fits) 7 and 11 states of 200 lie between 100x and 1000x with velocity errors of median 1.2e-2 and 9e-2 (max 8e-2,
#: 0.71), 3 and 4 above 1000x with 0.10 and 1.07; a warning on a twentieth of data-like states would be ignored.
VELOCITY_FACTOR = 1000.0


def warn_off_data(model, q_std: torch.Tensor) -> None:
    r"""An :class:`~learners.shadow.guards.ExtrapolationWarning` naming the first interior position of ``q_std``
    ``(steps + 1, batch..., n)`` (standardised) where the posterior std of the DEL residual exceeds
    :data:`VELOCITY_FACTOR` times :meth:`data_level`, and how many do (at up to ``CHECK_POINTS`` positions per
    trajectory, as ``predict`` checks). Skipped where the model gives no such std (no ``_check_extrapolation``, a
    low-rank final solve, a kernel that raises ``BeaTypeError`` for it)."""
    check = getattr(model, "_check_extrapolation", None)
    if check is None or getattr(model.gp, "_lowrank", None) is not None or q_std.shape[0] < 3:
        return
    level = model.data_level()
    try:
        ratio = check(q_std, "ignore", every=True).amax(-1) / level if level > 0 else None
    except BeaTypeError:  # a kernel without the DEL residual's std: nothing to compare, as under the low-rank solve
        return
    bad = None if ratio is None else ratio > VELOCITY_FACTOR  # NaN (ends, unchecked rows) is not flagged
    if bad is None or not bool(bad.any()):
        return
    idx = tuple(int(i) for i in torch.nonzero(bad)[0])
    warnings.warn(f"velocities: at {int(bad.sum())} of the positions the posterior std of the DEL residual is more "
                  f"than {VELOCITY_FACTOR:g}x its level on the data (first at index (step, batch...) = {idx}: "
                  f"{float(ratio[idx]):.3g}x): the learned Lagrangian is not determined there, and its velocities may be "
                  "off by tens of percent or more (the solve itself is sound: the model is extrapolating). Add data "
                  "there, or check these states against another fit", ExtrapolationWarning, stacklevel=caller_level())
