"""Deprecation without breakage: old parameter names keep working for one release.

:func:`renamed` wraps a function whose parameters were renamed to the project's vocabulary (``order``,
``n``, ``qdot0``, ``h``; docs/api/overview.md): a call with an old keyword still works, with a
:class:`DeprecationWarning` that names the replacement. The wrapped function's signature (for
:func:`inspect.signature` and the docs) is the new one.
"""

from __future__ import annotations

import functools
import warnings
from typing import Callable

from .errors import BeaTypeError

__all__ = ["renamed"]


def renamed(**old_to_new: str) -> Callable[[Callable], Callable]:
    """``@renamed(v0="qdot0")``: ``f(..., v0=x)`` calls ``f(..., qdot0=x)`` and warns; giving both is an error."""

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            for old, new in old_to_new.items():
                if old in kwargs:
                    if new in kwargs:
                        raise BeaTypeError(f"{fn.__name__}() got {old}= (deprecated) and {new}=; pass {new}= only")
                    warnings.warn(f"{fn.__name__}({old}=...) is deprecated and will be removed in the next release; "
                                  f"use {new}=", DeprecationWarning, stacklevel=2)
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return wrapper

    return decorate
