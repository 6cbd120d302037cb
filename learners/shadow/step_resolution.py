r"""Does the sampling step resolve the data's fastest oscillations? A warning where the truncation of
:math:`\mathrm{mod}_N` will dominate whatever the GP learns.

The inverse modified Lagrangian and the recovered :math:`L_{rec} = \mathrm{mod}_N(\bar L_{inv})` are series in
:math:`h^2`; their terms shrink with the local :math:`(h\omega)^2`. For the midpoint rule on a harmonic oscillator the
modified frequency is :math:`\tilde\omega = \tfrac2h\arctan(h\omega/2)`, a series in :math:`(h\omega/2)^2` that
converges only for :math:`h\omega < 2` (the scheme's stability limit; the trapezoidal rule's is the same), and each
order of it gains only a factor :math:`(2/h\omega)^2`. Where the data reach :math:`h\omega` near 2 no amount of data
makes :math:`H_{rec}[N]` accurate: morse3 (tests/test_learners_shadow_auto.py, an exponential wall) at
:math:`h = 0.2` has energy differences of the *exact* inverse modified Lagrangian off by 1.7e-2 (order 2) and 7.1e-3
(order 4), at :math:`h = 0.1` the library's fit reaches 1.8e-3 (benchmarks/RESULTS_identification.md, session 5).

*The estimate, from positions alone and in any units.* For a linear oscillation sampled exactly at step :math:`h`,
second differences satisfy :math:`\delta^2 q_k = -4\sin^2(h\omega/2)\,(q_k - q_*)`, so in a window of five snapshots

.. math::  x = -\frac{\langle\delta^4 q_k, \delta^2 q_k\rangle}{\|\delta^2 q_k\|^2} = 4\sin^2(h\omega/2), \qquad
           h\omega = 2\arcsin(\sqrt{x}/2),

a Rayleigh quotient that needs no equilibrium, no mass and no time unit (differences of positions only; invariant
under rotations and scalings of :math:`q` and of :math:`h`); for nonlinear motion it is the local frequency along the
acceleration, with the nonlinearity's own contribution. Windows where :math:`\|\delta^2 q\|` is below 1e-3 of its RMS
(turning points of the acceleration) are left out; :math:`x` is clipped to :math:`[0, 4]`.

*The criterion.* Warn where the :data:`QUANTILE` quantile of :math:`h\omega` over the windows exceeds
:data:`STIFF_LIMIT` = 1.2: there each order of the series gains less than :math:`(2/1.2)^2 \approx 2.8` (at
:math:`h\omega` = 1 it is 4). Measured (seed 0, 5 steps, 99% quantile): morse3 at :math:`h = 0.2` 1.37 (warns); every
system that meets the issue's accuracy at its step stays below -- the pendulum of ``python -m bea demo`` (400 x 5,
:math:`h = 0.5`) 1.04, Henon-Heiles (200 x 5, :math:`h = 0.1`) 0.23, anharmonic3 0.31, duffing3 0.37, mass_chain4
0.44, toda4 0.44, two_body4 0.81, morse3 at :math:`h = 0.1` 0.54. It needs five snapshots per trajectory (fourth
differences); with fewer there is no estimate and no warning. Stage schemes (higher order, other limits) are not
checked.
"""

from __future__ import annotations

import warnings
from typing import Optional

import torch

__all__ = ["step_resolution", "check_step_resolution", "STIFF_LIMIT", "QUANTILE"]

#: the quantile of the windows' :math:`h\omega` that is compared with :data:`STIFF_LIMIT` (module docstring): the
#: stiffest percent of the data, not the single stiffest window (one window is noise-prone)
QUANTILE = 0.99
#: :math:`h\omega` above which the truncation of the series is expected to dominate (module docstring)
STIFF_LIMIT = 1.2


def step_resolution(S: torch.Tensor) -> Optional[torch.Tensor]:
    r""":math:`h\omega` in each five-snapshot window of snapshots ``S`` (n_traj, m, n) (module docstring), flattened;
    None when ``m < 5`` or no window has a usable second difference."""
    if S.shape[1] < 5:
        return None
    d2 = S[:, 2:] - 2 * S[:, 1:-1] + S[:, :-2]
    d4 = d2[:, 2:] - 2 * d2[:, 1:-1] + d2[:, :-2]
    a = d2[:, 1:-1]
    size = a.pow(2).sum(-1)
    ok = size > 1e-6 * size.mean()  # |d2 q| above 1e-3 of its RMS
    if not bool(ok.any()):
        return None
    x = (-(d4 * a).sum(-1)[ok] / size[ok]).clamp(0.0, 4.0)
    return 2 * torch.asin(x.sqrt() / 2)


def check_step_resolution(model, S: torch.Tensor) -> None:
    """Warn (:class:`~learners.shadow.hyperparameters.IdentifiabilityWarning`) where the data's step is too coarse for
    the series (module docstring); records the quantile in ``model.history["step_resolution"]``."""
    import bea

    from .guards import IdentifiabilityWarning

    if isinstance(model.scheme, bea.StageScheme):
        return
    w = step_resolution(S)
    if w is None:
        return
    value = float(torch.quantile(w, QUANTILE))
    model.history["step_resolution"] = value
    if value > STIFF_LIMIT:
        warnings.warn(f"the step h = {model.h:g} is coarse for the data's fastest motion: h*omega reaches {value:.2f} "
                      f"({100 * (1 - QUANTILE):.0f}% of the data's five-snapshot windows above it; limit {STIFF_LIMIT:g}), "
                      "near the scheme's limit of 2 where the modified-equation series converges slowly, so the "
                      "truncation of H_rec[N] dominates the energy and velocity errors whatever the amount of data. "
                      "Sample with a smaller h (more snapshots per unit time)", IdentifiabilityWarning, stacklevel=3)
