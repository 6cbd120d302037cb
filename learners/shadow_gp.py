r"""Lagrangian Shadow Integration: a GP inverse modified Lagrangian from position snapshots.

Data: positions only, at a uniform step ``h``, shaped ``(n_traj, n_steps + 1, n)``. Each triple
:math:`(q_{j-1}, q_j, q_{j+1})` gives ``n`` linear conditions on :math:`L_{inv}` (THEORY.md §6),

.. math::  D_2L_{inv,\Delta}(q_{j-1}, q_j) + D_1L_{inv,\Delta}(q_j, q_{j+1}) = 0,

for any :mod:`bea` scheme. With a normalisation, a GP prior :math:`L_{inv} \sim \mathcal{GP}(0, k)`
on :math:`TQ = \mathbb R^{2n}` conditioned on these functionals gives the posterior mean
:math:`\bar L_{inv}` (:meth:`InverseModifiedLagrangianGP.lagrangian`) and uncertainty
(:meth:`~InverseModifiedLagrangianGP.variance`, :meth:`~InverseModifiedLagrangianGP.del_residuals`).

Afterwards (THEORY.md §4, §6): the scheme applied to :math:`\bar L_{inv}` predicts motions; the
recovered Lagrangian :math:`L_{rec} = \mathrm{mod}_N(\bar L_{inv})` (``bea`` code generation, any
order ``N``) gives the initial momentum :math:`p_0 = \partial_vL_{rec}(q_0, \dot q_0)`, velocities
(solve :math:`\partial_vL_{rec}(q_j, \dot q_j) = p_j`, :math:`p_j` the discrete momenta) and the energy
:math:`H_{rec} = \partial_vL_{rec}\cdot v - L_{rec}`.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Union

import torch

import bea

from ._checks import as_tensor, check_finite, check_order, check_snapshots
from .base import FunctionalLagrangianModel, solve_with_retry
from .functionals import Functionals, del_residuals, discrete_momenta, triples_from_snapshots

__all__ = ["InverseModifiedLagrangianGP", "DEFAULT_NEWTON"]

TorchLagrangian = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

#: Newton options for prediction: the posterior mean is a sum of thousands of terms with large
#: coefficients, so its rounding noise sets the attainable step accuracy -- Newton corrections stall
#: at about 5e-11 on the pendulum of THEORY.md §6. A tolerance below that floor costs an extra Jacobian
#: per step (the stall test needs two more iterations) and changes no trajectory digit that matters
#: (max error over 2,000 steps 2.53e-6 with xtol 1e-12, 2.55e-6 with 1e-10, 1.4x faster).
DEFAULT_NEWTON = {"xtol": 1e-10, "maxiter": 50}


class InverseModifiedLagrangianGP(FunctionalLagrangianModel):
    r"""GP model of the inverse modified Lagrangian of ``scheme`` at step ``h`` (Lagrangian Shadow
    Integration), learned from position snapshots.

    Parameters
    ----------
    h : the sampling step of the data (= the step of the integrator that will use :math:`L_{inv}`).
    scheme : a :mod:`bea` scheme or its name (``"midpoint"``, ``"trapezoidal"``, ...).
    kernel : a :class:`~learners.kernels.FunctionalKernel`, used as given (no learning); default: RBF,
        hyperparameters learned (see :mod:`learners.base`).
    normalisation : ``"mass"`` (default; :class:`~learners.normalisation.MassNormalisation`),
        ``"vertices"`` (the seed's) or a :class:`~learners.normalisation.Normalisation`.
    objective : ``"mll"`` (default) or ``"heldout"`` (see :mod:`learners.base` for the choice);
        ignored when ``lengthscale``/``epsilon`` is given.
    lengthscale, epsilon : fix the RBF lengthscale (``epsilon``: the seed's
        :math:`\exp(-\|x-y\|^2/\varepsilon^2)`); ``noise``: the relative nugget then (default 1e-12).
    ard : one lengthscale per input of :math:`(q, v)` (default) or one shared.
    iterations : objective evaluations of the pattern search after the coarse grid;
        ``max_train_functionals``: size of the training subset used while learning (the final fit
        uses all data).
    progress : ``tqdm`` bar while learning (None: only on a terminal).
    """

    def __init__(self, h: float, scheme: Union[str, "bea.Scheme"] = "midpoint", **options):
        super().__init__(h, scheme, **options)
        self._recovered: Dict[int, TorchLagrangian] = {}
        self.snapshots: Optional[torch.Tensor] = None

    def __repr__(self) -> str:
        state = f"fitted on {self.snapshots.shape[0]} trajectories" if self.snapshots is not None else "not fitted"
        return f"InverseModifiedLagrangianGP(h={self.h}, scheme={self.scheme!r}, normalisation={self.normalisation!r}, {state})"

    # ------------------------------------------------------------------ fitting
    def fit(self, snapshots) -> "InverseModifiedLagrangianGP":
        r"""Learn :math:`L_{inv}` from position snapshots ``(n_traj, n_steps + 1, n)`` (``n_steps >= 2``).

        Hyperparameters are learned first unless fixed (see the class docstring); the final GP is
        conditioned on all DEL residuals and the normalisation; :attr:`conditioning` reports the solve."""
        S = check_snapshots(snapshots)
        T, m, n = S.shape
        self.n = n
        F = del_residuals(triples_from_snapshots(S), self.h, self.scheme)
        groups = torch.arange(T).repeat_interleave((m - 2) * n)
        pairs = torch.stack([S[:, :-1], S[:, 1:]], -2).reshape(-1, 2, n)
        P = discrete_momenta(pairs, self.h, self.scheme)
        P_groups = torch.arange(T).repeat_interleave((m - 1) * n)
        self._fit_functionals(F, groups, P, P_groups)
        self.snapshots = S
        self._recovered = {}
        return self

    # ------------------------------------------------------------------ posterior
    def del_residuals(self, snapshots_or_triples, return_std: bool = True):
        r"""Posterior mean (and standard deviation) of the DEL residuals at new data: triples
        ``(B, 3, n)`` or snapshots ``(n_traj, m, n)`` (all their triples, trajectory-major). Returns
        tensors of shape ``(B, n)``."""
        self._require_fit()
        x = as_tensor(snapshots_or_triples, "triples")
        check_finite(x, "triples")
        if x.dim() == 3 and x.shape[1] == 3 and x.shape[-1] == self.n:
            triples = x
        else:
            triples = triples_from_snapshots(check_snapshots(x, self.n))
        G = del_residuals(triples, self.h, self.scheme)
        with torch.no_grad():
            if not return_std:
                return self.gp.functional_mean(G).reshape(-1, self.n)
            mean, var = self.gp.functional_posterior(G)
        return mean.reshape(-1, self.n), var.sqrt().reshape(-1, self.n)
    def functional_posterior(self, G: Functionals, full_cov: bool = False):
        """Posterior mean and variance (or covariance) of any linear functionals of :math:`L_{inv}`."""
        self._require_fit()
        with torch.no_grad():
            return self.gp.functional_posterior(G, full_cov=full_cov)

    # ------------------------------------------------------------------ identification
    def recovered_lagrangian(self, order: int = 2) -> TorchLagrangian:
        r""":math:`L_{rec} = \mathrm{mod}_N(\bar L_{inv})` truncated at :math:`h^N` (``order`` = N; 0 gives
        :math:`\bar L_{inv}` itself), from :func:`bea.compile_torch` (derived once, cached on disk)."""
        self._require_fit()
        N = check_order(order, self.scheme.symmetric)
        if N == 0:
            return self.lagrangian
        if N not in self._recovered:
            f = bea.compile_torch("modified_lagrangian", self.scheme, N, dim=self.n)
            Linv, h = self.lagrangian, self.h

            def L_rec(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
                return f(Linv, q, v, h)

            L_rec.order = N  # type: ignore[attr-defined]
            self._recovered[N] = L_rec
        return self._recovered[N]

    def energy(self, order: int = 2) -> TorchLagrangian:
        r"""The recovered energy :math:`H_{rec}[N] = \partial_vL_{rec}\cdot v - L_{rec}` (``order=0``: the
        energy of :math:`\bar L_{inv}` itself, uncorrected), a torch callable ``H(q, v)``."""
        return bea.energy(self.recovered_lagrangian(order))

    def integrator(self, **newton):
        """The :class:`integrators.VariationalIntegrator` of the scheme on :math:`\\bar L_{inv}`."""
        from integrators import VariationalIntegrator

        self._require_fit()
        opts = {**DEFAULT_NEWTON, **newton}
        return VariationalIntegrator(self.lagrangian, self.h, self.scheme, **opts)
    def predict(self, q0, qdot0, steps: int, order: int = 2, **newton) -> torch.Tensor:
        r"""Positions ``(steps + 1, batch..., n)`` from ``(q0, qdot0)`` (shape ``(batch..., n)``): the scheme
        on :math:`\bar L_{inv}` with :math:`p_0 = \partial_vL_{rec}(q_0, \dot q_0)`, :math:`L_{rec}` of
        ``order`` (THEORY.md §6). Batched: all initial conditions advance together."""
        self._require_fit()
        q0 = as_tensor(q0, "q0")
        qdot0 = as_tensor(qdot0, "qdot0")
        if q0.shape != qdot0.shape or q0.dim() < 1 or q0.shape[-1] != self.n:
            raise ValueError(f"q0 and qdot0 must have shape (batch..., {self.n}), got {tuple(q0.shape)} and {tuple(qdot0.shape)}")
        return solve_with_retry(self.integrator, newton, q0, qdot0, steps, legendre=self.recovered_lagrangian(order))
    def momenta(self, qs, chunk: int = 1000) -> torch.Tensor:
        r"""Discrete momenta of :math:`\bar L_{inv}` along positions ``qs`` ``(steps + 1, batch..., n)``:
        :math:`p_0 = -D_1L_\Delta(q_0, q_1)`, :math:`p_j = D_2L_\Delta(q_{j-1}, q_j)` (in time chunks)."""
        return _chunked_momenta(self.integrator(), self._positions(qs), chunk)
    def velocities(self, qs, order: int = 2, chunk: Optional[int] = None) -> torch.Tensor:
        r"""Velocities along positions ``qs`` ``(steps + 1, batch..., n)`` (e.g. from :meth:`predict` or the
        data, time first): solve :math:`\partial_vL_{rec}(q_j, \dot q_j) = p_j` with :math:`p_j` the
        discrete momenta of :math:`\bar L_{inv}` (batched Newton, ``chunk`` time steps at a time;
        default 1000 for ``order <= 2`` and 200 above, where the nested derivatives of ``mod_N`` take
        about 12 MB per position)."""
        qs = self._positions(qs)
        return _chunked_velocities(self.integrator(), qs, self.recovered_lagrangian(order), chunk or _chunk(order))
    def energies(self, qs, order: int = 2, chunk: Optional[int] = None) -> torch.Tensor:
        r""":math:`H_{rec}[N]` along positions ``qs`` with the velocities of :meth:`velocities`; shape
        ``(steps + 1, batch...)``."""
        qs = self._positions(qs)
        chunk = chunk or _chunk(order)
        v = self.velocities(qs, order, chunk)
        return _chunked_energy(self.energy(order), qs, v, chunk)

    def _positions(self, qs) -> torch.Tensor:
        self._require_fit()
        qs = as_tensor(qs, "qs")
        if qs.dim() < 2 or qs.shape[0] < 2 or qs.shape[-1] != self.n:
            raise ValueError(f"qs must have shape (steps + 1, batch..., {self.n}) with at least two positions, "
                             f"got {tuple(qs.shape)}")
        check_finite(qs, "qs")
        return qs


def _chunk(order: int) -> int:
    return 1000 if order <= 2 else 200


def _chunked_momenta(integ, qs: torch.Tensor, chunk: int) -> torch.Tensor:
    T1 = qs.shape[0]
    if T1 <= chunk:
        return integ.momenta(qs)
    parts = [integ.momenta(qs[:chunk])]
    for a in range(chunk, T1, chunk):
        b = min(a + chunk, T1)
        parts.append(integ.momenta(qs[a - 1:b])[1:])  # rows a..b-1: D2 L_d(q_(j-1), q_j)
    return torch.cat(parts)


def _chunked_velocities(integ, qs: torch.Tensor, L: TorchLagrangian, chunk: int) -> torch.Tensor:
    p = _chunked_momenta(integ, qs, chunk)
    T1 = qs.shape[0]
    if T1 <= chunk:
        return integ.velocities(qs, lagrangian=L, momenta=p)
    parts = []
    for a in range(0, T1, chunk):
        b = min(a + chunk, T1)
        lo = a if b - a >= 2 else a - 1  # the velocity solver wants at least two positions
        v = integ.velocities(qs[lo:b], lagrangian=L, momenta=p[lo:b])
        parts.append(v[a - lo:])
    return torch.cat(parts)


def _chunked_energy(H: TorchLagrangian, qs: torch.Tensor, v: torch.Tensor, chunk: int) -> torch.Tensor:
    return torch.cat([H(qs[a:a + chunk], v[a:a + chunk]).detach() for a in range(0, qs.shape[0], chunk)])
