"""Typed exceptions of :mod:`bea`, and the root of every exception of the project.

Every error that bad input can cause is one of these. Each also derives from the built-in
exception a caller would expect (``ValueError`` for a bad value, ``TypeError`` for a bad type),
so ``except ValueError`` keeps working; ``except bea.BeaError`` catches them all (the CLI does,
and prints the message on one line). Messages name the problem and the fix.

:class:`BeaError` is the one root: ``integrators``, ``learners`` and ``pipelines`` export this same
class, and their own errors (``ConvergenceError``, ``SnapshotError``, ``ModelFileError``,
``ExtrapolationError``, ``SpecError``, ...) derive from it. A condition that two packages can detect
has one class here (a singular mass matrix is :class:`NotRegularError` whether ``bea`` or the
integrator finds it), so a caller tells errors apart by class, never by message text.

:class:`BeaWarning` is the one root of the project's warnings in the same way (``CacheWarning``,
``ExtrapolationWarning``, ``IdentifiabilityWarning``, ...): ``warnings.simplefilter("error", bea.BeaWarning)``
turns every one of them into an error, and ``"ignore"`` silences them all. Deprecations stay plain
``DeprecationWarning`` (Python's own protocol for them).
"""

from __future__ import annotations

__all__ = [
    "BeaError",
    "BeaValueError",
    "BeaTypeError",
    "InconsistentSchemeError",
    "UnsupportedSchemeError",
    "NotRegularError",
    "SeriesError",
    "CacheFormatError",
    "InternalError",
    "BeaRuntimeError",
    "StaleHandleError",
    "BeaOSError",
    "BeaFileNotFoundError",
    "BeaIsADirectoryError",
    "MissingDependencyError",
    "NotRegularFileError",
    "BeaWarning",
    "UnverifiedSchemeWarning",
    "DuplicateNameError",
    "PluginLoadError",
]


class BeaError(Exception):
    """Base class of every error raised by :mod:`bea` for bad input."""


class BeaValueError(BeaError, ValueError):
    """An argument has the right type but an invalid value (order too large, non-finite constant...)."""


class BeaTypeError(BeaError, TypeError):
    """An argument has the wrong type (a string where a SymPy expression is needed, ...)."""


class InconsistentSchemeError(BeaValueError):
    r"""A scheme's discrete Lagrangian does not approximate :math:`\int_t^{t+h} L\,dt` to leading order."""


class UnsupportedSchemeError(BeaTypeError):
    """A scheme's discrete Lagrangian uses operations the symbolic engine cannot follow (only
    ``+ - * /`` with numbers and ``h``, and calls of ``L``, are allowed)."""


class NotRegularError(BeaValueError):
    r"""The Lagrangian's Hessian :math:`\partial^2 L/\partial v^2` is singular."""


class SeriesError(BeaValueError):
    r"""A truncated series in :math:`h` was asked for what it does not determine: a coefficient beyond
    the order it is known to, or a quotient by something other than :math:`c\,h^k`."""


class CacheFormatError(BeaValueError):
    """Stored data does not have the structure this engine writes."""


class InternalError(BeaValueError):
    """An invariant of the engine failed: a bug, please report it with the call that caused it.

    (It derives from ``ValueError`` because these conditions raised ``ValueError`` before; a caller
    should not rely on catching it.)"""


class BeaRuntimeError(BeaError, RuntimeError):
    """A call that cannot proceed in the object's present state (not fitted yet, its structure changed
    after it was compiled, no candidate on a search grid gave a usable fit)."""


class StaleHandleError(BeaRuntimeError):
    """A handle a fitted model handed out (an energy with its std, an element extension's std) was called after the
    model it reads was fitted again, loaded or moved: it would mix the old and the new state, so it refuses; take the
    handle again from the model (:mod:`learners.shadow.handles`)."""


class BeaOSError(BeaError, OSError):
    """A file-system condition (files written by a run that do not verify, ...); also an ``OSError``."""


class BeaFileNotFoundError(BeaOSError, FileNotFoundError):
    """A file named by the caller does not exist; also a ``FileNotFoundError``."""


class BeaIsADirectoryError(BeaOSError, IsADirectoryError):
    """A directory was given where a file name is needed; also an ``IsADirectoryError``."""


class MissingDependencyError(BeaError, ImportError):
    """An optional dependency needed for this call is not installed; the message names the ``pip install``."""


class NotRegularFileError(BeaOSError):
    """A path to be read is a named pipe, a device, a socket, a directory (or, where links are refused, a
    symbolic link) instead of a regular file: reading it could block forever or never end, so it is not opened
    for reading (:func:`bea.reading.open_regular`)."""


class BeaWarning(UserWarning):
    """Base class of every warning the project issues (deprecations apart, which are ``DeprecationWarning``)."""


class UnverifiedSchemeWarning(BeaWarning, RuntimeWarning):
    """A scheme's consistency could not be checked symbolically (its discrete Lagrangian uses operations
    ``bea`` cannot expand); it is used unverified. Also a ``RuntimeWarning``, the class it was issued as before."""
class DuplicateNameError(BeaValueError):
    """A name given to a registry (:func:`bea.register_scheme`, :func:`pipelines.sweep.register`) is already
    taken by another object, or declared by two installed packages' entry points."""


class PluginLoadError(BeaError, ImportError):
    """An installed package's entry point (a scheme or a sweep kind it declares) could not be imported; the
    message names the entry point, and the package's own error is chained as the cause."""
