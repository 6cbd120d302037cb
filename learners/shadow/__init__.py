r"""GP shadow learning: Gaussian-process models of (inverse modified) Lagrangians from positions.

Modules: :mod:`~learners.shadow.functionals` (linear functionals as derivative atoms),
:mod:`~learners.shadow.kernels` (kernels with functionals on both sides), :mod:`~learners.shadow.gp`
(the conditioned GP, exact Cholesky solve; an opt-in low-rank final solve in :mod:`~learners.shadow.lowrank_solve`),
:mod:`~learners.shadow.normalisation`,
:mod:`~learners.shadow.hyperparameters` (the shared model: kernel set-up, hyperparameter learning,
conditioning), :mod:`~learners.shadow.lsi` (Lagrangian Shadow Integration),
:mod:`~learners.shadow.lgp` (the LGP / LGPExact baselines), :mod:`~learners.shadow.compiled_mean`
(the posterior means, RBF and mechanical, as sums over atoms of the code generator's IR: their C for the compiled
integrator, and the RBF mean's jets to any order), :mod:`~learners.shadow.rbf_jet` (the RBF jets handed to
autograd), :mod:`~learners.shadow.units` (the standardised units of position and time, and the posterior mean's C form
in the data's units),
:mod:`~learners.shadow.guards` (no silent non-finite or runaway answers),
:mod:`~learners.shadow.mechanical` (the opt-in mechanical kernel: RBF in the positions times a polynomial in the
velocities), :mod:`~learners.shadow.element_kernel` (the element-structured kernel, opt-in or chosen by ``kernel="auto"`` through
:mod:`~learners.shadow.structure_choice`, its structures in
:mod:`~learners.shadow.element_structure`, its search in :mod:`~learners.shadow.element_search`, its blocks in
:mod:`~learners.shadow.element_blocks`, its chunked energies in :mod:`~learners.shadow.element_energy` and its std in
:mod:`~learners.shadow.element_uncertainty`, its extension to other structures in
:mod:`~learners.shadow.element_extension` and :mod:`~learners.shadow.element_model`) and
:mod:`~learners.shadow.kernel_choice` (the ``kernel=`` option).
"""

from bea.deprecation import renamed_attributes

from .functionals import (Functionals, del_residual_functionals, discrete_momentum_functionals, euler_lagrange_residuals,
                          point_evaluations, triples_from_snapshots)
from .gp import ConditioningInfo, FunctionalGP
from .guards import (ExtrapolationError, ExtrapolationWarning, IdentifiabilityWarning, NonFiniteModelError,
                     StaleCalibrationWarning, ToleranceRelaxedWarning)
from .element_kernel import ElementKernel
from .element_search import DegenerateScalesWarning
from .kernels import FunctionalKernel, RBFKernel, SmoothKernel
from .lgp import LagrangianGP, finite_differences
from .lowrank_solve import LowRankSolver, LowRankWarning
from .lsi import InverseModifiedLagrangianGP
from .mechanical import MechanicalKernel
from .normalisation import MassNormalisation, Normalisation, VertexNormalisation

__all__ = [
    # the models
    "InverseModifiedLagrangianGP",
    "LagrangianGP",
    "finite_differences",
    # kernels and the conditioned GP
    "FunctionalGP",
    "ConditioningInfo",
    "FunctionalKernel",
    "SmoothKernel",
    "RBFKernel",
    "MechanicalKernel",
    "ElementKernel",
    "LowRankSolver",
    # linear functionals
    "Functionals",
    "del_residual_functionals",
    "discrete_momentum_functionals",
    "euler_lagrange_residuals",
    "point_evaluations",
    "triples_from_snapshots",
    # options
    "Normalisation",
    "MassNormalisation",
    "VertexNormalisation",
    # guards
    "ExtrapolationWarning",
    "ExtrapolationError",
    "IdentifiabilityWarning",
    "DegenerateScalesWarning",
    "StaleCalibrationWarning",
    "NonFiniteModelError",
    "ToleranceRelaxedWarning",
    "LowRankWarning",
]

# one name, one idea (issue 29): the old names of the functional builders, one release with a DeprecationWarning
__getattr__ = renamed_attributes(__name__, {"del_residuals": "del_residual_functionals",
                                            "discrete_momenta": "discrete_momentum_functionals"}, globals())
