r"""Lagrangian Shadow Integration: a GP inverse modified Lagrangian from position snapshots.

Data: positions only, at a uniform step ``h``, shaped ``(n_traj, n_steps + 1, n)``. Each triple
:math:`(q_{j-1}, q_j, q_{j+1})` gives ``n`` linear conditions on :math:`L_{inv}` (docs/theory/lsi.md),

.. math::  D_2L_{inv,\Delta}(q_{j-1}, q_j) + D_1L_{inv,\Delta}(q_j, q_{j+1}) = 0,

for any :mod:`bea` scheme. With a normalisation, a GP prior :math:`L_{inv} \sim \mathcal{GP}(0, k)`
on :math:`TQ = \mathbb R^{2n}` conditioned on these functionals gives the posterior mean
:math:`\bar L_{inv}` (:meth:`InverseModifiedLagrangianGP.lagrangian`) and uncertainty
(:meth:`~InverseModifiedLagrangianGP.variance`, :meth:`~InverseModifiedLagrangianGP.del_residuals`).

Afterwards (docs/theory/inverse.md, docs/theory/lsi.md): the scheme applied to :math:`\bar L_{inv}` predicts motions; the
recovered Lagrangian :math:`L_{rec} = \mathrm{mod}_N(\bar L_{inv})` (``bea`` code generation, any
order ``N``) gives the initial momentum :math:`p_0 = \partial_vL_{rec}(q_0, \dot q_0)`, velocities
(solve :math:`\partial_vL_{rec}(q_j, \dot q_j) = p_j`, :math:`p_j` the discrete momenta) and the energy
:math:`H_{rec} = \partial_vL_{rec}\cdot v - L_{rec}`.

*Units.* Learning is equivariant under a change of units and origin of positions, :math:`q \to s\,q + c`, and
of time, :math:`h \to c\,h` with the same positions: the fit runs in standardised coordinates
(:mod:`learners.shadow.units`), :math:`q' = (q - \bar q)/\sigma` with :math:`\bar q` the mean position (per
coordinate) and :math:`\sigma` the RMS over coordinates of their standard deviations (one scale for all
coordinates, so rotations and the kernel's geometry are kept), and time :math:`t' = t/\tau` with the time unit
:math:`\tau = h/h'` chosen from the positions alone (:math:`h'` makes the RMS of the step velocities
:math:`(q'_{k+1} - q'_k)/h'` equal to :data:`~learners.shadow.units.VELOCITY_RMS` = 1/2). Velocities are :math:`v' = v/s`, :math:`s = \sigma/\tau`. The GP
models :math:`L'(q', v')` at the step :math:`h'`, the same problem bit for bit whatever the units of :math:`q`
and :math:`h`, and the model's Lagrangian in the data's units is :math:`L(q, v) = s^2 L'(q', v')` -- the scheme
commutes with these maps, so :math:`L` has the motions of :math:`L'` mapped back, and the factor :math:`s^2`
makes the mass normalisation hold in the data's units. Predictions are computed in the standardised
coordinates and mapped back; every output (Lagrangian, momenta :math:`s p'`, velocities :math:`s v'`, energies
:math:`s^2 H'`, DEL residuals :math:`s r'`, their stds, lengthscales :math:`\sigma\ell'_q` and :math:`s\ell'_v`)
is in the data's units, so scaling :math:`h` by :math:`c` scales velocities by :math:`1/c` and energies by
:math:`1/c^2` and leaves the motion unchanged (``tests/test_learners_time_units.py``). A kernel fixed by the user
(``kernel=``, ``lengthscale=``) is applied in the data's time unit (:math:`\tau = 1`), as given.

*Extrapolation.* :meth:`~InverseModifiedLagrangianGP.predict` checks the posterior (see
:data:`EXTRAPOLATION_FACTOR`) and the distance from the data (:data:`~learners.shadow.guards.RUNAWAY_FACTOR`);
a fit that ends with a non-finite model and a non-finite prediction raise
:class:`~learners.shadow.guards.NonFiniteModelError` (:mod:`learners.shadow.guards`).
"""

from __future__ import annotations

import math
import warnings
from typing import Callable, Dict, Optional, Union

import torch

from integrators import Trajectory, VariationalIntegrator

import bea
from bea.errors import BeaValueError
from .._checks import as_tensor, check_finite, check_snapshots, snapshot_layout
from .calibration import calibration_state, restore_calibration
from .heap import kept_heap
from .hyperparameters import FunctionalLagrangianModel
from .retry import solve_with_retry
from .lowrank_solve import LowRankWarning
from .guards import (caller_level, RUNAWAY_FACTOR, ExtrapolationError, ExtrapolationWarning,
                     check_prediction, report_extrapolation, runaway)
from .functionals import Functionals, del_residual_functionals, snapshot_functionals, triples_from_snapshots
from .mass_target import correct_matrix_target
from .normalisation import in_standard_units
from .position_objective import position_objective
from .principal import fit_with_candidate
from .step_resolution import check_step_resolution
from .structure_choice import structure_name
from .handles import FrozenMean
from .recovery import RecoveryMixin
from .element_search import ElementHooks
from .rbf_jet import RBFJet
from .stage_lsi import accepted_scheme, check_stage_objective, fit_stages, linear_scheme
from .units import StandardisedMean, position_units, standard_step  # noqa: F401  (StandardisedMean: re-exported)

__all__ = ["InverseModifiedLagrangianGP", "DEFAULT_NEWTON", "SEARCH_ITERATIONS", "ExtrapolationWarning", "ExtrapolationError", "EXTRAPOLATION_FACTOR"]

TorchLagrangian = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

#: Newton options for prediction: the posterior mean is a sum of thousands of terms with large
#: coefficients, so its rounding noise sets the attainable step accuracy -- Newton corrections stall
#: at about 5e-11 on the pendulum of docs/theory/lsi.md. A tolerance below that floor costs an extra Jacobian
#: per step (the stall test needs two more iterations) and changes no trajectory digit that matters
#: (max error over 2,000 steps 2.53e-6 with xtol 1e-12, 2.55e-6 with 1e-10, 1.4x faster).
DEFAULT_NEWTON = {"xtol": 1e-10, "maxiter": 50}

#: default budget of the hyperparameter search (:mod:`learners.shadow.hyperparameters`): enough for the pattern search to
#: converge (it stops when its steps fall below 5%; 46 evaluations on the reference pendulum of
#: ``benchmarks/shadow.py``). Why not fewer: a search cut short stops wherever its path happens to be,
#: and the path depends on the starting nugget, whose meaning in the data's units changed with the
#: standardisation (a relative nugget rho on DEL rows of the standardised fit is rho / sigma^2 in data
#: units). With 16 evaluations the reference model went from trajectory error 1.3e-5 (data units) to
#: 2.6e-5 (standardised) at the 10,000th step; converged, it is 4.2e-6, with a better marginal
#: likelihood (-8323 against -7802) and better level sets (H_rec[2] 2.5e-4 against 3.7e-4, H_rec[4]
#: 1.8e-5 against 2.7e-5).
SEARCH_ITERATIONS = 64

#: a predicted state counts as an extrapolation where the posterior std of its DEL residual exceeds this
#: multiple of its level on the data (``data_level``). Why 100 (CI pendulum, 60 trajectories): along
#: predictions started in the data's box the ratio stays below 1; on 120 held-out DEL residuals its
#: median is 0.12 and its 95th percentile 2.2, and the two residuals above 100 lie on a rotating orbit
#: beyond the data (q ~ -5.5), where the actual residual is 5e-3 against a median of 3e-7 -- the std
#: tracks the real error; predict([[50.]], [[30.]], 10) gives 1e5. 100 leaves a factor 45 above the
#: held-out 95th percentile and three decades below a clear extrapolation.
EXTRAPOLATION_FACTOR = 100.0

#: triples per batch when the extrapolation check evaluates posterior variances (bounds memory)
CHECK_CHUNK = 4096
#: positions per trajectory at which ``predict`` tests for extrapolation (evenly spaced; all of them with
#: ``return_std=True``)
CHECK_POINTS = 256


class InverseModifiedLagrangianGP(ElementHooks, RecoveryMixin, FunctionalLagrangianModel):
    r"""GP model of the inverse modified Lagrangian of ``scheme`` at step ``h`` (Lagrangian Shadow
    Integration), learned from position snapshots.

    Parameters
    ----------
    h : the sampling step of the data (= the step of the integrator that will use :math:`L_{inv}`).
    scheme : a :mod:`bea` scheme or its name (``"midpoint"``, ``"trapezoidal"``, ...), or a stage scheme
        (``"galerkin2"``: the DEL conditions linearised and iterated, :mod:`~learners.shadow.stage_lsi`).
    kernel : ``"auto"`` (default: the RBF, except that at ``n >= 3`` the positions search also scores
        ``MechanicalKernel(degree=2)`` and ``degree=4`` (4 over 2 only by ``position_search.DEGREE_MARGIN``) with
        the whole mass matrix and keeps one where it predicts held-out positions better,
        :mod:`learners.shadow.kernel_choice`; ``n <= 2``: the RBF exactly), ``"rbf"`` (or None: the RBF at
        every ``n``, not the default -- None is what model files from before the switch to ``"auto"`` record) or
        ``"mechanical"`` (:class:`~learners.shadow.mechanical.MechanicalKernel`: RBF in :math:`q` times a polynomial
        of degree 8 in :math:`v`; ``MechanicalKernel(degree=d)`` for another degree; ``ElementKernel.bodies(count, dim)``
        or ``ElementKernel.chain(n)``: element-structured, :mod:`learners.shadow.element_kernel`), hyperparameters learned (see
        :mod:`learners.shadow.hyperparameters`); or a :class:`~learners.shadow.kernels.FunctionalKernel`, used as
        given (no learning).
    normalisation : ``"mass"`` (default; :class:`~learners.shadow.normalisation.MassNormalisation`),
        ``"vertices"`` (the paper's) or a :class:`~learners.shadow.normalisation.Normalisation`.
    objective : ``"auto"`` (default: ``"mll"`` for ``n <= 2``, switching to ``"positions"`` with an IdentifiabilityWarning
        if the likelihood collapses; ``"positions"`` for ``n >= 3``, where the others collapse), ``"mll"``, ``"heldout"``
        or ``"positions"`` (:mod:`learners.shadow.hyperparameters`), or an object of :mod:`learners.shadow.objectives`
        with its parameters (``Auto(positions_from=4, fallback=False)``); ignored when ``lengthscale``/``epsilon`` is given.
        :attr:`objective_used` says which one ran.
    lengthscale, epsilon : fix the RBF lengthscale (``epsilon``: the paper's
        :math:`\exp(-\|x-y\|^2/\varepsilon^2)`); ``noise``: the relative nugget then (default 1e-12).
    ard : one lengthscale per input of :math:`(q, v)` (default) or one shared.
    iterations : most objective evaluations of the pattern search after the coarse grid (default
        :data:`SEARCH_ITERATIONS`: the search normally stops by itself first);
        ``max_train_functionals``: size of the training subset used while learning (the final fit
        uses all data).
    progress : ``tqdm`` bar while learning (None: only on a terminal).
    final_solver : None (default: the final solve's exact Cholesky) or a :class:`~learners.shadow.LowRankSolver`: a pivoted
        Cholesky :math:`\Theta \approx LL^\top` of :math:`m \ll F` columns and the subset-of-regressors mean, for many
        functionals; no std, and such a model is not saved (:mod:`learners.shadow.model_arguments`).
    """

    default_iterations = SEARCH_ITERATIONS
    objectives = ("auto", "mll", "heldout", "positions")

    # the constructor, with its explicit signature, is FunctionalLagrangianModel.__init__
    _accepted_scheme = staticmethod(accepted_scheme)  # linear in L, or a stage scheme (stage_lsi)
    _linear_scheme = linear_scheme

    def _fitted_extra(self) -> dict:
        return {"snapshots": self.snapshots, "data_level": self.data_level(), "objective_used": self.objective_used,
                **calibration_state(self)}

    def _restore_extra(self, extra: dict) -> None:
        self.snapshots, self._data_level = extra["snapshots"], extra["data_level"]
        self.objective_used = extra.get("objective_used")
        restore_calibration(self, extra)  # warns where fitted under an older variance rule
        self._pending_calibration = None

    def _init_state(self) -> None:
        self._recovered: Dict[object, TorchLagrangian] = {}
        self._jet: Optional[Union[RBFJet, bool]] = None  # None: not tried yet; False: no closed form
        self.snapshots: Optional[torch.Tensor] = None
        self._data_level: Optional[float] = None
        self._pending_calibration = None  # (training functionals, held-back standardised snapshots) of the last fit

    def __repr__(self) -> str:
        state = f"fitted on {self.snapshots.shape[0]} trajectories" if self.snapshots is not None else "not fitted"
        if getattr(self, "kernel_structure", None) is not None:  # chosen by kernel="auto" (structure_choice)
            state += f", element structure {structure_name(self.kernel_structure)}"
        return f"InverseModifiedLagrangianGP(h={self.h}, scheme={self.scheme!r}, normalisation={self.normalisation!r}, {state})"

    # ------------------------------------------------------------------ fitting
    def fit(self, snapshots) -> "InverseModifiedLagrangianGP":
        r"""Learn :math:`L_{inv}` from position snapshots ``(n_traj, n_steps + 1, n)`` (``n_steps >= 2``).

        The snapshots are standardised first (module docstring, *Units*); a coordinate that never moves is an error.
        Hyperparameters are learned unless fixed (class docstring; a fixed ``lengthscale`` is in the data's units); the
        final GP is conditioned on all DEL residuals and the normalisation (:attr:`conditioning`). From ``n = 3`` the
        positions search also scores the principal directions (:mod:`~learners.shadow.principal`; not where ``kernel="auto"``
        kept an element structure, which fixes the coordinates). ``history`` records
        an estimate of the step's resolution of the motion (:mod:`~learners.shadow.step_resolution`; no warning)."""
        S = check_snapshots(snapshots)
        with kept_heap():  # the assemblies' temporaries reuse freed memory instead of faulting fresh pages in (heap.py)
            if self._element:  # the structure fixes the coordinates: no principal-direction candidate
                self._fit_in_units(S)
            else:
                fit_with_candidate(self, S)
        check_step_resolution(self, S)
        return self

    def _fit_in_units(self, S: torch.Tensor, rotation: Optional[torch.Tensor] = None, finalise: bool = True) -> None:
        """:meth:`fit` in the standardised coordinates turned by ``rotation`` (:mod:`~learners.shadow.units`) if given;
        ``finalise=False`` (linear schemes): the search only, the final solve left to :meth:`_finalise`."""
        self.n, (center, unit) = S.shape[-1], position_units(S)
        self._set_units(center, unit, None, rotation=rotation)
        Sd = self._to_standard(S)
        self._step = standard_step(Sd) if self._learns_time_unit else None  # h', measured in these coordinates
        h, norm = self._h_std, in_standard_units(self.normalisation, self._standard_state, self._h_std, self.scheme)
        self._standard_snapshots = Sd  # for the "positions" objective while learning
        try:
            if isinstance(self.scheme, bea.StageScheme):  # DEL conditions linearised and iterated (stage_lsi)
                fit_stages(self, Sd, h, norm)
            else:
                self._fit_functionals(*snapshot_functionals(Sd, h, self.scheme), normalisation=norm, finalise=finalise)
        finally:
            del self._standard_snapshots
        self.snapshots, self._recovered, self._jet, self._data_level = S, {}, None, None

    def _correct_targets(self, F_norm: Functionals) -> None:
        """The whole-matrix targets moved to the recovered L's matrix (:mod:`~learners.shadow.mass_target`), where its
        premise holds (:func:`~learners.shadow.mass_target.correct_matrix_target`: the curvature term the scheme's, one
        the user gave used as given; a linear scheme, as a stage scheme's fit conditions again on the normalisation at
        each iteration, so its targets stay linear throughout)."""
        moved = correct_matrix_target(self, F_norm)
        if moved is not None:
            self.history["mass_target"] = moved

    def _position_objective(self, trajectories: torch.Tensor):
        check_stage_objective("positions", self.scheme)
        return position_objective(triples_from_snapshots(self._standard_snapshots[trajectories]), self._h_std, self.scheme)

    def _calibrate_quantities(self, trajectories: torch.Tensor, F_tr) -> None:
        """Keep what the ``"energy"`` calibration needs (:func:`~learners.shadow.calibration.ensure_energy_calibration`:
        run on first demand, as it costs more than many fits), warn on held-out one-step errors."""
        from .identifiability import check_one_step

        self._pending_calibration = (F_tr, self._standard_snapshots[trajectories])
        check_one_step(self, self._standard_snapshots[trajectories])

    def _lagrangian_std(self, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """:math:`\bar L'_{inv}` in the standardised coordinates."""
        return self.gp.mean(torch.cat([q, v], -1))

    # ------------------------------------------------------------------ posterior
    def del_residuals(self, snapshots_or_triples, return_std: bool = True):
        r"""Posterior mean (and standard deviation) of the DEL residuals at new data: triples ``(B, 3, n)``, snapshots
        ``(n_traj, m, n)`` or a Trajectory (all their triples, trajectory-major). Returns tensors of shape ``(B, n)``, in
        the data's units (:math:`s = \sigma/\tau` times those of :math:`L'`), each component along the data's axes
        with its exact posterior std, also when fitted in rotated coordinates (:mod:`~learners.shadow.principal`;
        :meth:`_residual_posterior`)."""
        self._require_fit()
        x = as_tensor(snapshot_layout(snapshots_or_triples), "triples")
        check_finite(x, "triples")
        if x.dim() == 3 and x.shape[1] == 3 and x.shape[-1] == self.n:
            triples = x
        else:
            triples = triples_from_snapshots(check_snapshots(x, self.n))
        mean, std = self._residual_posterior(self._to_standard(triples), return_std)
        return (self._speed * mean, self._speed * std) if return_std else self._speed * mean

    def _residual_posterior(self, triples_std: torch.Tensor, return_std: bool = True):
        r"""Posterior mean and std (or None) of the DEL residuals of :math:`L'` at standardised triples, ``(B, n)``, with
        components along the data's axes: with a rotation :math:`R`, component :math:`i` is :math:`\sum_j R_{ij}r'_j`
        (:mod:`~learners.shadow.units`: :math:`r = sRr'`), one functional each, so its variance is exact."""
        G = del_residual_functionals(triples_std, self._h_std, self._linear_scheme(), axes=self._rotation)
        with torch.no_grad():
            if not return_std:
                return self.gp.functional_mean(G).reshape(-1, self.n), None
            mean, var = self.gp.functional_posterior(G)
        return mean.reshape(-1, self.n), var.sqrt().reshape(-1, self.n)

    def functional_posterior(self, G: Functionals, full_cov: bool = False):
        """Posterior mean and variance (or covariance) of linear functionals of :math:`L_{inv}` (data's units)."""
        self._require_fit()
        with torch.no_grad():
            return self.gp.functional_posterior(self._standard_functionals(G), full_cov=full_cov)

    def data_level(self) -> float:
        r"""The posterior standard deviation of a DEL residual *on the data* (standardised units): the
        95th percentile, over the training functionals, of its leave-one-out standard deviation
        :math:`\sqrt{1/[\Theta^{-1}]_{ii} - \sigma_n^2}` -- the uncertainty of a dynamics condition at a data
        state when that condition itself is not observed (computed once, from the Cholesky factor)."""
        self._require_fit()
        if self._data_level is None:
            gp = self.gp
            with torch.no_grad():
                inv_diag = torch.cholesky_inverse(gp._chol).diagonal()
                n_data = gp.train_functionals.count - self._norm_count
                loo = (1 / inv_diag[:n_data] - float(gp.noise.detach()) - gp.info.jitter).clamp_min(0) * gp.variance_scale
                self._data_level = float(torch.quantile(loo.sqrt(), 0.95))
        return self._data_level

    def integrator(self, **newton):
        """:class:`integrators.VariationalIntegrator` of the scheme on :math:`\bar L_{inv}` (data's units), on a snapshot."""
        self._require_fit()
        opts = {**DEFAULT_NEWTON, **newton}
        return VariationalIntegrator(FrozenMean(self), self.h, self.scheme, **opts)  # C form: units.data_units_form

    def _integrator_std(self, **newton):
        opts = {**DEFAULT_NEWTON, **newton}
        return VariationalIntegrator(StandardisedMean(self), self._h_std, self.scheme, **opts)

    def _momentum_integrator(self, jets: bool = True) -> VariationalIntegrator:
        r"""The scheme on :math:`\bar L'_{inv}` for discrete momenta: first derivatives only, from the closed-form jet."""
        return VariationalIntegrator(self._mean_std(1, jets), self._h_std, self.scheme, **DEFAULT_NEWTON)

    def predict(self, q0, qdot0, steps: int, order: int = 2, *, return_std: bool = False, on_extrapolation: str = "warn",
                **newton):
        r"""A :class:`~integrators.Trajectory` from ``(q0, qdot0)`` (shape ``(batch..., n)``): positions ``q``
        ``(steps + 1, batch..., n)``, times ``t``, and ``std`` with ``return_std=True``. The scheme
        on :math:`\bar L_{inv}` with :math:`p_0 = \partial_vL_{rec}(q_0, \dot q_0)`, :math:`L_{rec}` of
        ``order`` (docs/theory/lsi.md). Batched: all initial conditions advance together; computed in the
        standardised coordinates and mapped back (module docstring).

        *Extrapolation.* The posterior standard deviation of the DEL residual at every predicted triple
        :math:`(q_{j-1}, q_j, q_{j+1})` measures how well the data determine the dynamics there. Where it
        exceeds :data:`EXTRAPOLATION_FACTOR` times its level on the data (:meth:`data_level`), the
        prediction is an extrapolation: ``on_extrapolation="warn"`` (default) issues an
        :class:`ExtrapolationWarning`, ``"raise"`` raises :class:`ExtrapolationError`, ``"ignore"`` skips the
        test. The test looks at :data:`CHECK_POINTS` evenly spaced positions per trajectory (every position
        with ``return_std=True``); a position more than :data:`~learners.shadow.guards.RUNAWAY_FACTOR` data spreads
        from the data's centre counts too, and non-finite positions raise ``NonFiniteModelError``. ``return_std=True``
        fills ``std``, of the same shape as ``q``: the posterior std of the DEL residual centred at each position, in
        the data's units (NaN at the first and last position, which are not the middle of a triple; components along the
        data's axes, as in :meth:`del_residuals`)."""
        self._require_fit()
        if on_extrapolation not in ("warn", "raise", "ignore"):
            raise BeaValueError(f"on_extrapolation must be 'warn', 'raise' or 'ignore', got {on_extrapolation!r}")
        q0 = as_tensor(q0, "q0")
        qdot0 = as_tensor(qdot0, "qdot0")
        if q0.shape != qdot0.shape or q0.dim() < 1 or q0.shape[-1] != self.n:
            raise BeaValueError(f"q0 and qdot0 must have shape (batch..., {self.n}), got {tuple(q0.shape)} and {tuple(qdot0.shape)}")
        check_finite(q0, "q0")
        check_finite(qdot0, "qdot0")
        q0s, v0s = self._to_standard(q0), self._vector_to_standard(qdot0)
        lowrank = getattr(self.gp, "_lowrank", None) is not None  # no std: no std-based extrapolation check
        try:
            sol = solve_with_retry(self._integrator_std, newton, q0s, v0s, steps, legendre=self._recovered_std(order))
        except ValueError as err:  # ConvergenceError, NotRegularError, a non-finite initial momentum
            if on_extrapolation != "ignore" and not lowrank:  # is the start outside the data? then that is the cause
                h = self._h_std
                lin = torch.stack([q0s - h * v0s, q0s, q0s + h * v0s], -2).reshape(-1, 3, self.n)
                ratio = float(self._residual_posterior(lin)[1].amax()) / max(self.data_level(), 1e-300)
                if ratio > EXTRAPOLATION_FACTOR:
                    raise ExtrapolationError(
                        f"the prediction failed ({type(err).__name__}) from initial states outside the data: the posterior "
                        f"std of the DEL residual there is {ratio:.3g}x its level on the data (threshold "
                        f"{EXTRAPOLATION_FACTOR:g}x), so the learned dynamics are not determined. Start inside the data's "
                        "region, or add data there") from err
            raise
        check_prediction(sol.q, "InverseModifiedLagrangianGP.predict", self._from_standard)
        std = None
        if lowrank and not return_std and on_extrapolation != "ignore":
            warnings.warn("predict's extrapolation check needs the posterior std, which the low-rank final solve does not "
                          "give: skipped (on_extrapolation='ignore' skips it silently; the dense solve has it)",
                          LowRankWarning, stacklevel=caller_level())
        elif return_std or on_extrapolation != "ignore":
            std = self._check_extrapolation(sol.q, on_extrapolation, every=not return_std)
        t = None if sol.t is None else sol.t * (self.h / self._h_std)  # the solve's times are in the standardised unit
        # legacy: unpacks as the (q, std) it returned before with return_std=True, else acts as the tensor q (deprecated)
        # the march's momenta of L_inv (those of momenta()), mapped back as momenta are (learners.shadow.units)
        return Trajectory(self._from_standard(sol.q), sol.valid, t=t, p=None if sol.p is None else self._vector_from_standard(sol.p),
                          std=self._speed * std if return_std else None, stats=sol.stats,
                          legacy=("q", "std") if return_std else None, legacy_tuple=return_std)

    def _check_extrapolation(self, qs: torch.Tensor, mode: str, every: bool = False) -> torch.Tensor:
        """Posterior std of the DEL residual at the interior positions of ``qs`` (standardised), NaN at the
        ends; warns or raises (``mode``) where it exceeds EXTRAPOLATION_FACTOR times the data level, is not a
        number, or where a position is a runaway (:func:`~learners.shadow.guards.runaway`).
        ``every``: only up to CHECK_POINTS evenly spaced positions per trajectory (NaN elsewhere): the
        variances cost as much as the prediction itself when taken at every step of a long run."""
        S1, n = qs.shape[0], self.n
        flat = qs.reshape(S1, -1, n)
        std = torch.full_like(flat, float("nan"))
        bad = runaway(flat)  # (steps + 1, batch): far beyond the data, whatever the std says
        if S1 >= 3:
            mid = torch.arange(1, S1 - 1, device=qs.device)
            if every and mid.numel() > CHECK_POINTS:
                mid = torch.unique(torch.linspace(1, S1 - 2, CHECK_POINTS, dtype=torch.float64, device=qs.device).round().long())
            trip = torch.stack([flat[mid - 1], flat[mid], flat[mid + 1]], 2).reshape(-1, 3, n)  # (time-major) x batch
            parts = [self._residual_posterior(trip[a:a + CHECK_CHUNK])[1] for a in range(0, trip.shape[0], CHECK_CHUNK)]
            std[mid] = torch.cat(parts).reshape(mid.numel(), -1, n)
            if mode != "ignore":
                bad[mid] |= ~(std[mid] <= EXTRAPOLATION_FACTOR * self.data_level()).all(-1)  # NaN std counts
        if mode != "ignore" and bool(bad.any()):
            self._report_extrapolation(qs, std.reshape(qs.shape), bad.reshape(qs.shape[:-1]), mode)
        return std.reshape(qs.shape)

    def _report_extrapolation(self, qs: torch.Tensor, std: torch.Tensor, bad: torch.Tensor, mode: str) -> None:
        idx = tuple(int(i) for i in torch.nonzero(bad)[0])
        level = self.data_level()
        ratio = float(std[idx].amax()) / level if level > 0 else math.inf
        far = float(qs[idx].abs().amax())
        msg = (f"the prediction leaves the data: at {int(bad.sum())} predicted positions the posterior std of the DEL "
               f"residual is more than {EXTRAPOLATION_FACTOR:g}x its level on the data, or the position is more than "
               f"{RUNAWAY_FACTOR:g} data spreads from the data's centre (first at index (step, batch...) = {idx}: std "
               f"{ratio:.3g}x, {far:.3g} spreads, position {self._from_standard(qs[idx]).tolist()}); the learned "
               "dynamics there are not determined by the data. Start inside the data's region, or add data there")
        report_extrapolation(msg, mode, stacklevel=4)
