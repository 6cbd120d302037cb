r"""Rollouts of learned models (ModLaNet paper, §5.2 and Table 2; docs/theory/modlanet.md).

Protocol of the paper: from 100 random initial states (:func:`~learners.neural.initial_states.random_initial_states`,
the paper's sampling), integrate the learned model and the true system over 30 s (601 time points), compare the
positions and the *true* energy along both, and report mean and standard deviation over the initial
states (:func:`~learners.neural.metrics.rollout_metrics`; the metrics are in :mod:`learners.neural.metrics`,
the true energy in :mod:`learners.neural.energy`).

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

The metrics, the true energy and the initial states are re-exported here, where they were defined
before the split, so that ``from learners.neural.rollout import mse_q`` keeps working.

Example (the paper's protocol; an HNN rolls out in canonical coordinates)::

    system = integrators.systems.n_pendulum(2, g=9.8)
    q0, v0 = random_initial_states(system, 100, seed=0)
    ts = torch.linspace(0, 30, 601)
    ref = integrators.reference_flow(system, q0, v0, ts)            # a Trajectory: ref.q, ref.v, ref.t
    qr, vr = ref.q, ref.v
    m = rollout_ode(model, q0, v0, ts, substeps=20)                 # dt = 0.0025: m.q, m.v
    rollout_metrics(m.q, m.v, qr, vr, true_energy(system), positions=pendulum_positions)
    p0, _ = canonical_data(system, q0, v0)
    c = rollout_ode(hnn, q0, p0, ts, substeps=20)                   # canonical: c.q, c.p
    rollout_metrics(c.q, velocities_from_momenta(system, c.q, c.p), qr, vr, true_energy(system))

Step size: with the paper's double-pendulum states (energies up to ~150) RK4 on the *true*
acceleration over 30 s gives MSE_E 0.47 at dt = 0.01 and 6e-7 at dt = 0.0025 (20 states), so
dt <= 0.0025 keeps the integrator's share far below the trained models' errors (ModLaNet MSE_E 2.4e-2).
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

import torch
from scipy.integrate import solve_ivp

from integrators import Trajectory, VariationalIntegrator
from integrators._checks import check_states

from bea.deprecation import renamed
from bea.errors import BeaTypeError, BeaValueError

from .._checks import as_tensor
from .energy import true_energy, velocities_from_momenta
from .initial_states import random_initial_states
from .metrics import angles_mod_2pi, mse_energy, mse_q, paper_statistic, pendulum_positions, rollout_metrics

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
        raise BeaValueError(f"times must be a 1-D sequence of at least two times, got shape {tuple(ts.shape)}")
    if not bool(torch.isfinite(ts).all()):
        raise BeaValueError("times contains non-finite values")
    if not bool((ts[1:] > ts[:-1]).all()):
        raise BeaValueError("times must be strictly increasing")
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
        raise BeaTypeError(f"model must have .acceleration(q, v) or .time_derivative(q, v), or be a callable A(q, v); "
                        f"got {type(model).__name__}")
    return f


def _canonical(model) -> bool:
    """Whether ``model`` steps canonical states ``(q, p)``: its ``time_derivative`` names its second argument p."""
    import inspect

    td = getattr(model, "time_derivative", None)
    try:
        return td is not None and list(inspect.signature(td).parameters)[1:2] == ["p"]
    except (TypeError, ValueError):  # a builtin without a signature: not canonical by declaration
        return False


def _takes_create_graph(fn) -> bool:
    try:
        import inspect
        return "create_graph" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return False


# ---------------------------------------------------------------------------------------------- ODE rollouts
def rollout_ode(model, q0, v0, times, *, method: str = "rk4", substeps: int = 1, rtol: float = 1e-10,
                atol: float = 1e-10, progress: Optional[bool] = None) -> Trajectory:
    r"""Integrate :math:`\ddot q = f(q, \dot q)` of ``model`` from ``(q0, v0)`` (shape ``(batch..., n)``)
    and return a :class:`~integrators.Trajectory` at ``t = times``: positions ``q`` and velocities ``v`` (momenta
    ``p`` for a canonical model, below), each of shape ``(len(times), batch..., n)``, float64; ``valid`` False
    where a trajectory was frozen at NaN. (It unpacks as the ``(q, v)`` returned before, with a
    ``DeprecationWarning``.)

    ``times[0]`` is the time of the initial state. ``method="rk4"``: classical Runge--Kutta of order
    4 with ``substeps`` equal steps per interval of ``times`` (any increasing grid), batched, without
    parameter gradients; a trajectory whose state turns non-finite or exceeds :data:`BLOWUP` (or,
    for a model with a ``singular`` attribute such as :class:`~learners.neural.baselines.LNN`, meets a
    singular Hessian) is frozen at NaN from then on (count them with ``torch.isnan(q[-1]).any(-1)``). Other methods go
    to SciPy's ``solve_ivp`` (e.g. ``"RK45"`` as the paper, ``"DOP853"``) on the whole batch as one
    system, tolerances ``rtol``, ``atol``; a failure raises ``ValueError``. ``progress`` shows a
    ``tqdm`` bar (RK4): ``True`` always, ``False`` never, ``None`` (default, as everywhere) on a terminal.

    For an :class:`~learners.neural.baselines.HNN` (a model whose ``time_derivative`` takes ``(q, p)``) pass
    canonical ``(q0, p0)``; the result carries ``p`` instead of ``v``.
    """
    q0, v0 = _initial(q0, v0)
    ts = _times(times)
    if isinstance(substeps, bool) or not isinstance(substeps, int) or substeps < 1:
        raise BeaValueError(f"substeps must be a positive integer, got {substeps!r}")
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
    qs, vs = qs.reshape(ts.numel(), *batch, n), vs.reshape(ts.numel(), *batch, n)
    second = "p" if _canonical(model) else "v"
    return Trajectory(qs, torch.isfinite(qs).all(-1), t=ts.to(qs), **{second: vs}, legacy=("q", second), legacy_tuple=True)


def _rk4(f, q, v, ts, substeps, progress):
    T, B, n = ts.numel(), q.shape[0], q.shape[1]
    qs = q.new_full((T, B, n), float("nan"))
    vs = q.new_full((T, B, n), float("nan"))
    qs[0], vs[0] = q, v
    alive = torch.ones(B, dtype=torch.bool, device=q.device)
    steps = range(1, T)
    if progress is not False:
        from tqdm import tqdm
        steps = tqdm(steps, desc="rk4 rollout", leave=False, disable=None if progress is None else not progress)
    for k in steps:
        h = float(ts[k] - ts[k - 1]) / substeps
        for _ in range(substeps):
            if not bool(alive.any()):
                break
            qa, va = q[alive], v[alive]
            bad = torch.zeros(qa.shape[0], dtype=torch.bool, device=qa.device)
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

    # SciPy integrates on the host; the model is evaluated where the data are
    def rhs(t, y):
        s = torch.from_numpy(y.reshape(B, 2 * n)).to(q.device)
        dq, dv = f(s[:, :n].contiguous(), s[:, n:].contiguous())
        return torch.cat([dq, dv], -1).reshape(-1).cpu().numpy()

    y0 = torch.cat([q, v], -1).reshape(-1).cpu().numpy()
    t = ts.cpu().numpy()
    sol = solve_ivp(rhs, (float(t[0]), float(t[-1])), y0, method=method, t_eval=t, rtol=rtol, atol=atol)
    if not sol.success or sol.y.shape[1] != t.size:
        raise BeaValueError(f"solve_ivp ({method}) failed: {sol.message}")
    y = torch.from_numpy(sol.y.T.copy()).reshape(t.size, B, 2 * n).to(q.device)
    return y[..., :n], y[..., n:]


# ---------------------------------------------------------------------------------------------- variational rollouts
@renamed(v0="qdot0")
def rollout_variational(lagrangian, q0, qdot0, h: float, steps: int, *, scheme="midpoint", legendre=None,
                        velocities: bool = True, progress: Optional[bool] = None, max_step: Optional[float] = None
                        ) -> Trajectory:
    r"""The variational integrator of ``scheme`` with step ``h`` for a Lagrangian model (any torch
    ``L(q, v)``: :class:`~learners.neural.baselines.LNN`, ModLaNet, a ``bea`` series, a system).

    Initial momentum :math:`p_0 = \partial L/\partial v(q_0, \dot q_0)`, or of ``legendre`` (e.g.
    :math:`\mathrm{mod}_N(L_{inv})` for a model of the inverse modified Lagrangian). Returns a
    :class:`~integrators.Trajectory`: positions ``q`` ``(steps + 1, batch..., n)``, velocities ``v`` (the Legendre
    inverse of the discrete momenta, :meth:`integrators.VariationalIntegrator.velocities`, with ``legendre`` if
    given; ``None`` if ``velocities=False``), ``valid`` ``(steps + 1, batch...)`` and times ``t``. (It unpacks as
    the ``(q, v, valid)`` returned before, with a ``DeprecationWarning``.) A trajectory whose
    Newton solve fails -- or whose step lands farther than ``max_step`` from the last position (another
    root of the implicit step, see :class:`integrators.VariationalIntegrator`) -- is stopped (NaN,
    ``valid`` False) instead of raising. Parameters of an ``nn.Module`` are frozen during the rollout
    (and restored).
    """
    q0, qdot0 = _initial(q0, qdot0)
    modules = [m for m in (lagrangian, legendre) if isinstance(m, torch.nn.Module)]
    saved = [[p.requires_grad for p in m.parameters()] for m in modules]
    try:
        for m in modules:
            m.requires_grad_(False)
        vi = VariationalIntegrator(lagrangian, h, scheme, progress=progress, max_step=max_step)
        sol = vi.solve(q0, qdot0, steps, legendre=legendre, on_failure="mask")
        qs, valid = sol.q, sol.valid
        vs = None
        if velocities:
            vs = torch.full_like(qs, float("nan"))
            ok = valid.reshape(valid.shape[0], -1).all(0)  # trajectories valid to the end
            n = qs.shape[-1]
            qf = qs.reshape(qs.shape[0], -1, n)
            if bool(ok.any()):
                # from the march's own momenta (the same as vi.momenta of the positions, not recomputed)
                vf = vi.velocities(qf[:, ok], legendre, momenta=sol.p.reshape(qf.shape)[:, ok])
                vs.reshape(qs.shape[0], -1, n)[:, ok] = vf
    finally:
        for m, flags in zip(modules, saved):
            for p, flag in zip(m.parameters(), flags):
                p.requires_grad_(flag)
    return Trajectory(qs, valid, t=sol.t, p=sol.p, v=vs, stats=sol.stats, legacy=("q", "v", "valid"), legacy_tuple=True)
