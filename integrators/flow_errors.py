"""The error of a failed reference integration, shared by the SciPy route (:mod:`integrators.reference`) and
the Taylor route (:mod:`integrators.taylor`), which cannot import each other both ways."""

from __future__ import annotations

from bea.errors import BeaValueError

__all__ = ["ReferenceFlowError"]


class ReferenceFlowError(BeaValueError):
    """The reference integration failed (a singularity or a collision on the way, a step size below
    rounding, non-finite values, an energy that drifts); the message gives the reason and the time reached."""
