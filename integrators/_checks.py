"""Input validation shared by the integrators and learners packages (clear errors, never silent NaN).

The one checks module above :mod:`bea`: the learners import these (their own module,
:mod:`learners._checks`, adds only what is specific to learning: snapshots, orders)."""

from __future__ import annotations

import math
from typing import Any, Optional, Tuple

import numpy as np
import torch

from bea.autodiff import check_state
from bea.errors import BeaTypeError, BeaValueError


def as_float64(x: Any, name: str) -> torch.Tensor:
    """``x`` (tensor, array, list or number) as a float64 tensor; complex, bool or non-numeric
    data raise ``TypeError``. Tensors keep their device."""
    if isinstance(x, torch.Tensor):
        t = x
    else:
        try:
            arr = np.asarray(x)
        except Exception as err:  # pragma: no cover - numpy raises many types
            raise BeaTypeError(f"{name} must be a tensor or array of numbers, got {type(x).__name__}") from err
        if arr.dtype == object or arr.dtype.kind not in "biufc":
            raise BeaTypeError(f"{name} must contain real numbers, got an array of dtype {arr.dtype}")
        t = torch.as_tensor(arr, device="cpu")  # numbers and arrays live on the host, whatever torch's default device
    if t.dtype == torch.bool:
        raise BeaTypeError(f"{name} must contain real numbers, got a bool tensor")
    if t.is_complex():
        raise BeaTypeError(f"{name} must be real, got a complex tensor")
    return t.to(torch.float64)


def check_finite(t: torch.Tensor, name: str) -> None:
    """Raise ``ValueError`` naming the first non-finite entry of ``t``."""
    bad = ~torch.isfinite(t)
    if bool(bad.any()):
        idx = tuple(int(i) for i in torch.nonzero(bad)[0])
        raise BeaValueError(f"{name} contains {int(bad.sum())} non-finite value(s) (NaN or inf), the first at index {idx}: "
                         f"{float(t[idx])}; pass finite numbers")


def check_step_size(h: Any, name: str = "h") -> float:
    if isinstance(h, torch.Tensor):
        if h.numel() != 1:
            raise BeaTypeError(f"{name} must be a positive number, got a tensor of shape {tuple(h.shape)}")
        h = h.item()
    if isinstance(h, bool) or not isinstance(h, (int, float, np.integer, np.floating)):
        raise BeaTypeError(f"{name} must be a positive number, got {h!r}")
    h = float(h)
    if not math.isfinite(h) or h <= 0:
        raise BeaValueError(f"{name} must be a positive finite number, got {h}")
    return h


def check_steps(steps: Any, name: str = "steps") -> int:
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)):
        raise BeaTypeError(f"{name} must be a positive integer, got {steps!r}")
    if steps <= 0:
        raise BeaValueError(f"{name} must be >= 1 (the number of time steps to take), got {steps}")
    return int(steps)


def check_states(q: Any, v: Any, n: Optional[int] = None, names: Tuple[str, str] = ("q", "v"),
                 mismatch: Optional[str] = None, finite: bool = True) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(q, v)`` as float64 tensors of one shape ``(batch..., n)`` (:func:`bea.autodiff.check_state`), finite
    unless ``finite=False``. Tensors keep their device and, when they require grad, their graph."""
    q, v = as_float64(q, names[0]), as_float64(v, names[1])
    check_state(q, v, n, names, mismatch)
    if finite:
        check_finite(q, names[0])
        check_finite(v, names[1])
    return q, v


def check_order(order, symmetric: Optional[bool]) -> int:
    """``order`` as a non-negative int; even for a symmetric scheme (only even powers of h)."""
    if isinstance(order, bool) or not isinstance(order, int) and not hasattr(order, "__index__"):
        raise BeaTypeError(f"order must be a non-negative integer (the highest power of h kept), got {order!r}")
    order = int(order)
    if order < 0:
        raise BeaValueError(f"order must be >= 0, got {order}")
    if symmetric and order % 2:
        raise BeaValueError(f"the scheme is symmetric (only even powers of h): use an even order, got {order}")
    return order


def check_lagrangian_output(out: Any, q: torch.Tensor, what: str = "the Lagrangian") -> torch.Tensor:
    if not isinstance(out, torch.Tensor):
        raise BeaTypeError(f"{what} must return a torch tensor, got {type(out).__name__}")
    if out.shape != q.shape[:-1]:
        raise BeaValueError(f"{what} must return one value per state: shape {tuple(q.shape[:-1])} for q of shape {tuple(q.shape)} "
                         f"(reduce over the last dimension only, e.g. .sum(-1)); got shape {tuple(out.shape)}")
    return out


def initial_data(x, y, names, steps, on_failure):
    """Validate a pair of initial arrays (float64, same shape, finite), ``steps`` and ``on_failure``."""
    x, y = check_states(x, y, names=names)
    return x, y, check_steps(steps), check_on_failure(on_failure)


def check_on_failure(on_failure: str) -> str:
    if on_failure not in ("raise", "mask"):
        raise BeaValueError(f"on_failure must be 'raise' or 'mask', got {on_failure!r}")
    return on_failure
