"""The stages of the ModLaNet experiments (:mod:`pipelines.modlanet_experiments`): the system, data and
initial states of a configuration, training of the baselines, rollouts with their table rows, and the
extension to more elements (paper §5.3)."""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Dict, List, Optional

import torch

from integrators import reference_flow, systems
from learners.modlanet import ModLaNet
from learners.modlanet.data import n_body_data, pendulum_chain_data
from learners.neural.baselines import VectorFieldModel, canonical_data, parameter_count, paper_baseline, vector_field_data
from learners.neural.rollout import (angles_mod_2pi, random_initial_states, rollout_metrics, rollout_ode, rollout_variational,
                                     true_energy, velocities_from_momenta)
from learners.neural.options import TrainOptions
from learners.neural.training import train

from bea.errors import BeaValueError

from .modlanet_config import ModLaNetConfig


# ---------------------------------------------------------------------------------------------- helpers
def _system(cfg: ModLaNetConfig, k: Optional[int] = None):
    if cfg.system == "double_pendulum":
        return systems.n_pendulum(k or 2, g=9.8)
    if cfg.system == "three_body":
        return systems.n_body([1] * (k or 3), G=1.0)
    raise BeaValueError(f"system must be 'double_pendulum' or 'three_body', got {cfg.system!r}")


def _positions(cfg: ModLaNetConfig):
    return angles_mod_2pi if cfg.system == "double_pendulum" else None


def _data(cfg: ModLaNetConfig, k: Optional[int] = None, n_samples: Optional[int] = None, seed: Optional[int] = None):
    seed = cfg.seed if seed is None else seed
    opts = {key: val for key, val in (("t_max", cfg.t_max), ("rate", cfg.rate)) if val is not None}
    n_traj = None if n_samples is not None else cfg.n_traj
    if cfg.system == "double_pendulum":
        return pendulum_chain_data(k or 2, n_traj, seed=seed, n_samples=n_samples, max_velocity=cfg.max_velocity, **opts)
    return n_body_data(k or 3, n_traj, seed=seed, n_samples=n_samples, **opts)


def _states(cfg: ModLaNetConfig, k: Optional[int], n: int, seed: int):
    """The paper's random initial states; pendulum velocities scaled by ``max_velocity / 10``."""
    name = f"{k or 2}-pendulum" if cfg.system == "double_pendulum" else f"{k or 3}-body"
    q0, v0 = random_initial_states(name, n, seed=seed)
    if cfg.system == "double_pendulum":
        v0 = v0 * (cfg.max_velocity / 10.0)
    return q0, v0


def _modlanet(cfg: ModLaNetConfig) -> ModLaNet:
    if cfg.system == "double_pendulum":
        return ModLaNet.pendulum_chain(2, hidden=cfg.hidden, transform_hidden=cfg.transform_hidden, seed=cfg.seed)
    return ModLaNet.bodies(3, hidden=cfg.hidden, seed=cfg.seed)


def _times(t: float, dt: float) -> torch.Tensor:
    steps = int(round(t / dt))
    return dt * torch.arange(steps + 1, dtype=torch.float64)


def _train_kwargs(cfg: ModLaNetConfig, epochs: int, lr: Optional[float] = None) -> Dict[str, Any]:
    """The keywords of :func:`~learners.neural.training.train` for ``cfg`` (its ``options``)."""
    return dict(options=TrainOptions(epochs=max(1, int(epochs)), lr=lr or cfg.lr, batch_size=cfg.batch_size,
                                     patience=cfg.patience, seed=cfg.seed, progress=cfg.progress))


def _energy_deviation(qs, vs, energy) -> float:
    r""":math:`\max_{t, b} |E(q_t, v_t) - E(q_0, v_0)|` over the trajectories that stayed finite."""
    with torch.no_grad():
        ok = torch.isfinite(qs).all(-1).all(0) & torch.isfinite(vs).all(-1).all(0)
        if not bool(ok.any()):
            return float("nan")
        E = energy(qs[:, ok], vs[:, ok])
        return float((E - E[:1]).abs().max())


def _energy_curve(qs, vs, q_ref, v_ref, energy) -> torch.Tensor:
    r"""Per-time :math:`\operatorname{mean}_b (E(\hat x_b(t)) - E(x_b(t)))^2` over the states that stayed finite."""
    with torch.no_grad():
        ok = torch.isfinite(qs).all(-1).all(0) & torch.isfinite(vs).all(-1).all(0)
        if not bool(ok.any()):
            return torch.full((qs.shape[0],), float("nan"))
        return (energy(qs[:, ok], vs[:, ok]) - energy(q_ref[:, ok], v_ref[:, ok])).pow(2).mean(-1)


class _Clock:
    def __init__(self, log):
        self.timings: Dict[str, float] = {}
        self.log = log

    def __call__(self, key: str, fn: Callable, *args, **kwargs):
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        self.timings[key] = self.timings.get(key, 0.0) + time.perf_counter() - t
        self.log(f"  {key}: {self.timings[key]:.1f} s")
        return out


# ---------------------------------------------------------------------------------------------- stages
def _rollout_row(name: str, model, params: int, q0, v0, ts, q_ref, v_ref, cfg, clock, kind: str = "ode") -> Dict[str, Any]:
    """Roll out one model and return its table row (and the trajectories, for the figures)."""
    system = _system(cfg)
    energy = true_energy(system)
    try:
        if kind == "hnn":
            p0, _ = canonical_data(system, q0, v0)
            canonical = clock(f"rollout {name}", rollout_ode, model, q0, p0, ts, substeps=cfg.substeps)
            qh, ph = canonical.q, canonical.p
            vh = velocities_from_momenta(system, qh, ph)
        elif kind == "variational":
            k = int(round(cfg.dt_out / cfg.variational_h))
            traj = clock(f"rollout {name}", rollout_variational, model, q0, v0, cfg.variational_h, k * (ts.numel() - 1))
            qh, vh = traj.q[::k], traj.v[::k]
        else:
            traj = clock(f"rollout {name}", rollout_ode, model, q0, v0, ts, substeps=cfg.substeps)
            qh, vh = traj.q, traj.v
        metrics = rollout_metrics(qh, vh, q_ref, v_ref, energy, positions=_positions(cfg))
    except (ValueError, RuntimeError, torch.linalg.LinAlgError) as err:  # a model whose rollout cannot run = failed
        qh = vh = torch.full_like(q_ref, float("nan"))
        metrics = {"failed": q0.shape[0], "states": q0.shape[0], "error": str(err)[:200],
                   **{f"{k}{s}": float("nan") for k in ("mse_q", "mse_E", "paper_q", "paper_E") for s in ("", "_std", "_median")}}
    row = {"model": name, "params": params, **metrics, "q": qh, "v": vh,
           "energy_curve": _energy_curve(qh, vh, q_ref, v_ref, energy)}
    return row


def _train_baseline(kind: str, cfg: ModLaNetConfig, data, clock):
    light = kind.startswith("light_")
    base = kind[len("light_"):] if light else kind
    model = paper_baseline(base, cfg.system, light=light, seed=cfg.seed)
    kw = _train_kwargs(cfg, cfg.baseline_epochs)
    if base == "hnn":  # the paper: canonical data, loss on the whole vector field (qdot, pdot)
        p, pdot = canonical_data(_system(cfg), data.q, data.v)
        res = clock(f"train {kind}", train, VectorFieldModel(model), vector_field_data(data.q, p, data.v, pdot), **kw)
    else:
        res = clock(f"train {kind}", train, model, (data.q, data.v, data.a), **kw)
    return model, res


def _extension(cfg: ModLaNetConfig, model: ModLaNet, n_train: int, clock, log) -> List[Dict[str, Any]]:
    rows = []
    for k in cfg.extend_to:
        system = _system(cfg, k)
        energy = true_energy(system)
        q0, v0 = _states(cfg, k, cfg.extension_states, seed=cfg.seed + 100 + k)
        ts = _times(cfg.extension_t, cfg.dt_out)
        flow = clock(f"reference {k}", reference_flow, system, q0, v0, ts)
        q_ref, v_ref = flow.q, flow.v
        ext = model.extend(k)
        row: Dict[str, Any] = {"elements": k, "params": parameter_count(ext), "times": ts, "q_ref": q_ref}
        for stage in ("direct", "finetuned"):
            if stage == "finetuned":
                n_ft = max(2, int(round(cfg.finetune_data_fraction * n_train)))
                data = clock(f"data {k} (fine-tune)", _data, cfg, k, n_ft, cfg.seed + 10 + k)
                res = clock(f"fine-tune {k}", train, ext, (data.q, data.v, data.a),
                            **_train_kwargs(cfg, math.ceil(cfg.finetune_epoch_fraction * cfg.epochs)))
                row["finetune"] = {"samples": n_ft, "epochs": res.epochs_run, "val": (res.initial_val, res.best_val)}
            try:
                traj = clock(f"rollout {k} ({stage})", rollout_ode, ext, q0, v0, ts, substeps=cfg.substeps)
                qs, vs = traj.q, traj.v
            except (ValueError, RuntimeError) as err:
                qs = vs = torch.full_like(q_ref, float("nan"))
                log(f"  extension {k} ({stage}) failed: {err}")
            m = rollout_metrics(qs, vs, q_ref, v_ref, energy, positions=_positions(cfg))
            m["max_energy_deviation"] = _energy_deviation(qs, vs, energy)
            m["true_energy_scale"] = float(energy(q0, v0).abs().mean())
            m["energy_curve"] = _energy_curve(qs, vs, q_ref, v_ref, energy)
            m["q"] = qs
            row[stage] = m
            log(f"  {k} elements, {stage}: MSE_q {m['mse_q']:.3e}, MSE_E {m['mse_E']:.3e} (paper statistic {m['paper_E']:.3e}), "
                f"max |E(t) - E(0)| {m['max_energy_deviation']:.3e} (mean |E| {m['true_energy_scale']:.3e}), failed {m['failed']}")
        rows.append(row)
    return rows
