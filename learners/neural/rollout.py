r"""Rollouts and the paper's prediction metrics (ModLaNet paper, §5.2 and Table 2; docs/theory/modlanet.md).

Protocol of the paper: from 100 random initial states (:func:`random_initial_states`, the paper's
sampling), integrate the learned model and the true system over 30 s (601 time points), compare the
positions and the *true* energy along both, and report mean and standard deviation over the initial
states (:func:`rollout_metrics`). Two statistics per state:

* :func:`mse_q`, :func:`mse_energy` -- mean squared errors over time (what "MSE" says);
* :func:`paper_statistic` -- what the paper's code actually prints as "MSE" in its Table 2:
  :math:`\lVert\hat x - x\rVert_F / T` over the 601 time points (a root, not a mean square). Only this
  one is comparable with the paper's numbers.

* :func:`rollout_ode` -- models with ``.acceleration(q, v)`` (ModLaNet, LNN, MLP baseline) or
  ``.time_derivative(q, v)`` (HNN, vector-field baseline), or a plain callable ``A(q, v)``.
  ``method="rk4"`` (default): classical fixed-step Runge--Kutta 4 in torch, all initial states as one
  batch, ``substeps`` steps per output interval. The paper uses SciPy's ``solve_ivp`` (RK45,
  ``rtol=1e-12``) one trajectory at a time; with 100 states and an autograd acceleration that is
  slow on 2 cores, and an adaptive solver stalls when a poorly trained model produces stiff or
  exploding fields (the paper's "failed" rows). A fixed step costs a known number of model calls,
  keeps the batch together and marks divergent trajectories as failed instead of stalling; its
  error is :math:`O(\Delta t^4)` (tests check the observed order against
  :func:`integrators.reference_flow`). ``method="RK45" | "DOP853" | ...`` runs ``solve_ivp`` on the
  whole batch as one system (as :func:`integrators.reference_flow` does), for checks.
* :func:`rollout_variational` -- Lagrangian models (ModLaNet, LNN, a ``bea`` series) through
  :class:`integrators.VariationalIntegrator`: :math:`p_0 = \partial L/\partial v(q_0, \dot q_0)`
  (or of ``legendre``), velocities from the discrete momenta.
* :func:`mse_q`, :func:`mse_energy`, :func:`paper_statistic`, :func:`rollout_metrics` -- the metrics.
* :func:`true_energy` -- the exact energy of an :mod:`integrators.systems` system (or of any torch
  Lagrangian through :func:`bea.energy`).

Example (the paper's protocol; an HNN rolls out in canonical coordinates)::

    system = integrators.systems.n_pendulum(2, g=9.8)
    q0, v0 = random_initial_states(system, 100, seed=0)
    ts = torch.linspace(0, 30, 601)
    qr, vr = integrators.reference_flow(system, q0, v0, ts)
    qm, vm = rollout_ode(model, q0, v0, ts, substeps=20)            # dt = 0.0025
    rollout_metrics(qm, vm, qr, vr, true_energy(system), positions=pendulum_positions)
    p0, _ = canonical_data(system, q0, v0)
    qh, ph = rollout_ode(hnn, q0, p0, ts, substeps=20)
    rollout_metrics(qh, velocities_from_momenta(system, qh, ph), qr, vr, true_energy(system))

Step size: with the paper's double-pendulum states (energies up to ~150) RK4 on the *true*
acceleration over 30 s gives MSE_E 0.47 at dt = 0.01 and 6e-7 at dt = 0.0025 (20 states), so
dt <= 0.0025 keeps the integrator's share far below the trained models' errors (ModLaNet MSE_E 2.4e-2).
"""

from __future__ import annotations

import math
import re
from typing import Callable, Dict, Optional, Tuple

import numpy as np
import torch
from scipy.integrate import solve_ivp

import bea
from integrators import VariationalIntegrator
from integrators._checks import check_states

from .._checks import as_tensor

__all__ = [
    "rollout_ode",
    "rollout_variational",
    "mse_q",
    "mse_energy",
    "paper_statistic",
    "rollout_metrics",
    "random_initial_states",
    "true_energy",
    "velocities_from_momenta",
    "pendulum_positions",
    "angles_mod_2pi",
]

Energy = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

#: a state whose largest entry exceeds this counts as diverged (the trajectory is marked failed)
BLOWUP = 1e8


# ---------------------------------------------------------------------------------------------- checks
def _tensor(x, name: str) -> torch.Tensor:
    return as_tensor(x, name)


def _initial(q0, v0) -> Tuple[torch.Tensor, torch.Tensor]:
    return check_states(q0, v0, names=("q0", "v0"))


def _times(times) -> torch.Tensor:
    ts = _tensor(times, "times")
    if ts.dim() != 1 or ts.numel() < 2:
        raise ValueError(f"times must be a 1-D sequence of at least two times, got shape {tuple(ts.shape)}")
    if not bool(torch.isfinite(ts).all()):
        raise ValueError("times contains non-finite values")
    if not bool((ts[1:] > ts[:-1]).all()):
        raise ValueError("times must be strictly increasing")
    return ts


def _field(model) -> Callable[[torch.Tensor, torch.Tensor], Tuple[torch.Tensor, torch.Tensor]]:
    """The first-order vector field ``(q, v) -> (qdot, vdot)`` of a model, detached."""
    if hasattr(model, "time_derivative"):
        def f(q, v):
            dq, dv = model.time_derivative(q, v, create_graph=False) if _takes_create_graph(model.time_derivative) \
                else model.time_derivative(q, v)
            return dq.detach(), dv.detach()
    elif hasattr(model, "acceleration"):
        def f(q, v):
            acc = model.acceleration
            a = acc(q, v, create_graph=False) if _takes_create_graph(acc) else acc(q, v)
            return v, a.detach()
    elif callable(model):
        def f(q, v):
            return v, _tensor(model(q, v), "the acceleration")
    else:
        raise TypeError(f"model must have .acceleration(q, v) or .time_derivative(q, v), or be a callable A(q, v); "
                        f"got {type(model).__name__}")
    return f


def _takes_create_graph(fn) -> bool:
    try:
        import inspect
        return "create_graph" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return False


# ---------------------------------------------------------------------------------------------- ODE rollouts
def rollout_ode(model, q0, v0, times, *, method: str = "rk4", substeps: int = 1, rtol: float = 1e-10,
                atol: float = 1e-10, progress: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""Integrate :math:`\ddot q = f(q, \dot q)` of ``model`` from ``(q0, v0)`` (shape ``(batch..., n)``)
    and return ``(q, v)`` at ``times``, each of shape ``(len(times), batch..., n)``, float64.

    ``times[0]`` is the time of the initial state. ``method="rk4"``: classical Runge--Kutta of order
    4 with ``substeps`` equal steps per interval of ``times`` (any increasing grid), batched, without
    parameter gradients; a trajectory whose state turns non-finite or exceeds :data:`BLOWUP` (or,
    for a model with a ``singular`` attribute such as :class:`~learners.neural.baselines.LNN`, meets a
    singular Hessian) is frozen at NaN from then on (count them with ``torch.isnan(q[-1]).any(-1)``). Other methods go
    to SciPy's ``solve_ivp`` (e.g. ``"RK45"`` as the paper, ``"DOP853"``) on the whole batch as one
    system, tolerances ``rtol``, ``atol``; a failure raises ``ValueError``. ``progress`` shows a
    ``tqdm`` bar (RK4).

    For an :class:`~learners.neural.baselines.HNN` (or a vector-field baseline) pass canonical
    ``(q0, p0)`` and read the second output as momenta.
    """
    q0, v0 = _initial(q0, v0)
    ts = _times(times)
    if isinstance(substeps, bool) or not isinstance(substeps, int) or substeps < 1:
        raise ValueError(f"substeps must be a positive integer, got {substeps!r}")
    f = _field(model)
    batch, n = q0.shape[:-1], q0.shape[-1]
    q, v = q0.reshape(-1, n).clone(), v0.reshape(-1, n).clone()
    # an LNN with a singular Hessian somewhere fails that trajectory only (NaN), not the batch
    singular = getattr(model, "singular", None)
    if singular is not None and method.lower() == "rk4":
        model.singular = "nan"
    try:
        if method.lower() == "rk4":
            qs, vs = _rk4(f, q, v, ts, substeps, progress)
        else:
            qs, vs = _scipy(f, q, v, ts, method, rtol, atol)
    finally:
        if singular is not None:
            model.singular = singular
    return qs.reshape(ts.numel(), *batch, n), vs.reshape(ts.numel(), *batch, n)


def _rk4(f, q, v, ts, substeps, progress):
    T, B, n = ts.numel(), q.shape[0], q.shape[1]
    qs = q.new_full((T, B, n), float("nan"))
    vs = q.new_full((T, B, n), float("nan"))
    qs[0], vs[0] = q, v
    alive = torch.ones(B, dtype=torch.bool)
    steps = range(1, T)
    if progress:
        from tqdm import tqdm
        steps = tqdm(steps, desc="rk4 rollout", leave=False)
    for k in steps:
        h = float(ts[k] - ts[k - 1]) / substeps
        for _ in range(substeps):
            if not bool(alive.any()):
                break
            qa, va = q[alive], v[alive]
            bad = torch.zeros(qa.shape[0], dtype=torch.bool)
            k1q, k1v = _stage(f, qa, va, bad)
            k2q, k2v = _stage(f, qa + 0.5 * h * k1q, va + 0.5 * h * k1v, bad)
            k3q, k3v = _stage(f, qa + 0.5 * h * k2q, va + 0.5 * h * k2v, bad)
            k4q, k4v = _stage(f, qa + h * k3q, va + h * k3v, bad)
            qn = qa + h / 6 * (k1q + 2 * k2q + 2 * k3q + k4q)
            vn = va + h / 6 * (k1v + 2 * k2v + 2 * k3v + k4v)
            ok = torch.isfinite(qn).all(-1) & torch.isfinite(vn).all(-1) & ~bad
            ok &= (qn.abs().amax(-1) < BLOWUP) & (vn.abs().amax(-1) < BLOWUP)
            idx = torch.nonzero(alive).squeeze(-1)
            q[idx], v[idx] = qn, vn
            dead = idx[~ok]
            q[dead], v[dead] = float("nan"), float("nan")
            alive[dead] = False
        qs[k], vs[k] = q, v
    return qs, vs


def _stage(f, q, v, bad):
    """One RK stage; rows whose field is not finite (or whose input already is not) are flagged in
    ``bad`` (in place) and get a zero field, so that they cannot spoil the others."""
    good = torch.isfinite(q).all(-1) & torch.isfinite(v).all(-1) & (q.abs().amax(-1) < BLOWUP) & (v.abs().amax(-1) < BLOWUP)
    dq = torch.zeros_like(q)
    dv = torch.zeros_like(v)
    if bool(good.any()):
        gq, gv = f(q[good], v[good]) if not bool(good.all()) else f(q, v)
        dq[good], dv[good] = gq, gv
    good &= torch.isfinite(dq).all(-1) & torch.isfinite(dv).all(-1)
    dq[~good], dv[~good] = 0.0, 0.0
    bad |= ~good
    return dq, dv


def _scipy(f, q, v, ts, method, rtol, atol):
    B, n = q.shape

    def rhs(t, y):
        s = torch.from_numpy(y.reshape(B, 2 * n))
        dq, dv = f(s[:, :n].contiguous(), s[:, n:].contiguous())
        return torch.cat([dq, dv], -1).reshape(-1).numpy()

    y0 = torch.cat([q, v], -1).reshape(-1).numpy()
    t = ts.numpy()
    sol = solve_ivp(rhs, (float(t[0]), float(t[-1])), y0, method=method, t_eval=t, rtol=rtol, atol=atol)
    if not sol.success or sol.y.shape[1] != t.size:
        raise ValueError(f"solve_ivp ({method}) failed: {sol.message}")
    y = torch.from_numpy(sol.y.T.copy()).reshape(t.size, B, 2 * n)
    return y[..., :n], y[..., n:]


# ---------------------------------------------------------------------------------------------- variational rollouts
def rollout_variational(lagrangian, q0, v0, h: float, steps: int, *, scheme="midpoint", legendre=None,
                        velocities: bool = True, progress: Optional[bool] = None, max_step: Optional[float] = None
                        ) -> Tuple[torch.Tensor, Optional[torch.Tensor], torch.Tensor]:
    r"""The variational integrator of ``scheme`` with step ``h`` for a Lagrangian model (any torch
    ``L(q, v)``: :class:`~learners.neural.baselines.LNN`, ModLaNet, a ``bea`` series, a system).

    Initial momentum :math:`p_0 = \partial L/\partial v(q_0, v_0)`, or of ``legendre`` (e.g.
    :math:`\mathrm{mod}_N(L_{inv})` for a model of the inverse modified Lagrangian). Returns
    ``(q, v, valid)``: positions ``(steps + 1, batch..., n)``, velocities (the Legendre inverse of the
    discrete momenta, :meth:`integrators.VariationalIntegrator.velocities`, with ``legendre`` if
    given; ``None`` if ``velocities=False``) and ``valid`` ``(steps + 1, batch...)``. A trajectory whose
    Newton solve fails -- or whose step lands farther than ``max_step`` from the last position (another
    root of the implicit step, see :class:`integrators.VariationalIntegrator`) -- is stopped (NaN,
    ``valid`` False) instead of raising. Parameters of an ``nn.Module`` are frozen during the rollout
    (and restored).
    """
    q0, v0 = _initial(q0, v0)
    modules = [m for m in (lagrangian, legendre) if isinstance(m, torch.nn.Module)]
    saved = [[p.requires_grad for p in m.parameters()] for m in modules]
    try:
        for m in modules:
            m.requires_grad_(False)
        vi = VariationalIntegrator(lagrangian, h, scheme, progress=progress, max_step=max_step)
        sol = vi.solve(q0, v0, steps, legendre=legendre, on_failure="mask")
        qs, valid = sol.q, sol.valid
        vs = None
        if velocities:
            vs = torch.full_like(qs, float("nan"))
            ok = valid.reshape(valid.shape[0], -1).all(0)  # trajectories valid to the end
            n = qs.shape[-1]
            qf = qs.reshape(qs.shape[0], -1, n)
            if bool(ok.any()):
                vf = vi.velocities(qf[:, ok], legendre)
                vs.reshape(qs.shape[0], -1, n)[:, ok] = vf
    finally:
        for m, flags in zip(modules, saved):
            for p, flag in zip(m.parameters(), flags):
                p.requires_grad_(flag)
    return qs, vs, valid


# ---------------------------------------------------------------------------------------------- metrics
def _pair(pred, ref, name: str) -> Tuple[torch.Tensor, torch.Tensor]:
    pred, ref = _tensor(pred, f"{name} (prediction)"), _tensor(ref, f"{name} (reference)")
    if pred.shape != ref.shape or pred.dim() < 2:
        raise ValueError(f"prediction and reference must have the same shape (time, batch..., n) with time first, "
                         f"got {tuple(pred.shape)} and {tuple(ref.shape)}")
    if not bool(torch.isfinite(ref).all()):
        raise ValueError(f"the reference {name} contains non-finite values")
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
        raise ValueError(f"positions and velocities must have the same shape, got {tuple(pq.shape)} and {tuple(pv.shape)}")
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
        raise ValueError(f"reference must be 'trajectory' or 'initial', got {reference!r}")
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
    shape ``(..., n)`` to ``(..., 2n)``."""
    ls = torch.as_tensor(lengths, dtype=theta.dtype)
    sx = torch.cumsum(ls * torch.sin(theta), -1)
    sy = torch.cumsum(-ls * torch.cos(theta), -1)
    return torch.stack([sx, sy], -1).reshape(*theta.shape[:-1], 2 * theta.shape[-1])


# ---------------------------------------------------------------------------------------------- systems
def true_energy(system) -> Energy:
    r"""A torch callable :math:`E(q, v)` for the exact energy :math:`p\cdot v - L`: ``system.energy`` of
    an :mod:`integrators.systems` system (symbolic, exact), else :func:`bea.energy` of a torch
    Lagrangian (autograd), returned detached."""
    if hasattr(system, "energy") and callable(system.energy) and hasattr(system, "expr"):
        return system.energy
    if not callable(system):
        raise TypeError(f"true_energy needs a System or a torch Lagrangian L(q, v), got {type(system).__name__}")
    H = bea.energy(system)
    return lambda q, v: H(q, v).detach()


def velocities_from_momenta(lagrangian, q, p, *, tol: float = 1e-12, maxiter: int = 30) -> torch.Tensor:
    r"""Invert the Legendre map: :math:`v` with :math:`\partial L/\partial v(q, v) = p`, by Newton's
    method from :math:`v = 0` (one step is exact for mechanical Lagrangians, quadratic in :math:`v`).
    Used to compare HNN rollouts in :math:`(q, p)` with the true energy :math:`E(q, v)`."""
    q, p = _tensor(q, "q"), _tensor(p, "p")
    if q.shape != p.shape or q.dim() < 1:
        raise ValueError(f"q and p must have the same shape (..., n), got {tuple(q.shape)} and {tuple(p.shape)}")
    n = q.shape[-1]
    qf, pf = q.reshape(-1, n), p.reshape(-1, n)
    ok = torch.isfinite(qf).all(-1) & torch.isfinite(pf).all(-1)   # failed rollouts (NaN) stay NaN
    out = torch.full_like(qf, float("nan"))
    qo, po = qf[ok], pf[ok]
    v = torch.zeros_like(qo)
    for _ in range(maxiter if qo.numel() else 0):
        with torch.enable_grad():
            vv = v.detach().requires_grad_(True)
            (gv,) = torch.autograd.grad(lagrangian(qo, vv).sum(), vv, create_graph=True)
            r = gv - po
            M = torch.stack([torch.autograd.grad(r[..., i].sum(), vv, retain_graph=True)[0] for i in range(n)], -2)
        dv = torch.linalg.solve(M.detach(), r.detach().unsqueeze(-1)).squeeze(-1)
        v = v - dv
        if float(dv.abs().max()) <= tol * (1 + float(v.abs().max())):
            break
    out[ok] = v.detach()
    return out.reshape(q.shape)


def random_initial_states(system, n: int = 100, seed: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""``n`` random initial states ``(q0, v0)`` (each ``(n, dof)``, float64) drawn as in the paper's code
    (``random_config`` of YupuLu/ModLaNets), deterministic in ``seed`` (NumPy ``default_rng``).

    ``system``: an :mod:`integrators.systems` system named ``"<k>-pendulum"`` or ``"<N>-body"``, or the
    strings ``"double_pendulum"`` / ``"three_body"``.

    * pendulum chain (unit masses and lengths, as the paper): each angle :math:`\theta_i \sim U(0, 2\pi)`,
      each angular velocity :math:`\omega_i \sim U(-10, 10)` (the paper draws a "momentum" in
      :math:`[-10, 10]` and divides it by :math:`m_i l_i^2 = 1`);
    * ``N`` bodies (unit masses, G = 1): a point :math:`p_0 \sim U([-1, 1]^2)` rescaled to radius
      :math:`r \sim U(1, 5)`; body ``i`` at :math:`R(2\pi i/N)\,p_0`; velocity
      :math:`R(2\pi i/N)\big[\hat t\, s \odot (1 + \nu\, u_i)\big]`, with :math:`\hat t` the unit tangent,
      :math:`u_i \sim U([-1, 1]^2)`, :math:`\nu = 0.5` and
      :math:`s^2 = \frac{1}{2r}\sum_{k=1}^{N-1} 1/\sin(\pi k/N)`, the paper's formula. That base speed
      is :math:`\sqrt2` times the circular-orbit speed of the regular polygon
      (:math:`\frac{1}{4r}\sum_k 1/\sin(\pi k/N)`), so many states are unbound -- the paper notes that
      particles often escape.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    name = system if isinstance(system, str) else getattr(system, "name", "")
    name = {"double_pendulum": "2-pendulum", "three_body": "3-body"}.get(name, name)
    rng = np.random.default_rng(seed)
    m = re.fullmatch(r"(\d+)-pendulum", name or "")
    if m:
        k = int(m.group(1))
        u = rng.random((n, k, 2))
        q0 = 2 * math.pi * u[..., 0]
        v0 = (2 * u[..., 1] - 1) * 10.0
        return torch.from_numpy(q0), torch.from_numpy(v0)
    m = re.fullmatch(r"(\d+)-body", name or "")
    if m:
        N = int(m.group(1))
        nu, r_min, r_max = 0.5, 1.0, 5.0
        theta = 2 * math.pi / N
        speed2_r = sum(1 / math.sin(math.pi * k / N) for k in range(1, N)) / 2  # s^2 * r
        q0, v0 = np.zeros((n, 2 * N)), np.zeros((n, 2 * N))
        for b in range(n):
            p0 = 2 * rng.random(2) - 1
            r = rng.random() * (r_max - r_min) + r_min
            p0 *= r / np.linalg.norm(p0)
            tangent = _rotate(p0 / np.linalg.norm(p0), math.pi / 2)
            s = math.sqrt(speed2_r / r)
            for i in range(N):
                q0[b, 2 * i: 2 * i + 2] = _rotate(p0, i * theta)
                vel = tangent * s * (1 + nu * (2 * rng.random(2) - 1))
                v0[b, 2 * i: 2 * i + 2] = _rotate(vel, i * theta)
        return torch.from_numpy(q0), torch.from_numpy(v0)
    raise ValueError(f"random_initial_states knows pendulum chains ('<k>-pendulum', 'double_pendulum') and N-body systems "
                     f"('<N>-body', 'three_body'), got {name!r}")


def _rotate(x: np.ndarray, angle: float) -> np.ndarray:
    c, s = math.cos(angle), math.sin(angle)
    return np.array([c * x[0] - s * x[1], s * x[0] + c * x[1]])
