"""Input validation for the learners (clear errors, never silent NaN): what is specific to learning
(snapshots, orders); the generic checks are :mod:`integrators._checks`, re-used here.

Every input becomes a float64 tensor here, and the learners create their own tensors with explicit
``dtype=torch.float64``: nothing depends on, or changes, torch's process-wide default dtype."""

from __future__ import annotations

from typing import Any

import torch

import bea
from bea.errors import BeaValueError, UnsupportedSchemeError
from integrators._checks import as_float64, check_finite, check_order, check_step_size
from integrators._checks import check_states as _check_states
from integrators.trajectory import Trajectory


def as_tensor(x: Any, name: str) -> torch.Tensor:
    """``x`` as a detached float64 tensor (:func:`integrators._checks.as_float64`); it keeps its device."""
    return as_float64(x, name).detach()


def check_snapshots(snapshots: Any, n: int | None = None, name: str = "snapshots") -> torch.Tensor:
    """Snapshots of shape ``(n_traj, n_steps + 1, n)`` with at least three positions per trajectory, or a
    :class:`~integrators.Trajectory` (time first), taken in that layout (:meth:`~integrators.Trajectory.to_snapshots`)."""
    s = as_tensor(snapshot_layout(snapshots), name)
    if s.dim() != 3:
        hint = " (one trajectory? use snapshots[None])" if s.dim() == 2 else ""
        raise BeaValueError(f"{name} must have shape (n_traj, n_steps + 1, n), got {tuple(s.shape)}{hint}")
    if s.shape[0] < 1 or s.shape[2] < 1:
        raise BeaValueError(f"{name} must contain at least one trajectory and one coordinate, got shape {tuple(s.shape)}")
    if s.shape[1] < 3:
        raise BeaValueError(f"each trajectory needs at least 3 positions (one DEL triple q_(j-1), q_j, q_(j+1)), "
                         f"got {s.shape[1]} per trajectory (shape {tuple(s.shape)})")
    if n is not None and s.shape[2] != n:
        raise BeaValueError(f"{name} have n={s.shape[2]} coordinates, but the model was fitted with n={n}")
    check_finite(s, name)
    return s


def snapshot_layout(x: Any) -> Any:
    """``x`` in the snapshot layout ``(n_traj, time, n)``: a :class:`~integrators.Trajectory` (time first) is
    transposed (:meth:`~integrators.Trajectory.to_snapshots`); anything else is returned as it is."""
    return x.to_snapshots() if isinstance(x, Trajectory) else x


def check_step(h: Any) -> float:
    return check_step_size(h, "h")


def check_linear_scheme(scheme: bea.Scheme) -> bea.Scheme:
    """The scheme, if its discrete Lagrangian is linear in ``L``, as LSI needs: the GP conditions on the DEL
    residuals as linear functionals of ``L``. A stage scheme (:mod:`bea.stages`) depends on ``L`` also through
    its interior points, a stationary value, so it is not."""
    if isinstance(scheme, bea.StageScheme):
        raise UnsupportedSchemeError(
            f"LSI needs a discrete Lagrangian linear in L; {scheme!r} has interior points fixed by stationarity, "
            "which makes it nonlinear in L. Fit with 'midpoint', 'trapezoidal' or a CustomScheme of values of L, "
            "and integrate the result with any scheme")
    return scheme


def check_states(q: Any, v: Any, n: int) -> tuple:
    """States of a fitted model: float64, one shape ``(..., n)``; tensors that carry a graph stay attached
    (callers differentiate through L)."""
    q = q if isinstance(q, torch.Tensor) and q.requires_grad else as_tensor(q, "q")
    v = v if isinstance(v, torch.Tensor) and v.requires_grad else as_tensor(v, "v")
    return _check_states(q, v, n, mismatch=f"the model was fitted with n={n}", finite=False)
