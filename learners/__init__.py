r"""learners: Gaussian-process models of (inverse modified) Lagrangians from position data.

Lagrangian Shadow Integration (docs/theory/lsi.md):

>>> from learners import InverseModifiedLagrangianGP
>>> model = InverseModifiedLagrangianGP(h=0.5).fit(snapshots)     # (n_traj, n_steps + 1, n) positions
>>> traj = model.predict(q0, qdot0, steps=1000)                     # the scheme on L_inv, p0 from mod_2(L_inv)
>>> H = model.energy(order=2)                                       # identified energy H_rec[2]
>>> v = model.velocities(traj, order=2)                             # traj.q: positions (1001, batch, n), traj.t

The networks have the same form (:mod:`learners.neural.estimator`):

>>> from learners.modlanet import ModLaNet
>>> from learners.neural import DELLoss, TrainOptions
>>> M = ModLaNet.pendulum_chain(2, h=0.1, loss=DELLoss(), options=TrainOptions(epochs=200)).fit(snapshots)
>>> traj = M.predict(q0, qdot0, steps=100)                          # the scheme on M, p0 from mod_2(M)

Namespaces, one per family: :mod:`learners.shadow` (the GPs), :mod:`learners.modlanet` (ModLaNet, its elements and
data), :mod:`learners.neural` (the neural baselines, training and its options, rollouts, metrics). The flat names
below are the same objects, kept for existing code.

Modules: :mod:`~learners.shadow.functionals` (linear functionals as derivative atoms: DEL/EL residuals,
momenta, point values), :mod:`~learners.shadow.kernels` (the kernel with functionals applied on both
sides), :mod:`~learners.shadow.gp` (the conditioned GP, exact Cholesky solve), :mod:`~learners.shadow.normalisation`,
:mod:`~learners.shadow.hyperparameters` (hyperparameters), :mod:`~learners.shadow.lsi` (LSI), :mod:`~learners.shadow.lgp`
(LGP, LGPExact), :mod:`~learners.metrics`, :mod:`~pipelines.shadow_experiments`, :mod:`~pipelines.plots`,
:mod:`~pipelines.demo`.
"""

from bea.errors import BeaError, BeaWarning, NotRegularError

from .shadow.lgp import LagrangianGP, finite_differences
from .shadow.functionals import (Functionals, del_residual_functionals, discrete_momentum_functionals, euler_lagrange_residuals,
                                 point_evaluations, triples_from_snapshots)
from .shadow.gp import ConditioningInfo, FunctionalGP
from .shadow.kernels import FunctionalKernel, RBFKernel, SmoothKernel
from .shadow.mechanical import MechanicalKernel
from .neural.baselines import (HNN, LNN, MLPBaseline, VectorFieldModel, canonical_data, euler_lagrange_acceleration,
                               parameter_count, paper_baseline, vector_field_data)
from .shadow.normalisation import MassNormalisation, Normalisation, VertexNormalisation
from .neural.rollout import (angles_mod_2pi, mse_energy, mse_q, pendulum_positions, random_initial_states, rollout_metrics,
                      rollout_ode, rollout_variational, paper_statistic, true_energy, velocities_from_momenta)
from .shadow.guards import NonFiniteModelError
from .saving import ModelFileError
from .shadow.guards import IdentifiabilityWarning, StaleCalibrationWarning, ToleranceRelaxedWarning
from .shadow.element_search import DegenerateScalesWarning
from .shadow.lsi import ExtrapolationError, ExtrapolationWarning, InverseModifiedLagrangianGP
from .modlanet.model import ModLaNet
from .modlanet.data import (AccelerationData, double_pendulum_data, n_body_data, n_body_snapshots, pendulum_chain_data,
                            pendulum_chain_snapshots, three_body_data)
from .neural.training import TrainResult, TrainingDivergedError, predict_positions, recovered_energy, recovered_lagrangian, train

__all__ = [
    "ModLaNet",
    "train",
    "TrainResult",
    "TrainingDivergedError",
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
    "IdentifiabilityWarning",
    "DegenerateScalesWarning",
    "StaleCalibrationWarning",
    "ToleranceRelaxedWarning",
    "ExtrapolationError",
    "NonFiniteModelError",
    "BeaError",
    "BeaWarning",
    "NotRegularError",
    "ModelFileError",
    "LagrangianGP",
    "finite_differences",
    "FunctionalGP",
    "ConditioningInfo",
    "FunctionalKernel",
    "RBFKernel",
    "MechanicalKernel",
    "SmoothKernel",
    "Functionals",
    "del_residual_functionals",
    "discrete_momentum_functionals",
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
    "paper_baseline",
    "rollout_ode",
    "rollout_variational",
    "mse_q",
    "mse_energy",
    "paper_statistic",
    "rollout_metrics",
    "random_initial_states",
    "true_energy",
    "velocities_from_momenta",
    "pendulum_positions",
    "angles_mod_2pi",
    "VectorFieldModel",
    "vector_field_data",
]

# deprecated names (one release): "seed" meant the reference paper, and reads as a random seed
_RENAMED = {"seed_baseline": "paper_baseline", "seed_statistic": "paper_statistic",
            # one name, one idea (issue 29): these build functionals, not values
            "del_residuals": "del_residual_functionals", "discrete_momenta": "discrete_momentum_functionals"}


def __getattr__(name: str):
    if name in _RENAMED:
        import warnings

        warnings.warn(f"learners.{name} is deprecated and will be removed in the next release; use "
                      f"learners.{_RENAMED[name]}", DeprecationWarning, stacklevel=2)
        return globals()[_RENAMED[name]]
    raise AttributeError(f"module 'learners' has no attribute {name!r}")
