"""What a task kind is (:class:`Kind`, :class:`Param`, :class:`TaskOutput`, :class:`ParamError`) and the
registry of kinds (:data:`KINDS`, :func:`register`, :func:`get_kind`); the built-in kinds are in
:mod:`pipelines.sweep.convergence_kind` and :mod:`pipelines.sweep.experiment_kinds` (see :mod:`pipelines.sweep.tasks`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple
from bea.errors import BeaTypeError, BeaValueError

__all__ = ["Param", "Kind", "TaskOutput", "ParamError", "REQUIRED", "KINDS", "register", "get_kind"]


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = _Required()


class ParamError(BeaValueError):
    """A parameter value that cannot run; ``key`` names the parameter."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class Param:
    """A parameter: ``hint`` (the type a value must have), ``default`` (:data:`REQUIRED`; ``None``:
    optional, absent from the task's parameters unless given), ``doc``."""

    hint: Any
    default: Any = REQUIRED
    doc: str = ""


@dataclass
class TaskOutput:
    metrics: Dict[str, Any]
    config: Dict[str, Any] = field(default_factory=dict)
    timings: Dict[str, float] = field(default_factory=dict)
    info: Dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Kind:
    """A task kind. ``params()`` returns the schema (built lazily: it may import the library);
    ``check(params)`` raises :class:`ParamError`; ``run(params, seed)`` returns a :class:`TaskOutput`.
    For the report: ``x`` -- the parameter on the horizontal axis of the metric plots (``h``:
    log-log error plots with fitted slopes); ``metrics`` -- the metrics plotted by default. ``renamed``:
    ``(old, new)`` parameter names still accepted in a specification for one release, with a DeprecationWarning
    (the convergence kind's ``N`` is ``order`` now, the project's name for the truncation order)."""

    name: str
    params: Callable[[], Dict[str, Param]]
    run: Callable[[Dict[str, Any], int], TaskOutput]
    check: Callable[[Dict[str, Any]], None] = lambda p: None
    x: Optional[str] = None
    metrics: Tuple[str, ...] = ()
    slopes: bool = False
    renamed: Tuple[Tuple[str, str], ...] = ()


KINDS: Dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    """Add (or replace) a task kind; returns it."""
    if not isinstance(kind, Kind):
        raise BeaTypeError(f"register needs a pipelines.sweep.tasks.Kind, got {type(kind).__name__}")
    KINDS[kind.name] = kind
    return kind


def get_kind(name: str) -> Kind:
    try:
        return KINDS[name]
    except KeyError:
        raise BeaValueError(f"unknown kind {name!r} (one of {', '.join(sorted(KINDS))})") from None
