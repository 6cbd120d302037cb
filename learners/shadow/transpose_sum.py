r""":math:`M + M^\top` of a square matrix in place, tile by tile: the symmetric assembly's last step without a
transposed copy of the whole matrix.

:meth:`~learners.shadow.kernels.FunctionalKernel.forward` with ``symmetric=True`` sums each atom pair once into
:math:`U` and returns :math:`\Theta = U + U^\top` (:mod:`~learners.shadow.symmetric_covariance`). Formed as
``U.add_(U.T.clone())``, the clone reads :math:`F^2` entries with stride :math:`F` -- a cache miss nearly every entry:
~0.3 CPU s at :math:`F = 3{,}868` (fpu6's training functionals), about a third of that size's Cholesky factor, and the
default fit at n = 6 makes ~45 such assemblies. :func:`add_transpose_` walks the matrix in :data:`TILE` x
:data:`TILE` tiles instead: for tiles :math:`X = M_{IJ}`, :math:`Y = M_{JI}` (:math:`I < J`), :math:`S = X + Y^\top`
is written to :math:`X` and :math:`S^\top` to :math:`Y`; a diagonal tile gets :math:`D + D^\top`. Each entry is the
same one rounded sum :math:`M_{ij} + M_{ji}` as in the whole-matrix form (IEEE addition commutes), so the result is
equal bit for bit (tests/test_learners_transpose_sum.py), at ~0.05 CPU s for :math:`F = 3{,}868` (one thread).
"""

from __future__ import annotations

import torch

from bea.errors import BeaValueError

__all__ = ["TILE", "add_transpose_", "symmetrise_", "fresh_block", "unit_coefficients"]

#: tile edge: two 256 x 256 tiles of doubles (1 MB) stay in cache (128 and 256 measured: 0.08 and 0.05 s at F = 3,868)
TILE = 256


def add_transpose_(M: torch.Tensor, tile: int = TILE) -> torch.Tensor:
    r""":math:`M \leftarrow M + M^\top` in place for a square ``M`` (module docstring), returned; bit for bit
    ``M.add_(M.T.clone())``. Where autograd records ``M`` (it requires grad under grad mode) the whole-matrix form is
    used: the tiles' writes through views would each be one more node of its graph."""
    if M.dim() != 2 or M.shape[0] != M.shape[1]:
        raise BeaValueError(f"add_transpose_ sums a square matrix with its transpose; got shape {tuple(M.shape)}")
    if torch.is_grad_enabled() and M.requires_grad:
        return M.add_(M.T.clone())
    n = M.shape[0]
    for i in range(0, n, tile):
        d = M[i:i + tile, i:i + tile]
        d.add_(d.T.clone())
        for j in range(i + tile, n, tile):
            x, y = M[i:i + tile, j:j + tile], M[j:j + tile, i:i + tile]
            s = x + y.T
            x.copy_(s)
            y.copy_(s.T)
    return M


def symmetrise_(M: torch.Tensor) -> torch.Tensor:
    r""":math:`\tfrac12(M + M^\top)` in place (bit for bit ``0.5 * (M + M.T)``: the same sum, then the same exact
    halving), for a square ``M`` that nothing else holds; out of place where autograd records ``M``."""
    if torch.is_grad_enabled() and M.requires_grad:
        return 0.5 * (M + M.T)
    return add_transpose_(M).mul_(0.5)


def fresh_block(method):
    """Marks a kernel's ``derivative_block`` as returning a new float64 matrix that nothing else holds, so that the
    assembly (:meth:`~learners.shadow.kernels.FunctionalKernel._pair_into`) may scale it in place and skip its unit
    coefficients. An override in a subclass is not marked unless decorated itself: a user kernel that memoises, expands
    or returns float32 blocks keeps the out-of-place products."""
    method.fresh_block = True
    return method


def unit_coefficients(kernel, *atom_sets) -> list:
    """For each atom set, whether its coefficients may be left out of the products: all exactly 1 (``x * 1`` is ``x``),
    not recorded by autograd, and ``kernel``'s (a FunctionalKernel's) blocks from a :func:`fresh_block` closed form."""
    fresh = kernel.closed_form and getattr(type(kernel.base_kernel).derivative_block, "fresh_block", False)
    return [fresh and not A.coef.requires_grad and bool((A.coef == 1).all()) for A in atom_sets]
