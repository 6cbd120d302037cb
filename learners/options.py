r"""Options as objects: small frozen dataclasses where a string used to stand for a choice with parameters.

A string still names each choice's defaults (``objective="positions"`` is ``Positions()``, ``loss="del"`` is
``DELLoss()``); the object form sets its parameters (``DELLoss(inverse_order=2, max_step=0.5)``). Options are
values: immutable, compared by their fields, printed with them, and saved in model files as their fields
(:mod:`learners.saving`: every subclass is registered as a component there).

The options themselves live with what they configure: the GP's hyperparameter objectives in
:mod:`learners.shadow.objectives`, the training losses and settings of the networks in
:mod:`learners.neural.options`; normalisations were objects already (:mod:`learners.shadow.normalisation`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Mapping, Type, TypeVar, Union

from bea.errors import BeaTypeError, BeaValueError

from .saving import register

__all__ = ["Options", "from_name"]

T = TypeVar("T", bound="Options")


class Options:
    """Base of the option dataclasses: saved as their fields (``_init_args``, read by :mod:`learners.saving`)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        register(cls)  # a component model files may contain, rebuilt from its fields

    @property
    def _init_args(self) -> Dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def from_name(spec: Union[str, T], choices: Mapping[str, Type[T]], what: str) -> T:
    """``spec`` if it is one of the option classes in ``choices``, else the defaults of the class it names; a
    typed error naming the choices otherwise."""
    classes = tuple(set(choices.values()))
    if isinstance(spec, classes):
        return spec
    if isinstance(spec, str) and spec in choices:
        return choices[spec]()
    names = ", ".join(repr(k) for k in choices)
    objects = ", ".join(sorted(c.__name__ for c in classes))
    err = BeaValueError if isinstance(spec, str) else BeaTypeError
    raise err(f"{what} must be one of {names} or an object of {objects}, got {spec!r}")
