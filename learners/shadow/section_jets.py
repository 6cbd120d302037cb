r"""Directional derivatives of the Gaussian kernel sections in closed form (no forward-mode autograd).

:func:`~learners.shadow.feature_jets._gaussian_section` is a product over the inputs of one-dimensional factors,
:math:`G_\alpha(z) = \prod_i h_{\alpha_i}(z_i)` with :math:`h_a(z) = (-1)^a He_a(z)\,e^{-z^2/2}/\sqrt{a!}` and
:math:`z = (x_b - y)/\ell`. Its derivatives in the atom point :math:`y` along directions :math:`u^{(d)}` follow from
:math:`h_a' = \sqrt{a+1}\,h_{a+1}` (:math:`\frac{d}{dz}(-1)^a He_a e^{-z^2/2} = (-1)^{a+1}He_{a+1}e^{-z^2/2}`) and
:math:`\partial z_i/\partial y_i = -1/\ell_i`: factor :math:`i` along the directions of a set :math:`D` is

.. math::  h^{(D)}_{i,a} = \Big(\prod_{d \in D} -u^{(d)}_i/\ell_i\Big)\sqrt{(a+1)\cdots(a+|D|)}\;h_{a+|D|}(z_i),

and the product rule over the factors is the multiplication of truncated hyper-dual numbers (one nilpotent unit
per direction, :math:`\varepsilon_d^2 = 0`): component :math:`D` of a product is :math:`\sum_{E \subseteq D} a_E
b_{D\setminus E}`. These are the numbers ``torch.func.jvp`` formed through
:func:`~learners.shadow.feature_jets._directional` (equal to rounding), without its per-operation overhead: that pass
was ~40% of the first energy std of an element-kernel fit (benchmarks/RESULTS_calibration.md, Session 19).
"""

from __future__ import annotations

import math

import torch

from bea.errors import BeaValueError

from .feature_jets import _hermite

__all__ = ["gaussian_directional"]


def gaussian_directional(xb: torch.Tensor, y: torch.Tensor, scales: torch.Tensor, alphas: torch.Tensor,
                         W: torch.Tensor) -> dict:
    r""":func:`~learners.shadow.feature_jets._gaussian_section` ``(xb, y, scales, alphas)`` (B, P, S) and its
    derivatives in ``y`` (P, n) along the directions ``W`` (P, m, n), m <= 2, keyed as
    :func:`~learners.shadow.feature_jets._directional` keys them (the set of directions)."""
    m = W.shape[1]
    if m > 2:
        raise BeaValueError(f"gaussian_directional takes at most 2 directions (atoms of order <= 2), got {m}")
    z = (xb[:, None, :] - y[None]) / scales  # (B, P, n)
    top = int(alphas.max()) if alphas.numel() else 0
    he = torch.stack(_hermite(z, top + m), -1)  # (B, P, n, top + m + 1)
    sign = torch.tensor([(-1) ** a / math.sqrt(math.factorial(a)) for a in range(top + m + 1)], dtype=z.dtype,
                        device=z.device)
    h = he * sign * torch.exp(-0.5 * z * z)[..., None]
    c = [-W[:, d] / scales for d in range(m)]  # (P, n): dz/dt along direction d
    comps = []
    for mask in range(1 << m):
        k = bin(mask).count("1")
        lift = torch.tensor([math.sqrt(math.perm(a + k, k)) for a in range(top + 1)], dtype=z.dtype, device=z.device)
        part = h[..., k:k + top + 1] * lift
        for d in range(m):
            if mask >> d & 1:
                part = part * c[d][None, :, :, None]
        comps.append(part)
    out = _dual_product(comps, alphas)
    keys = [tuple(d for d in range(m) if mask >> d & 1) for mask in range(1 << m)]
    return dict(zip(keys, out))


def _dual_mul(a: list, b: list) -> list:
    """Product of two truncated hyper-dual numbers, components indexed by the bit mask of their directions."""
    out = []
    for mask in range(len(a)):
        subs = [sub for sub in range(mask + 1) if sub & mask == sub]
        acc = a[subs[0]] * b[mask ^ subs[0]]
        for sub in subs[1:]:  # out of place: these may be differentiated, also inside torch.func transforms
            acc = acc + a[sub] * b[mask ^ sub]
        out.append(acc)
    return out


def _dual_product(h: list, alphas: torch.Tensor) -> list:
    r""":math:`\prod_i h_{..., i, \alpha_i}` in hyper-dual arithmetic (``h``: components (..., n, top + 1)) for the
    multi-indices ``alphas`` (S, n): components (..., S). For n > 2 the inputs are split in halves, each half's product
    formed once per distinct half multi-index, as :func:`~learners.shadow.feature_jets._product_over_inputs`."""
    n = alphas.shape[1]
    if n <= 2:
        out = [t[..., 0, alphas[:, 0]] for t in h]
        for i in range(1, n):
            out = _dual_mul(out, [t[..., i, alphas[:, i]] for t in h])
        return out
    k = n // 2
    (u1, inv1), (u2, inv2) = (torch.unique(a, dim=0, return_inverse=True) for a in (alphas[:, :k], alphas[:, k:]))
    left = [t[..., inv1] for t in _dual_product([t[..., :k, :] for t in h], u1)]
    right = [t[..., inv2] for t in _dual_product([t[..., k:, :] for t in h], u2)]
    return _dual_mul(left, right)
