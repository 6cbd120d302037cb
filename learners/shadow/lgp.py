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
LSI compensates by construction. Same hyperparameter machinery as LSI (:mod:`learners.shadow.hyperparameters`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Union

import torch

import bea
from bea.errors import BeaValueError
from integrators import Trajectory

from .._checks import as_tensor, check_finite, check_order, check_snapshots, check_step
from .hyperparameters import FunctionalLagrangianModel
from .retry import solve_with_retry
from .functionals import Functionals, euler_lagrange_residuals, gradient_evaluations
from .lsi import DEFAULT_NEWTON

__all__ = ["LagrangianGP", "finite_differences"]

TorchLagrangian = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def finite_differences(snapshots: torch.Tensor, h: float):
    r"""Central differences at the interior snapshots: ``(q, v, a)`` each ``(n_traj, n_steps - 1, n)``."""
    S = check_snapshots(snapshots)
    h = check_step(h)
    q = S[:, 1:-1]
    v = (S[:, 2:] - S[:, :-2]) / (2 * h)
    a = (S[:, 2:] - 2 * S[:, 1:-1] + S[:, :-2]) / h**2
    return q, v, a


class LagrangianGP(FunctionalLagrangianModel):
    r"""GP Lagrangian from the continuous EL equation (LGP / LGPExact baselines).

    Parameters
    ----------
    h, scheme : step and scheme used by :meth:`predict` and :meth:`velocities` (``h`` is also the
        snapshot step for :meth:`fit`).
    Other parameters as :class:`~learners.InverseModifiedLagrangianGP` (kernel, normalisation,
    objective, lengthscale/epsilon, noise, ard, iterations, max_train_functionals, progress).
    """

    # the constructor, with its explicit signature, is FunctionalLagrangianModel.__init__
    def _fitted_extra(self) -> dict:
        return {"kind": self.kind}

    def _restore_extra(self, extra: dict) -> None:
        self.kind = extra["kind"]

    def _init_state(self) -> None:
        self.kind: Optional[str] = None

    def __repr__(self) -> str:
        return f"LagrangianGP(h={self.h}, scheme={self.scheme!r}, {self.kind or 'not fitted'})"
    def fit(self, snapshots) -> "LagrangianGP":
        """LGP: fit to position snapshots ``(n_traj, n_steps + 1, n)`` (finite-difference derivatives)."""
        q, v, a = finite_differences(snapshots, self.h)
        T, m, n = q.shape
        self._fit_states(q.reshape(-1, n), v.reshape(-1, n), a.reshape(-1, n), torch.arange(T).repeat_interleave(m))
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
            groups = torch.arange(T).repeat_interleave(m)
            q, v, a = q.reshape(-1, n), v.reshape(-1, n), a.reshape(-1, n)
        else:
            groups = torch.arange(q.shape[0]) if trajectory is None else torch.as_tensor(trajectory, dtype=torch.long)
            if groups.shape != (q.shape[0],):
                raise BeaValueError(f"trajectory must label each of the {q.shape[0]} states, got shape {tuple(groups.shape)}")
        if q.shape[0] < 2:
            raise BeaValueError("need at least two states")
        self._fit_states(q, v, a, groups)
        self.kind = "LGPExact (given derivatives)"
        return self

    def _fit_states(self, q, v, a, groups) -> None:
        n = q.shape[-1]
        self.n = n
        F = euler_lagrange_residuals(q, v, a)
        g = groups.repeat_interleave(n)
        x = torch.cat([q, v], -1)
        P = Functionals.cat([gradient_evaluations(x, torch.eye(2 * n, dtype=torch.float64)[n + i].expand_as(x).clone()) for i in range(n)])
        P_groups = groups.repeat(n)
        self._fit_functionals(F, g, P, P_groups)

    # ------------------------------------------------------------------ same interface as LSI
    def recovered_lagrangian(self, order: int = 0) -> TorchLagrangian:
        """The learned Lagrangian itself (LGP learns :math:`L`, not :math:`L_{inv}`); only ``order=0``."""
        self._require_fit()
        if check_order(order, None) != 0:
            raise BeaValueError("LagrangianGP learns the exact Lagrangian directly: there is no correction of order > 0")
        return self.lagrangian

    def energy(self, order: int = 0) -> TorchLagrangian:
        """Energy :math:`H = \\partial_vL\\cdot v - L` of the learned Lagrangian."""
        return bea.energy(self.recovered_lagrangian(order))

    def integrator(self, **newton):
        from integrators import VariationalIntegrator

        self._require_fit()
        return VariationalIntegrator(self, self.h, self.scheme, **{**DEFAULT_NEWTON, **newton})  # the model: C form of the mean
    def predict(self, q0, qdot0, steps: int, **newton) -> Trajectory:
        """The scheme on the learned :math:`L` from ``(q0, qdot0)``, :math:`p_0 = \\partial_vL(q_0, \\dot q_0)`:
        a :class:`~integrators.Trajectory` (positions ``q``, ``(steps + 1, batch..., n)``; times ``t``)."""
        self._require_fit()
        q0, qdot0 = as_tensor(q0, "q0"), as_tensor(qdot0, "qdot0")
        if q0.shape != qdot0.shape or q0.dim() < 1 or q0.shape[-1] != self.n:
            raise BeaValueError(f"q0 and qdot0 must have shape (batch..., {self.n}), got {tuple(q0.shape)} and {tuple(qdot0.shape)}")
        # legacy=None: used as the tensor q it returned before (deprecated)
        return dataclasses.replace(solve_with_retry(self.integrator, newton, q0, qdot0, steps), legacy=None)
    def velocities(self, qs, order: int = 0) -> torch.Tensor:
        """Velocities from the discrete momenta of the learned :math:`L` along ``qs``."""
        self.recovered_lagrangian(order)
        return self.integrator().velocities(qs)
