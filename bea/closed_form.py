r"""Closed forms of the midpoint rule's series at :math:`h^2`, as torch functions of any dimension.

The generic route (:func:`bea.compile_torch`) derives the series symbolically once per dimension ``n``;
its cost grows quickly with ``n`` (the midpoint rule at order 2 for ``n = 6``, three bodies in the
plane, does not finish in 10 minutes). At order 2 the midpoint rule has a closed form for every ``n``
(THEORY.md §3, checked against the generic formula in the tests):

.. math::
    \mathrm{mod}_2(L) = L + \frac{h^2}{24}\big(A^\top M A - v^\top L_{qq}\, v\big), \qquad
    \mathrm{inv}_2(L) = 2L - \mathrm{mod}_2(L) = L - \frac{h^2}{24}\big(A^\top M A - v^\top L_{qq}\, v\big),

with :math:`M = \partial_v^2 L` and the Euler--Lagrange acceleration :math:`A = M^{-1}(\partial_q L - L_{vq} v)`.
Both are evaluated by autograd (``2n + 1`` backward passes) with ``create_graph=True``, so they are
differentiable again, e.g. inside a DEL loss or :func:`bea.energy`.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .autodiff import TorchLagrangian, _as_leaf, _evaluate, _grad_mode_aware, check_regular, check_state, grads
from .errors import BeaTypeError, BeaValueError

__all__ = ["midpoint_mod2", "midpoint_inv2"]


def _step(h: Any) -> float:
    if isinstance(h, bool) or not isinstance(h, (int, float)):
        raise BeaTypeError(f"h must be a positive number, got {type(h).__name__} {str(h)[:40]!r}")
    h = float(h)
    if not (h > 0 and math.isfinite(h)):
        raise BeaValueError(f"h must be a positive finite number, got {h}")
    return h


def _correction(L: TorchLagrangian, q: torch.Tensor, v: torch.Tensor):
    r""":math:`L(q, v)` and :math:`A^\top M A - v^\top L_{qq} v`, both ``(...)``."""
    val = _evaluate(L, q, v)
    gq, gv = grads(val, (q, v))
    n = q.shape[-1]
    M_rows, C_rows, Q_rows = [], [], []
    for i in range(n):
        cq, cv = grads(gv[..., i], (q, v))
        M_rows.append(cv)
        C_rows.append(cq)
        (qq,) = grads(gq[..., i], (q,))
        Q_rows.append(qq)
    M, C, Lqq = torch.stack(M_rows, -2), torch.stack(C_rows, -2), torch.stack(Q_rows, -2)
    check_regular(M)
    A = torch.linalg.solve(M, (gq - (C @ v.unsqueeze(-1)).squeeze(-1)).unsqueeze(-1))  # (..., n, 1)
    AMA = (A.transpose(-1, -2) @ M @ A)[..., 0, 0]
    vLv = (v.unsqueeze(-2) @ Lqq @ v.unsqueeze(-1))[..., 0, 0]
    return val, AMA - vLv


def _series(L: TorchLagrangian, h: Any, sign: float) -> TorchLagrangian:
    if not callable(L):
        raise BeaTypeError(f"the Lagrangian must be a callable L(q, v), got {type(L).__name__}")
    h = _step(h)

    @_grad_mode_aware
    def L_series(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        check_state(q, v)
        q, v = _as_leaf(q), _as_leaf(v)
        val, X = _correction(L, q, v)
        return val + sign * h * h / 24 * X

    L_series.order = 2  # type: ignore[attr-defined]
    return L_series


def midpoint_mod2(L: TorchLagrangian, h: float) -> TorchLagrangian:
    r"""The midpoint rule's modified Lagrangian truncated at :math:`h^2`,
    :math:`L + \frac{h^2}{24}(A^\top MA - v^\top L_{qq}v)`, for a torch Lagrangian of any dimension."""
    return _series(L, h, 1.0)


def midpoint_inv2(L: TorchLagrangian, h: float) -> TorchLagrangian:
    r"""The midpoint rule's inverse modified Lagrangian truncated at :math:`h^2`,
    :math:`L - \frac{h^2}{24}(A^\top MA - v^\top L_{qq}v)`: the midpoint rule applied to it reproduces
    the flow of ``L`` to :math:`O(h^3)` per step (any dimension)."""
    return _series(L, h, -1.0)
