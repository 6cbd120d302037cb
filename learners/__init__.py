r"""learners: Gaussian-process models of (inverse modified) Lagrangians from position data.

Lagrangian Shadow Integration (docs/theory/lsi.md):

>>> from learners import InverseModifiedLagrangianGP
>>> model = InverseModifiedLagrangianGP(h=0.5).fit(snapshots)     # (n_traj, n_steps + 1, n) positions
>>> qs = model.predict(q0, qdot0, steps=1000)                       # the scheme on L_inv, p0 from mod_2(L_inv)
>>> H = model.energy(order=2)                                       # identified energy H_rec[2]
>>> v = model.velocities(qs, order=2)

Modules: :mod:`~learners.functionals` (linear functionals as derivative atoms: DEL/EL residuals,
momenta, point values), :mod:`~learners.kernels` (the kernel with functionals applied on both
sides), :mod:`~learners.gp` (the conditioned GP, exact Cholesky solve), :mod:`~learners.normalisation`,
:mod:`~learners.base` (hyperparameters), :mod:`~learners.shadow_gp` (LSI), :mod:`~learners.baselines`
(LGP, LGPExact), :mod:`~learners.metrics`, :mod:`~learners.experiments`, :mod:`~learners.plots`,
:mod:`~learners.demo`.
"""

from .baselines import LagrangianGP, finite_differences
from .functionals import (Functionals, del_residuals, discrete_momenta, euler_lagrange_residuals, point_evaluations,
                          triples_from_snapshots)
from .gp import ConditioningInfo, FunctionalGP
from .kernels import FunctionalKernel, RBFKernel, SmoothKernel
from .neural_baselines import (HNN, LNN, MLPBaseline, VectorFieldModel, canonical_data, euler_lagrange_acceleration,
                               parameter_count, seed_baseline, vector_field_data)
from .normalisation import MassNormalisation, Normalisation, VertexNormalisation
from .rollout import (angles_mod_2pi, mse_energy, mse_q, pendulum_positions, random_initial_states, rollout_metrics,
                      rollout_ode, rollout_variational, seed_statistic, true_energy, velocities_from_momenta)
from .shadow_gp import ExtrapolationError, ExtrapolationWarning, InverseModifiedLagrangianGP
from .modlanet import ModLaNet
from .modlanet_data import (AccelerationData, double_pendulum_data, n_body_data, n_body_snapshots, pendulum_chain_data,
                            pendulum_chain_snapshots, three_body_data)
from .training import TrainResult, predict_positions, recovered_energy, recovered_lagrangian, train

__all__ = [
    "ModLaNet",
    "train",
    "TrainResult",
    "predict_positions",
    "recovered_lagrangian",
    "recovered_energy",
    "AccelerationData",
    "double_pendulum_data",
    "three_body_data",
    "pendulum_chain_data",
    "n_body_data",
    "pendulum_chain_snapshots",
    "n_body_snapshots",
    "InverseModifiedLagrangianGP",
    "ExtrapolationWarning",
    "ExtrapolationError",
    "LagrangianGP",
    "finite_differences",
    "FunctionalGP",
    "ConditioningInfo",
    "FunctionalKernel",
    "RBFKernel",
    "SmoothKernel",
    "Functionals",
    "del_residuals",
    "discrete_momenta",
    "euler_lagrange_residuals",
    "point_evaluations",
    "triples_from_snapshots",
    "Normalisation",
    "MassNormalisation",
    "VertexNormalisation",
    "LNN",
    "HNN",
    "MLPBaseline",
    "canonical_data",
    "euler_lagrange_acceleration",
    "parameter_count",
    "seed_baseline",
    "rollout_ode",
    "rollout_variational",
    "mse_q",
    "mse_energy",
    "seed_statistic",
    "rollout_metrics",
    "random_initial_states",
    "true_energy",
    "velocities_from_momenta",
    "pendulum_positions",
    "angles_mod_2pi",
    "VectorFieldModel",
    "vector_field_data",
]
