r"""The hyperparameter objectives of the GP models as objects (``objective=`` of
:class:`~learners.InverseModifiedLagrangianGP` and :class:`~learners.LagrangianGP`; the strings name their defaults).

* :class:`MLL` (``"mll"``): the negative log marginal likelihood of the training functionals.
* :class:`HeldOut` (``"heldout"``): the residuals and momenta of held-back trajectories.
* :class:`Positions` (``"positions"``, models that learn from positions only): held-out one-step position errors
  (:mod:`learners.shadow.position_objective`).
* :class:`Auto` (``"auto"``, the default): ``"positions"`` from ``positions_from`` degrees of freedom on (3: below,
  the likelihood is well posed; above, it and ``"heldout"`` reward collapsing to the trivial Lagrangian), else
  ``"mll"``, switching to ``"positions"`` with an IdentifiabilityWarning if the likelihood collapses and
  ``fallback`` is true. The details are in :mod:`learners.shadow.hyperparameters`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence, Union

from bea.errors import BeaValueError

from ..options import Options, from_name

__all__ = ["Objective", "Auto", "MLL", "HeldOut", "Positions", "get_objective"]


@dataclass(frozen=True)
class Objective(Options):
    """Base class: ``name`` is the string that stands for the class's defaults."""

    name: ClassVar[str] = ""


@dataclass(frozen=True)
class MLL(Objective):
    """The negative log marginal likelihood."""

    name: ClassVar[str] = "mll"


@dataclass(frozen=True)
class HeldOut(Objective):
    """The residuals and momenta of held-back trajectories under the posterior."""

    name: ClassVar[str] = "heldout"


@dataclass(frozen=True)
class Positions(Objective):
    """Held-out one-step position errors (positions-only models)."""

    name: ClassVar[str] = "positions"


@dataclass(frozen=True)
class Auto(Objective):
    """``"positions"`` for ``n >= positions_from``, else ``"mll"``, falling back to ``"positions"`` if the
    likelihood collapses and ``fallback`` (models without the positions objective always run ``"mll"``)."""

    positions_from: int = 3
    fallback: bool = True
    name: ClassVar[str] = "auto"

    def __post_init__(self):
        if isinstance(self.positions_from, bool) or not isinstance(self.positions_from, int) or self.positions_from < 1:
            raise BeaValueError(f"positions_from must be a positive integer (degrees of freedom), got {self.positions_from!r}")
        if not isinstance(self.fallback, bool):
            raise BeaValueError(f"fallback must be True or False, got {self.fallback!r}")


_BY_NAME = {c.name: c for c in (Auto, MLL, HeldOut, Positions)}


def get_objective(spec: Union[str, Objective], offered: Sequence[str] = tuple(_BY_NAME), model: str = "the model"
                  ) -> Objective:
    """The :class:`Objective` that ``spec`` (an objective or its name) stands for, checked against the names
    ``offered`` by ``model``."""
    obj = from_name(spec, _BY_NAME, "objective")
    if obj.name not in offered:
        raise BeaValueError(f"objective must be one of {', '.join(map(repr, offered))} for {model}, got {spec!r}")
    return obj
