"""Input validation for the learners (clear errors, never silent NaN).

Every input becomes a float64 tensor here, and the learners create their own tensors with explicit
``dtype=torch.float64``: nothing depends on, or changes, torch's process-wide default dtype."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch


def as_tensor(x: Any, name: str) -> torch.Tensor:
    """``x`` as a float64 tensor; bool, complex and non-numeric input raise ``TypeError``."""
    if isinstance(x, torch.Tensor):
        t = x.detach()
    else:
        try:
            arr = np.asarray(x)
        except Exception as err:  # pragma: no cover
            raise TypeError(f"{name} must be a tensor or array of numbers, got {type(x).__name__}") from err
        if arr.dtype == object or arr.dtype.kind not in "biuf":
            raise TypeError(f"{name} must contain real numbers, got an array of dtype {arr.dtype}")
        t = torch.as_tensor(arr)
    if t.dtype == torch.bool or t.is_complex():
        raise TypeError(f"{name} must contain real numbers, got a {t.dtype} tensor")
    return t.to(torch.float64)


def check_finite(t: torch.Tensor, name: str) -> None:
    bad = ~torch.isfinite(t)
    if bool(bad.any()):
        idx = tuple(int(i) for i in torch.nonzero(bad)[0])
        raise ValueError(f"{name} contains {int(bad.sum())} non-finite value(s) (NaN or inf), the first at index {idx}")


def check_snapshots(snapshots: Any, n: int | None = None, name: str = "snapshots") -> torch.Tensor:
    """Snapshots of shape ``(n_traj, n_steps + 1, n)`` with at least three positions per trajectory."""
    s = as_tensor(snapshots, name)
    if s.dim() != 3:
        hint = " (one trajectory? use snapshots[None])" if s.dim() == 2 else ""
        raise ValueError(f"{name} must have shape (n_traj, n_steps + 1, n), got {tuple(s.shape)}{hint}")
    if s.shape[0] < 1 or s.shape[2] < 1:
        raise ValueError(f"{name} must contain at least one trajectory and one coordinate, got shape {tuple(s.shape)}")
    if s.shape[1] < 3:
        raise ValueError(f"each trajectory needs at least 3 positions (one DEL triple q_(j-1), q_j, q_(j+1)), "
                         f"got {s.shape[1]} per trajectory (shape {tuple(s.shape)})")
    if n is not None and s.shape[2] != n:
        raise ValueError(f"{name} have n={s.shape[2]} coordinates, but the model was fitted with n={n}")
    check_finite(s, name)
    return s


def check_step(h: Any) -> float:
    if isinstance(h, torch.Tensor) and h.numel() == 1:
        h = h.item()
    if isinstance(h, bool) or not isinstance(h, (int, float, np.integer, np.floating)):
        raise TypeError(f"h must be a positive number, got {h!r}")
    h = float(h)
    if not math.isfinite(h) or h <= 0:
        raise ValueError(f"h must be a positive finite number, got {h}")
    return h


def check_order(order: Any, symmetric: bool | None) -> int:
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)):
        raise TypeError(f"order must be a non-negative integer (the highest power of h kept), got {order!r}")
    order = int(order)
    if order < 0:
        raise ValueError(f"order must be >= 0, got {order}")
    if symmetric and order % 2:
        raise ValueError(f"the scheme is symmetric (only even powers of h): use an even order, got {order}")
    return order


def check_states(q: Any, v: Any, n: int) -> tuple:
    # tensors that carry a graph are converted differentiably (callers differentiate through L)
    q = as_tensor(q, "q") if not (isinstance(q, torch.Tensor) and q.requires_grad) else q.to(torch.float64)
    v = as_tensor(v, "v") if not (isinstance(v, torch.Tensor) and v.requires_grad) else v.to(torch.float64)
    if q.shape != v.shape or q.dim() < 1 or q.shape[-1] != n:
        raise ValueError(f"q and v must both have shape (..., {n}), got {tuple(q.shape)} and {tuple(v.shape)}")
    return q, v
