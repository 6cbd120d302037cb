r"""What :meth:`VariationalIntegrator.solve` returns: positions, where they are valid, and how they were made.

:class:`Solution` holds

* ``q`` -- positions :math:`q_0, \dots, q_{steps}`, shape ``(steps + 1, batch..., n)``; NaN exactly where
  ``valid`` is False;
* ``valid`` -- shape ``(steps + 1, batch...)``: a trajectory whose Newton solve failed (with
  ``on_failure="mask"``) is stopped, and is valid up to its last converged step (all True with
  ``on_failure="raise"``, which raises instead);
* Newton statistics: ``newton_iterations`` (Jacobian evaluations of the eager steps; the compiled C
  loop does not count them), ``eager_steps`` and ``compiled_steps`` (time steps taken by each path),
  and ``execution`` (``"eager"``, ``"compiled"`` or ``"compiled+eager"``).

Deprecated, for one release: before 0.3 ``solve`` returned the tensor ``q`` (``on_failure="raise"``) or
the tuple ``(q, valid)`` (``on_failure="mask"``). A :class:`Solution` still unpacks as ``q, valid = sol``
and still acts as the tensor ``q`` (indexing, attributes such as ``.shape``, torch functions and
arithmetic), each time with a :class:`DeprecationWarning` that names the replacement, ``sol.q``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Optional

import torch

__all__ = ["Solution"]

_TUPLE = ("unpacking a Solution as (q, valid) is deprecated and will be removed in the next release; "
          "use sol.q and sol.valid")
_TENSOR = ("using a Solution as the position tensor is deprecated and will be removed in the next release; "
           "use sol.q")


def _deprecated(message: str) -> None:
    warnings.warn(message, DeprecationWarning, stacklevel=3)


@dataclass(frozen=True, eq=False)
class Solution:
    """Positions of a variational integration with their validity and Newton statistics (module docstring)."""

    q: torch.Tensor
    valid: torch.Tensor
    newton_iterations: int = 0
    eager_steps: int = 0
    compiled_steps: int = 0
    execution: Optional[str] = None

    @property
    def steps(self) -> int:
        """The number of time steps asked for (``q`` has ``steps + 1`` rows)."""
        return self.q.shape[0] - 1

    @property
    def all_valid(self) -> bool:
        """Whether every trajectory reached the last step."""
        return bool(self.valid.all())

    def __repr__(self) -> str:
        failed = int((~self.valid[-1]).sum()) if self.valid.dim() else int(not bool(self.valid[-1]))
        return (f"Solution(q: {tuple(self.q.shape)} {self.q.dtype} on {self.q.device}, failed trajectories: {failed}, "
                f"newton_iterations={self.newton_iterations}, eager_steps={self.eager_steps}, "
                f"compiled_steps={self.compiled_steps}, execution={self.execution!r})")

    # -------------------------------------------------------------- deprecated: the old return types
    def __iter__(self):
        _deprecated(_TUPLE)
        return iter((self.q, self.valid))

    def __len__(self) -> int:
        _deprecated(_TENSOR)
        return len(self.q)

    def __getitem__(self, index):
        _deprecated(_TENSOR)
        return self.q[index]

    def __getattr__(self, name: str):
        # only reached for names a Solution lacks: tensor attributes and methods (.shape, .numpy(), ...)
        if name.startswith("__") or name in ("q", "valid"):
            raise AttributeError(name)
        if hasattr(torch.Tensor, name):
            _deprecated(_TENSOR)
            return getattr(self.q, name)
        raise AttributeError(f"'Solution' has no attribute {name!r} (fields: q, valid, newton_iterations, eager_steps, "
                             f"compiled_steps, execution)")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        _deprecated(_TENSOR)
        unwrap = lambda x: x.q if isinstance(x, Solution) else x  # noqa: E731
        args = tuple(unwrap(a) if not isinstance(a, (list, tuple)) else type(a)(unwrap(b) for b in a) for a in args)
        kwargs = {k: unwrap(v) for k, v in (kwargs or {}).items()}
        return func(*args, **kwargs)



def _deprecated_operator(name: str):
    op = getattr(torch.Tensor, name)

    def method(self, *args):
        _deprecated(_TENSOR)
        return op(self.q, *(a.q if isinstance(a, Solution) else a for a in args))

    method.__name__ = name
    return method


# arithmetic as the old tensor return value allowed it (deprecated)
for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__neg__", "__abs__"):
    setattr(Solution, _name, _deprecated_operator(_name))
