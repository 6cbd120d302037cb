"""Input validation shared by the integrators package (clear errors, never silent NaN)."""

from __future__ import annotations

import math
from typing import Any, Optional, Tuple

import numpy as np
import torch


def as_float64(x: Any, name: str) -> torch.Tensor:
    """``x`` (tensor, array, list or number) as a float64 tensor; complex, bool or non-numeric
    data raise ``TypeError``. Tensors keep their device."""
    if isinstance(x, torch.Tensor):
        t = x
    else:
        try:
            arr = np.asarray(x)
        except Exception as err:  # pragma: no cover - numpy raises many types
            raise TypeError(f"{name} must be a tensor or array of numbers, got {type(x).__name__}") from err
        if arr.dtype == object or arr.dtype.kind not in "biufc":
            raise TypeError(f"{name} must contain real numbers, got an array of dtype {arr.dtype}")
        t = torch.as_tensor(arr)
    if t.dtype == torch.bool:
        raise TypeError(f"{name} must contain real numbers, got a bool tensor")
    if t.is_complex():
        raise TypeError(f"{name} must be real, got a complex tensor")
    return t.to(torch.float64)


def check_finite(t: torch.Tensor, name: str) -> None:
    """Raise ``ValueError`` naming the first non-finite entry of ``t``."""
    bad = ~torch.isfinite(t)
    if bool(bad.any()):
        idx = tuple(int(i) for i in torch.nonzero(bad)[0])
        raise ValueError(f"{name} contains {int(bad.sum())} non-finite value(s) (NaN or inf), the first at index {idx}: "
                         f"{float(t[idx])}; pass finite numbers")


def check_step_size(h: Any, name: str = "h") -> float:
    if isinstance(h, torch.Tensor):
        if h.numel() != 1:
            raise TypeError(f"{name} must be a positive number, got a tensor of shape {tuple(h.shape)}")
        h = h.item()
    if isinstance(h, bool) or not isinstance(h, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a positive number, got {h!r}")
    h = float(h)
    if not math.isfinite(h) or h <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {h}")
    return h


def check_steps(steps: Any, name: str = "steps") -> int:
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)):
        raise TypeError(f"{name} must be a positive integer, got {steps!r}")
    if steps <= 0:
        raise ValueError(f"{name} must be >= 1 (the number of time steps to take), got {steps}")
    return int(steps)


def check_pair(a: torch.Tensor, b: torch.Tensor, names: Tuple[str, str], n: Optional[int] = None) -> None:
    """``a`` and ``b`` must both have shape ``(batch..., n)``."""
    if a.dim() < 1:
        raise ValueError(f"{names[0]} must have shape (batch..., n) with n >= 1, got a scalar; use shape (1,) for one coordinate")
    if a.shape != b.shape:
        raise ValueError(f"{names[0]} and {names[1]} must have the same shape (batch..., n), got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape[-1] == 0:
        raise ValueError(f"{names[0]} has last dimension 0; it must be the number of coordinates n >= 1")
    if n is not None and a.shape[-1] != n:
        raise ValueError(f"{names[0]} has {a.shape[-1]} coordinates in its last dimension, but the Lagrangian has n={n}")


def check_lagrangian_output(out: Any, q: torch.Tensor, what: str = "the Lagrangian") -> torch.Tensor:
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{what} must return a torch tensor, got {type(out).__name__}")
    if out.shape != q.shape[:-1]:
        raise ValueError(f"{what} must return one value per state: shape {tuple(q.shape[:-1])} for q of shape {tuple(q.shape)} "
                         f"(reduce over the last dimension only, e.g. .sum(-1)); got shape {tuple(out.shape)}")
    return out
