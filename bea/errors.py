"""Typed exceptions of :mod:`bea`.

Every error that bad input can cause is one of these. Each also derives from the built-in
exception a caller would expect (``ValueError`` for a bad value, ``TypeError`` for a bad type),
so ``except ValueError`` keeps working; ``except bea.BeaError`` catches them all (the CLI does,
and prints the message on one line). Messages name the problem and the fix.
"""

from __future__ import annotations

__all__ = [
    "BeaError",
    "BeaValueError",
    "BeaTypeError",
    "InconsistentSchemeError",
    "UnsupportedSchemeError",
    "NotRegularError",
    "NotRegularFileError",
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


class NotRegularFileError(BeaError, OSError):
    """A path to be read is a named pipe, a device, a socket, a directory (or, where links are refused, a
    symbolic link) instead of a regular file: reading it could block forever or never end, so it is not opened
    for reading (:func:`bea.reading.open_regular`)."""
