r"""Neural Lagrangian/Hamiltonian baselines and the training and rollout shared with ModLaNet.

Modules: :mod:`~learners.neural.baselines` (LNN, HNN, MLP baselines), :mod:`~learners.neural.training`
(the training loop), :mod:`~learners.neural.losses` (acceleration and DEL losses), :mod:`~learners.neural.prediction`
(prediction of position-trained models),
:mod:`~learners.neural.rollout` (rollouts), :mod:`~learners.neural.metrics` (the paper's prediction metrics),
:mod:`~learners.neural.energy` (the true energy, velocities from momenta), :mod:`~learners.neural.initial_states`
(the paper's random initial states), :mod:`~learners.neural.options` (the loss and training options as objects),
:mod:`~learners.neural.estimator` (the estimator form: ``fit``, ``predict``, ``energy``).
"""

from .baselines import (HNN, LNN, MLPBaseline, VectorFieldModel, canonical_data, euler_lagrange_acceleration,
                        parameter_count, paper_baseline, vector_field_data)
from .estimator import FieldEstimator, LagrangianEstimator
from .metrics import angles_mod_2pi, mse_energy, mse_q, paper_statistic, pendulum_positions, rollout_metrics
from .energy import true_energy, velocities_from_momenta
from .initial_states import random_initial_states
from .options import AccelerationLoss, DELLoss, Loss, TrainOptions
from .prediction import inverse_lagrangian, predict_positions, recovered_energy, recovered_lagrangian
from .rollout import rollout_ode, rollout_variational
from .training import TrainingDivergedError, TrainResult, train

__all__ = [
    # the baselines
    "LNN",
    "HNN",
    "MLPBaseline",
    "VectorFieldModel",
    "paper_baseline",
    "parameter_count",
    "canonical_data",
    "vector_field_data",
    "euler_lagrange_acceleration",
    # training: the estimator form, the function under it and its options
    "LagrangianEstimator",
    "FieldEstimator",
    "train",
    "TrainResult",
    "TrainingDivergedError",
    "TrainOptions",
    "Loss",
    "AccelerationLoss",
    "DELLoss",
    # prediction of position-trained models
    "predict_positions",
    "recovered_lagrangian",
    "recovered_energy",
    "inverse_lagrangian",
    # rollouts and the paper's metrics
    "rollout_ode",
    "rollout_variational",
    "random_initial_states",
    "true_energy",
    "velocities_from_momenta",
    "mse_q",
    "mse_energy",
    "paper_statistic",
    "rollout_metrics",
    "pendulum_positions",
    "angles_mod_2pi",
]
