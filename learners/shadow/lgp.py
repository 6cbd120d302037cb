r"""Baselines of the reference paper: a GP Lagrangian fitted to the *continuous* Euler--Lagrange equation.

:class:`LagrangianGP` conditions :math:`L \sim \mathcal{GP}(0, k)` on the EL residuals

.. math::  E_i[L](q, v, a) = \sum_j \partial_{v_i}\partial_{v_j}L\, a_j + \sum_j \partial_{v_i}\partial_{q_j}L\, v_j
           - \partial_{q_i}L = 0

at states :math:`(q, v)` with accelerations :math:`a`, plus the same normalisation as LSI:

* **LGP** (:meth:`LagrangianGP.fit`): positions only, velocities and accelerations from central
  finite differences, :math:`v_j = (q_{j+1} - q_{j-1})/2h`, :math:`a_j = (q_{j+1} - 2q_j + q_{j-1})/h^2`
  (errors :math:`O(h^2)`);
* **LGPExact** (:meth:`LagrangianGP.fit_states`): exact velocities and accelerations (not available in
  practice; it isolates the discretisation error of the integrator).

Both learn an approximation of the *exact* Lagrangian; predictions apply the scheme to it directly
(:math:`p_0 = \partial_vL(q_0, \dot q_0)`), so they carry the scheme's :math:`O(h^2)` error, which
LSI compensates by construction. Same hyperparameter machinery as LSI (:mod:`learners.shadow.hyperparameters`),
and, when it learns the hyperparameters, the same standardised units of position and time
(:mod:`learners.shadow.units`): the fit then does not depend on the units of ``q`` or ``h``, and every output is
mapped back to the data's. A kernel fixed by the user (``epsilon=5``, the paper's baseline) is fitted in the data's
units, as given.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import torch

import bea
from bea.errors import BeaValueError
from integrators import Trajectory
from integrators.trajectory import positions

from .._checks import as_tensor, check_finite, check_order, check_snapshots, check_states, check_step
from .handles import FrozenMean, check_current, stamp
from .hyperparameters import FunctionalLagrangianModel
from .retry import solve_with_retry
from .functionals import Functionals, euler_lagrange_residuals, gradient_evaluations
from .units import StandardisedMean
from .held_states import midpoint_states
from .guards import RUNAWAY_FACTOR, check_prediction, data_region, report_extrapolation, runaway
from .lsi import DEFAULT_NEWTON
from .references import energies_reference, reference_state
from .uncertainty import LinearisedQuantity, Reference, jet_order, posterior_variance
from .units import position_units, standard_step, standard_time

__all__ = ["LagrangianGP", "finite_differences"]

TorchLagrangian = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def finite_differences(snapshots: torch.Tensor, h: float):
    r"""Central differences at the interior snapshots: ``(q, v, a)`` each ``(n_traj, n_steps - 1, n)``."""
    S = check_snapshots(snapshots)
    h = check_step(h)
    q, v = midpoint_states(S, h)
    a = (S[:, 2:] - 2 * S[:, 1:-1] + S[:, :-2]) / h**2
    return q, v, a


class LagrangianGP(FunctionalLagrangianModel):
    r"""GP Lagrangian from the continuous EL equation (LGP / LGPExact baselines).

    Parameters
    ----------
    h, scheme : step and scheme used by :meth:`predict` and :meth:`velocities` (``h`` is also the
        snapshot step for :meth:`fit`).
    Other parameters as :class:`~learners.InverseModifiedLagrangianGP` (kernel, normalisation,
        objective, lengthscale/epsilon, noise, ard, iterations, max_train_functionals, progress, final_solver). Here the default
        ``kernel="auto"``, ``"rbf"`` and None are the same RBF (no positions search scores the mechanical kernel).
    """

    # the constructor, with its explicit signature, is FunctionalLagrangianModel.__init__
    def _fitted_extra(self) -> dict:
        return {"kind": self.kind, "region": self._region}

    def _restore_extra(self, extra: dict) -> None:
        self.kind, self._region = extra["kind"], extra.get("region")  # (files before the runaway check: none)

    def _init_state(self) -> None:
        self.kind: Optional[str] = None
        self._region = None  # centre and spread of the data's positions, for the runaway check of predict

    def __repr__(self) -> str:
        return f"LagrangianGP(h={self.h}, scheme={self.scheme!r}, {self.kind or 'not fitted'})"
    def fit(self, snapshots) -> "LagrangianGP":
        """LGP: fit to position snapshots ``(n_traj, n_steps + 1, n)`` (finite-difference derivatives, taken in the
        standardised units of :mod:`learners.shadow.units` when the hyperparameters are learned)."""
        S = check_snapshots(snapshots)
        self._region = data_region(S)
        if self._learns_time_unit:
            center, unit = position_units(S)
            S = (S - center) / unit
            self._set_units(center, unit, standard_step(S))
        else:  # a kernel fixed in the data's units (the paper's baseline, epsilon = 5) is fitted there
            self._set_units(None, 1.0, None, S.device)
        q, v, a = finite_differences(S, self._h_std)
        T, m, n = q.shape
        groups = torch.arange(T, device=q.device).repeat_interleave(m)
        self._fit_states(q.reshape(-1, n), v.reshape(-1, n), a.reshape(-1, n), groups)
        self.kind = "LGP (finite differences)"
        return self
    def fit_states(self, q, v, a, trajectory: Optional[torch.Tensor] = None) -> "LagrangianGP":
        r"""LGPExact: fit to states ``q, v`` with accelerations ``a``, each ``(B, n)`` (or ``(n_traj, m, n)``,
        then trajectories group the validation split); ``trajectory`` (B,) optionally labels them."""
        q, v, a = as_tensor(q, "q"), as_tensor(v, "v"), as_tensor(a, "a")
        if not (q.shape == v.shape == a.shape) or q.dim() not in (2, 3):
            raise BeaValueError(f"q, v, a must have the same shape (B, n) or (n_traj, m, n), got {tuple(q.shape)}, "
                             f"{tuple(v.shape)}, "
                             f"{tuple(a.shape)}")
        for t, name in ((q, "q"), (v, "v"), (a, "a")):
            check_finite(t, name)
        if q.dim() == 3:
            T, m, n = q.shape
            groups = torch.arange(T, device=q.device).repeat_interleave(m)
            q, v, a = q.reshape(-1, n), v.reshape(-1, n), a.reshape(-1, n)
        else:
            groups = (torch.arange(q.shape[0], device=q.device) if trajectory is None
                      else torch.as_tensor(trajectory, dtype=torch.long, device=q.device))
            if groups.shape != (q.shape[0],):
                raise BeaValueError(f"trajectory must label each of the {q.shape[0]} states, got shape {tuple(groups.shape)}")
        if q.shape[0] < 2:
            raise BeaValueError("need at least two states")
        self._region = data_region(q)
        if self._learns_time_unit:
            center, unit = position_units(q)
            tau = standard_time(v, unit)
            self._set_units(center, unit, self.h / tau)
            q, v, a = self._to_standard(q), v / self._speed, a * (tau / self._speed)  # a' = a tau^2 / sigma
        else:
            self._set_units(None, 1.0, None, q.device)
        self._fit_states(q, v, a, groups)
        self.kind = "LGPExact (given derivatives)"
        return self

    def _fit_states(self, q, v, a, groups) -> None:
        """Condition on the EL residuals at standardised states ``q, v, a`` (B, n)."""
        n = q.shape[-1]
        self.n = n
        F = euler_lagrange_residuals(q, v, a)
        g = groups.repeat_interleave(n)
        x = torch.cat([q, v], -1)
        eye = torch.eye(2 * n, dtype=x.dtype, device=x.device)
        P = Functionals.cat([gradient_evaluations(x, eye[n + i].expand_as(x).clone()) for i in range(n)])
        P_groups = groups.repeat(n)
        self._fit_functionals(F, g, P, P_groups)

    # ------------------------------------------------------------------ same interface as LSI
    def recovered_lagrangian(self, order: int = 2) -> TorchLagrangian:
        """The learned Lagrangian itself, at every ``order``: LGP learns :math:`L`, not :math:`L_{inv}`, so there is
        no series to truncate. ``order`` (default 2, as for :class:`~learners.InverseModifiedLagrangianGP`) is
        checked as there, so that both GP models are called the same way. A snapshot of the model as it is now
        (:mod:`learners.shadow.handles`: a later fit leaves it as it is)."""
        self._require_fit()
        check_order(order, self.scheme.symmetric)
        return FrozenMean(self)

    def energy(self, order: int = 2, return_std: bool = False, reference=None):
        r"""Energy :math:`H = \partial_vL\cdot v - L` of the learned Lagrangian, a torch callable ``H(q, v)``
        (``order`` as in :meth:`recovered_lagrangian`).

        As :meth:`InverseModifiedLagrangianGP.energy <learners.InverseModifiedLagrangianGP.energy>`:
        ``reference=(q_ref, v_ref)`` (one state) gives :math:`H(q, v) - H(q_{ref}, v_{ref})`; ``return_std=True``
        makes ``H`` return ``(mean, std)``, the std of the GP posterior of :math:`H`, which is linear in
        :math:`L` (exact, no linearisation), in the data's units. It is not calibrated on held-out data (LSI's
        ``"energy"`` calibration) and knows nothing of the finite-difference error of :meth:`fit`. The means alone are a
        snapshot (with ``reference`` too); with ``return_std``, ``H`` refuses after a refit (:mod:`learners.shadow.handles`)."""
        H_mean, taken = bea.energy(self.recovered_lagrangian(order)), stamp(self)
        ref = None if reference is None else reference_state(reference, self.n)
        if not return_std and ref is None:
            return H_mean
        H_ref = None if ref is None else H_mean(ref[0][None], ref[1][None]).detach()
        G_of = None if not return_std else self._energy_quantity()

        def H(q, v):
            q, v = check_states(q, v, self.n)
            lead = q.shape[:-1]
            qf, vf = q.detach().reshape(-1, self.n), v.detach().reshape(-1, self.n)
            mean = H_mean(qf, vf).detach() - (0.0 if H_ref is None else H_ref)
            if G_of is None:  # the means alone: H_mean and H_ref are frozen, a snapshot
                return mean.reshape(lead)
            check_current(self, taken, f"energy({order}, return_std=True)")
            x = self._standard_state(qf, vf)
            R = None if ref is None else Reference(self._standard_state(ref[0], ref[1]).expand_as(x))
            var = self._speed ** 4 * self._variance_factor("energy_differences") * posterior_variance(self.gp, G_of(x), R)[:, 0, 0]
            return mean.reshape(lead), var.clamp_min(0).sqrt().reshape(lead)

        return H

    def _energy_quantity(self):
        """``x -> LinearisedQuantity`` of the energy at standardised states (its jet order probed once)."""
        def quantity(L, q, v):
            return bea.energy(L)(q, v)

        x0 = torch.cat([torch.zeros(self.n, dtype=torch.float64), 0.3 * torch.ones(self.n, dtype=torch.float64)])[None]
        p = jet_order(self.gp, quantity, x0, 1)
        return lambda x: LinearisedQuantity(quantity, x, 1, p)

    def energies(self, qs, order: int = 2, reference=None, *, reference_index: Optional[int] = None) -> torch.Tensor:
        """:math:`H` along positions ``qs`` ``(steps + 1, batch..., n)`` with the velocities of :meth:`velocities`:
        shape ``(steps + 1, batch...)``. ``reference`` (a state) and ``reference_index`` (a time index) as in
        :meth:`InverseModifiedLagrangianGP.energies <learners.InverseModifiedLagrangianGP.energies>` (means
        only: LGP has no posterior std along positions)."""
        self._require_fit()
        qs = as_tensor(positions(qs), "qs")
        state, index = energies_reference(reference, reference_index, qs.shape[0], self.n)  # checked before the solve
        v = self.velocities(qs, order)
        E = bea.energy(self.lagrangian)(qs, v).detach()
        if index is not None:
            E = E - E[index]
        if state is not None:
            E = E - self.energy(order)(state[0][None], state[1][None]).detach()
        return E

    def integrator(self, **newton):
        from integrators import VariationalIntegrator

        self._require_fit()
        # the mean as it is now (learners.shadow.handles), with its C form
        return VariationalIntegrator(FrozenMean(self), self.h, self.scheme, **{**DEFAULT_NEWTON, **newton})
    def predict(self, q0, qdot0, steps: int, order: int = 2, *, on_extrapolation: str = "warn", **newton) -> Trajectory:
        """The scheme on the learned :math:`L` from ``(q0, qdot0)``, :math:`p_0 = \\partial_vL(q_0, \\dot q_0)`:
        a :class:`~integrators.Trajectory` (positions ``q``, ``(steps + 1, batch..., n)``; times ``t``).

        ``order`` as in :meth:`recovered_lagrangian` (the same :math:`L` at every order). ``on_extrapolation``:
        where a predicted position lies more than :data:`~learners.shadow.guards.RUNAWAY_FACTOR` data spreads from
        the data's centre, ``"warn"`` (default) issues an :class:`ExtrapolationWarning`, ``"raise"`` raises
        :class:`~learners.ExtrapolationError`, ``"ignore"`` skips the test (as for
        :class:`~learners.InverseModifiedLagrangianGP`, which also tests the posterior std there)."""
        self.recovered_lagrangian(order)
        if on_extrapolation not in ("warn", "raise", "ignore"):
            raise BeaValueError(f"on_extrapolation must be 'warn', 'raise' or 'ignore', got {on_extrapolation!r}")
        q0, qdot0 = as_tensor(q0, "q0"), as_tensor(qdot0, "qdot0")
        if q0.shape != qdot0.shape or q0.dim() < 1 or q0.shape[-1] != self.n:
            raise BeaValueError(f"q0 and qdot0 must have shape (batch..., {self.n}), got {tuple(q0.shape)} and {tuple(qdot0.shape)}")
        check_finite(q0, "q0")
        check_finite(qdot0, "qdot0")
        sol = solve_with_retry(self._integrator_std, newton, self._to_standard(q0), qdot0 / self._speed, steps)
        check_prediction(sol.q, "LagrangianGP.predict", self._from_standard)
        qs = self._from_standard(sol.q)
        far = (runaway(qs, self._region) if self._region is not None
               else torch.zeros(qs.shape[:-1], dtype=torch.bool, device=qs.device))
        if on_extrapolation != "ignore" and bool(far.any()):
            idx = tuple(int(i) for i in torch.nonzero(far)[0])
            msg = (f"the prediction leaves the data: {int(far.sum())} predicted positions lie more than "
                   f"{RUNAWAY_FACTOR:g} data spreads from the data's centre (first at (step, batch...) = {idx}, "
                   f"position {qs[idx].tolist()}), where the learned Lagrangian is not "
                   "determined by the data. Start inside the data's region")
            report_extrapolation(msg, on_extrapolation, stacklevel=2)
        t = None if sol.t is None else sol.t * (self.h / self._h_std)  # the solve's times are in the standardised unit
        # legacy=None: used as the tensor q it returned before (deprecated)
        # p: the march's discrete momenta of the learned L, mapped back as momenta are (learners.shadow.units)
        return dataclasses.replace(sol, q=qs, t=t, p=None if sol.p is None else self._speed * sol.p,
                                   legacy=None)

    def _integrator_std(self, **newton):
        """The scheme on the posterior mean in the standardised coordinates (C form), at the step :math:`h'`."""
        from integrators import VariationalIntegrator

        return VariationalIntegrator(StandardisedMean(self), self._h_std, self.scheme, **{**DEFAULT_NEWTON, **newton})

    def velocities(self, qs, order: int = 2) -> torch.Tensor:
        """Velocities from the discrete momenta of the learned :math:`L` along ``qs`` ``(steps + 1, batch..., n)``."""
        self.recovered_lagrangian(order)
        qs = as_tensor(positions(qs), "qs")
        check_finite(qs, "qs")
        return self._speed * self._integrator_std().velocities(self._to_standard(qs))
