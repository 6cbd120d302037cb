r"""The RBF's first-order functional block in a few passes over one matrix, the same numbers as the general form.

For atoms of order one on both sides (the DEL functionals' atoms: one direction :math:`u` at :math:`x`, one
:math:`v` at :math:`y`; scaled inputs, :math:`r = x - y`, :math:`k = e^{-\|r\|^2/2}`),

.. math::  \partial_u\partial'_v k(x, y) = e^{-Q_0}\,\big(g_u g_v + u\cdot v\big), \qquad
           Q_0 = \tfrac12(\|x\|^2 + \|y\|^2) - x\cdot y, \quad g_u = u\cdot y - u\cdot x = -u\cdot r,
           \quad g_v = x\cdot v - y\cdot v = v\cdot r,

the partition sum of :meth:`~learners.shadow.kernels.RBFKernel.derivative_block` for :math:`a = b = 1`:
:math:`(-Q_u)(-Q_v) + (-Q_{uv})`. :func:`first_order_block` forms it from the same products, reductions and
roundings in the same order -- only exact steps differ: a negation moved into a subtraction's operand order
(:math:`-(p - q) = q - p`), a product by one or a double negation dropped -- so the result is bit for bit the general
form's, while the (A, B) matrices are three buffers written in place instead of about fifteen fresh temporaries
(the element kernel's assembly at n = 6 makes ~1,000 such blocks of ~10^5-10^6 entries each). Without gradients
only (in-place writes): :func:`usable` says when.
"""

from __future__ import annotations

from typing import Optional

import torch

__all__ = ["usable", "first_order_block"]


def usable(U: torch.Tensor, V: torch.Tensor, *tensors: torch.Tensor) -> bool:
    """Whether :func:`first_order_block` applies: one direction a side and nothing to differentiate."""
    if U.shape[1] != 1 or V.shape[1] != 1:
        return False
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in (U, V) + tensors))


def first_order_block(Xs: torch.Tensor, Us: torch.Tensor, Ys: torch.Tensor, Vs: torch.Tensor,
                      out: Optional[torch.Tensor] = None) -> torch.Tensor:
    r""":math:`e^{-Q_0}(g_u g_v + u\cdot v)` (module docstring) for scaled atoms ``Xs`` (A, D), ``Us`` (A, 1, D) and
    ``Ys`` (B, D), ``Vs`` (B, 1, D), written into ``out`` (A, B) (any strides) when given."""
    u, v, Yt = Us[:, 0], Vs[:, 0], Ys.T
    E = torch.add((Xs * Xs).sum(-1)[:, None], (Ys * Ys).sum(-1)[None, :])
    E.mul_(0.5)
    W = Xs @ Yt
    torch.sub(W, E, out=E)  # -Q0, the general form's -(Q0) with the subtraction's operands swapped
    E.exp_()
    G = u @ Yt
    G.sub_((u * Xs).sum(-1)[:, None])  # g_u = -((u.x) - u.y)
    torch.mm(Xs, v.T, out=W)
    W.sub_((v * Ys).sum(-1)[None, :])  # g_v = -(-((x.v) - y.v))
    G.mul_(W)
    torch.mm(u, v.T, out=W)  # -(-(u.v)): the pair term negated twice
    G.add_(W)
    if out is None:
        return G.mul_(E)
    return torch.mul(G, E, out=out)
