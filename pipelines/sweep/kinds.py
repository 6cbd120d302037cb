"""What a task kind is (:class:`Kind`, :class:`Param`, :class:`TaskOutput`, :class:`ParamError`) and the
registry of kinds (:data:`KINDS`, :func:`register`, :func:`get_kind`); the built-in kinds are in
:mod:`pipelines.sweep.convergence_kind` and :mod:`pipelines.sweep.experiment_kinds` (see :mod:`pipelines.sweep.tasks`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from bea.errors import BeaTypeError, BeaValueError
from bea.registry import Registry

__all__ = ["Param", "Kind", "TaskOutput", "ParamError", "REQUIRED", "KINDS", "register", "get_kind", "kind_names"]


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


#: the kinds registered in this process, by name (in registration order); :func:`get_kind` also finds the kinds
#: that installed packages declare in the entry-point group ``bea.sweep_kinds`` (:mod:`bea.registry`)
KINDS: Dict[str, Kind] = {}


def _check_kind(kind: Any, name: str) -> None:
    if not isinstance(kind, Kind):
        raise BeaTypeError(f"register needs a pipelines.sweep.Kind, got {type(kind).__name__} for {name!r}")
    if kind.name != name:
        raise BeaValueError(f"the sweep kind registered as {name!r} is named {kind.name!r}: an entry point's name must be "
                            f"the Kind's name")


_REGISTRY = Registry("sweep kind", "bea.sweep_kinds", _check_kind, entries=KINDS)


def register(kind: Kind, *, replace: bool = False) -> Kind:
    """Add a task kind under ``kind.name``, so that a sweep specification can name it (``kind = "..."``); returns
    it. A name already taken by another kind raises :class:`~bea.errors.DuplicateNameError` unless
    ``replace=True``. A package can declare kinds instead, in the entry-point group ``bea.sweep_kinds``
    (the entry point's name is the kind's name, its value the :class:`Kind`)."""
    if not isinstance(kind, Kind):
        raise BeaTypeError(f"register needs a pipelines.sweep.Kind, got {type(kind).__name__}")
    return _REGISTRY.register(kind.name, kind, replace=replace)


def kind_names() -> List[str]:
    """The kinds a specification can name: registered, and declared by installed packages."""
    return _REGISTRY.names()


def get_kind(name: str) -> Kind:
    """The kind registered as ``name``, or declared by an installed package's entry point (loaded now)."""
    kind = _REGISTRY.get(name) if isinstance(name, str) and name.strip() else None
    if kind is None:
        raise BeaValueError(f"unknown kind {name!r} (one of {', '.join(kind_names())}); register yours with "
                            f"pipelines.sweep.register(Kind(...)) or a package's 'bea.sweep_kinds' entry point")
    return kind
