"""The position-only variant of the ModLaNet experiments (:mod:`pipelines.modlanet_experiments`, stage 5):
ModLaNet trained with the DEL loss on snapshots, rolled out with the midpoint rule, and the identification of its
energy (level sets, relative band along the prediction)."""

from __future__ import annotations

import math
from typing import Any, Dict

import torch

import bea
from learners.metrics import level_set_error
from learners.modlanet.data import pendulum_chain_snapshots
from learners.neural.baselines import parameter_count
from learners.neural.rollout import rollout_metrics, rollout_variational, true_energy
from learners.neural.prediction import inverse_lagrangian, recovered_energy, recovered_lagrangian
from learners.neural.options import DELLoss
from learners.neural.training import train

from .modlanet_config import ModLaNetConfig
from .modlanet_stages import _data, _energy_curve, _modlanet, _positions, _rollout_row, _system, _train_kwargs


def _position_only(cfg: ModLaNetConfig, q0, v0, q_ref, v_ref, ts, clock, log) -> Dict[str, Any]:
    r"""DEL-trained ModLaNet from snapshots at ``del_h``; midpoint rollout; level sets and bands of the identified
    energies.

    ``del_inverse_order = 0``: the model is :math:`L_{inv}`; the midpoint rule integrates it with
    :math:`p_0 = \partial_v\,\mathrm{mod}_2(\text{model})`; :math:`H_{rec}[0] = H(\text{model})`,
    :math:`H_{rec}[2] = H(\mathrm{mod}_2\,\text{model})`.
    ``del_inverse_order = 2``: the model :math:`M_\theta` has the element structure of the true :math:`L` and the DEL
    loss sees :math:`L_{inv} = \mathrm{inv}_2(M_\theta)`, so that :math:`\mathrm{mod}_2(L_{inv}) = M_\theta + O(h^4)`;
    the midpoint rule integrates :math:`L_{inv}` with :math:`p_0 = \partial_vM_\theta`,
    :math:`H_{rec}[0] = H(L_{inv})` and :math:`H_{rec}[2] = H(M_\theta)`; the identified :math:`M_\theta` is also rolled out
    with RK4 like the acceleration-trained model (row ``"ModLaNet (positions, RK4)"``) and, if ``variational_h``, with the
    midpoint rule at that step, :math:`p_0 = \partial_vM_\theta` (row ``"ModLaNet (positions, VI)"``)."""
    h, io = cfg.del_h, cfg.del_inverse_order
    S = clock("data (snapshots)", pendulum_chain_snapshots, 2, cfg.del_n_traj, cfg.del_n_steps, h, seed=cfg.seed + 1,
              max_velocity=cfg.max_velocity)
    model = _modlanet(cfg)
    res = clock("train modlanet (del)", train, model, S, loss=DELLoss(inverse_order=io, max_step=cfg.del_max_step), h=h,
                **_train_kwargs(cfg, cfg.del_epochs, cfg.del_lr))
    log(f"  DEL loss {res.initial_val:.3e} -> {res.best_val:.3e} (inverse order {io})")
    system = _system(cfg)
    energy = true_energy(system)
    k = int(round(h / cfg.dt_out))
    steps = (q_ref.shape[0] - 1) // k
    if io:
        integrated, legendre = inverse_lagrangian(model, io, h, method="formula"), model
        energies = {0: bea.energy(integrated), 2: model.energy_at}
    else:
        integrated, legendre = model, recovered_lagrangian(model, 2, h, method="formula")
        energies = {N: recovered_energy(model, N, h, method="formula") for N in (0, 2)}
    # a step longer than any in the training triples is outside the data: another root of the step, counted as failed
    qs = clock("rollout modlanet (del)", rollout_variational, integrated, q0, v0, h, steps, legendre=legendre,
               velocities=False, max_step=cfg.del_max_step).q
    vs = clock("velocities (del)", _velocities, model, integrated, legendre, qs, h)
    qr, vr = q_ref[::k][: steps + 1], v_ref[::k][: steps + 1]
    metrics = rollout_metrics(qs, vs, qr, vr, energy, positions=_positions(cfg))
    # identification: level sets of H_rec[N] against the true energy at states of the exact flow
    Sq, Sv = _ls_states(cfg)
    level = {N: clock(f"level sets N={N}", level_set_error, H, energy, states=(Sq, Sv)) for N, H in energies.items()}
    band = {N: clock(f"energy band N={N}", _relative_band, H, qs, vs) for N, H in energies.items()}
    out = {"model": "ModLaNet (positions, DEL)", "params": parameter_count(model), **metrics, "train": res,
           "level_set": level, "energy_band": band, "q": qs, "v": vs, "h": h, "inverse_order": io,
           "energy_curve": _energy_curve(qs, vs, qr, vr, energy), "times": h * torch.arange(steps + 1, dtype=torch.float64),
           "modelobj": model}
    if io:
        out["rk4"] = _rollout_row("ModLaNet (positions, RK4)", model, parameter_count(model), q0, v0, ts, q_ref, v_ref, cfg,
                                  clock)
        if cfg.variational_h:  # the identified L with the midpoint rule at the acceleration-trained model's step
            out["variational"] = _rollout_row("ModLaNet (positions, VI)", model, parameter_count(model), q0, v0, ts, q_ref,
                                              v_ref, cfg, clock, kind="variational")
    return out


def _velocities(model, integrated, legendre, qs: torch.Tensor, h: float) -> torch.Tensor:
    r"""Velocities along midpoint trajectories ``(T, B, n)`` of ``integrated``: the discrete momenta, then the
    Legendre map of ``legendre`` inverted (:meth:`integrators.VariationalIntegrator.velocities`), one trajectory
    at a time so that a failed inversion marks only its own trajectory (NaN, counted as failed); ``model``'s
    parameters are frozen meanwhile."""
    vs = torch.full_like(qs, float("nan"))
    flags = [(p, p.requires_grad) for p in model.parameters()]
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        _invert(integrated, legendre, qs, h, vs)
    finally:
        for p, f in flags:
            p.requires_grad_(f)
    return vs


def _invert(model, legendre, qs, h, vs):
    from integrators import VariationalIntegrator

    with torch.enable_grad():
        vi = VariationalIntegrator(model, h, "midpoint")
        for b in range(qs.shape[1]):
            if not bool(torch.isfinite(qs[:, b]).all()):
                continue
            try:
                vs[:, b] = vi.velocities(qs[:, b:b + 1], legendre)[:, 0].detach()
            except (ValueError, RuntimeError, ArithmeticError):
                pass


def _relative_band(H, qs: torch.Tensor, vs: torch.Tensor, points: int = 50) -> float:
    r"""Variation of an identified energy ``H`` along predicted trajectories ``(T, B, n)``, relative to its spread
    over the initial states (invariant under :math:`H \to aH + b`, the freedom of an identified energy):

    .. math:: \frac{\operatorname{mean}_b\,(\max_t - \min_t) H(q_b(t), v_b(t))}{\operatorname{std}_b H(q_b(0), v_b(0))},

    on at most ``points`` equally spaced times, over the trajectories that stayed finite."""
    ok = torch.isfinite(qs).all(-1).all(0) & torch.isfinite(vs).all(-1).all(0)
    if int(ok.sum()) < 2:
        return float("nan")
    stride = max(1, math.ceil(qs.shape[0] / points))
    q, v = qs[::stride, ok], vs[::stride, ok]
    with torch.enable_grad():
        E = torch.stack([H(q[t], v[t]).detach() for t in range(q.shape[0])])
    return float((E.amax(0) - E.amin(0)).mean() / E[0].std())


def _ls_states(cfg: ModLaNetConfig):
    d = _data(cfg, n_samples=cfg.level_set_states, seed=cfg.seed + 2)
    return d.q, d.v
