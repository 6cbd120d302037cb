r"""The estimator form of the GP models (``Model(..., h=, scheme=).fit(data).predict(q0, qdot0, steps)``) for the
torch networks: ModLaNet, :class:`~learners.neural.baselines.LNN` (Lagrangians), and the first-order
:class:`~learners.neural.baselines.HNN` and :class:`~learners.neural.baselines.MLPBaseline`.

Configuration, keyword-only in each model's constructor: ``h`` (the sampling step of snapshot data, and the step of
:meth:`predict`), ``scheme``, ``loss`` (:class:`~learners.neural.options.AccelerationLoss` or
:class:`~learners.neural.options.DELLoss`, or their names) and ``options``
(:class:`~learners.neural.options.TrainOptions`). :meth:`fit` is :func:`~learners.neural.training.train` with them
and returns the model (its :class:`~learners.neural.training.TrainResult` in ``train_result``).

What a trained Lagrangian network *is* depends on the loss, and with it what :meth:`predict` integrates and what
:meth:`energy` means (the same meanings as the GPs', docs/theory/lsi.md):

============================================  ==============================  =================================
trained with                                  the scheme integrates           Legendre map, energy
============================================  ==============================  =================================
``DELLoss()`` (the model is :math:`L_{inv}`)  the model                       :math:`L_{rec} = \mathrm{mod}_N(\text{model})`
``DELLoss(inverse_order=M)`` (true :math:`L`)  :math:`\mathrm{inv}_M(\text{model})`  the model
``AccelerationLoss()`` (true :math:`L`)       the model                       the model
============================================  ==============================  =================================

so that :meth:`predict` is :func:`~learners.neural.prediction.predict_positions` (``order=N``; ``N = 0`` for an
acceleration-trained model) and :meth:`energy` is :math:`H_{rec}[N] = \partial_vL_{rec}\cdot v - L_{rec}` (for a
model of the true :math:`L`, its own energy at every order: :math:`\mathrm{mod}_N\mathrm{inv}_N L = L` to the
truncation order). :meth:`energies` and :meth:`velocities` evaluate them along positions, with the velocities
that solve :math:`\partial_vL_{rec}(q_j, \dot q_j) = p_j` for the discrete momenta :math:`p_j` of the integrated
Lagrangian (:mod:`integrators.modified`), as the GPs' methods of the same names.

The first-order models (HNN, MLPBaseline) are not Lagrangians: they train on the acceleration loss only and
:meth:`FieldEstimator.predict` integrates their vector field with RK4 at step ``h``
(:func:`~learners.neural.rollout.rollout_ode`).
"""

from __future__ import annotations

import warnings

from typing import Callable, Optional, Tuple, Union

import torch

import bea
from bea.errors import BeaRuntimeError, BeaTypeError, BeaValueError
from integrators import Trajectory, modified

from .._checks import check_step
from .options import AccelerationLoss, DELLoss, Loss, TrainOptions, get_loss

__all__ = ["Estimator", "LagrangianEstimator", "FieldEstimator"]

TorchLagrangian = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class Estimator:
    """Shared part: the configuration and :meth:`fit`."""

    #: the TrainResult of the last :meth:`fit` (None before)
    train_result = None

    def _configure(self, h: Optional[float], scheme, loss: Union[str, Loss], options: Optional[TrainOptions]) -> None:
        """Validate and keep the estimator's configuration (called by the constructors)."""
        self.h = None if h is None else check_step(h)
        self.scheme = bea.get_scheme(scheme)
        self.loss = get_loss(loss)
        if options is not None and not isinstance(options, TrainOptions):
            raise BeaTypeError(f"options must be a learners.TrainOptions, got {type(options).__name__}")
        self.options = TrainOptions() if options is None else options

    def _train_data(self, data):
        """What :func:`train` takes for ``data`` (first-order models adapt it)."""
        return self, data

    def fit(self, data) -> "Estimator":
        r"""Train on ``data`` with the configured loss, step, scheme and options
        (:func:`~learners.neural.training.train`; the parameters are updated in place, the best state on the
        validation split is kept) and return the model. ``data``: ``(q, v, a)`` (or an object with ``.q, .v, .a``)
        for the acceleration loss; snapshots ``(n_traj, n_steps + 1, n)`` or an :class:`integrators.Trajectory`
        for the DEL loss."""
        from .training import train  # training imports the losses and the prediction that import this module's peers

        if isinstance(self.loss, DELLoss) and self.h is None:
            raise BeaValueError(f"the DEL loss needs the sampling step of the snapshots: {type(self).__name__}(..., h=0.1, "
                                f"loss='del')")
        model, data = self._train_data(data)
        self.train_result = train(model, data, self.loss, h=self.h, scheme=self.scheme, options=self.options)
        return self

    def _step(self) -> float:
        if self.h is None:
            raise BeaValueError(f"this needs the model's step: configure it with h=, e.g. {type(self).__name__}(..., h=0.1)")
        return self.h


class LagrangianEstimator(Estimator):
    """The estimator form of a torch Lagrangian ``L(q, v)`` (ModLaNet, LNN); see the module docstring."""

    def lagrangians(self, order: int = 2) -> Tuple[TorchLagrangian, TorchLagrangian]:
        r"""``(integrated, legendre)``: the Lagrangian the scheme integrates and the one whose Legendre map and
        energy are reported (the module docstring's table); ``order``: :math:`N` of :math:`\mathrm{mod}_N` for a
        model of :math:`L_{inv}`."""
        if not isinstance(self.loss, DELLoss):
            return self, self  # no step involved: the energy of an acceleration-trained model needs no h
        if self.loss.inverse_order:
            return modified.inverse_lagrangian(self, self.loss.inverse_order, self._step(), self.scheme), self
        return self, modified.recovered_lagrangian(self, order, self._step(), self.scheme)

    def _recovery_order(self, order: int) -> int:
        """The order passed on: 0 for a model of the true Lagrangian (no correction to recover)."""
        return order if isinstance(self.loss, DELLoss) and not self.loss.inverse_order else 0

    def predict(self, q0, qdot0, steps: int, order: int = 2, **newton) -> Trajectory:
        r"""A :class:`~integrators.Trajectory` from ``(q0, qdot0)`` (``(batch..., n)``): the scheme at step ``h`` on
        the integrated Lagrangian with :math:`p_0 = \partial_v` (Legendre Lagrangian) :math:`(q_0, \dot q_0)`
        (:func:`~learners.neural.prediction.predict_positions`); ``newton``: options of the integrator."""
        from .prediction import predict_positions

        io = self.loss.inverse_order if isinstance(self.loss, DELLoss) else 0
        traj = predict_positions(self, q0, qdot0, steps, self._step(), self.scheme, self._recovery_order(order), inverse_order=io,
                                 **newton)
        return Trajectory(traj.q, traj.valid, t=traj.t, p=traj.p, v=traj.v, stats=traj.stats)

    def energy(self, *states, order: int = 2):
        r"""The identified energy :math:`H_{rec}[N]` as a callable ``H(q, v)`` (as the GPs' ``energy(order)``).
        The model's own energy at given states is :meth:`energy_at`; ``energy(q, v)`` still returns it for one
        release, with a ``DeprecationWarning``."""
        if len(states) == 1 and isinstance(states[0], int) and not isinstance(states[0], bool):
            return bea.energy(self.lagrangians(states[0])[1])  # energy(2), the order positionally as the GPs take it
        if len(states) not in (0, 2):
            raise BeaTypeError("energy takes an order (energy(2) returns H_rec as a callable); the energy at states "
                               "(q, v) is energy_at(q, v)")
        if states:
            warnings.warn(f"{type(self).__name__}.energy(q, v) is deprecated and will be removed in the next release; "
                          f"use {type(self).__name__}.energy_at(q, v) (energy(order) is the callable)",
                          DeprecationWarning, stacklevel=2)
            return self.energy_at(*states)
        return bea.energy(self.lagrangians(order)[1])

    def energy_at(self, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        r"""The model's own energy :math:`p\cdot v - L` at ``(q, v)``, a tensor."""
        return bea.energy(self)(q, v)

    def energies(self, qs, order: int = 2) -> torch.Tensor:
        r""":math:`H_{rec}[N]` along positions ``qs`` (a Trajectory or ``(steps + 1, batch..., n)``), with the
        velocities of :meth:`velocities`; shape ``(steps + 1, batch...)``."""
        integrated, legendre = self.lagrangians(order)
        return modified.energies(integrated, qs, self._recovery_order(order), self._step(), self.scheme, recovered=legendre)

    def velocities(self, qs, order: int = 2) -> torch.Tensor:
        r"""Velocities along positions ``qs``: :math:`\partial_vL_{rec}(q_j, \dot q_j) = p_j`, :math:`p_j` the discrete
        momenta of the integrated Lagrangian; the shape of ``qs``."""
        integrated, legendre = self.lagrangians(order)
        return modified.velocities(integrated, qs, self._recovery_order(order), self._step(), self.scheme,
                                   recovered=legendre)


class FieldEstimator(Estimator):
    """The estimator form of a first-order model (HNN, MLPBaseline): acceleration loss, RK4 prediction."""

    def _configure(self, h, scheme, loss, options) -> None:
        super()._configure(h, scheme, loss, options)
        if not isinstance(self.loss, AccelerationLoss):
            raise BeaValueError(f"{type(self).__name__} is not a Lagrangian: it trains on the acceleration loss only, got "
                                f"loss={self.loss!r}")

    def _train_data(self, data):
        """``(q, p, qdot, pdot)``: the whole vector field, as the paper trains HNN and its baseline
        (:class:`~learners.neural.baselines.VectorFieldModel`); else ``(q, v, a)`` on the acceleration half."""
        from .baselines import VectorFieldModel, vector_field_data

        if isinstance(data, (tuple, list)) and len(data) == 4:
            return VectorFieldModel(self), vector_field_data(*data)
        return self, data

    def predict(self, q0, qdot0, steps: int, substeps: int = 1) -> Trajectory:
        r"""RK4 on the model's vector field from ``(q0, qdot0)`` (for an HNN, canonical ``(q0, p0)``) at the times
        ``h * j``, ``j = 0..steps``, with ``substeps`` steps per interval (:func:`~learners.neural.rollout.rollout_ode`)."""
        from .rollout import rollout_ode

        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise BeaValueError(f"steps must be a positive integer, got {steps!r}")
        times = self._step() * torch.arange(steps + 1, dtype=torch.float64)
        traj = rollout_ode(self, q0, qdot0, times, substeps=substeps)
        return Trajectory(traj.q, traj.valid, t=traj.t, p=traj.p, v=traj.v, stats=traj.stats)

    def energy(self, order: int = 2):
        """A first-order model has no Lagrangian energy (an HNN's Hamiltonian is its ``forward(q, p)``)."""
        hamiltonian = "; its Hamiltonian is the model itself, H(q, p) = model(q, p)" if hasattr(self, "momenta") else ""
        raise BeaRuntimeError(f"{type(self).__name__} learns a vector field, not a Lagrangian: it has no energy "
                              f"H(q, v){hamiltonian}")
