r"""ModLaNet: modular Lagrangian networks built from shared element networks (docs/theory/modlanet.md).

Modules: :mod:`~learners.modlanet.elements` (MLPs, local-to-global transforms, energy cells),
:mod:`~learners.modlanet.model` (:class:`ModLaNet`), :mod:`~learners.modlanet.data` (acceleration and
snapshot data of pendulum chains and n bodies).
"""

from .data import (AccelerationData, body_initial_states, double_pendulum_data, n_body_data, n_body_snapshots,
                   pendulum_chain_data, pendulum_chain_snapshots, pendulum_initial_states, three_body_data)
from .elements import (MLP, AngleOnRod, CallableTransform, FixedCell, Identity, MLPTransform, NewtonianPair, PairCell,
                       PotentialCell, Transform, UniformGravity)
from .model import ModLaNet, check_parents

__all__ = [
    # the model
    "ModLaNet",
    "check_parents",
    # its elements: local-to-global transforms and energy cells
    "Transform",
    "Identity",
    "AngleOnRod",
    "MLPTransform",
    "CallableTransform",
    "PotentialCell",
    "PairCell",
    "FixedCell",
    "UniformGravity",
    "NewtonianPair",
    "MLP",
    # data of pendulum chains and n bodies
    "AccelerationData",
    "pendulum_chain_data",
    "n_body_data",
    "double_pendulum_data",
    "three_body_data",
    "pendulum_chain_snapshots",
    "n_body_snapshots",
    "pendulum_initial_states",
    "body_initial_states",
]
