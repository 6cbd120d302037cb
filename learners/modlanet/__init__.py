r"""ModLaNet: modular Lagrangian networks built from shared element networks (docs/theory/modlanet.md).

Modules: :mod:`~learners.modlanet.elements` (MLPs, local-to-global transforms, energy cells),
:mod:`~learners.modlanet.model` (:class:`ModLaNet`), :mod:`~learners.modlanet.data` (acceleration and
snapshot data of pendulum chains and n bodies).
"""

from .model import ModLaNet, check_parents

__all__ = ["ModLaNet", "check_parents"]
