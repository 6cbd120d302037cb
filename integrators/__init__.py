"""integrators: batched variational integrators in torch, reference flows and snapshot data.

* :class:`VariationalIntegrator` -- any torch Lagrangian, any :mod:`bea` scheme, thousands of
  trajectories at once (:mod:`integrators.variational`, Newton in :mod:`integrators.newton`).
* :func:`reference_flow` -- accurate Euler--Lagrange flows with SciPy (:mod:`integrators.reference`);
  :func:`collocation_flow` -- the same by Chebyshev collocation, for expensive Lagrangians such as
  :mod:`bea` series of torch Lagrangians (:mod:`integrators.collocation`).
* :mod:`integrators.systems` -- example systems, each a SymPy Lagrangian usable as torch.
* :mod:`integrators.data` -- position-only snapshot data: generate, save, load and validate.
* :mod:`integrators.convergence` -- errors against exact and modified flows, observed orders.
* :class:`Trajectory` -- what every producer of trajectories returns (``t``, ``q``, ``valid``, ``v``/``p``,
  ``std``, ``stats``; time first), and what the consumers (``momenta``, ``velocities``, ...) take.

Errors descend from :class:`bea.BeaError`, exported here as ``BeaError`` (docs/api/overview.md).

Depends on :mod:`bea` (schemes and series); :mod:`bea` never imports this package.
"""

from bea.errors import BeaError, BeaWarning

from . import collocation, convergence, data, modified, systems
from ._admissible import InconsistentSchemeError, NotRegularError
from .model_protocol import CompiledPathWarning, LagrangianModel
from .newton import ConvergenceError, NewtonOptions
from .collocation import collocation_flow
from .reference import ReferenceFlowError, reference_flow
from .symbolic import SymbolicLagrangian
from .systems import System
from .trajectory import Trajectory, positions
from .variational import VariationalIntegrator

__all__ = [
    "VariationalIntegrator",
    "Trajectory",
    "positions",
    "BeaError",
    "BeaWarning",
    "ConvergenceError",
    "NotRegularError",
    "InconsistentSchemeError",
    "NewtonOptions",
    "CompiledPathWarning",
    "LagrangianModel",
    "reference_flow",
    "collocation_flow",
    "ReferenceFlowError",
    "SymbolicLagrangian",
    "System",
    "systems",
    "data",
    "convergence",
    "collocation",
    "modified",
]


def __getattr__(name: str):
    if name == "Solution":  # the old name of Trajectory, deprecated
        from . import solution

        return solution.Solution
    raise AttributeError(f"module 'integrators' has no attribute {name!r}")
