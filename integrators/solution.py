"""Deprecated: :class:`Solution` is now :class:`integrators.Trajectory` (:mod:`integrators.trajectory`),
the one type every producer of trajectories returns. The old name works for one release, with a
:class:`DeprecationWarning`."""

from __future__ import annotations

import warnings

from .trajectory import Trajectory

__all__: list = []

def __getattr__(name: str):
    if name == "Solution":
        warnings.warn("Solution is deprecated and will be removed in the next release; use integrators.Trajectory "
                      "(the same class)", DeprecationWarning, stacklevel=2)
        return Trajectory
    raise AttributeError(f"module 'integrators.solution' has no attribute {name!r}")
