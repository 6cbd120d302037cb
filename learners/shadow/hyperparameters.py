r"""Shared machinery of the GP Lagrangian models: kernel set-up, hyperparameter learning, conditioning.

A model observes *data functionals* of the unknown Lagrangian (DEL residuals for LSI, continuous
Euler--Lagrange residuals for LGP), all with target zero, plus a normalisation with a non-zero
target (:mod:`learners.shadow.normalisation`), and conditions a :class:`~learners.shadow.gp.FunctionalGP` on them.

Hyperparameters (lengthscale(s) of the RBF kernel, the nugget :math:`\rho = \sigma_n^2/\sigma_f^2`
and the outputscale :math:`\sigma_f^2`) are fixed or learned on a training subset of at most
``max_train_functionals`` functionals (whole trajectories): a coarse grid over one shared lengthscale,
then a pattern search on the log-parameters (per-input lengthscales with ``ard=True``, and the
nugget), ``iterations`` evaluations with a ``tqdm`` bar. No gradients: every objective involves a
solve with a covariance of condition number ~1e11-1e13, whose hyperparameter gradients are too
inaccurate to follow (Adam on them went uphill in our trials). Two objectives:

``"mll"`` (default)
    The log marginal likelihood of all observations, profiled over :math:`\sigma_f^2` (closed form
    :math:`\sigma_f^{2*} = y^\top(K_1 + \rho I)^{-1}y/F`). Almost all targets are zero and only the
    normalisation carries a non-zero value, so the data-fit term is small and the likelihood is
    ruled by :math:`\log\det`: by the chain rule it is the sum of the log predictive densities of
    each DEL residual being zero given the previous ones -- a sequential cross-validation of the
    zero residuals that also weighs their predicted variance, and so penalises kernels that are
    needlessly flexible. That is what identification needs: :math:`\mathrm{mod}_N` and its energy use
    higher derivatives of :math:`\bar L_{inv}` (third and beyond), which a too short lengthscale gets
    wrong even where it predicts well.
``"heldout"``
    Every fifth trajectory validates; minimise the held-out log residual
    :math:`J = \frac1{|V|}\sum_{j \in V}\log R_j^2 - \log\overline{P^2}` (:math:`R_j` posterior-mean
    DEL/EL residuals on the validation trajectories, :math:`P` their posterior-mean momenta, so
    :math:`J` is blind to the scale of :math:`L` and penalises a Lagrangian that is flat on the data).

Which works better here (full pendulum, ``benchmarks/shadow.py --objectives``): both predict well
(``"heldout"`` picks shorter lengthscales and the smaller trajectory error), but ``"heldout"``
identifies badly -- level-set errors 0.013 (:math:`H_{rec}[2]`) and 0.026 (:math:`H_{rec}[4]`, worse
than N = 2) against 5e-4 and 4e-5 with ``"mll"``. Hence ``"mll"``.

Calibration (either objective): every fifth training trajectory is held back while learning; at the
end the posterior variances are scaled (``FunctionalGP.variance_scale``, the mean is unchanged) so that
95.4% of the held-back DEL/EL residuals lie within two posterior standard deviations.

``lengthscale=`` (or the paper's ``epsilon=``, :math:`\ell = \varepsilon/\sqrt2`) fixes the
lengthscale and skips learning; ``noise=`` then sets :math:`\rho` (default ``1e-12``).
"""

from __future__ import annotations

import math
from typing import Dict, Optional, Sequence, Tuple, Union

import gpytorch
import torch
from gpytorch.constraints import Positive
from tqdm.auto import tqdm

import bea

from .. import saving
from ..saving import recorded
from .._checks import check_states, check_step
from .functionals import Functionals
from .gp import FunctionalGP
from .kernels import FunctionalKernel, RBFKernel
from .normalisation import Normalisation, get_normalisation

__all__ = ["FunctionalLagrangianModel", "MIN_NOISE"]

#: smallest nugget rho = sigma_n^2 / sigma_f^2 (keeps the posterior mean smooth at rounding level)
MIN_NOISE = 1e-13

#: relative lengthscales of the coarse grid (times the RMS spread of the data atoms)
GRID_SCALES = (0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0)
#: nuggets of the coarse grid
GRID_NOISES = (1e-12,)


def _exp_positive() -> Positive:
    return Positive(transform=torch.exp, inv_transform=torch.log)


class FunctionalLagrangianModel(gpytorch.Module):
    r"""Base class of :class:`~learners.InverseModifiedLagrangianGP` and :class:`~learners.LagrangianGP`."""

    #: hyperparameter-search evaluations when ``iterations`` is not given
    default_iterations = 16

    @recorded
    def __init__(self, h: float, scheme: Union[str, "bea.Scheme"] = "midpoint", *, kernel: Optional[FunctionalKernel] = None,
                 normalisation: Union[str, Normalisation, None] = "mass", objective: str = "mll",
                 lengthscale: Union[float, Sequence[float], torch.Tensor, None] = None, epsilon: Optional[float] = None,
                 noise: Optional[float] = None, ard: bool = True, iterations: Optional[int] = None, max_train_functionals: int = 600,
                 progress: Optional[bool] = None, seed: int = 0):
        super().__init__()
        self.h = check_step(h)
        self.scheme = bea.get_scheme(scheme)
        if objective not in ("heldout", "mll"):
            raise ValueError(f"objective must be 'heldout' or 'mll', got {objective!r}")
        if epsilon is not None:
            if lengthscale is not None:
                raise ValueError("give lengthscale= or epsilon=, not both")
            if not float(epsilon) > 0:
                raise ValueError(f"epsilon must be positive, got {epsilon}")
            lengthscale = float(epsilon) / math.sqrt(2)
        if noise is not None and not (math.isfinite(float(noise)) and float(noise) >= MIN_NOISE):
            raise ValueError(f"noise (relative nugget) must be a finite number >= {MIN_NOISE:g}, got {noise}")
        if iterations is None:
            iterations = self.default_iterations
        if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0:
            raise ValueError(f"iterations must be an integer >= 0, got {iterations!r}")
        if isinstance(max_train_functionals, bool) or not isinstance(max_train_functionals, int) or max_train_functionals < 10:
            raise ValueError(f"max_train_functionals must be an integer >= 10 (the size of the subset used to learn the "
                             f"hyperparameters), got {max_train_functionals!r}")
        self._user_kernel = kernel
        self.normalisation = get_normalisation(normalisation)
        self.objective = objective
        self.fixed_lengthscale = lengthscale
        self.fixed_noise = noise
        self.ard = ard
        self.iterations = iterations
        self.max_train_functionals = max_train_functionals
        self.progress = progress
        self.seed = seed
        self.gp: Optional[FunctionalGP] = None
        self.history: Dict[str, list] = {}
        self.n: Optional[int] = None
        #: units of the data (see InverseModifiedLagrangianGP.fit): the GP lives on x' = ((q - center)/unit, v/unit) and the
        #: model's Lagrangian is unit**2 * L'(x'); None/1.0: the data's own units
        self._center: Optional[torch.Tensor] = None
        self._unit: float = 1.0
        self._init_state()

    def _init_state(self) -> None:
        """Attributes of a subclass's fitted state (none here)."""

    # ------------------------------------------------------------------ saving
    def save(self, path) -> "Path":
        """Write the fitted model (constructor arguments, hyperparameters, posterior) to ``path`` atomically
        (:mod:`learners.saving`); :meth:`load` gives it back without refitting."""
        from . import persist

        return saving.write(self, path, self._init_args, persist.fitted_state(self))

    @classmethod
    def load(cls, path, map_location=None):
        """The model saved in ``path`` by :meth:`save`; :class:`~learners.saving.ModelFileError` if the file holds
        another class or format version."""
        from . import persist

        config, state = saving.read(path, cls, map_location)
        model = cls(**config)
        persist.restore(model, state)
        return model

    def _fitted_extra(self) -> dict:
        return {}

    def _restore_extra(self, extra: dict) -> None:
        pass

    # ------------------------------------------------------------------ set-up
    def _make_gp(self, D: int) -> FunctionalGP:
        if self._user_kernel is not None:
            kernel = self._user_kernel
        else:
            base = RBFKernel(ard_num_dims=D if self.ard else None, lengthscale_constraint=_exp_positive())
            kernel = FunctionalKernel(base, outputscale_constraint=_exp_positive())
        gp = FunctionalGP(kernel, noise=1e-12, min_noise=0.0)
        # the nugget on a log scale; its floor MIN_NOISE (relative to the outputscale) is enforced in _set_hyper
        gp.likelihood = gpytorch.likelihoods.GaussianLikelihood(noise_constraint=_exp_positive())
        gp.likelihood.noise = torch.tensor(1e-12, dtype=torch.float64)
        gp.to(torch.float64)  # parameters in float64 whatever the caller's default dtype
        return gp

    @staticmethod
    def _spread(F: Functionals) -> torch.Tensor:
        pts = torch.cat([a.points for a in F.atoms.values()])
        return pts.std(0).clamp_min(1e-8)

    def _set_hyper(self, gp: FunctionalGP, lengthscale, noise: float, outputscale: float = 1.0) -> None:
        base = gp.kernel.base_kernel
        ls = torch.as_tensor(lengthscale, dtype=torch.float64).reshape(-1)
        if ls.numel() == 1:
            ls = ls.expand(base.raw_lengthscale.shape[-1])
        if ls.numel() != base.raw_lengthscale.shape[-1]:
            raise ValueError(f"lengthscale needs 1 or {base.raw_lengthscale.shape[-1]} values, got {ls.numel()}")
        if not bool((ls > 0).all()) or not bool(torch.isfinite(ls).all()):
            raise ValueError(f"lengthscales must be positive and finite, got {ls.tolist()}")
        base.lengthscale = ls.reshape(base.raw_lengthscale.shape)
        gp.kernel.outputscale = outputscale
        gp.likelihood.noise = torch.tensor([max(noise * outputscale, MIN_NOISE * outputscale * 1.0001)], dtype=torch.float64)

    # ------------------------------------------------------------------ learning
    def _fit_functionals(self, F_data: Functionals, groups: torch.Tensor, P: Functionals, P_groups: torch.Tensor,
                         normalisation: Optional[Normalisation] = None) -> None:
        r"""Learn or set the hyperparameters, then condition on all data functionals + the normalisation.

        ``groups`` (F_data.count,) and ``P_groups`` (P.count,) give the trajectory of each functional."""
        D = F_data.dim
        center = torch.cat([a.points for a in F_data.atoms.values()]).mean(0)
        F_norm = (normalisation or self.normalisation).functionals(D // 2, center)
        self.gp = gp = self._make_gp(D)
        self.history = {}
        self._variance_scale = 1.0
        if self._user_kernel is not None:  # used as given
            rho = self.fixed_noise if self.fixed_noise is not None else 1e-12
            gp.likelihood.noise = torch.tensor([rho * float(gp.kernel.outputscale.detach())], dtype=torch.float64)
            self._freeze()
        elif self.fixed_lengthscale is not None:
            ls = torch.as_tensor(self.fixed_lengthscale, dtype=torch.float64) / self._unit  # given in the data's units
            self._set_hyper(gp, ls, self.fixed_noise if self.fixed_noise is not None else 1e-12)
            self._freeze()
        else:
            self._learn(F_data, groups, P, P_groups, F_norm)
        with torch.no_grad():
            gp.condition(Functionals.cat([F_data, F_norm]))
        gp.variance_scale = self._variance_scale

    def _freeze(self) -> None:
        for p in self.gp.parameters():
            p.requires_grad_(False)

    def _split(self, groups: torch.Tensor, count: int) -> Tuple[torch.Tensor, torch.Tensor]:
        ids = torch.unique(groups)
        if ids.numel() >= 5:
            val_ids = ids[4::5]
            val = torch.isin(groups, val_ids)
        else:  # few trajectories: interleave functionals
            val = torch.zeros(count, dtype=torch.bool)
            val[4::5] = True
        if int(val.sum()) == 0 or int((~val).sum()) == 0:
            raise ValueError("too little data to learn hyperparameters (need at least 5 functionals); fix them with lengthscale=")
        return torch.nonzero(~val).flatten(), torch.nonzero(val).flatten()

    def _learn(self, F_data: Functionals, groups: torch.Tensor, P: Functionals, P_groups: torch.Tensor,
               F_norm: Functionals) -> None:
        gp = self.gp
        tr, va = self._split(groups, F_data.count)
        gen = torch.Generator().manual_seed(self.seed)
        if tr.numel() > self.max_train_functionals:  # whole trajectories, chosen at random
            tr_groups = torch.unique(groups[tr])
            perm = tr_groups[torch.randperm(tr_groups.numel(), generator=gen)]
            per = max(1, tr.numel() // tr_groups.numel())
            keep = perm[: max(1, self.max_train_functionals // per)]
            tr = tr[torch.isin(groups[tr], keep)]
        if va.numel() > self.max_train_functionals // 2:
            va_groups = torch.unique(groups[va])
            per = max(1, va.numel() // va_groups.numel())
            keep = va_groups[torch.randperm(va_groups.numel(), generator=gen)][: max(1, self.max_train_functionals // 2 // per)]
            va = va[torch.isin(groups[va], keep)]
        F_tr = Functionals.cat([F_data.subset(tr), F_norm])
        F_va = F_data.subset(va)
        P_va = P.subset(torch.nonzero(torch.isin(P_groups, torch.unique(groups[va]))).flatten())
        G_va = Functionals.cat([F_va, P_va])
        spread = self._spread(F_data)

        def objective() -> float:
            if self.objective == "mll":  # profiled over the outputscale: sigma_f^2* = y' (K1 + rho I)^-1 y / F
                gp.kernel.outputscale = 1.0
                R, _ = gp.factor(F_tr)
                y = F_tr.targets
                alpha = torch.linalg.solve_triangular(R, y[:, None], upper=False)[:, 0]
                F = y.numel()
                s2 = float(alpha @ alpha) / F
                return 0.5 * F * math.log(s2) + float(torch.log(torch.diagonal(R)).sum()) + 0.5 * F * (1 + math.log(2 * math.pi))
            gp.condition(F_tr)
            both = gp.functional_mean(G_va)
            r2, p2 = both[:F_va.count].pow(2), both[F_va.count:].pow(2).mean()
            return float(torch.log(r2 + 1e-30 * p2).mean() - torch.log(p2))

        def evaluate(theta: torch.Tensor) -> float:
            self._set_hyper(gp, torch.exp(theta[:-1]), max(float(torch.exp(theta[-1])), MIN_NOISE))
            try:
                val = objective()
            except RuntimeError:
                return math.inf
            return val if math.isfinite(val) else math.inf

        with torch.no_grad():
            for p in gp.parameters():
                p.requires_grad_(False)
            # 1. coarse grid over a shared lengthscale
            d = gp.kernel.base_kernel.raw_lengthscale.shape[-1]
            scale0 = float(spread.pow(2).mean().sqrt())
            grid = []
            for s in GRID_SCALES:
                for rho in GRID_NOISES:
                    theta = torch.tensor([math.log(s * scale0)] * d + [math.log(rho)], dtype=torch.float64)
                    grid.append((s * scale0, rho, evaluate(theta)))
            self.history["grid"] = grid
            ok = [g for g in grid if math.isfinite(g[2])]
            if not ok:
                raise RuntimeError("no hyperparameters on the grid gave a usable fit; fix them with lengthscale= and noise=")
            l0, r0, best = min(ok, key=lambda g: g[2])
            theta = torch.tensor([math.log(l0)] * d + [math.log(r0)], dtype=torch.float64)
            # 2. pattern search on the log-parameters (per-input lengthscales with ard=True, then the nugget)
            steps = torch.tensor([math.log(1.5)] * d + [math.log(10.0)], dtype=torch.float64)
            trace = []
            disable = None if self.progress is None else not self.progress
            bar = tqdm(total=self.iterations, desc="hyperparameters", disable=disable,
                       leave=False)
            evals = 0
            while evals < self.iterations and float(steps[0]) > math.log(1.05):
                improved = False
                for c in range(d + 1):
                    for sign in (1.0, -1.0):
                        if evals >= self.iterations:
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
            self.history["search"] = trace
            self.history["objective"] = best
            # settle on the best point
            if self.objective == "mll":
                gp.kernel.outputscale = 1.0
                self._set_hyper(gp, torch.exp(theta[:-1]), max(float(torch.exp(theta[-1])), MIN_NOISE))
                R, _ = gp.factor(F_tr)
                alpha = torch.linalg.solve_triangular(R, F_tr.targets[:, None], upper=False)[:, 0]
                s2 = float(alpha @ alpha) / F_tr.count
                self._set_hyper(gp, torch.exp(theta[:-1]), max(float(torch.exp(theta[-1])), MIN_NOISE), outputscale=s2)
            else:
                self._set_hyper(gp, torch.exp(theta[:-1]), max(float(torch.exp(theta[-1])), MIN_NOISE))
            self._calibrate(F_tr, F_va)

    def _calibrate(self, F_tr: Functionals, F_va: Functionals) -> None:
        r"""Scale the posterior variances (``gp.variance_scale``: :math:`\sigma_f^2` and the nugget together,
        the mean is unchanged) so that 95.4% of the validation residuals lie within two posterior standard
        deviations, as for a calibrated Gaussian. (The residuals are heavy-tailed -- largest where
        validation orbits leave the data -- so matching their mean square instead would leave most of
        them at a fraction of a standard deviation.)"""
        gp = self.gp
        with torch.no_grad():
            gp.condition(F_tr)
            gp.variance_scale = 1.0
            mean, var = gp.functional_posterior(F_va)
            ok = var > 0
            if int(ok.sum()) < 5:
                return
            z = mean[ok].abs() / var[ok].sqrt()
            s = float((torch.quantile(z, 0.954) / 2) ** 2)
            if math.isfinite(s) and s > 0:
                self.history["calibration_factor"] = s
                self._variance_scale = s

    # ------------------------------------------------------------------ hyperparameters after fitting
    @property
    def hyperparameters(self) -> Dict[str, object]:
        """Lengthscale(s), outputscale and relative nugget in use."""
        self._require_fit()
        gp = self.gp
        ls = gp.kernel.base_kernel.lengthscale.detach().reshape(-1) * self._unit  # in the data's units
        return {"lengthscale": ls.tolist() if ls.numel() > 1 else float(ls),
                "outputscale": float(gp.kernel.outputscale) * gp.variance_scale * self._unit ** 4,
                "noise": float(gp.noise) / float(gp.kernel.outputscale)}

    @property
    def conditioning(self):
        """:class:`~learners.shadow.gp.ConditioningInfo` of the final solve (size, jitter, condition estimate)."""
        self._require_fit()
        return self.gp.info

    # ------------------------------------------------------------------ posterior
    def lagrangian(self, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        r"""Posterior mean of the learned Lagrangian (:math:`\bar L_{inv}` for LSI, :math:`\bar L` for LGP) at
        ``q, v`` of shape ``(..., n)`` -> ``(...)``; differentiable to any order (autograd)."""
        self._require_fit()
        q, v = check_states(q, v, self.n)
        return self._unit ** 2 * self.gp.mean(self._standard_state(q, v))

    __call__ = lagrangian

    def c_lagrangian(self):
        """The posterior mean as C (gradient and Hessian in closed form, :mod:`learners.shadow.compiled_mean`),
        so that integrators given the model itself step it on their compiled path
        (:mod:`integrators.compiled`). The C form is that of the GP's own coordinates, so it is offered
        only when they are the data's (no standardisation); raises ``integrators.compiled.NotLowerable``
        otherwise and for kernels without a C form (the integrator then steps eagerly)."""
        self._require_fit()
        from integrators.compiled import NotLowerable

        if self._unit != 1.0 or (self._center is not None and bool(self._center.any())):
            raise NotLowerable("the model is standardised: step StandardisedMean(model) in its coordinates instead")
        return self._standardised_c_lagrangian()

    def _standardised_c_lagrangian(self):
        from .compiled_mean import c_lagrangian_of_expansion

        return c_lagrangian_of_expansion(self.gp._mean_fn, self.n)
    def variance(self, q, v) -> torch.Tensor:
        r"""Posterior variance of the learned Lagrangian at ``q, v`` (shape ``(...)``). Only differences of
        :math:`L` are determined by the data and the normalisation, so this is largest far from both."""
        self._require_fit()
        q, v = check_states(q, v, self.n)
        with torch.no_grad():
            return self._unit ** 4 * self.gp.variance(self._standard_state(q.detach(), v.detach()))

    def _standard_state(self, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``(q, v)`` in the GP's coordinates ``((q - center)/unit, v/unit)``, concatenated."""
        if self._center is None:
            return torch.cat([q, v], -1)
        return torch.cat([(q - self._center) / self._unit, v / self._unit], -1)

    def _require_fit(self) -> None:
        if self.gp is None or self.gp._beta is None:
            raise RuntimeError(f"{type(self).__name__} is not fitted yet: call .fit(...) first")
