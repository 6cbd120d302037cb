r"""The paper's prediction metrics for rollouts (ModLaNet paper, §5.2 and Table 2; docs/theory/modlanet.md).

Rollouts of a model and of the true system from the same initial states (see
:mod:`learners.neural.rollout`) are compared in the positions and in the *true* energy along both,
and summarised by mean and standard deviation over the initial states (:func:`rollout_metrics`). Two
statistics per state:

* :func:`mse_q`, :func:`mse_energy` -- mean squared errors over time (what "MSE" says);
* :func:`paper_statistic` -- what the paper's code actually prints as "MSE" in its Table 2:
  :math:`\lVert\hat x - x\rVert_F / T` over the 601 time points (a root, not a mean square). Only this
  one is comparable with the paper's numbers.

:func:`angles_mod_2pi` and :func:`pendulum_positions` map the coordinates before they are compared.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, Optional, Tuple

import torch

from bea.errors import BeaValueError
from integrators.trajectory import positions as positions_of  # a Trajectory or its positions

from .._checks import as_tensor
from .energy import Energy

__all__ = ["mse_q", "mse_energy", "paper_statistic", "rollout_metrics", "pendulum_positions", "angles_mod_2pi"]


def _pair(pred, ref, name: str) -> Tuple[torch.Tensor, torch.Tensor]:
    pred, ref = (as_tensor(positions_of(x), f"{name} ({what})") for x, what in ((pred, "prediction"), (ref, "reference")))
    if pred.shape != ref.shape or pred.dim() < 2:
        raise BeaValueError(f"prediction and reference must have the same shape (time, batch..., n) with time first, "
                         f"got {tuple(pred.shape)} and {tuple(ref.shape)}")
    if not bool(torch.isfinite(ref).all()):
        raise BeaValueError(f"the reference {name} contains non-finite values")
    return pred, ref


def mse_q(pred, ref, *, positions: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
          per_state: bool = False) -> torch.Tensor:
    r"""Position error of rollouts ``pred`` against ``ref``, both ``(T, batch..., n)``:

    .. math:: \mathrm{MSE}_q^{(b)} = \frac1T\sum_{t}\frac1n\sum_{i}\big(\hat q_i^{(b)}(t) - q_i^{(b)}(t)\big)^2,

    for each initial state ``b`` (a true mean square; the paper's Table 2 reports :func:`paper_statistic`
    instead); returns its mean over the initial states, or the vector ``(batch...)`` if ``per_state``.
    ``positions`` maps coordinates first (e.g. :func:`pendulum_positions` for Cartesian bob positions).
    A failed (NaN) prediction gives NaN for its state (see
    :func:`rollout_metrics`, which counts and excludes them).

    The paper's double pendulum is chaotic at its energies: over 30 s two *reference* solutions
    (DOP853 at rtol 1e-10 and 1e-13) already differ by MSE_q = 0.17 in Cartesian positions and 50 in
    unwrapped angles (20 states, 9 of them diverging; identical to 1e-13 up to 10 s). MSE_q at 30 s is
    therefore dominated by chaos; MSE_E (the true energy is conserved) is the informative number.

    Which positions: the paper's code compares the coordinates as integrated (unwrapped angles) in
    :func:`paper_statistic`, the number its Table 2 reports. For a mean square, unwrapped angles are
    meaningless on this chaotic system (chance level -- the reference against the reference of *another*
    initial state, 100 seed states, 30 s -- 1.5e4), so the experiments use angles mod :math:`2\pi`
    (``positions=angles_mod_2pi``, chance level 6.96; Cartesian positions 1.55). In the paper's statistic
    the chance level is 6.0 for unwrapped angles (its ModLaNet 1.28, HNN 4.91, baseline 3.42) and 0.15
    for angles mod :math:`2\pi`, below every entry of its table -- which confirms unwrapped angles there.
    """
    pred, ref = _pair(pred, ref, "positions")
    if positions is not None:
        pred, ref = positions(pred), positions(ref)
    per = ((pred - ref) ** 2).mean(-1).mean(0)
    return per if per_state else per.mean()


def _energies(pred_q, pred_v, ref_q, ref_v, energy: Energy) -> Tuple[torch.Tensor, torch.Tensor]:
    """The true energy along the prediction (NaN where it failed) and along the reference, each ``(T, batch...)``."""
    pq, rq = _pair(pred_q, ref_q, "positions")
    pv, rv = _pair(pred_v, ref_v, "velocities")
    if pq.shape != pv.shape:
        raise BeaValueError(f"positions and velocities must have the same shape, got {tuple(pq.shape)} and {tuple(pv.shape)}")
    with torch.no_grad():
        ok = torch.isfinite(pq).all(-1) & torch.isfinite(pv).all(-1)
        Ep = energy(torch.where(ok[..., None], pq, rq), torch.where(ok[..., None], pv, rv)).detach()
        Ep = torch.where(ok, Ep, torch.full_like(Ep, float("nan")))
        Er = energy(rq, rv).detach()
    return Ep, Er


def mse_energy(pred_q, pred_v, ref_q, ref_v, energy: Energy, *, reference: str = "trajectory",
               per_state: bool = False) -> torch.Tensor:
    r"""Energy error of rollouts, with the *true* energy :math:`E` (``energy(q, v)``, e.g.
    :func:`true_energy`) evaluated on both:

    .. math:: \mathrm{MSE}_E^{(b)} = \frac1T\sum_t \big(E(\hat q^{(b)}(t), \hat v^{(b)}(t)) - E_{ref}^{(b)}(t)\big)^2,

    with :math:`E_{ref}(t) = E(q(t), v(t))` along the reference (``reference="trajectory"``, the paper:
    the error is taken against the ground-truth trajectory, then averaged over time) or
    :math:`E(q(0), v(0))` (``"initial"``); the two agree to the reference solver's accuracy since
    :math:`E` is conserved. Mean over initial states, or ``(batch...)`` if ``per_state``.
    """
    if reference not in ("trajectory", "initial"):
        raise BeaValueError(f"reference must be 'trajectory' or 'initial', got {reference!r}")
    Ep, Er = _energies(pred_q, pred_v, ref_q, ref_v, energy)
    if reference == "initial":
        Er = Er[:1].expand_as(Er)
    per = ((Ep - Er) ** 2).mean(0)
    return per if per_state else per.mean()


def paper_statistic(pred, ref, *, per_state: bool = False) -> torch.Tensor:
    r"""The number the paper's code prints as "MSE" in Table 2 (``analysis/analyze-*.ipynb`` of
    YupuLu/ModLaNets): for each initial state ``b`` the Frobenius norm of the error over time and
    components divided by the number of time points,

    .. math:: e^{(b)} = \frac1T\Big(\sum_{t=1}^{T}\sum_i \big(\hat x_i^{(b)}(t) - x_i^{(b)}(t)\big)^2\Big)^{1/2}
              = \sqrt{k\,\mathrm{MSE}^{(b)}/T},

    with ``pred``, ``ref`` of shape ``(T, batch..., k)`` (``k`` coordinates, or ``k = 1`` for the energy).
    It is *not* a mean squared error: it scales as :math:`T^{-1/2}` and as the root of the MSE, so it is
    comparable with the paper's numbers only on the paper's grid (30 s at 20 per second, ``T = 601``).
    The paper applies it to the coordinates as integrated (Cartesian positions of the bodies; *unwrapped*
    angles of the pendulum) and to the true energy of each rollout. Returns the mean over states, or the
    vector ``(batch...)`` if ``per_state`` (NaN for a failed state)."""
    pred, ref = _pair(pred, ref, "values")
    T = pred.shape[0]
    per = ((pred - ref) ** 2).sum(-1).sum(0).sqrt() / T
    return per if per_state else per.mean()


def rollout_metrics(pred_q, pred_v, ref_q, ref_v, energy: Energy, *,
                    positions: Optional[Callable[[torch.Tensor], torch.Tensor]] = None) -> Dict[str, float]:
    """The paper's Table 2 entries for one model, each as the mean over the initial states that did not
    fail, with ``_std`` (over those states) and ``_median`` (the lower middle value for an even count; on
    chaotic systems a few close encounters dominate the mean):

    * ``mse_q``, ``mse_E``: mean squared errors over time (:func:`mse_q` with ``positions``, :func:`mse_energy`);
    * ``paper_q``, ``paper_E``: :func:`paper_statistic` of the coordinates as integrated and of the true
      energy -- the number the paper's code prints as "MSE" (comparable with its table on its 601-point grid);
    * ``failed``: the number of states whose rollout diverged (NaN) -- the paper writes "failed" when a
      model's rollouts break down -- and ``states``."""
    q_per = mse_q(pred_q, ref_q, positions=positions, per_state=True).reshape(-1)
    Ep, Er = _energies(pred_q, pred_v, ref_q, ref_v, energy)
    e_per = ((Ep - Er) ** 2).mean(0).reshape(-1)
    sq_per = paper_statistic(pred_q, ref_q, per_state=True).reshape(-1)
    se_per = paper_statistic(Ep[..., None], Er[..., None], per_state=True).reshape(-1)
    ok = torch.isfinite(q_per) & torch.isfinite(e_per)
    out = {"failed": int((~ok).sum()), "states": int(ok.numel())}
    for key, per in (("mse_q", q_per), ("mse_E", e_per), ("paper_q", sq_per), ("paper_E", se_per)):
        good = per[ok]
        out[key] = float(good.mean()) if good.numel() else float("nan")
        out[key + "_std"] = float(good.std(unbiased=False)) if good.numel() else float("nan")
        out[key + "_median"] = float(good.median()) if good.numel() else float("nan")
    return out


def angles_mod_2pi(theta: torch.Tensor) -> torch.Tensor:
    r""":math:`\theta \bmod 2\pi \in [0, 2\pi)`, elementwise: the comparison of positions that matches the
    paper's Table 2 for the double pendulum (see :func:`mse_q`)."""
    return torch.remainder(theta, 2 * math.pi)


def pendulum_positions(theta: torch.Tensor, lengths=1.0) -> torch.Tensor:
    r"""Cartesian bob positions of a pendulum chain from absolute angles (downward vertical, as in
    :func:`integrators.systems.n_pendulum`): :math:`x_i = \sum_{k\le i} l_k(\sin\theta_k, -\cos\theta_k)`;
    shape ``(..., n)`` to ``(..., 2n)``, on the device and in the dtype of ``theta``."""
    ls = torch.as_tensor(lengths, dtype=theta.dtype, device=theta.device)
    sx = torch.cumsum(ls * torch.sin(theta), -1)
    sy = torch.cumsum(-ls * torch.cos(theta), -1)
    return torch.stack([sx, sy], -1).reshape(*theta.shape[:-1], 2 * theta.shape[-1])
