r"""Shared machinery of the GP Lagrangian models: kernel set-up, hyperparameter learning, conditioning.

A model observes *data functionals* of the unknown Lagrangian (DEL residuals for LSI, continuous
Euler--Lagrange residuals for LGP), all with target zero, plus a normalisation with a non-zero
target (:mod:`learners.shadow.normalisation`), and conditions a :class:`~learners.shadow.gp.FunctionalGP` on them.

Hyperparameters (lengthscale(s) of the RBF kernel -- or, with ``kernel="mechanical"``, the position lengthscales
and velocity scales of :class:`~learners.shadow.mechanical.MechanicalKernel`, searched the same way --, the nugget
:math:`\rho = \sigma_n^2/\sigma_f^2` and the outputscale :math:`\sigma_f^2`) are fixed or learned on a training subset of at most
``max_train_functionals`` functionals (whole trajectories): a coarse grid over one shared lengthscale,
then a pattern search on the log-parameters (per-input lengthscales with ``ard=True``, and the
nugget), ``iterations`` evaluations with a ``tqdm`` bar. No gradients: every objective involves a
solve with a covariance of condition number ~1e11-1e13, whose hyperparameter gradients are too
inaccurate to follow (Adam on them went uphill in our trials). Three objectives:

``"auto"`` (default)
    ``"mll"`` for ``n <= 2`` and ``"positions"`` for ``n >= 3`` (where the other two collapse, below); if the likelihood
    collapses all the same (profiled outputscale below
    :data:`~learners.shadow.hyperparameter_search.COLLAPSE_OUTPUTSCALE`), an :class:`IdentifiabilityWarning` and the
    ``"positions"`` search. ``objective_used`` records the choice.
``"mll"``
    The log marginal likelihood of all observations, profiled over :math:`\sigma_f^2` (closed form
    :math:`\sigma_f^{2*} = y^\top(K_1 + \rho I)^{-1}y/F`). Almost all targets are zero and only the normalisation
    carries a non-zero value, so the data-fit term is small and the likelihood is ruled by :math:`\log\det`: by the
    chain rule it is the sum of the log predictive densities of each DEL residual being zero given the previous ones
    -- a sequential cross-validation of the zero residuals that also weighs their predicted variance, and so penalises
    kernels that are needlessly flexible. That is what identification needs: :math:`\mathrm{mod}_N` and its energy use
    higher derivatives of :math:`\bar L_{inv}` (third and beyond), which a too short lengthscale gets wrong even where
    it predicts well.
``"heldout"``
    Every fifth trajectory validates; minimise the held-out log residual :math:`J = \frac1{|V|}\sum_{j \in V}\log
    R_j^2 - \log\overline{P^2}` (:math:`R_j` posterior-mean DEL/EL residuals on the validation trajectories, :math:`P`
    their posterior-mean momenta, so :math:`J` is blind to the scale of :math:`L` and penalises a Lagrangian that is
    flat on the data).

Which works better here (full pendulum, ``benchmarks/shadow.py --objectives``): ``"heldout"`` predicts better but
identifies badly (level sets 0.013 / 0.026 for :math:`H_{rec}[2]` / :math:`H_{rec}[4]` against 5e-4 / 4e-5). Hence ``"mll"``.

``"positions"`` (LSI only)
    The held-out one-step position error (:mod:`learners.shadow.position_objective`): from each held-back triple, the
    move of :math:`q_{j+1}` that one Newton step of the scheme on the candidate posterior mean would make,
    :math:`\delta c = -(\partial_c r)^{-1} r`; minimise the mean of :math:`\log\|\delta c\|^2`. Needed for :math:`n \ge
    3`: there ``"mll"`` and ``"heldout"`` drift to lengthscales of a fraction of the data's spread and
    outputscales of 1e-17, a Lagrangian nearly zero away from the normalisation point that satisfies the zero DEL
    targets trivially (FPU chain, ``n = 4``: level-set error 0.74 for :math:`H_{rec}[2]`). A flat Lagrangian cannot
    predict a position, so this objective cannot drift there. Its search (:mod:`learners.shadow.position_search`) is a
    grid over one lengthscale for the positions and one for the velocities on the training subset, then a refinement
    with all training functionals, since the best lengthscales shrink as the data grow (on the chain: 1.6 and 12.6 in
    the data's units with the whole training set, 4.2 and 34 with 400 functionals). The same search chooses the
    normalisation (the trace of the mass matrix, or the whole matrix where it predicts clearly better) and, with
    ``kernel="auto"`` (the default), the kernel: the mechanical kernel of degree 2 (or 4, where clearly better than 2)
    with the whole matrix where it predicts the held-out positions better than the RBF (``kernel_degree`` records it).

Calibration (any objective): every fifth training trajectory is held back while learning; at the end the variances
are scaled (``FunctionalGP.variance_scale``) so that 95.4% of the held-back DEL/EL residuals lie within two standard
deviations; for LSI the energies and velocities get their own scale (:mod:`learners.shadow.calibration`).

``lengthscale=`` (or the paper's ``epsilon=``, :math:`\ell = \varepsilon/\sqrt2`) fixes the lengthscale and skips
learning; ``noise=`` then sets :math:`\rho` (default ``1e-12``). The searches: :mod:`learners.shadow.hyperparameter_search`.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Dict, Optional, Sequence, Union

import gpytorch
import torch

import bea
from bea.errors import BeaRuntimeError, BeaValueError

from .. import saving
from ..saving import recorded
from .._checks import check_linear_scheme, check_states, check_step
from . import model_arguments, persist
from .calibration import Calibration, del_calibration, ensure_energy_calibration
from .functionals import Functionals
from .gp import FunctionalGP
from .guards import IdentifiabilityWarning, caller_level, check_fitted
from .hyperparameter_search import (MIN_NOISE, collapsed, grid_best, grid_search, objective, pattern_search, set_hyperparameters,
                                    settle, spread, training_subsets)
from .kernel_choice import KernelOption, kernel_option, new_gp
from .lowrank_solve import LowRankSolver
from .mechanical import MechanicalKernel
from .position_search import search_positions
from .normalisation import Normalisation, get_normalisation
from .objectives import Auto, Objective, get_objective
from .units import StandardUnits

__all__ = ["FunctionalLagrangianModel", "MIN_NOISE", "IdentifiabilityWarning"]


class FunctionalLagrangianModel(StandardUnits, gpytorch.Module):
    r"""Base class of :class:`~learners.InverseModifiedLagrangianGP` and :class:`~learners.LagrangianGP`; their
    constructor (parameters: :class:`~learners.InverseModifiedLagrangianGP`). ``final_solver``: None (default), the
    exact Cholesky of :math:`\Theta + \sigma_n^2 I` in the fit's final solve; a
    :class:`~learners.shadow.lowrank_solve.LowRankSolver`, a pivoted Cholesky :math:`\Theta \approx LL^\top` of
    :math:`m \ll F` columns and the subset-of-regressors mean, std refused (:mod:`learners.shadow.model_arguments`)."""

    #: hyperparameter-search evaluations when ``iterations`` is not given
    default_iterations = 16
    #: the hyperparameter objectives this model offers
    objectives = ("auto", "mll", "heldout")
    final_solver = model_arguments.final_solver  # the constructor's final_solver=; setting it is deprecated

    @recorded
    def __init__(self, h: float, scheme: Union[str, "bea.Scheme"] = "midpoint", *, kernel: KernelOption = "auto",
                 normalisation: Union[str, Normalisation, None] = "mass", objective: Union[str, Objective] = "auto",
                 lengthscale: Union[float, Sequence[float], torch.Tensor, None] = None, epsilon: Optional[float] = None,
                 noise: Optional[float] = None, ard: bool = True, iterations: Optional[int] = None,
                 max_train_functionals: int = 600, progress: Optional[bool] = None, seed: int = 0,
                 final_solver: Optional[LowRankSolver] = None):
        super().__init__()
        self.h = check_step(h)
        self.scheme = self._accepted_scheme(bea.get_scheme(scheme))
        objective = get_objective(objective, self.objectives, type(self).__name__)
        lengthscale = model_arguments.checked_lengthscale(lengthscale, epsilon, noise)
        model_arguments.check_search_budget(iterations, max_train_functionals)
        self._final_solver = model_arguments.check_final_solver(final_solver)
        self._user_kernel, self._kernel_template = kernel_option(kernel, lengthscale)
        self._kernel_auto = isinstance(kernel, str) and kernel == "auto"  # the search may choose (position_search)
        self.kernel_degree: Optional[int] = None  # the mechanical degree the last search chose; None: the kernel asked for
        #: the element structure the last search chose (learners.shadow.structure_choice), e.g. ("bodies", 2, 2); None: none
        self.kernel_structure: Optional[tuple] = None
        self.normalisation = get_normalisation(normalisation)
        self.objective = objective
        #: the objective the last fit used ("auto" resolved; None when the hyperparameters were fixed)
        self.objective_used: Optional[str] = None
        self._calibration: Dict[str, Calibration] = {}
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
        #: units of the data (learners.shadow.units): the GP lives on x' = ((q - center)/unit, v/speed), at the step
        #: h' = _step, and the model's Lagrangian is speed**2 * L'(x'); None/1.0: the data's own units
        self._set_units(None, 1.0, None)
        self._init_state()

    def _init_state(self) -> None:
        """Attributes of a subclass's fitted state (none here)."""

    #: the scheme, if this model can condition on its functionals (linear in L; LSI also takes stage schemes)
    _accepted_scheme = staticmethod(check_linear_scheme)

    # ------------------------------------------------------------------ saving
    def save(self, path) -> Path:
        """Write the fitted model (constructor arguments, hyperparameters, posterior) to ``path`` atomically
        (:mod:`learners.saving`); :meth:`load` gives it back without refitting."""
        persist.check_savable(self)
        state = persist.fitted_state(self)
        return saving.write(self, path, persist.saved_config(self), state, persist.file_version(state))

    @classmethod
    def load(cls, path, map_location=None):
        """The model saved in ``path`` by :meth:`save`; :class:`~learners.saving.ModelFileError` if the file holds
        another class or format version."""
        def restore(config, state):
            model = cls(**config)
            persist.restore(model, state)
            return model

        return saving.load(path, cls, map_location, restore)

    def _fitted_extra(self) -> dict:
        return {}

    def _restore_extra(self, extra: dict) -> None:
        pass

    # ------------------------------------------------------------------ set-up
    def _make_gp(self, D: int) -> FunctionalGP:
        template = self._kernel_template if self.kernel_degree is None else MechanicalKernel(self.kernel_degree)
        return new_gp(self._user_kernel, template, D, self.ard, self._units_device)  # the data's device

    def _apply(self, fn, recurse: bool = True):
        """``.to(device)``, ``.cuda()``, ``.cpu()`` (every ``nn.Module`` move) of a fitted model: its whole fitted
        state (posterior, data, units) goes where ``fn`` sends tensors, as a loaded model file is placed
        (:mod:`learners.shadow.persist`); the cached derived Lagrangians are rebuilt there on demand."""
        if getattr(self, "gp", None) is None or self.gp._beta is None:
            return super()._apply(fn, recurse)
        persist.move(self, fn)
        return self

    # ------------------------------------------------------------------ learning
    def _fit_functionals(self, F_data: Functionals, groups: torch.Tensor, P: Functionals, P_groups: torch.Tensor,
                         normalisation: Optional[Normalisation] = None, finalise: bool = True) -> None:
        r"""Learn or set the hyperparameters, then (``finalise``, else :meth:`_finalise` later) condition on all data
        functionals + the normalisation. ``groups`` (F_data.count,) and ``P_groups`` (P.count,) give the trajectory of
        each functional."""
        D = F_data.dim
        center = torch.cat([a.points for a in F_data.atoms.values()]).mean(0)
        norm = normalisation or self.normalisation
        F_norm = norm.functionals(D // 2, center)
        self.kernel_degree = self.kernel_structure = self.objective_used = None  # set again by a search (_learn)
        self.gp = gp = self._make_gp(D)
        self.history = {}
        self._calibration = {}
        self._pending_calibration = None
        self._variance_scale = 1.0
        if self._user_kernel is not None:  # used as given
            rho = self.fixed_noise if self.fixed_noise is not None else 1e-12
            gp.likelihood.noise = torch.tensor([rho * float(gp.kernel.outputscale.detach())], dtype=torch.float64,
                                               device=self._units_device)
            self._freeze()
        elif self.fixed_lengthscale is not None:
            # given in the data's units; the time unit is then the data's (_learns_time_unit), so one scale serves q and v
            ls = torch.as_tensor(self.fixed_lengthscale, dtype=torch.float64, device=self._units_device) / self._unit
            set_hyperparameters(gp, ls, self.fixed_noise if self.fixed_noise is not None else 1e-12)
            self._freeze()
        else:
            searched = norm.searched(D // 2) if getattr(norm, "matrix", False) is None else None
            alt = None if searched is None else searched.functionals(D // 2, center)
            # the mechanical candidate's second condition (position_search.MECHANICAL_DIAGONAL): unequal masses; read
            # by the search only, so not kept on the fitted model
            whole = searched is not None and D // 2 >= 3 and searched.matrix is True and self._kernel_auto
            self._norm_diagonal = norm.with_matrix("diagonal").functionals(D // 2, center) if whole else None
            F_norm = self._learn(F_data, groups, P, P_groups, F_norm, alt)
            self._norm_diagonal = None
        self._norm_count, self._final = F_norm.count, (F_data, F_norm)
        if finalise:
            self._finalise()

    def _finalise(self) -> None:
        """The fit's last and largest solve: condition on all data functionals and the normalisation (deferred by
        :mod:`~learners.shadow.principal` until the search's winner is known), then :func:`check_fitted`."""
        (F_data, F_norm), self._final, gp = self._final, None, self.gp  # the search may have chosen another kernel's GP
        gp.solver = self.final_solver  # the constructor's (None, the default: the dense solve, unchanged)
        with torch.no_grad():  # a positions search's fit: its solves' symmetric assembly (symmetric_covariance)
            gp.condition(Functionals.cat([F_data, F_norm]), symmetric=self.objective_used == "positions")
        self._correct_targets(F_norm)
        gp.variance_scale = self._variance_scale
        check_fitted(self, torch.cat([a.points for a in F_data.atoms.values()]))  # never a silent NaN model

    def _correct_targets(self, F_norm: Functionals) -> None:
        """Move the final solve's normalisation targets ``F_norm`` (last in its functionals): none here; LSI
        overrides it (:mod:`~learners.shadow.mass_target`)."""

    @property
    def _learns_time_unit(self) -> bool:
        """Whether the fit chooses its time unit from the data (:mod:`learners.shadow.units`): when it learns the
        hyperparameters. A kernel fixed by the user (``kernel=``, ``lengthscale=``) is applied in the data's
        time unit, as given."""
        return self._user_kernel is None and self.fixed_lengthscale is None

    def _freeze(self) -> None:
        self.gp.requires_grad_(False)  # every parameter

    def _resolved_objective(self, n: int) -> str:
        r"""The objective ``"auto"`` stands for: ``"positions"`` for a model that learns from positions with
        :math:`n \ge 3` (there the other two collapse, :mod:`learners.shadow.position_objective`), else ``"mll"``
        (identical to the results before ``"auto"`` existed; :meth:`_learn` still switches to ``"positions"`` if
        the likelihood collapses)."""
        if not isinstance(self.objective, Auto):
            return self.objective.name
        return "positions" if n >= self.objective.positions_from and "positions" in self.objectives else "mll"

    def _learn(self, F_data: Functionals, groups: torch.Tensor, P: Functionals, P_groups: torch.Tensor,
               F_norm: Functionals, F_norm_alt: Optional[Functionals] = None) -> Functionals:
        """Search the hyperparameters (:mod:`learners.shadow.hyperparameter_search`, :mod:`learners.shadow.position_search`)
        on a training subset, validated on held-back trajectories (their residuals and momenta), then calibrate the
        variances on those. Returns the normalisation kept (``F_norm``, or ``F_norm_alt`` if the search chose it)."""
        gp = self.gp
        kind = self._resolved_objective(F_data.dim // 2)
        tr, va = training_subsets(groups, F_data.count, self.max_train_functionals, self.seed)
        F_tr = Functionals.cat([F_data.subset(tr), F_norm])
        F_va = F_data.subset(va)
        P_va = P.subset(torch.nonzero(torch.isin(P_groups, torch.unique(groups[va]))).flatten())
        scale0 = float(spread(F_data).pow(2).mean().sqrt())
        with torch.no_grad():
            for p in gp.parameters():
                p.requires_grad_(False)
            if kind != "positions":
                theta = self._search(kind, F_tr, F_va, P_va, None, scale0)
                if getattr(self.objective, "fallback", False) and collapsed(gp) and "positions" in self.objectives:
                    warnings.warn(f"the marginal likelihood collapsed (outputscale {float(gp.kernel.outputscale.detach()):.2g}, "
                                  "a Lagrangian ~0 away from the normalisation point): learning the hyperparameters with "
                                  "objective='positions' instead", IdentifiabilityWarning,
                                  stacklevel=caller_level())
                    kind = "positions"
            if kind == "positions":
                positions = self._position_objective(torch.unique(groups[va]))
                F_tr, theta, F_norm = self._search_positions(F_data, groups, F_tr, F_va, P_va, F_norm, positions, scale0,
                                                             F_norm_alt)
            self.objective_used = self.history["objective_used"] = kind
            settle(self.gp, kind, theta, F_tr)  # the search may have chosen another kernel's GP
            self._calibrate(F_tr, F_va)
            self._calibrate_quantities(torch.unique(groups[va]), F_tr)
        return F_norm

    def _search(self, kind: str, F_tr: Functionals, F_va: Functionals, P_va: Functionals, positions, scale0: float):
        """Coarse grid over a shared lengthscale, then the pattern search on every log-parameter: the best theta."""
        evaluate = objective(self.gp, kind, F_tr, F_va, Functionals.cat([F_va, P_va]), positions)
        d = self.gp.kernel.base_kernel.raw_lengthscale.shape[-1]
        self.history["grid"] = grid = grid_search(evaluate, d, scale0, long=positions is not None)
        theta, best = grid_best(grid, d)
        iterations = self.default_iterations if self.iterations is None else self.iterations
        theta, best, self.history["search"] = pattern_search(evaluate, theta, best, iterations, self.progress)
        self.history["objective"] = best
        return theta

    def _search_positions(self, F_data, groups, F_tr, F_va, P_va, F_norm, positions, scale0: float, F_norm_alt=None):
        if self.gp.kernel.base_kernel.raw_lengthscale.shape[-1] != F_data.dim:  # one shared lengthscale (ard=False)
            return F_tr, self._search("positions", F_tr, F_va, P_va, positions, scale0), F_norm
        return search_positions(self, F_data, groups, F_tr, F_va, P_va, F_norm, positions, scale0, F_norm_alt)

    def _calibrate_quantities(self, trajectories: torch.Tensor, F_tr: Functionals) -> None:
        """Calibrate the variances of recovered quantities on the held-back ``trajectories`` (models that recover
        them; nothing here)."""

    def _position_objective(self, trajectories: torch.Tensor):
        """The ``"positions"`` objective on the given held-back trajectories (models that learn from positions)."""
        raise BeaValueError(f"{type(self).__name__} does not learn from positions: use objective='mll' or 'heldout'")

    def _calibrate(self, F_tr: Functionals, F_va: Functionals) -> None:
        """Scale the posterior variances on the validation residuals
        (:func:`~learners.shadow.calibration.del_calibration`)."""
        del_calibration(self, F_tr, F_va)

    @property
    def calibration(self) -> Dict[str, Calibration]:
        r"""The calibrations of the last fit by quantity (:mod:`learners.shadow.calibration`): ``"del"`` (DEL residuals:
        ``predict``'s std) and, for LSI, ``"energy"`` (energies and velocities); empty when the hyperparameters were
        fixed. Each gives the variance scale, and the RMS z-score, fraction within :math:`2\sigma` and count of the
        held-back values it was fitted on."""
        if getattr(self, "_pending_calibration", None) is not None:
            ensure_energy_calibration(self)
        return dict(self._calibration)

    def _variance_factor(self, quantity: str) -> float:
        """Factor on the posterior variances (already times the DEL scale) for ``quantity``; "energy" for a missing
        "energy_differences"."""
        cal = self._calibration.get(quantity, self._calibration.get("energy") if quantity == "energy_differences" else None)
        return 1.0 if cal is None else cal.scale / self.gp.variance_scale

    # ------------------------------------------------------------------ hyperparameters after fitting
    @property
    def hyperparameters(self) -> Dict[str, object]:
        """Lengthscale(s), outputscale and relative nugget in use; the lengthscales are those of the GP's inputs in the
        data's units, along the rotated directions where the fit turned its coordinates (``_rotation``, principal)."""
        self._require_fit()
        gp, ls = self.gp, self.gp.kernel.base_kernel.lengthscale.detach().reshape(-1)
        ls = ls * self._input_units(self.n) if ls.numel() > 1 or self._time != 1.0 else ls * self._unit  # data's units
        return {"lengthscale": ls.tolist() if ls.numel() > 1 else float(ls),
                "outputscale": float(gp.kernel.outputscale.detach()) * gp.variance_scale * self._speed ** 4,
                "noise": float(gp.noise.detach()) / float(gp.kernel.outputscale.detach())}

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
        return self._speed ** 2 * self.gp.mean(self._standard_state(q, v))

    __call__ = lagrangian

    def compiled_form(self, n: int):
        """The posterior mean as C in the data's units (model protocol, :mod:`integrators.model_protocol`): the
        closed-form C of the mean in the GP's coordinates (:mod:`learners.shadow.compiled_mean`) composed with
        the standardisation, so that every integrator of the model -- :meth:`integrator` included -- takes the
        compiled path. Raises ``integrators.compiled.NotLowerable`` for kernels without a C form."""
        self._require_fit()
        from .units import data_units_form

        return data_units_form(self, n)

    c_lagrangian = property(lambda self: lambda: self.compiled_form(self.n))  # the older hook: live (learners.shadow.handles)

    def _standardised_c_lagrangian(self):
        from .compiled_mean import c_lagrangian_of_expansion

        return c_lagrangian_of_expansion(self.gp._mean_fn, self.n)
    def variance(self, q, v) -> torch.Tensor:
        r"""Posterior variance of the learned Lagrangian at ``q, v`` (shape ``(...)``). Only differences of :math:`L`
        are determined by the data and the normalisation, so this is largest far from both."""
        self._require_fit()
        q, v = check_states(q, v, self.n)
        with torch.no_grad():
            return self._speed ** 4 * self.gp.variance(self._standard_state(q.detach(), v.detach()))

    def _require_fit(self) -> None:
        if self.gp is None or self.gp._beta is None:
            raise BeaRuntimeError(f"{type(self).__name__} is not fitted yet: call .fit(...) first")
