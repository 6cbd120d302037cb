"""Deprecation without breakage: old parameter names keep working for one release.

:func:`renamed` wraps a function whose parameters were renamed to the project's vocabulary (``order``,
``n``, ``qdot0``, ``h``; docs/api/overview.md): a call with an old keyword still works, with a
:class:`DeprecationWarning` that names the replacement. The wrapped function's signature (for
:func:`inspect.signature` and the docs) is the new one.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from typing import Any, Callable, Dict

from .errors import BeaTypeError

__all__ = ["renamed", "renamed_attributes", "h_before_scheme"]


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


def renamed_attributes(module: str, old_to_new: Dict[str, str], namespace: Dict[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) that serves each old name as its new one, with a
    :class:`DeprecationWarning` naming the replacement (``from module import old`` included)."""

    def __getattr__(name: str) -> Any:
        if name in old_to_new:
            warnings.warn(f"{module}.{name} is deprecated and will be removed in the next release; use "
                          f"{module}.{old_to_new[name]}", DeprecationWarning, stacklevel=2)
            return namespace[old_to_new[name]]
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def h_before_scheme(*old_order: str) -> Callable[[Callable], Callable]:
    """``@h_before_scheme("system", "scheme", "order", "kind", "h")`` on a function whose parameters now put ``h``
    before ``scheme`` (the project's order): a positional call in the old order, recognised by a scheme (a name or
    a :class:`~bea.schemes.Scheme`) in the old scheme position, still works, with a DeprecationWarning."""

    def decorate(fn: Callable) -> Callable:
        at = old_order.index("scheme")
        new_order = [p for p in inspect.signature(fn).parameters if p in old_order]

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            from .schemes import Scheme  # here: bea.schemes uses this module

            if len(args) > at and isinstance(args[at], (str, Scheme)):
                shown = [p for p in old_order if p != "self"]
                warnings.warn(f"{fn.__qualname__}({', '.join(shown)}) is deprecated and will be removed in the next "
                              f"release: h comes before scheme now, {fn.__qualname__}("
                              f"{', '.join(p for p in new_order if p != 'self')})", DeprecationWarning, stacklevel=2)
                kwargs.update(zip(old_order, args))
                args = ()
            return fn(*args, **kwargs)

        return wrapper

    return decorate
