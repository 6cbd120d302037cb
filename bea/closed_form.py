r"""The midpoint rule's series at :math:`h^2` as torch functions of any dimension (thin wrappers).

.. math::
    \mathrm{mod}_2(L) = L + \frac{h^2}{24}\big(A^\top M A - v^\top L_{qq}\, v\big), \qquad
    \mathrm{inv}_2(L) = L - \frac{h^2}{24}\big(A^\top M A - v^\top L_{qq}\, v\big),

with :math:`M = \partial_v^2 L` and the Euler--Lagrange acceleration :math:`A = M^{-1}(\partial_q L - L_{vq} v)`.
They were once hand-written closed forms, needed because the component engine could not derive
``n = 6``; the dimension-free engine covers every ``n`` now, so both are the general formula
(:func:`bea.compile_torch` without ``n``) bound to ``L`` and ``h``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .autodiff import TorchLagrangian
from .errors import BeaTypeError, BeaValueError

__all__ = ["midpoint_mod2", "midpoint_inv2"]


def _step(h: Any) -> float:
    if isinstance(h, bool) or not isinstance(h, (int, float)):
        raise BeaTypeError(f"h must be a positive number, got {type(h).__name__} {str(h)[:40]!r}")
    h = float(h)
    if not (h > 0 and math.isfinite(h)):
        raise BeaValueError(f"h must be a positive finite number, got {h}")
    return h


def _series(L: TorchLagrangian, h: Any, kind: str) -> TorchLagrangian:
    from .api import compile_torch

    if not callable(L):
        raise BeaTypeError(f"the Lagrangian must be a callable L(q, v), got {type(L).__name__}")
    h = _step(h)
    f = compile_torch(kind, "midpoint", 2)

    def L_series(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return f(L, q, v, h)

    L_series.order = 2  # type: ignore[attr-defined]
    return L_series


def midpoint_mod2(L: TorchLagrangian, h: float) -> TorchLagrangian:
    r"""The midpoint rule's modified Lagrangian truncated at :math:`h^2`,
    :math:`L + \frac{h^2}{24}(A^\top MA - v^\top L_{qq}v)`, for a torch Lagrangian of any dimension."""
    return _series(L, h, "modified_lagrangian")


def midpoint_inv2(L: TorchLagrangian, h: float) -> TorchLagrangian:
    r"""The midpoint rule's inverse modified Lagrangian truncated at :math:`h^2`,
    :math:`L - \frac{h^2}{24}(A^\top MA - v^\top L_{qq}v)`: the midpoint rule applied to it reproduces
    the flow of ``L`` to :math:`O(h^3)` per step (any dimension)."""
    return _series(L, h, "inverse_modified_lagrangian")
