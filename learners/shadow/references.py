r"""What the energy of a learned model is measured from: one vocabulary for both GP models (issue 29).

An energy is determined only up to a constant, so :meth:`energy` and :meth:`energies` can report differences:

* ``reference=(q_ref, v_ref)`` -- a **state** (one each, shape ``(n,)``): :math:`H(q, v) - H(q_{ref}, v_{ref})`,
  the same meaning in ``energy()`` (at states) and ``energies()`` (along positions);
* ``reference_index=j`` -- a **time index** of the positions given to ``energies()``: :math:`H_k - H_j` per
  trajectory.

``energies(reference=j)`` with an integer meant the time index before; it still does for one release, with a
DeprecationWarning naming ``reference_index=``.
"""

from __future__ import annotations

import warnings
from typing import Optional, Tuple

import torch

from bea.errors import BeaTypeError, BeaValueError

from .._checks import check_states

__all__ = ["reference_state", "energies_reference"]


def reference_state(reference, n: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(q_ref, v_ref)``, each of shape ``(n,)``, from a pair of one state each."""
    try:
        q_r, v_r = reference
    except (TypeError, ValueError):
        raise BeaTypeError("reference must be a pair (q_ref, v_ref) of one state each (a time index of energies() is "
                           "reference_index=)") from None
    q_r, v_r = check_states(q_r, v_r, n)
    if q_r.numel() != n:
        raise BeaValueError(f"reference must be one state: q_ref and v_ref of shape ({n},), got {tuple(q_r.shape)}")
    return q_r.reshape(n), v_r.reshape(n)


def energies_reference(reference, reference_index, steps: int, n: int, caller: str = "energies"
                       ) -> Tuple[Optional[Tuple[torch.Tensor, torch.Tensor]], Optional[int]]:
    """The state and the time index (each or both None) an ``energies()`` call measures from, with ``steps`` the
    number of positions along time; an integer ``reference`` is the deprecated spelling of ``reference_index``."""
    if isinstance(reference, int) and not isinstance(reference, bool):
        if reference_index is not None:
            raise BeaTypeError(f"{caller}() got reference={reference} (a time index: deprecated) and reference_index=; "
                               "pass reference_index= only")
        warnings.warn(f"{caller}(reference=<time index>) is deprecated and will be removed in the next release; use "
                      f"reference_index={reference} (reference= is a state (q_ref, v_ref), as in energy())",
                      DeprecationWarning, stacklevel=3)
        reference, reference_index = None, reference
    if reference is not None and reference_index is not None:
        raise BeaValueError(f"{caller}() measures from one reference: a state (reference=) or a time index "
                            "(reference_index=), not both")
    if reference_index is not None:
        if isinstance(reference_index, bool) or not isinstance(reference_index, int) \
                or not -steps <= reference_index < steps:
            raise BeaValueError(f"reference_index must be a time index in [0, {steps}), got {reference_index!r}")
        reference_index %= steps
    state = None if reference is None else reference_state(reference, n)
    return state, reference_index
