r"""One type for every trajectory the packages produce: :class:`Trajectory`.

A :class:`Trajectory` holds, time first,

* ``q`` -- positions :math:`q(t_0), \dots, q(t_{T-1})`, shape ``(T, batch..., n)``; NaN exactly where
  ``valid`` is False;
* ``valid`` -- shape ``(T, batch...)``: a trajectory that failed (a Newton solve with
  ``on_failure="mask"``) is valid up to its last good time and stopped there (all True otherwise);
* ``t`` -- the times, shape ``(T,)`` (``t0 + h j`` for a discrete trajectory of step ``h``), or None;
* ``p``, ``v`` -- momenta and velocities at the same times, each the shape of ``q``, where the producer
  computed them (None otherwise);
* ``std`` -- a predictive standard deviation of ``q`` (a GP's), the shape of ``q``, or None;
* ``stats`` -- how it was made (for the integrator: ``newton_iterations``, the Jacobian evaluations of the
  eager steps; ``eager_steps`` and ``compiled_steps``; ``execution``).

Snapshot data keep the layout ``(trajectory, time, n)``: :meth:`Trajectory.from_snapshots` and
:meth:`Trajectory.to_snapshots` convert, so the transposition lives in one place.

The consumers (:meth:`~integrators.VariationalIntegrator.momenta`, ``velocities``, ``energies``, the
learners' DEL residuals and metrics) take a :class:`Trajectory` or the position tensor ``q``;
:func:`positions` is the one conversion they share.

*Deprecated, for one release*: the producers returned tensors and tuples before (``solve`` the tensor ``q``
or ``(q, valid)``; a GP's ``predict`` ``q`` or ``(q, std)``; ``rollout_variational`` ``(q, v, valid)``, ...).
A :class:`Trajectory` still unpacks as the tuple its producer returned, and still acts as the tensor ``q``
(indexing, ``len``, tensor attributes such as ``.shape``, torch functions and arithmetic), each time with a
:class:`DeprecationWarning` that names the replacement (``traj.q``, ``traj.std``, ...).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Tuple

import torch

from bea.errors import BeaTypeError, BeaValueError

from ._checks import as_float64, check_step_size

__all__ = ["Trajectory", "positions"]

_STATS = ("newton_iterations", "eager_steps", "compiled_steps", "execution")


def _deprecated(message: str) -> None:
    warnings.warn(message, DeprecationWarning, stacklevel=3)


def _tensor_message(kind: str) -> str:
    return (f"using a {kind} as the position tensor is deprecated and will be removed in the next release; "
            "use traj.q (a Trajectory also has t, valid, p, v, std)")


@dataclass(frozen=True, eq=False)
class Trajectory:
    """Positions along time with their validity, times, momenta or velocities and uncertainty (module docstring)."""

    q: torch.Tensor
    valid: Optional[torch.Tensor] = None
    t: Optional[torch.Tensor] = None
    p: Optional[torch.Tensor] = None
    v: Optional[torch.Tensor] = None
    std: Optional[torch.Tensor] = None
    stats: Mapping[str, Any] = field(default_factory=dict)
    #: deprecated forms: the fields the producer's old tuple held (unpacking gives them; None: it iterates as the
    #: tensor q did), and whether indexing and len() follow that tuple rather than q
    legacy: Optional[Tuple[str, ...]] = field(default=("q", "valid"), repr=False)
    legacy_tuple: bool = field(default=False, repr=False)

    def __post_init__(self):
        q = self.q
        if not isinstance(q, torch.Tensor):
            raise BeaTypeError(f"Trajectory.q must be a tensor of shape (time, batch..., n), got {type(q).__name__}")
        if q.dim() < 2:
            raise BeaValueError(f"Trajectory.q must have shape (time, batch..., n), got {tuple(q.shape)}")
        if self.valid is None:
            object.__setattr__(self, "valid", torch.ones(q.shape[:-1], dtype=torch.bool, device=q.device))
        elif tuple(self.valid.shape) != tuple(q.shape[:-1]) or self.valid.dtype != torch.bool:
            raise BeaValueError(f"Trajectory.valid must be a bool tensor of shape {tuple(q.shape[:-1])} (q's without n), "
                                f"got {self.valid.dtype} {tuple(self.valid.shape)}")
        if self.t is not None and tuple(self.t.shape) != (q.shape[0],):
            raise BeaValueError(f"Trajectory.t must have shape ({q.shape[0]},), one time per row of q, got {tuple(self.t.shape)}")
        for name in ("p", "v", "std"):
            x = getattr(self, name)
            if x is not None and tuple(x.shape) != tuple(q.shape):
                raise BeaValueError(f"Trajectory.{name} must have the shape of q {tuple(q.shape)}, got {tuple(x.shape)}")
        object.__setattr__(self, "stats", dict(self.stats))

    # -------------------------------------------------------------- snapshots: (trajectory, time, n)
    @classmethod
    def from_snapshots(cls, snapshots, h: Optional[float] = None, t0: float = 0.0) -> "Trajectory":
        r"""A trajectory from snapshot data ``(trajectory, time, n)``: ``q = snapshots`` transposed to
        ``(time, trajectory, n)``; ``t = t0 + h j`` when the step ``h`` is given."""
        s = as_float64(snapshots, "snapshots")
        if s.dim() != 3:
            raise BeaValueError(f"snapshots must have shape (trajectory, time, n), got {tuple(s.shape)}")
        t = None if h is None else t0 + check_step_size(h, "h") * torch.arange(s.shape[1], dtype=s.dtype, device=s.device)
        return cls(s.transpose(0, 1), valid=torch.isfinite(s).all(-1).transpose(0, 1), t=t)

    def to_snapshots(self) -> torch.Tensor:
        """``q`` in the snapshot layout ``(trajectory, time, n)`` (one batch dimension; NaN where not valid)."""
        if self.q.dim() != 3:
            raise BeaValueError(f"to_snapshots needs q of shape (time, trajectory, n), got {tuple(self.q.shape)}; "
                                "reshape the batch to one dimension first")
        return self.q.transpose(0, 1)

    # -------------------------------------------------------------- derived
    @property
    def steps(self) -> int:
        """The number of time steps (``q`` has ``steps + 1`` rows)."""
        return self.q.shape[0] - 1

    @property
    def all_valid(self) -> bool:
        """Whether every trajectory reached the last time."""
        return bool(self.valid.all())

    @property
    def newton_iterations(self) -> int:
        return self.stats.get("newton_iterations", 0)

    @property
    def eager_steps(self) -> int:
        return self.stats.get("eager_steps", 0)

    @property
    def compiled_steps(self) -> int:
        return self.stats.get("compiled_steps", 0)

    @property
    def execution(self) -> Optional[str]:
        return self.stats.get("execution")

    def __repr__(self) -> str:
        failed = int((~self.valid[-1]).sum())
        extra = "".join(f", {k}" for k in ("t", "p", "v", "std") if getattr(self, k) is not None)
        stats = "".join(f", {k}={v!r}" for k, v in self.stats.items())
        return (f"Trajectory(q: {tuple(self.q.shape)} {self.q.dtype} on {self.q.device}{extra}, "
                f"failed trajectories: {failed}{stats})")

    def __bool__(self) -> bool:  # a Trajectory is always true (not len(q) > 0 through the deprecated __len__)
        return True

    # -------------------------------------------------------------- deprecated: the old return types
    def __array__(self, dtype=None, copy=None):
        _deprecated(_tensor_message("Trajectory"))
        out = self.q.detach().cpu().numpy()
        return out if dtype is None else out.astype(dtype)

    def __iter__(self):
        if self.legacy is None:
            _deprecated(_tensor_message("Trajectory"))
            return iter(self.q)
        names = ", ".join(self.legacy)
        _deprecated(f"unpacking a Trajectory as ({names}) is deprecated and will be removed in the next release; "
                    f"use {', '.join('traj.' + k for k in self.legacy)}")
        return iter(tuple(getattr(self, k) for k in self.legacy))

    def __len__(self) -> int:
        _deprecated(_tensor_message("Trajectory"))
        return len(self.legacy) if self.legacy_tuple else len(self.q)

    def __getitem__(self, index):
        _deprecated(_tensor_message("Trajectory"))
        if self.legacy_tuple and isinstance(index, int):
            return getattr(self, self.legacy[index])
        return self.q[index]

    def __getattr__(self, name: str):
        # only reached for names a Trajectory lacks: tensor attributes and methods (.shape, .numpy(), ...)
        if name.startswith("__") or name in ("q", "valid", "stats", "legacy"):
            raise AttributeError(name)
        if hasattr(torch.Tensor, name):
            _deprecated(_tensor_message("Trajectory"))
            return getattr(self.q, name)
        raise AttributeError(f"'Trajectory' has no attribute {name!r} (fields: q, valid, t, p, v, std, stats)")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        _deprecated(_tensor_message("Trajectory"))
        unwrap = lambda x: x.q if isinstance(x, Trajectory) else x  # noqa: E731
        args = tuple(unwrap(a) if not isinstance(a, (list, tuple)) else type(a)(unwrap(b) for b in a) for a in args)
        kwargs = {k: unwrap(v) for k, v in (kwargs or {}).items()}
        return func(*args, **kwargs)


def _deprecated_operator(name: str):
    op = getattr(torch.Tensor, name)

    def method(self, *args):
        _deprecated(_tensor_message("Trajectory"))
        return op(self.q, *(a.q if isinstance(a, Trajectory) else a for a in args))

    method.__name__ = name
    return method


# arithmetic as the old tensor return value allowed it (deprecated)
for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__neg__", "__abs__"):
    setattr(Trajectory, _name, _deprecated_operator(_name))


def positions(x):
    """The position tensor of ``x``: ``x.q`` for a :class:`Trajectory`, else ``x`` itself (a tensor or array
    of shape ``(time, batch..., n)``, checked by the consumer)."""
    return x.q if isinstance(x, Trajectory) else x
