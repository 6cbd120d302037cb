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
only (in-place writes): :func:`usable` says when. :func:`mechanical_first_order_block` does the same for the
mechanical kernel's block (the general form's sum over the four subsets of the two leaves, in its order).
"""

from __future__ import annotations

import math
from typing import Optional

import torch

__all__ = ["usable", "column_terms", "first_order_block", "mechanical_first_order_block"]


def usable(U: torch.Tensor, V: torch.Tensor, *tensors: torch.Tensor) -> bool:
    """Whether :func:`first_order_block` applies: one direction a side and nothing to differentiate -- neither by
    autograd nor by a torch.func transform (jvp, jacfwd, vmap), inside which ``requires_grad`` reads False."""
    if U.shape[1] != 1 or V.shape[1] != 1 or torch._C._are_functorch_transforms_active():
        return False
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in (U, V) + tensors))


def column_terms(Ys: torch.Tensor, Vs: torch.Tensor):
    r"""The column side's :math:`\|y\|^2` and :math:`v\cdot y` of :func:`first_order_block`, once for many row chunks
    (a row's sum does not depend on the rows around it: the same numbers)."""
    return (Ys * Ys).sum(-1), (Vs[:, 0] * Ys).sum(-1)


def _gaussian(Xs: torch.Tensor, Ys: torch.Tensor, yy: torch.Tensor):
    r""":math:`e^{-Q_0}` (A, B) and the buffer :math:`x\cdot y` was formed in (free for reuse): :math:`-Q_0` as the general
    form's :math:`-(Q_0)` with the subtraction's operands swapped (the same number)."""
    E = torch.add((Xs * Xs).sum(-1)[:, None], yy[None, :])
    E.mul_(0.5)
    W = Xs @ Ys.T
    torch.sub(W, E, out=E)
    return E.exp_(), W


def first_order_block(Xs: torch.Tensor, Us: torch.Tensor, Ys: torch.Tensor, Vs: torch.Tensor,
                      out: Optional[torch.Tensor] = None, columns=None) -> torch.Tensor:
    r""":math:`e^{-Q_0}(g_u g_v + u\cdot v)` (module docstring) for scaled atoms ``Xs`` (A, D), ``Us`` (A, 1, D) and
    ``Ys`` (B, D), ``Vs`` (B, 1, D), written into ``out`` (A, B) (any strides) when given; ``columns``: the
    :func:`column_terms` of ``Ys``, ``Vs`` if known."""
    u, v, Yt = Us[:, 0], Vs[:, 0], Ys.T
    yy, vy = column_terms(Ys, Vs) if columns is None else columns
    E, W = _gaussian(Xs, Ys, yy)
    G = u @ Yt
    G.sub_((u * Xs).sum(-1)[:, None])  # g_u = -((u.x) - u.y)
    torch.mm(Xs, v.T, out=W)
    W.sub_(vy[None, :])  # g_v = -(-((x.v) - y.v))
    G.mul_(W)
    torch.mm(u, v.T, out=W)  # -(-(u.v)): the pair term negated twice
    G.add_(W)
    if out is None:
        return G.mul_(E)
    return torch.mul(G, E, out=out)


def mechanical_first_order_block(Xq, Xv, Uq, Uv, Yq, Yv, Vq, Vv, degree: int) -> torch.Tensor:
    r"""The mechanical kernel's block :math:`e^{-Q_0}\sum_{S \subseteq \{u, v\}} \partial_S e^{-Q}\,\partial_{S^c} P`
    (:mod:`~learners.shadow.mechanical`) for one direction a side, scaled position and velocity parts (``Uq`` (A, 1,
    n), ...): with :math:`f_k = P^{(k)}(a_0)`, :math:`a_u = u^v\cdot y^v`, :math:`a_v = x^v\cdot v^v` and :math:`g_u,
    g_v` as for the RBF on the positions,

    .. math::  e^{-Q_0}\big[f_2 a_u a_v + f_1 u^v\cdot v^v + g_u f_1 a_v + g_v f_1 a_u
               + (g_u g_v + u^q\cdot v^q) f_0\big],

    the general form's four subsets in its order, each product and sum rounded as there (bit for bit)."""
    uq, vq, uv, vv = Uq[:, 0], Vq[:, 0], Uv[:, 0], Vv[:, 0]
    E, W = _gaussian(Xq, Yq, (Yq * Yq).sum(-1))
    base = (Xv @ Yv.T).add_(1)
    f2 = base ** (degree - 2)  # the general form's powers: b^(d-2), then products
    f1 = f2 * base
    f0 = base.mul_(f1)
    f2.mul_(math.perm(degree, 2))
    f1.mul_(degree)
    total = uv @ Yv.T  # a_u
    au = total.clone()
    av = Xv @ vv.T
    total.mul_(av).mul_(f2)  # f_2 (a_u a_v)
    torch.mm(uv, vv.T, out=W)
    total.add_(W.mul_(f1))  # + f_1 (u.v)
    gu = uq @ Yq.T
    gu.sub_((uq * Xq).sum(-1)[:, None])  # -(first derivative of Q along u), as for the RBF
    gv = Xq @ vq.T
    gv.sub_((vq * Yq).sum(-1)[None, :])
    total.add_(av.mul_(f1).mul_(gu))
    total.add_(au.mul_(f1).mul_(gv))
    gu.mul_(gv)
    torch.mm(uq, vq.T, out=W)
    total.add_(gu.add_(W).mul_(f0))
    return total.mul_(E)
