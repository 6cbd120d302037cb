r"""A Gaussian process conditioned on linear functionals, with an exact Cholesky solve.

Prior :math:`L \sim \mathcal{GP}(0, \sigma_f^2 k)` on :math:`\mathbb R^D`. Observations are values of
linear functionals :math:`y_i = \Lambda_i[L] + \eta_i`, :math:`\eta_i \sim \mathcal N(0, \sigma_n^2)`
(``noise``; data are exact here, so it acts as a nugget). With
:math:`\Theta = \Lambda\Lambda^\top k + \sigma_n^2 I = R R^\top` (Cholesky),

.. math::  \beta = \Theta^{-1} y, \qquad
           \bar L(x) = \sum_i \beta_i\, \Lambda_i^{y} k(x, y), \qquad
           \operatorname{Cov}[\Gamma L, \Gamma' L] = \Gamma\Gamma'^\top k
           - (R^{-1}\Theta_{\Lambda\Gamma})^\top (R^{-1}\Theta_{\Lambda\Gamma'})

for any further functionals :math:`\Gamma, \Gamma'` (point values, momenta, DEL residuals at new
triples). The posterior mean is a sum over the training atoms, evaluated in closed form and
differentiable to any order in :math:`x` (so :mod:`bea` can apply its correction formulas to it).

Why not ``gpytorch.models.ExactGP``: its training inputs are points of one fixed width, while the
observations here are functionals made of different numbers and orders of atoms (DEL residuals,
normalisation, point values), and the covariance is extremely ill-conditioned (a smooth kernel
and many nearly dependent functionals), which calls for an explicit, reported jitter policy. The
solve is therefore a documented exact Cholesky: if the factorisation fails, a jitter
:math:`10^{-12}\,\overline{\operatorname{diag}\Theta}` is added and raised tenfold until it
succeeds (at most :data:`MAX_JITTER`); the jitter used, the size and a condition estimate are
reported in :attr:`FunctionalGP.info`.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Dict, Optional

import gpytorch
import torch
from gpytorch.constraints import GreaterThan

from bea.errors import BeaRuntimeError, BeaValueError

from .functionals import AtomSet, Functionals, point_evaluations
from .kernels import AtomExpansion, FunctionalKernel
from .lowrank_solve import DENSE_ROUTE
from .symmetric_covariance import symmetric_covariance
from .transpose_sum import symmetrise_

__all__ = ["FunctionalGP", "ConditioningInfo", "MAX_JITTER"]

#: largest relative jitter tried before giving up (relative to the mean diagonal of the covariance)
MAX_JITTER = 1e-4


@dataclass
class ConditioningInfo:
    """How the linear system was solved."""

    size: int  #: number of functionals conditioned on
    noise: float  #: noise variance sigma_n^2 on the diagonal
    jitter: float  #: extra diagonal added to make the Cholesky succeed (0 if none)
    mean_diag: float  #: mean diagonal of the covariance
    cond_estimate: float  #: (max R_ii / min R_ii)^2, a lower bound on the 2-norm condition number
    extra: Dict[str, float] = field(default_factory=dict)

    def __str__(self) -> str:
        return (f"{self.size} functionals, noise {self.noise:.2e}, jitter {self.jitter:.2e} "
                f"(relative {self.jitter / self.mean_diag:.1e}), condition >= {self.cond_estimate:.2e}")


class FunctionalGP(gpytorch.Module):
    r"""GP posterior given observed values of linear functionals (see the module docstring).

    Parameters
    ----------
    kernel : a :class:`~learners.shadow.kernels.FunctionalKernel` (default: RBF with one lengthscale).
    noise : initial noise variance :math:`\sigma_n^2` (a ``gpytorch`` Gaussian likelihood holds it,
        with lower bound ``min_noise``).
    """

    def __init__(self, kernel: Optional[FunctionalKernel] = None, noise: float = 1e-10, min_noise: float = 1e-14):
        super().__init__()
        self.kernel = kernel if kernel is not None else FunctionalKernel()
        self.likelihood = gpytorch.likelihoods.GaussianLikelihood(noise_constraint=GreaterThan(min_noise))
        self.likelihood.noise = torch.tensor(max(noise, 2 * min_noise), dtype=torch.float64,
                                             device=self.likelihood.raw_noise.device)
        self.train_functionals: Optional[Functionals] = None
        self.info: Optional[ConditioningInfo] = None
        self._chol: Optional[torch.Tensor] = None
        self._beta: Optional[torch.Tensor] = None
        self._mean_atoms: Optional[Dict[int, AtomSet]] = None
        self._mean_fn: Optional[AtomExpansion] = None
        self._conditioned = None  # the key (_key) of the current posterior: the same solve is not repeated
        self._factor_symmetric = False  # the assembly asked of the stored factor (factor's ``symmetric``), for retarget
        #: multiplies posterior (co)variances: equivalent to scaling sigma_f^2 and sigma_n^2 together,
        #: which leaves the posterior mean unchanged (set by calibration on held-out data)
        self.variance_scale: float = 1.0
        #: None: the exact Cholesky (default); a :class:`~learners.shadow.lowrank_solve.LowRankSolver`: its mean, no std
        self.solver = None
        self._lowrank = None  # the low-rank posterior (lowrank_solve.LowRankPosterior) where the solver made it
        # float64 whatever the caller's default dtype (GPyTorch creates its parameters in the default)
        self.to(torch.float64)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        """A load into a conditioned GP (:attr:`_beta` set) is refused unless every value it gives equals this GP's own:
        it would change the hyperparameters but not the weights and factor conditioned on them (a posterior of neither
        state). Here rather than on the model, so that loads through a parent module or ``model.gp`` are refused too;
        loads straight into a part (``model.gp.kernel.load_state_dict``, a kernel shared with a fresh GP) meet the same
        check through :meth:`_guard_parts`. The library's loads target fresh GPs (persist, calibration)."""
        if self._beta is not None:
            _refuse_change(self, state_dict, prefix)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def _guard_parts(self) -> None:
        """Give every part of this GP (kernel, likelihood and theirs) the load check of :meth:`_load_from_state_dict`,
        for as long as this GP is alive, conditioned and holds the part; called wherever a posterior is set. The guard
        holds the GP weakly (a kernel shared between fits keeps no old factor alive)."""
        guarded = self.__dict__.setdefault("_guarded_parts", weakref.WeakSet())
        for part in self.modules():
            if part is not self and part not in guarded:
                guarded.add(part)
                part.register_load_state_dict_pre_hook(_PartGuard(self))

    def __getstate__(self):
        state = super().__getstate__()  # pickle and deepcopy: the weak set is rebuilt by __setstate__
        return {k: v for k, v in state.items() if k != "_guarded_parts"}

    def __setstate__(self, state) -> None:
        super().__setstate__(state)
        if self._beta is not None:
            self._guard_parts()

    @property
    def noise(self) -> torch.Tensor:
        return self.likelihood.noise.reshape(())

    # ------------------------------------------------------------------ conditioning
    def factor(self, F: Functionals, symmetric: bool = False) -> tuple:
        r"""Cholesky factor :math:`R` of :math:`\Theta(F, F) + (\sigma_n^2 + \text{jitter}) I` and the info
        (differentiable in the hyperparameters). ``symmetric``: :math:`\Theta` assembled with each atom pair once
        (:mod:`learners.shadow.symmetric_covariance`: equal to rounding, not bit for bit; for the positions
        objective's evaluations) where no gradient in the hyperparameters is asked for."""
        if symmetric and not (torch.is_grad_enabled() and any(p.requires_grad for p in self.kernel.parameters())):
            K = symmetric_covariance(self.kernel, F)
        else:
            K = self.kernel.forward(F, F)  # the library's forward returns a new matrix: symmetrised in place
            K = symmetrise_(K) if type(self.kernel).forward is FunctionalKernel.forward else 0.5 * (K + K.T)
        diag_mean = float(torch.diagonal(K).mean().detach())
        scale = diag_mean if diag_mean > 0 else 1.0
        A = K
        if torch.is_grad_enabled() and (K.requires_grad or self.noise.requires_grad):  # differentiable: out of place
            A = K + torch.diag_embed(self.noise.expand(F.count))
        else:  # no identity matrix, no copy (n = 6: 4,800^2 entries)
            A.diagonal().add_(self.noise)
        jitter = 0.0
        R, info = torch.linalg.cholesky_ex(A)
        while int(info) != 0:
            jitter = 1e-12 * scale if jitter == 0 else jitter * 10
            if jitter > MAX_JITTER * scale:
                raise BeaRuntimeError(
                    f"the covariance of the {F.count} functionals is not positive definite even with a relative jitter of "
                    f"{MAX_JITTER:g}: the data or the hyperparameters are degenerate (duplicate trajectories? a lengthscale "
                    f"far too large?)")
            R, info = torch.linalg.cholesky_ex(_plus_diagonal(A, jitter))
        d = torch.diagonal(R).detach()
        info_ = ConditioningInfo(size=F.count, noise=float(self.noise.detach()), jitter=jitter, mean_diag=diag_mean,
                                 cond_estimate=float((d.max() / d.min()) ** 2))
        return R, info_

    def condition(self, F: Functionals, targets: Optional[torch.Tensor] = None, symmetric: bool = False) -> "FunctionalGP":
        """Condition on the functionals ``F`` with observed values ``targets`` (default ``F.targets``); ``symmetric``:
        see :meth:`factor`. The same ``F``, assembly and hyperparameters again reuse the current solve."""
        y = F.targets if targets is None else targets
        if y is None:
            raise BeaValueError("no targets: give targets= or functionals with .targets")
        key = self._key(F, symmetric) if targets is None else None
        if key is not None and self.solver is not None:  # a low-rank solve is never a dense one's repeat
            key = (key, self.solver)
        if key is not None and F is self.train_functionals and key == self._conditioned:  # the same solve, again
            return self
        if self.solver is not None:
            return self._set_lowrank(F, y, key)
        self._set_posterior(F, y, *self.factor(F, symmetric), bool(symmetric), key)
        return self

    def retarget(self, targets: torch.Tensor) -> "FunctionalGP":
        """Condition again on the same functionals with other observed values ``targets``: the stored factor is
        reused (the covariance does not depend on the targets), so this is a triangular solve, not a factorisation."""
        self._require()
        F = self.train_functionals
        F = Functionals(F.dim, F.count, F.atoms, targets.to(torch.float64))
        if self._lowrank is not None:
            return self._set_lowrank(F, F.targets, None, self._lowrank)
        self._set_posterior(F, F.targets, self._chol, self.info, self._factor_symmetric, self._key(F, self._factor_symmetric))
        return self

    def _set_posterior(self, F: Functionals, y: torch.Tensor, R: torch.Tensor, info: ConditioningInfo, symmetric: bool,
                       key) -> None:
        r"""The posterior given the values ``y`` of the functionals ``F`` and the factor :math:`R` of their covariance
        (:meth:`factor`, with its ``info``): :math:`\beta = (RR^\top)^{-1}y` and the mean's atoms; ``symmetric`` (the
        factor's assembly) and ``key`` (:meth:`_key`, None where nothing may be reused) are kept for the next
        :meth:`condition` or :meth:`retarget`. Nothing is stored before the solve succeeded."""
        beta = torch.cholesky_solve(y[:, None].to(R.dtype), R)[:, 0]
        self._lowrank = None
        self.train_functionals, self._chol, self._beta, self.info, self._factor_symmetric = F, R, beta, info, symmetric
        self._guard_parts()
        self._mean_atoms = _merge_atoms(F, beta)
        self._mean_fn = AtomExpansion(self.kernel, self._mean_atoms, differentiable=beta.requires_grad)
        self._conditioned = key

    def _set_lowrank(self, F: Functionals, y: torch.Tensor, key, previous=None) -> "FunctionalGP":
        r"""The posterior of :attr:`solver` (:mod:`~learners.shadow.lowrank_solve`): weights :math:`\alpha` on the pivot
        functionals only (:attr:`_beta` holds them at the pivots' places, zeros elsewhere); ``previous``: the same
        functionals' factor, reused for new values ``y`` (:meth:`retarget`)."""
        noise = float(self.noise.detach())
        if previous is None or previous.noise != noise:  # R = qr([L; sigma_n I]) holds the noise it was made with
            if self.solver is None:
                raise BeaValueError("retarget after a noise change needs a new low-rank solve, but gp.solver is None: "
                                    "condition again (densely, or with gp.solver set)")
            post = self.solver.solve(self.kernel, F, y, noise)
        else:
            post = previous
            post.alpha = post.weights(y, noise)
        beta = post.alpha.new_zeros(F.count).index_copy(0, post.factor.pivots, post.alpha)
        d = torch.diagonal(post.R)
        info = ConditioningInfo(size=F.count, noise=noise, jitter=0.0, mean_diag=float(post.factor.diag.mean()),
                                cond_estimate=float((d.max() / d.min()) ** 2) if d.numel() else 1.0,
                                extra={"rank": float(post.factor.rank), "relative_residual": post.factor.relative_residual,
                                       "residual_over_noise": float(post.factor.residual.sum()) / noise})
        self._chol, self._factor_symmetric = None, False
        self.train_functionals, self._beta, self.info, self._lowrank = F, beta, info, post
        self._guard_parts()
        self._mean_atoms = _merge_atoms(post.functionals, post.alpha)
        self._mean_fn = AtomExpansion(self.kernel, self._mean_atoms)
        self._conditioned = key
        return self

    @property
    def _chol(self) -> Optional[torch.Tensor]:
        """The dense Cholesky factor of the last solve; refused where the low-rank solver made the posterior."""
        if self.__dict__.get("_lowrank") is not None:
            raise BeaValueError(f"this posterior was solved by the low-rank solver ({self.solver}): it has no dense "
                                "factor, which the posterior std and variances, calibration, data_level, saving the model, "
                                "the element extension (sharing_posterior) and predict's return_std all need (predict "
                                f"without them skips its std check with a LowRankWarning); use {DENSE_ROUTE}")
        return self.__dict__.get("_dense_chol")

    @_chol.setter
    def _chol(self, value: Optional[torch.Tensor]) -> None:
        self.__dict__["_dense_chol"] = value

    def require_dense(self) -> None:
        """Raise :attr:`_chol`'s refusal where the low-rank solver made the posterior (before costly work needing it)."""
        self._chol  # noqa: B018 -- the property raises

    @property
    def mean_functionals(self) -> Functionals:
        """The functionals the posterior mean sums over: the training functionals, or the low-rank solve's pivots."""
        return self.train_functionals if self._lowrank is None else self._lowrank.functionals

    def sharing_posterior(self, kernel: FunctionalKernel) -> "FunctionalGP":
        r"""A GP under ``kernel`` holding this one's posterior as it is -- functionals, factor :math:`R`, weights
        :math:`\beta`, mean atoms, likelihood, variance scale --, its mean :math:`\sum_a c_a\,\partial k(\cdot, a)` of
        ``kernel``: the same weights under another kernel whose blocks with the training atoms are the ones to use
        (:mod:`~learners.shadow.element_extension`). It is never re-solved (``condition`` would refactor the
        functionals under ``kernel``), so it shares the tensors, which nothing changes in place."""
        self._require()
        gp = FunctionalGP(kernel)
        gp.likelihood, gp.variance_scale = self.likelihood, self.variance_scale
        gp.train_functionals, gp.info, gp._chol, gp._beta = self.train_functionals, self.info, self._chol, self._beta
        gp._mean_atoms, gp._factor_symmetric = self._mean_atoms, self._factor_symmetric
        gp._mean_fn = AtomExpansion(kernel, gp._mean_atoms)
        gp._guard_parts()
        return gp

    def _key(self, F: Functionals, symmetric: bool = False):
        r"""What a posterior without gradients depends on: the functionals ``F`` (the object, never changed in
        place), how :math:`\Theta` was assembled (``symmetric``: its entries differ at rounding, so a full assembly's
        solve never stands for a symmetric one's, nor the reverse) and every hyperparameter's value; None where
        gradients flow (nothing is reused). An element kernel's part-by-part assembly
        (:func:`~learners.shadow.element_gram.reusing_parts`, the element search's stages 2b-3) is keyed
        ``symmetric=True`` too: it and a plain symmetric solve may stand for each other (the calibration after such a
        search may reuse it), equal to rounding, not bit for bit."""
        params = list(self.parameters())
        if torch.is_grad_enabled() and any(p.requires_grad for p in params):
            return None
        return id(F), bool(symmetric), tuple(tuple(p.detach().reshape(-1).tolist()) for p in params)

    def _require(self) -> None:
        if self._beta is None:
            raise BeaRuntimeError("condition the GP on data first (fit)")

    # ------------------------------------------------------------------ posterior
    def mean(self, x: torch.Tensor) -> torch.Tensor:
        r"""Posterior mean :math:`\bar L(x)`, ``x`` of shape (..., D) -> (...); differentiable in ``x``
        (and in the hyperparameters, if the GP was conditioned with gradients enabled)."""
        self._require()
        return self._mean_fn(x)

    def functional_mean(self, G: Functionals) -> torch.Tensor:
        r"""Posterior mean of the functionals ``G``: :math:`\Theta_{G\Lambda}\beta`."""
        self._require()
        if self._lowrank is not None:  # the pivots only carry weights
            return self.kernel.forward(G, self._lowrank.functionals) @ self._lowrank.alpha
        return self.kernel.forward(G, self.train_functionals) @ self._beta

    def functional_posterior(self, G: Functionals, full_cov: bool = False):
        r"""Posterior mean and variance (or full covariance) of the functionals ``G``."""
        self._require()
        R = self._chol  # refused in low-rank mode, before Theta(G, F) is assembled
        KGT = self.kernel.forward(G, self.train_functionals)
        mean = KGT @ self._beta
        V = torch.linalg.solve_triangular(R, KGT.T, upper=False)
        if full_cov:
            return mean, self.variance_scale * (self.kernel.forward(G, G) - V.T @ V)
        var = self.kernel.diagonal(G) - (V * V).sum(0)
        return mean, self.variance_scale * var.clamp_min(0.0)

    def variance(self, x: torch.Tensor) -> torch.Tensor:
        r"""Posterior variance of :math:`L(x)`, ``x`` of shape (..., D) -> (...)."""
        lead = x.shape[:-1]
        _, var = self.functional_posterior(point_evaluations(x.reshape(-1, x.shape[-1])))
        return var.reshape(lead)


def _plus_diagonal(A: torch.Tensor, value: float) -> torch.Tensor:
    """``A + value I`` (a new matrix; ``A`` itself is left as it is, for the next, larger jitter)."""
    out = A.clone()
    out.diagonal().add_(value)
    return out


def _merge_atoms(F: Functionals, beta: torch.Tensor) -> Dict[int, AtomSet]:
    r"""Atoms of the posterior mean :math:`\sum_i \beta_i \Lambda_i^y k(\cdot, y)`, with order-0 and
    order-1 atoms at the same point merged (their contributions are linear in coefficient and
    direction), which halves the cost for the midpoint rule (neighbouring triples share midpoints)."""
    out: Dict[int, AtomSet] = {}
    for m, A in F.atoms.items():
        w = A.coef * beta[A.owner]
        if m == 0:
            pts, inv = torch.unique(A.points, dim=0, return_inverse=True)
            coef = w.new_zeros(pts.shape[0]).index_add(0, inv, w)
            out[0] = AtomSet(pts, pts.new_zeros(pts.shape[0], 0, pts.shape[1]), coef, inv.new_zeros(pts.shape[0]))
        elif m == 1:
            pts, inv = torch.unique(A.points, dim=0, return_inverse=True)
            dirs = w.new_zeros(pts.shape[0], pts.shape[1]).index_add(0, inv, w[:, None] * A.dirs[:, 0])
            out[1] = AtomSet(pts, dirs[:, None, :], w.new_ones(pts.shape[0]), inv.new_zeros(pts.shape[0]))
        else:
            out[m] = AtomSet(A.points, A.dirs, w, A.owner.new_zeros(len(A)))
    return out


def _refuse_change(module: torch.nn.Module, state_dict, prefix: str) -> None:
    """Raise where ``state_dict`` gives ``module`` (under ``prefix``) a value other than its own (strict=False: a
    subset equal to its own values is fine)."""
    own = module.state_dict()
    given = [k for k in own if prefix + k in state_dict]
    if any(not torch.equal(own[k], torch.as_tensor(state_dict[prefix + k]).to(own[k])) for k in given):
        raise BeaRuntimeError("load_state_dict would change the kernel hyperparameters of a fitted GP model but "
                              "not its posterior (weights and factor conditioned on the old ones): read a saved "
                              "model with load(path), or fit again (learners.shadow.handles)")


class _PartGuard:
    """The load pre-hook :meth:`FunctionalGP._guard_parts` puts on a part: the GP's check, while the GP is alive,
    conditioned, and still holds the part (a kernel replaced before a fit is free again). A copy (pickle, deepcopy)
    guards nothing: the copied GP guards its own copied parts again."""

    def __init__(self, gp: Optional["FunctionalGP"] = None) -> None:
        self._gp = None if gp is None else weakref.ref(gp)

    def __reduce__(self):
        return (_PartGuard, ())

    def __call__(self, part, state_dict, prefix, *_) -> None:
        gp = None if self._gp is None else self._gp()
        if gp is not None and gp._beta is not None and any(part is m for m in gp.modules()):
            _refuse_change(part, state_dict, prefix)
