r"""Identification from positions only in higher dimension (issue 16): :math:`H_{rec}[0/2/4]` with their
posterior uncertainty, and the two position-only learners side by side.

Two experiments, :func:`run` executes both and returns a :class:`IdentificationResults`:

**chain** (``n = 4``): the FPU-:math:`\beta` chain of 4 unit masses with fixed ends
(:func:`integrators.systems.fpu_chain`), position snapshots at ``h = 0.45`` from initial states in
:math:`[-0.6, 0.6]^{8}`; the LSI GP (:class:`~learners.InverseModifiedLagrangianGP`, midpoint rule). Reported:
the trajectory error of the LSI prediction against the exact flow (:func:`integrators.reference_flow`), the
level-set errors of :math:`H_{rec}[0]`, :math:`H_{rec}[2]`, :math:`H_{rec}[4]` (mean
:math:`\sin\angle(\nabla H, \nabla H_{true})` at Halton states inside the data's box), the energy along the
prediction with its :math:`\pm2\sigma` band, velocity errors, z-scores of held-out energy differences, fit and
prediction times.

*Why this chain, this step and these lengthscales.* A chain of 4 pendula was tried first: with the
likelihood as hyperparameter objective the search runs to lengthscales of 0.1-0.25 of the data's spread with
an outputscale of 1e-17 at ``n >= 3`` and identifies nothing (level-set error 0.73 at 200 trajectories);
with a fixed lengthscale it reaches 0.12 (``h = 0.2``, 200 trajectories), where the GP's own error hides the
:math:`h^2` correction. Linear chains (coupled oscillators) cannot be identified at all: every combination of
their normal modes' Lagrangians has the same motions. The FPU chain is nonlinear and coupled. The step: with
the *exact* inverse modified Lagrangian (:math:`\mathrm{inv}_6`, no GP) the level-set errors of
:math:`H_{rec}[2]`/:math:`H_{rec}[4]` on this box are 0.0159/0.0056 at ``h = 0.5`` (a gain of 2.8 at best),
0.0052/0.0010 at ``h = 0.4``; ``h = 0.45`` leaves room for the GP's own error. The lengthscales (one for the
positions, one for the velocities, in the data's units) are those that the ``"positions"`` objective
(:mod:`learners.shadow.position_objective`) selects on the CI data -- 1.57 and 12.6 -- rounded and fixed,
because that search (a 30-point grid and 9 refinement solves with every training functional) takes minutes;
``lengthscale=None`` (``--learn``) repeats it.

**double pendulum** (``n = 2``, position-dependent mass): the data of the ModLaNet experiment
(:func:`learners.modlanet.data.pendulum_chain_snapshots` with the settings of
:data:`pipelines.modlanet_experiments.SMALL`/``FULL``), the ModLaNet position-only pipeline
(:func:`pipelines.modlanet_experiments.run`, acceleration training and baselines cut to the minimum) and the GP
on the same snapshots and ``h``, rolled out from the same initial states; MSE of positions and true energy,
level-set errors of :math:`H_{rec}[0/2]` (and :math:`H_{rec}[4]` for the GP) at the same states of the exact
flow, training times.

Sizes: :data:`CI` (default) and :data:`FULL` (``BEA_FULL=1``, :func:`default_config`). Command line::

    python -m pipelines.identification            # CI size (a few minutes on 2 cores)
    BEA_FULL=1 python -m pipelines.identification # full size
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from learners import InverseModifiedLagrangianGP
from learners.metrics import max_trajectory_error

from bea.errors import BeaValueError

from .identification_report import figure, table
from .shadow_experiments import _level_sets, _level_states, _strided_velocities, _timed

__all__ = ["IdentificationConfig", "IdentificationResults", "CI", "FULL", "default_config", "run", "run_chain",
           "run_double_pendulum", "fit_chain", "chain_system", "level_set_errors", "table", "figure", "main"]


@dataclass(frozen=True)
class IdentificationConfig:
    """Sizes of both experiments. Chain: ``chain_n`` masses, ``n_traj`` x ``n_steps`` snapshots at ``h``,
    initial states uniform in ``[-amplitude, amplitude]^{2n}``; level sets at ``level_points`` Halton states
    of ``[-level_fraction * amplitude, ...]^{2n}``; prediction of ``steps`` steps from ``q0, qdot0`` with the
    band at every ``band_every``-th step; ``heldout`` states for z-scores. Double pendulum: ``modlanet``
    (``"small"`` or ``"full"``: which ModLaNet configuration's position-only data and training) and
    ``modlanet_epochs`` (None: that configuration's)."""

    chain_n: int = 4
    beta: float = 1.0
    h: float = 0.45
    n_traj: int = 200
    n_steps: int = 5
    amplitude: float = 0.6
    #: RBF lengthscales (positions, velocities) in the data's units (None: learned, objective "positions")
    lengthscale: Optional[Tuple[float, float]] = (1.6, 12.6)
    data_seed: int = 0
    level_points: int = 40
    level_fraction: float = 0.7
    orders: Tuple[int, ...] = (2, 4)
    q0: Tuple[float, ...] = (0.3, -0.2, 0.1, 0.25)
    qdot0: Tuple[float, ...] = (0.0, 0.2, -0.1, 0.0)
    steps: int = 60
    band_every: int = 4
    velocity_every: int = 10  #: order-4 velocities at every k-th predicted step (autograd through mod_4 at n = 4)
    heldout: int = 30
    heldout_orders: Tuple[int, ...] = (2, 4)  #: orders of the held-out z-scores (N = 4: a third of the states)
    double_pendulum: bool = True
    modlanet: str = "small"
    modlanet_epochs: Optional[int] = None
    gp_max_train_functionals: int = 400
    progress: Optional[bool] = None


#: CI size: the chain at 200 trajectories, 40 level-set states, a 60-step prediction; the double pendulum at the
#: ModLaNet SMALL size (16 x 15 snapshots, 25 epochs)
CI = IdentificationConfig()
#: full size (``BEA_FULL=1``): 400 trajectories, 200 level-set states, 200-step prediction; the double pendulum
#: with the ModLaNet SMALL data and 200 epochs (the FULL position-only data, 300 x 100 snapshots, is beyond a
#: GP's dense solve)
FULL = replace(CI, n_traj=400, level_points=200, steps=200, band_every=10, velocity_every=20, heldout=100,
               modlanet_epochs=200, gp_max_train_functionals=800)


def default_config() -> IdentificationConfig:
    """:data:`FULL` when the environment variable ``BEA_FULL`` is ``1``, else :data:`CI`."""
    return FULL if os.environ.get("BEA_FULL", "") == "1" else CI


@dataclass
class IdentificationResults:
    """``chain``: metrics (floats); ``chain_timings``; ``chain_series``: tensors for the figures;
    ``double_pendulum``: one row per learner (``model, mse_q, mse_E, ls0, ls2, ls4, train_s, ...``)."""

    config: IdentificationConfig
    chain: Dict[str, float]
    chain_timings: Dict[str, float]
    chain_series: Dict[str, torch.Tensor]
    double_pendulum: List[Dict[str, Any]] = field(default_factory=list)
    models: Dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------- chain (n >= 4)
@dataclass
class _Box:  # what shadow_experiments._level_states reads
    level_box: Sequence[Tuple[float, float]]
    level_points: int


def chain_system(cfg: IdentificationConfig):
    """The FPU-beta chain of ``cfg.chain_n`` unit masses (:func:`integrators.systems.fpu_chain`)."""
    from integrators import systems

    return systems.fpu_chain(cfg.chain_n, beta=cfg.beta)


def fit_chain(cfg: IdentificationConfig, system, timings: Dict[str, float], calibrate: bool = True) -> InverseModifiedLagrangianGP:
    """Snapshots of ``system`` (:func:`chain_system`) and the LSI GP fitted on them (``calibrate``: its variances
    calibrated when the lengthscale is fixed, :func:`_calibrate`); wall times into ``timings``."""
    from integrators.data import snapshots

    n = cfg.chain_n
    dom = [(-cfg.amplitude, cfg.amplitude)] * (2 * n)
    S = _timed(timings, "data", snapshots, system, cfg.h, cfg.n_traj, cfg.n_steps, domain=dom, seed=cfg.data_seed)
    opts: Dict[str, Any] = dict(progress=cfg.progress, max_train_functionals=cfg.gp_max_train_functionals)
    if cfg.lengthscale is not None:
        opts["lengthscale"] = [float(cfg.lengthscale[0])] * n + [float(cfg.lengthscale[1])] * n
    else:  # the whole training set: the best lengthscales shrink as the data grow; the RBF, whose lengthscales the
        # configurations fix (kernel="auto", the default, may keep the mechanical kernel at n >= 3)
        opts.update(objective="positions", kernel="rbf", iterations=8, max_train_functionals=cfg.n_traj * cfg.n_steps * n)
    lsi = _timed(timings, "fit", InverseModifiedLagrangianGP(cfg.h, **opts).fit, S)
    if calibrate and cfg.lengthscale is not None:
        _timed(timings, "calibrate", _calibrate, cfg, system, lsi, dom)
    return lsi


def _calibrate(cfg: IdentificationConfig, system, lsi: InverseModifiedLagrangianGP, dom) -> None:
    r"""With a fixed lengthscale the model skips the calibration step of its hyperparameter search (the variance
    scale that puts 95.4% of held-back DEL residuals within :math:`2\sigma`, :mod:`learners.shadow.hyperparameters`);
    the same step here, on ``n_traj / 4`` fresh trajectories of the same box. Only the variances change."""
    from integrators.data import snapshots

    Sv = snapshots(system, cfg.h, max(5, cfg.n_traj // 4), cfg.n_steps, domain=dom, seed=cfg.data_seed + 1000)
    r, sd = lsi.del_residuals(Sv)
    ok = sd > 0
    z = (r[ok].abs() / sd[ok]).reshape(-1)
    factor = float((torch.quantile(z, 0.954) / 2) ** 2)
    if math.isfinite(factor) and factor > 0:
        lsi.gp.variance_scale = lsi.gp.variance_scale * factor


def run_chain(cfg: IdentificationConfig = CI, log=print):
    """The chain experiment: returns ``(metrics, timings, series, model)`` (module docstring)."""
    from integrators import reference_flow

    log = log or (lambda *a, **k: None)
    system = chain_system(cfg)
    n, h = cfg.chain_n, cfg.h
    if len(cfg.q0) != n or len(cfg.qdot0) != n:
        raise BeaValueError(f"q0 and qdot0 need {n} entries each (chain_n = {n}), got {len(cfg.q0)} and {len(cfg.qdot0)}")
    timings: Dict[str, float] = {}
    m: Dict[str, float] = {}
    lsi = fit_chain(cfg, system, timings)
    log(f"chain: {system.name}, {cfg.n_traj} x {cfg.n_steps} snapshots at h = {h}; fit in {timings['fit']:.1f} s")
    # prediction against the exact flow
    q0 = torch.tensor([list(cfg.q0)], dtype=torch.float64)
    v0 = torch.tensor([list(cfg.qdot0)], dtype=torch.float64)
    times = h * torch.arange(cfg.steps + 1, dtype=torch.float64)
    flow = reference_flow(system, q0, v0, times)
    q_ref, v_ref = flow.q, flow.v
    q = _timed(timings, "predict", lsi.predict, q0, v0, cfg.steps, order=2, on_extrapolation="ignore").q
    m["traj"] = max_trajectory_error(q, q_ref)
    m.update(level_set_errors(cfg, lsi, system, (0, *cfg.orders), cfg.level_points, timings))
    log("chain level-set errors: " + ", ".join(f"H_rec[{N}] {m[f'ls{N}']:.3g}" for N in (0, *cfg.orders)))
    series = dict(times=times, q=q[:, 0], q_ref=q_ref[:, 0])
    _band(cfg, lsi, system, q, q_ref, v_ref, m, timings, series)
    _heldout(cfg, lsi, system, m, timings, series)
    return m, timings, series, lsi


def level_set_errors(cfg: IdentificationConfig, lsi, system, orders: Sequence[int], points: int,
                     timings: Optional[Dict[str, float]] = None) -> Dict[str, float]:
    r"""``{"ls{N}": mean level-set error of H_rec[N]}`` at the first ``points`` Halton states of the box
    ``[-level_fraction * amplitude, ...]^{2n}`` (inside the data's)."""
    a = cfg.level_fraction * cfg.amplitude
    states = _level_states(_Box([(-a, a)] * (2 * cfg.chain_n), points), cfg.chain_n)
    out = {}
    for N in orders:
        t = time.perf_counter()
        out[f"ls{N}"] = _level_sets({}, "", lsi.energy(N), system.energy, states, chunk=64)
        if timings is not None:
            timings[f"level_sets{N}"] = time.perf_counter() - t
    return out


def _band(cfg, lsi, system, q, q_ref, v_ref, m, timings, series) -> None:
    r"""Velocity errors (order 2 everywhere, order 4 at every ``velocity_every``-th step) and :math:`H_{rec}[2] - H_{rec}[2](0)` along the
    prediction with its posterior std (GP part) at every ``band_every``-th step."""
    every = cfg.band_every
    v2 = _timed(timings, "velocities2", lsi.velocities, q, order=2)
    m["vel2"] = float((v2 - v_ref).abs().max())
    idx = torch.arange(cfg.velocity_every, cfg.steps + 1, cfg.velocity_every)
    if 4 in cfg.orders:
        v4 = _timed(timings, "velocities4", _strided_velocities, lsi, q, 4, idx)
        m["vel4"] = float((v4 - v_ref[idx]).abs().max())
    # GP part only: the first omitted term would need H_rec[4] at every predicted step (about 4 s each at n = 4)
    E, std = _timed(timings, "band", lsi.energies, q, order=2, return_std=True, std_every=every, reference_index=0,
                    truncation=False)
    E, std = E[:, 0], std[:, 0]
    true = (system.energy(q_ref, v_ref) - system.energy(q_ref[:1], v_ref[:1]))[:, 0]
    rows = torch.arange(0, cfg.steps + 1, every)
    m["band2"] = float(E.max() - E.min())
    m["band2_std_mean"] = float(std[rows[1:]].mean())
    m["true_energy_spread"] = float(system.energy(*_states_in_box(cfg, 64, 5)).std())
    series.update(E2=E, E2_std=std, band_rows=rows, true_E=true)


def _states_in_box(cfg: IdentificationConfig, count: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    a = cfg.level_fraction * cfg.amplitude
    x = a * (2 * torch.rand(count, 2 * cfg.chain_n, generator=g, dtype=torch.float64) - 1)
    return x[:, :cfg.chain_n].contiguous(), x[:, cfg.chain_n:].contiguous()


def _heldout(cfg, lsi, system, m, timings, series) -> None:
    r"""z-scores of held-out energy differences :math:`H_{rec}[N](x) - H_{rec}[N](x_r)` against the true ones times
    the scale of the normalisation's units (least squares over the held-out states: one number, since the
    energy is identified up to scale and constant), the first omitted term (:math:`H_{rec}[N+2] - H_{rec}[N]`) in
    the std."""
    q, v = _states_in_box(cfg, cfg.heldout + 1, 11)
    qr, vr = q[0], v[0]
    q, v = q[1:], v[1:]
    true = (system.energy(q, v) - system.energy(qr[None], vr[None])).detach()
    for N in cfg.heldout_orders:
        t = time.perf_counter()
        k = cfg.heldout if N <= 2 else max(10, cfg.heldout // 3)
        q, v, tr = q[:k], v[:k], true[:k]
        mean, std = lsi.energy(N, return_std=True, reference=(qr, vr))(q, v)
        timings[f"heldout{N}"] = time.perf_counter() - t
        s = float((mean * tr).sum() / (tr * tr).sum())
        z = (mean - s * tr) / std
        m[f"calib{N}"] = float((z.abs() <= 2).double().mean())
        m[f"std{N}_mean"] = float(std.mean())
        series[f"z{N}"] = z


# ---------------------------------------------------------------------------------------------- double pendulum
def _modlanet_config(cfg: IdentificationConfig):
    from .modlanet_experiments import FULL as ML_FULL, SMALL as ML_SMALL

    if cfg.modlanet not in ("small", "full"):
        raise BeaValueError(f"modlanet must be 'small' or 'full' (which ModLaNet configuration's data), got {cfg.modlanet!r}")
    base = (ML_SMALL if cfg.modlanet == "small" else ML_FULL)["double_pendulum"]
    epochs = cfg.modlanet_epochs or base.del_epochs
    # the acceleration-trained model and its rollouts are not compared here: one epoch, no baselines, no extension
    return replace(base, baselines=(), extend_to=(), epochs=1, variational_h=None, del_epochs=epochs, progress=cfg.progress)


def run_double_pendulum(cfg: IdentificationConfig = CI, log=print) -> List[Dict[str, Any]]:
    r"""GP and ModLaNet from the same position snapshots of the double pendulum at the same ``h`` (module
    docstring): one row each with ``mse_q``, ``mse_E`` (rollouts from the same initial states against the exact
    flow), level-set errors ``ls0``, ``ls2`` (``ls4`` for the GP), ``train_s`` and ``predict_s``."""
    from integrators import systems
    from learners.metrics import level_set_error
    from learners.modlanet.data import pendulum_chain_data, pendulum_chain_snapshots
    from learners.neural.rollout import angles_mod_2pi, rollout_metrics, true_energy

    from .modlanet_experiments import run as modlanet_run

    log = log or (lambda *a, **k: None)
    mc = _modlanet_config(cfg)
    out = modlanet_run(mc, log=lambda s: None)
    po, ref, tm = out["position_only"], out["reference"], out["timings"]
    ml = {"model": "ModLaNet (positions, DEL)", "mse_q": po["mse_q"], "mse_E": po["mse_E"], "failed": po["failed"],
          "ls0": po["level_set"][0], "ls2": po["level_set"][2], "band2": po["energy_band"][2],
          "train_s": tm.get("train modlanet (del)"), "predict_s": tm.get("rollout modlanet (del)")}
    h = mc.del_h
    S = pendulum_chain_snapshots(2, mc.del_n_traj, mc.del_n_steps, h, seed=mc.seed + 1, max_velocity=mc.max_velocity)
    timings: Dict[str, float] = {}
    # the "positions" objective with the whole training set (the likelihood's lengthscales identify nothing here:
    # level sets 0.85, 4 of 6 rollouts failed; these: 0.30, 1 of 6)
    size = S.shape[0] * (S.shape[1] - 2) * S.shape[2]
    gp = _timed(timings, "train", InverseModifiedLagrangianGP(h, progress=cfg.progress, iterations=8, objective="positions",
                                                              max_train_functionals=size).fit, S)
    k = int(round(h / mc.dt_out))
    steps = (ref["q"].shape[0] - 1) // k
    qr, vr = ref["q"][::k][: steps + 1], ref["v"][::k][: steps + 1]
    qs, vs = _timed(timings, "predict", _rollout_each, gp, qr[0], vr[0], steps)
    system = systems.n_pendulum(2, g=9.8)
    energy = true_energy(system)
    metrics = rollout_metrics(qs, vs, qr, vr, energy, positions=angles_mod_2pi)
    opts = {key: val for key, val in (("t_max", mc.t_max), ("rate", mc.rate)) if val is not None}
    d = pendulum_chain_data(2, None, seed=mc.seed + 2, n_samples=mc.level_set_states, max_velocity=mc.max_velocity, **opts)
    row = {"model": "LSI GP (positions)", "mse_q": metrics["mse_q"], "mse_E": metrics["mse_E"], "failed": metrics["failed"],
           "train_s": timings["train"], "predict_s": timings["predict"]}
    for N in (0, 2, 4):
        row[f"ls{N}"] = level_set_error(gp.energy(N), energy, states=(d.q, d.v))
    log(f"double pendulum ({S.shape[0]} x {S.shape[1] - 1} snapshots, h = {h}): GP level sets "
        f"{row['ls0']:.3g}/{row['ls2']:.3g}/{row['ls4']:.3g}, ModLaNet {ml['ls0']:.3g}/{ml['ls2']:.3g}")
    return [row, ml]


def _rollout_each(gp: InverseModifiedLagrangianGP, q0: torch.Tensor, v0: torch.Tensor, steps: int):
    """Positions and order-2 velocities one initial state at a time; one that fails (Newton diverges where the
    learned dynamics leave the data) stays NaN and counts as failed, as for ModLaNet."""
    from integrators import ConvergenceError, NotRegularError

    qs = torch.full((steps + 1, q0.shape[0], q0.shape[1]), float("nan"), dtype=torch.float64)
    vs = torch.full_like(qs, float("nan"))
    for b in range(q0.shape[0]):
        try:
            qb = gp.predict(q0[b:b + 1], v0[b:b + 1], steps, order=2, on_extrapolation="ignore").q
            vs[:, b:b + 1] = gp.velocities(qb, order=2)
            qs[:, b:b + 1] = qb
        except (ConvergenceError, NotRegularError, ValueError, RuntimeError):
            pass
    return qs, vs


# ---------------------------------------------------------------------------------------------- run
def run(cfg: Optional[IdentificationConfig] = None, log=print) -> IdentificationResults:
    """Both experiments (the double pendulum unless ``cfg.double_pendulum`` is false)."""
    cfg = cfg or default_config()
    m, timings, series, lsi = run_chain(cfg, log)
    rows = run_double_pendulum(cfg, log) if cfg.double_pendulum else []
    return IdentificationResults(cfg, m, timings, series, rows, {"chain": lsi})


def main(argv: Optional[Sequence[str]] = None) -> IdentificationResults:
    """Command line: ``python -m pipelines.identification [--no-double-pendulum] [--learn]`` (``BEA_FULL=1``: full
    size)."""
    from bea.cli import OneLineParser

    ap = OneLineParser(prog="python -m pipelines.identification", description=__doc__.split("\n")[0],
                      name="pipelines.identification")
    ap.add_argument("--no-double-pendulum", action="store_true", help="only the chain")
    ap.add_argument("--learn", action="store_true",
                    help="learn the chain's lengthscales (objective 'positions', minutes) instead of the fixed ones")
    args = ap.parse_args(argv)
    cfg = default_config()
    if args.no_double_pendulum:
        cfg = replace(cfg, double_pendulum=False)
    if args.learn:
        cfg = replace(cfg, lengthscale=None)
    res = run(cfg)
    print(table(res))
    return res


if __name__ == "__main__":
    import sys

    from bea.cli import run_guarded

    sys.exit(run_guarded(lambda: main() and None, "pipelines.identification"))
