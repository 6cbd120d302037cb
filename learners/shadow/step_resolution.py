r"""How well does the sampling step resolve the data's motion? A recorded diagnostic, not a warning.

The inverse modified Lagrangian and the recovered :math:`L_{rec} = \mathrm{mod}_N(\bar L_{inv})` are series in
:math:`h^2`; their terms shrink with the local :math:`(h\omega)^2`. For the midpoint rule on a harmonic oscillator the
modified frequency is :math:`\tilde\omega = \tfrac2h\arctan(h\omega/2)`, a series in :math:`(h\omega/2)^2` that
converges only for :math:`h\omega < 2`. Where the data reach :math:`h\omega` near 2 no amount of data makes
:math:`H_{rec}[N]` accurate: morse3 (tests/test_learners_shadow_auto.py, an exponential wall) at :math:`h = 0.2` has
energy differences of the *exact* inverse modified Lagrangian off by 1.5e-2 (order 2) and 7.1e-3 (order 4)
(benchmarks/RESULTS_identification.md, session 6).

*The estimate, from positions alone and in any units.* For a linear oscillation sampled exactly at step :math:`h`,
second differences satisfy :math:`\delta^2 q_k = -4\sin^2(h\omega/2)\,(q_k - q_*)`, so in a window of five snapshots

.. math::  x = -\frac{\langle\delta^4 q_k, \delta^2 q_k\rangle}{\|\delta^2 q_k\|^2} = 4\sin^2(h\omega/2), \qquad
           \hat w = 2\arcsin(\sqrt{x}/2),

a Rayleigh quotient that needs no equilibrium, no mass and no time unit (differences of positions only; invariant
under rotations and scalings of :math:`q` and of :math:`h`). :math:`\hat w` equals :math:`h\omega` for linear motion
only. For nonlinear motion it also measures how fast the acceleration changes along the orbit (the nonlinearity's own
contribution): the pendulum of ``python -m bea demo`` (:math:`h = 0.5`, :math:`h\omega \le 0.5`) gives a 99% quantile
of 1.04, at :math:`h = 0.6` 1.21 (seeds 0-3). Noise in the positions raises it more: for white noise alone
:math:`x` is about :math:`20/6` (:math:`\hat w \approx 2.3`) whatever the step; the pendulum at :math:`h = 0.05`,
where the step resolves the motion well, gives 0.08 clean and 1.1-1.5 with 1e-5 relative noise (by the draw).
Windows where :math:`\|\delta^2 q\|` is below 1e-3 of its RMS are left out; :math:`x` is clipped to :math:`[0, 4]`.

*Noise.* For white noise of variance :math:`\epsilon^2` the third differences :math:`\delta^3 q_k` (coefficients
1, -3, 3, -1) have variance :math:`20\epsilon^2` and lag-1 covariance :math:`-15\epsilon^2`: their lag-1
autocorrelation is :math:`-3/4`, while for a resolved motion it is near :math:`+1` (consecutive changes of the
acceleration nearly equal). Third, not second, differences: noise reaches the estimate through :math:`\delta^4`, and
second differences stay dominated by the motion long after (the noisy pendulum above: second-difference correlation
0.999, third-difference -0.13). :func:`noise_correlation` pools it over the data; below 0 the third differences are
more noise than motion and :math:`\hat w` says nothing about the step. Measured (seed 0; 5 steps, the pendulum 400
trajectories of 4 steps): every clean case 0.69 or above (pendulum :math:`h = 0.5` 0.74, :math:`h = 0.6` 0.69;
morse3 :math:`h = 0.2` 0.77; two_body4 0.76; anharmonic3 0.96; Henon-Heiles 0.99), the pendulum at :math:`h = 0.05` with relative noise 1e-6 0.97,
3e-6 0.79, 1e-5 -0.13.

*Why no warning.* No threshold on :math:`\hat w` separates "the step is too coarse" from "the motion is nonlinear" or
"the positions are noisy" on the cases measured (above; morse3 at :math:`h = 0.2`, where the truncation does dominate,
gives 1.37, between the pendulum's 1.21 and the noisy 1.1-1.5), and a warning with the wrong remedy (a smaller step
would make the noisy case worse) misleads. So :meth:`fit` records both numbers in ``model.history["step_resolution"]``
(``"estimate"``: the :data:`QUANTILE` quantile of :math:`\hat w`; ``"noise_correlation"``; ``"noise_dominated"``: the
correlation below 0) and issues nothing. It needs five snapshots per trajectory (fourth differences); with fewer there
is no record. Stage schemes are not checked.
"""

from __future__ import annotations

from typing import Optional

import torch

__all__ = ["step_resolution", "noise_correlation", "check_step_resolution", "second_differences", "QUANTILE"]

#: the quantile of the windows' estimates that is recorded: the stiffest percent of the data, not the single stiffest
#: window (one window is noise-prone)
QUANTILE = 0.99


def second_differences(S: torch.Tensor) -> torch.Tensor:
    r""":math:`q_{k+1} - 2q_k + q_{k-1}` along the snapshot axis of ``S`` (n_traj, m, n): (n_traj, m - 2, n)."""
    return S[:, 2:] - 2 * S[:, 1:-1] + S[:, :-2]


def step_resolution(S: torch.Tensor) -> Optional[torch.Tensor]:
    r""":math:`\hat w` in each five-snapshot window of snapshots ``S`` (n_traj, m, n) (module docstring), flattened;
    None when ``m < 5`` or no window has a usable second difference."""
    if S.shape[1] < 5:
        return None
    d2 = second_differences(S)
    d4 = second_differences(d2)
    a = d2[:, 1:-1]
    size = a.pow(2).sum(-1)
    ok = size > 1e-6 * size.mean()  # |d2 q| above 1e-3 of its RMS
    if not bool(ok.any()):
        return None
    x = (-(d4 * a).sum(-1)[ok] / size[ok]).clamp(0.0, 4.0)
    return 2 * torch.asin(x.sqrt() / 2)


def noise_correlation(S: torch.Tensor) -> Optional[float]:
    r"""Lag-1 autocorrelation of the third differences of snapshots ``S`` (n_traj, m, n), pooled over trajectories
    and coordinates: the mean product of consecutive third differences over their mean square (not centred: a
    trajectory of five snapshots has two, and centring them would take the motion's own trend for noise).
    :math:`-3/4` for white noise, near 1 for a resolved motion (module docstring); None when ``m < 5`` or the third
    differences vanish."""
    if S.shape[1] < 5:
        return None
    d3 = torch.diff(S, n=3, dim=1)
    power = float(d3.pow(2).mean())
    if not power > 0:
        return None
    return float((d3[:, 1:] * d3[:, :-1]).mean()) / power


def check_step_resolution(model, S: torch.Tensor) -> None:
    """Record the step-resolution estimate and the noise correlation in ``model.history["step_resolution"]`` (module
    docstring: a diagnostic, no warning)."""
    import bea

    if isinstance(model.scheme, bea.StageScheme):
        return
    w = step_resolution(S)
    if w is None:
        return
    rho = noise_correlation(S)
    model.history["step_resolution"] = {"estimate": float(torch.quantile(w, QUANTILE)), "noise_correlation": rho,
                                        "noise_dominated": rho is not None and rho < 0}
