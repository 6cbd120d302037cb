r"""The search for the hyperparameters of a GP Lagrangian model: lengthscale(s), the nugget
:math:`\rho = \sigma_n^2/\sigma_f^2` and the outputscale :math:`\sigma_f^2` (the objectives, and why the
search uses no gradients, are described in :mod:`learners.shadow.hyperparameters`).

The parameters searched are :math:`\theta = (\log\ell_1, \dots, \log\ell_d, \log\rho)`: a coarse grid over
one shared lengthscale (:func:`grid_search`; for the ``"positions"`` objective with one lengthscale per input,
:mod:`learners.shadow.position_search` instead), then a pattern search on :math:`\theta`
(:func:`pattern_search`); :func:`settle` sets the best point, with the profiled outputscale for ``"mll"``.
"""

from __future__ import annotations

import math
from typing import Callable, List, Optional, Tuple

import torch
from tqdm.auto import tqdm

from bea.errors import BeaRuntimeError, BeaValueError

from .functionals import Functionals
from .gp import FunctionalGP

__all__ = ["MIN_NOISE", "set_hyperparameters", "training_subsets", "spread", "objective", "grid_search",
           "grid_best", "pattern_search", "settle", "split_functionals", "collapsed",
           "COLLAPSE_OUTPUTSCALE"]

#: smallest nugget rho = sigma_n^2 / sigma_f^2 (keeps the posterior mean smooth at rounding level)
MIN_NOISE = 1e-13

#: relative lengthscales of the coarse grid (times the RMS spread of the data atoms)
GRID_SCALES = (0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0)
#: further relative lengthscales of the ``"positions"`` objective's grid (it does not collapse to short ones, and
#: Lagrangians are often smooth on scales far beyond the data's spread)
LONG_SCALES = (2.8, 4.0, 5.6, 8.0, 11.0, 16.0)
#: a profiled outputscale below this (standardised units, where the mass normalisation makes the Lagrangian O(1))
#: means the likelihood collapsed to a Lagrangian ~0 away from the normalisation point (measured 1e-17..1e-24 at
#: n >= 3; well-posed fits: pendulum and Henon-Heiles are checked in tests/test_learners_shadow_auto.py)
COLLAPSE_OUTPUTSCALE = 1e-8
#: nuggets of the coarse grid
GRID_NOISES = (1e-12,)

Objective = Callable[[torch.Tensor], float]


def set_hyperparameters(gp: FunctionalGP, lengthscale, noise: float, outputscale: float = 1.0) -> None:
    """Lengthscale(s) (one shared or one per input), relative nugget (floored at :data:`MIN_NOISE`) and outputscale."""
    base = gp.kernel.base_kernel
    dev = base.raw_lengthscale.device  # the search keeps its few numbers on the CPU; the model's are where its data are
    ls = torch.as_tensor(lengthscale, dtype=torch.float64, device=dev).reshape(-1)
    if ls.numel() == 1:
        ls = ls.expand(base.raw_lengthscale.shape[-1])
    if ls.numel() != base.raw_lengthscale.shape[-1]:
        raise BeaValueError(f"lengthscale needs 1 or {base.raw_lengthscale.shape[-1]} values, got {ls.numel()}")
    if not bool((ls > 0).all()) or not bool(torch.isfinite(ls).all()):
        raise BeaValueError(f"lengthscales must be positive and finite, got {ls.tolist()}")
    base.lengthscale = ls.reshape(base.raw_lengthscale.shape)
    gp.kernel.outputscale = outputscale
    gp.likelihood.noise = torch.tensor([max(noise * outputscale, MIN_NOISE * outputscale * 1.0001)], dtype=torch.float64,
                                       device=dev)


def _set_theta(gp: FunctionalGP, theta: torch.Tensor, outputscale: float = 1.0) -> None:
    set_hyperparameters(gp, torch.exp(theta[:-1]), max(float(torch.exp(theta[-1])), MIN_NOISE), outputscale)


def _split(groups: torch.Tensor, count: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Every fifth trajectory validates (every fifth functional when there are fewer than five trajectories)."""
    ids = torch.unique(groups)
    if ids.numel() >= 5:
        val_ids = ids[4::5]
        val = torch.isin(groups, val_ids)
    else:  # few trajectories: interleave functionals
        val = torch.zeros(count, dtype=torch.bool, device=groups.device)
        val[4::5] = True
    if int(val.sum()) == 0 or int((~val).sum()) == 0:
        raise BeaValueError("too little data to learn hyperparameters (need at least 5 functionals); fix them with lengthscale=")
    return torch.nonzero(~val).flatten(), torch.nonzero(val).flatten()


def split_functionals(groups: torch.Tensor, count: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Indices of all training and all validation functionals (:func:`_split`)."""
    return _split(groups, count)


def training_subsets(groups: torch.Tensor, count: int, max_train: int, seed: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Indices of the training and validation functionals (``groups``: the trajectory of each), at most
    ``max_train`` and ``max_train // 2`` of them, whole trajectories chosen at random (``seed``)."""
    tr, va = _split(groups, count)
    gen = torch.Generator().manual_seed(seed)  # a CPU generator: the same subsets on every device
    if tr.numel() > max_train:  # whole trajectories, chosen at random
        tr_groups = torch.unique(groups[tr])
        perm = tr_groups[torch.randperm(tr_groups.numel(), generator=gen, device="cpu").to(groups.device)]
        per = max(1, tr.numel() // tr_groups.numel())
        keep = perm[: max(1, max_train // per)]
        tr = tr[torch.isin(groups[tr], keep)]
    if va.numel() > max_train // 2:
        va_groups = torch.unique(groups[va])
        per = max(1, va.numel() // va_groups.numel())
        perm = torch.randperm(va_groups.numel(), generator=gen, device="cpu").to(groups.device)
        keep = va_groups[perm][: max(1, max_train // 2 // per)]
        va = va[torch.isin(groups[va], keep)]
    return tr, va


def spread(F: Functionals) -> torch.Tensor:
    """Standard deviation of the atoms' points per input (floored at 1e-8)."""
    pts = torch.cat([a.points for a in F.atoms.values()])
    return pts.std(0).clamp_min(1e-8)


def _profiled(gp: FunctionalGP, F_tr: Functionals) -> Tuple[torch.Tensor, float]:
    r"""The Cholesky factor ``R`` of :math:`K_1 + \rho I` (outputscale 1) and the profiled outputscale
    :math:`\sigma_f^{2*} = y^\top(K_1 + \rho I)^{-1}y/F`."""
    gp.kernel.outputscale = 1.0
    R, _ = gp.factor(F_tr)
    alpha = torch.linalg.solve_triangular(R, F_tr.targets[:, None], upper=False)[:, 0]
    return R, float(alpha @ alpha) / F_tr.count


def objective(gp: FunctionalGP, kind: str, F_tr: Functionals, F_va: Functionals, G_va: Functionals,
              positions: Optional[Callable[[Callable], float]] = None) -> Objective:
    r""":math:`\theta \mapsto` the objective ``kind`` (``"mll"``: negative log marginal likelihood of ``F_tr``
    profiled over the outputscale; ``"heldout"``: held-out log residual on ``G_va`` = ``F_va`` and momenta;
    ``"positions"``: ``positions`` applied to the posterior mean conditioned on ``F_tr``, the held-out one-step
    position errors of :mod:`learners.shadow.position_objective`), ``inf`` where the fit fails."""
    if kind == "positions" and positions is None:
        raise BeaValueError("the 'positions' objective needs held-out triples (positions=)")

    def value() -> float:
        if kind == "positions":  # each atom pair once (~half the assembly): values equal to amplified rounding only
            gp.condition(F_tr, symmetric=True)
            return positions(lambda q, v: gp.mean(torch.cat([q, v], -1)))
        if kind == "mll":  # profiled over the outputscale: sigma_f^2* = y' (K1 + rho I)^-1 y / F
            R, s2 = _profiled(gp, F_tr)
            F = F_tr.count
            return 0.5 * F * math.log(s2) + float(torch.log(torch.diagonal(R)).sum()) + 0.5 * F * (1 + math.log(2 * math.pi))
        gp.condition(F_tr)
        both = gp.functional_mean(G_va)
        r2, p2 = both[:F_va.count].pow(2), both[F_va.count:].pow(2).mean()
        return float(torch.log(r2 + 1e-30 * p2).mean() - torch.log(p2))

    def evaluate(theta: torch.Tensor) -> float:
        _set_theta(gp, theta)
        try:
            val = value()
        except RuntimeError:
            return math.inf
        return val if math.isfinite(val) else math.inf
    return evaluate


def grid_search(evaluate: Objective, d: int, scale0: float, long: bool = False) -> List[tuple]:
    r"""The coarse grid over one shared lengthscale (:data:`GRID_SCALES`, and :data:`LONG_SCALES` if ``long``,
    times ``scale0``) and the nuggets :data:`GRID_NOISES`: the list of ``(lengthscale, nugget, objective)``."""
    grid = []
    for s in GRID_SCALES + (LONG_SCALES if long else ()):
        for rho in GRID_NOISES:
            theta = torch.tensor([math.log(s * scale0)] * d + [math.log(rho)], dtype=torch.float64, device="cpu")
            grid.append((s * scale0, rho, evaluate(theta)))
    return grid


def grid_best(grid: List[tuple], d: int) -> Tuple[torch.Tensor, float]:
    r"""The best :math:`\theta` on the ``grid`` of :func:`grid_search` and its objective."""
    ok = [g for g in grid if math.isfinite(g[2])]
    if not ok:
        raise BeaRuntimeError("no hyperparameters on the grid gave a usable fit; fix them with lengthscale= and noise=")
    l0, r0, best = min(ok, key=lambda g: g[2])
    return torch.tensor([math.log(l0)] * d + [math.log(r0)], dtype=torch.float64, device="cpu"), best


def pattern_search(evaluate: Objective, theta: torch.Tensor, best: float, iterations: int,
                   progress: Optional[bool]) -> Tuple[torch.Tensor, float, List[float]]:
    r"""Coordinate steps on :math:`\theta` (factor 1.5 in the lengthscales, 10 in the nugget), the first improving
    step taken, all steps halved when none improves; at most ``iterations`` evaluations. Returns the best
    :math:`\theta`, its value and the trace of values."""
    d = theta.numel() - 1
    steps = torch.tensor([math.log(1.5)] * d + [math.log(10.0)], dtype=torch.float64, device=theta.device)
    trace = []
    disable = None if progress is None else not progress
    bar = tqdm(total=iterations, desc="hyperparameters", disable=disable, leave=False)
    evals = 0
    while evals < iterations and float(steps[0]) > math.log(1.05):
        improved = False
        for c in range(d + 1):
            for sign in (1.0, -1.0):
                if evals >= iterations:
                    break
                trial = theta.clone()
                trial[c] += sign * steps[c]
                if c == d and float(torch.exp(trial[c])) < MIN_NOISE:
                    continue
                val = evaluate(trial)
                evals += 1
                bar.update(1)
                trace.append(val)
                if val < best:
                    best, theta, improved = val, trial, True
                    ls = ",".join(f"{float(x):.3g}" for x in torch.exp(theta[:-1]))
                    bar.set_postfix(objective=f"{best:.3f}", lengthscale=ls)
                    break
        if not improved:
            steps = steps / 2
    bar.close()
    return theta, best, trace


def settle(gp: FunctionalGP, kind: str, theta: torch.Tensor, F_tr: Functionals) -> None:
    r"""Set :math:`\theta`, with the profiled outputscale of ``F_tr`` for ``"mll"`` (outputscale 1 otherwise)."""
    if kind == "mll":
        _set_theta(gp, theta)
        _, s2 = _profiled(gp, F_tr)
        _set_theta(gp, theta, outputscale=s2)
    else:
        _set_theta(gp, theta)


def collapsed(gp: FunctionalGP) -> bool:
    """Whether the profiled outputscale set by :func:`settle` for ``"mll"`` is below :data:`COLLAPSE_OUTPUTSCALE`."""
    return float(gp.kernel.outputscale.detach()) < COLLAPSE_OUTPUTSCALE
