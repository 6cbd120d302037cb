r"""One group's share of the element kernel's functional blocks, computed with fewer base blocks, the same kernel.

For a group of instances :math:`w_e = A_e z + b_e` (projected by the scales :math:`D_g`), the block between atoms
:math:`(x_a, u_a)` and :math:`(y_b, v_b)` is

.. math::  S_{ab} = \sum_{e, e'} \partial_{A_e u_a}\partial_{A_{e'} v_b}\, k(A_e x_a + b_e, A_{e'} y_b + b_{e'}),

:math:`m^2` base blocks per atom pair in the plain form. Three exact reductions (each term they drop or fold is
exactly zero or exactly equal to one they keep; the sums differ from the plain ones in order only, so to rounding):

* *Active instances.* A derivative is multilinear in its directions, so an instance whose projected direction
  :math:`A_e u_{a,r}` vanishes for some leaf :math:`r` contributes zero. The DEL functionals' atoms differentiate
  along one coordinate (:math:`\partial_{q_k}L_\Delta`): a site sees one of them, a bond two, a pair of bodies
  :math:`2(\text{count} - 1)` of its :math:`\text{count}(\text{count} - 1)` instances. The (instance, atom) pairs
  with every direction non-zero -- exactly, as computed -- are gathered into one list per side, and one base call
  gives all their blocks, summed into the atoms by ``index_add`` (rows of at most :data:`ELEMENT_BLOCK_ENTRIES`
  entries a call: the memory bound).
* *Orientations.* For a base kernel even in both arguments, :math:`k(-s, -t) = k(s, t)` (the RBF; the mechanical
  kernel's Gaussian in :math:`q - q'` times a polynomial in :math:`v\cdot v'`), and a group closed under negation
  (:math:`w_{\bar e} = -w_e` exactly: the pair elements in both orientations), derivatives along negated directions
  at negated points agree, so :math:`S = 2\sum_{e \in H}\sum_{e'}`, :math:`H` one orientation of each pair.
* *Same atoms.* When both sides are the same atoms (the Gram's diagonal blocks: one atom set against itself), the
  gathered block is symmetric: only row chunks against the columns from their first on are computed, the chunk
  against itself weighted one half, and :math:`S = T + T^\top`. With both: :math:`S = 2(T_+ + T_+^\top + T_- +
  T_-^\top)`, :math:`T_\pm` the symmetric sums over :math:`H \times (\pm H)` (:math:`B(e, -e')^\top = B(e', -e)` by
  evenness).

A fourth reduction is not used in these blocks, only in the closed-form mean (:class:`~learners.shadow.element_kernel.
ElementExpansion`, and so :meth:`~learners.shadow.element_kernel.ElementKernel.state_entries`): *Swaps.* For a group
marked ``"swap"`` (the body triples, :func:`~learners.shadow.element_structure.body_groups`) whose instance set is
closed under the swap :math:`\Pi` of its two halves, and a :func:`swap_invariant_base`, :math:`\sum_e F_g(w_e) =
2\sum_{e \in H} F_g(w_e)` (:func:`swap_half`). The blocks above run over every instance of such a group.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from .kernels import CHUNK_ATOMS, RBFKernel
from .mechanical import MechanicalKernel
from .rbf_block import column_terms, first_order_block, usable

__all__ = ["ELEMENT_BLOCK_ENTRIES", "ColumnCache", "negation_half", "swap_half", "even_base", "swap_invariant_base",
           "group_block", "active_atoms", "same_atoms"]

#: most gathered (row, column) entries per base call: the default assembly's cache-sized block (CHUNK_ATOMS**2)
ELEMENT_BLOCK_ENTRIES = CHUNK_ATOMS * CHUNK_ATOMS
_MIN_ROWS = 16  # >= 16 rows a call: bounded Python overhead (as FunctionalKernel's row chunks)


def even_base(base) -> bool:
    """Whether ``base`` is known to satisfy :math:`k(-s, -t) = k(s, t)` (module docstring; exact classes only, so a
    subclass with another form is not assumed even)."""
    return type(base) in (RBFKernel, MechanicalKernel)


def swap_invariant_base(base) -> bool:
    r"""Whether ``base`` is known to satisfy :math:`k(\Pi s, \Pi t) = k(s, t)` for the swap :math:`\Pi` of
    :func:`swap_half` (exact classes only, as :func:`even_base`). True for the unit RBF, a function of :math:`|s - t|^2`
    only, and for the mechanical kernel, a function of :math:`|\tilde q - \tilde q'|^2` and :math:`\tilde v \cdot
    \tilde v'` only: sums over coordinates of the same permutation applied to both arguments, which :math:`\Pi` is
    (it permutes the position outputs among themselves and the velocity outputs among themselves). The element
    kernel's scales :math:`D_g` are one per kind of output, so they commute with :math:`\Pi`. Unlike evenness this
    holds for any permutation-invariant form, not for a base with one scale per input."""
    return type(base) in (RBFKernel, MechanicalKernel)


def negation_half(M: torch.Tensor, b: torch.Tensor) -> Optional[torch.Tensor]:
    r"""Indices :math:`H` of one orientation when the instances pair up exactly as :math:`(A_{\bar e}, b_{\bar e}) =
    -(A_e, b_e)`, :math:`\bar e \ne e`, each instance in one pair; else None. ``M`` (m, k, D), ``b`` (m, k)."""
    return _paired_half(M, b, -M, -b)


def swap_half(M: torch.Tensor, b: torch.Tensor, positions: int) -> Optional[torch.Tensor]:
    r"""Indices :math:`H` of one instance of each pair :math:`w_{\bar e} = \Pi w_e` exactly, :math:`\Pi` the swap of
    the two halves of the position outputs and of the velocity outputs (a triple's :math:`(r_{ij}, r_{ik}) \to (r_{ik},
    r_{ij})`); None where the outputs do not split so or the instances do not pair up. With a base invariant under
    :math:`\Pi` on both arguments (the RBF with one scale per kind of output, the mechanical kernel: a function of
    :math:`|q - q'|` and :math:`v \cdot v'`: :func:`swap_invariant_base`) and the group's instance set closed under
    :math:`\Pi`, a posterior mean :math:`F_g` is
    :math:`\Pi`-symmetric, so :math:`\sum_e F_g(w_e) = 2\sum_{e \in H} F_g(w_e)`."""
    k = M.shape[1]
    if positions % 2 or k - positions not in (0, positions):
        return None
    h = positions // 2
    perm = [*range(h, positions), *range(h), *(positions + j for j in [*range(h, positions), *range(h)][:k - positions])]
    return _paired_half(M, b, M[:, perm], b[:, perm])


def _paired_half(M: torch.Tensor, b: torch.Tensor, M_image: torch.Tensor, b_image: torch.Tensor) -> Optional[torch.Tensor]:
    """Indices of one instance of each pair (e, f), f != e, with instance f's map equal to instance e's image (the
    ``*_image`` tensors, row e each), each instance in one pair; else None."""
    m = M.shape[0]
    if m < 2 or m % 2:
        return None
    flat = torch.cat([M.reshape(m, -1), b.reshape(m, -1)], 1)
    image = torch.cat([M_image.reshape(m, -1), b_image.reshape(m, -1)], 1)
    match = (image[:, None, :] == flat[None, :, :]).all(-1)  # match[e, f]: w_f = image of w_e exactly
    partner = [None] * m
    for e in range(m):
        hits = [f for f in match[e].nonzero().flatten().tolist() if f != e and partner[f] is None]
        if partner[e] is None:
            if not hits:
                return None
            partner[e], partner[hits[0]] = hits[0], e
    return torch.tensor([e for e in range(m) if e < partner[e]], dtype=torch.long, device=M.device)


def same_atoms(X, U, Y, V) -> bool:
    """Whether the two sides are the same atoms (the same tensors or views of the same memory and layout)."""
    def same(a, c):
        return a is c or (a.data_ptr() == c.data_ptr() and a.shape == c.shape and a.stride() == c.stride())
    return same(X, Y) and same(U, V)


def active_atoms(P: torch.Tensor, Q: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""Indices (instance, atom) of the projected atoms ``P`` (m, A, k) with directions ``Q`` (m, A, a, k) whose every
    direction is non-zero (module docstring, *Active instances*); every pair for atoms of order 0."""
    act = (Q != 0).any(-1).all(-1) if Q.shape[2] else Q.new_ones(Q.shape[:2], dtype=torch.bool)
    return act.nonzero(as_tuple=True)


def _sum_into(base, rows, cols, A: int, B: int, symmetric: bool) -> torch.Tensor:
    """:math:`\\sum` of the base blocks of gathered rows ``(points, dirs, atom)`` against gathered columns, summed into
    (A, B) atoms; ``symmetric`` (rows are columns, the block symmetric): T + T^T from the upper row chunks."""
    Xp, Up, ra = rows
    Yp, Vp, ca = cols
    out = Xp.new_zeros(A, B)
    step = max(_MIN_ROWS, ELEMENT_BLOCK_ENTRIES // max(1, Yp.shape[0]))
    if type(base) is RBFKernel and usable(Up, Vp, Xp, Yp, base.lengthscale):  # blocks, column sums: two reused buffers
        return _sum_in_place(base, rows, cols, out, step, symmetric)
    for s in range(0, Xp.shape[0], step):
        sl = slice(s, s + step)
        if symmetric:  # the chunk against itself counts half (both orders are in it), then the columns after it
            e = min(s + step, Yp.shape[0])
            phi = torch.cat([0.5 * base.derivative_block(Xp[sl], Up[sl], Yp[s:e], Vp[s:e]),
                             base.derivative_block(Xp[sl], Up[sl], Yp[e:], Vp[e:])], 1)
            cidx = ca[s:]
        else:
            phi, cidx = base.derivative_block(Xp[sl], Up[sl], Yp, Vp), ca
        # in place on fresh zeros (still differentiable: index_add_'s backward needs neither value), no (A, B) copies
        out.index_add_(0, ra[sl], phi.new_zeros(phi.shape[0], B).index_add_(1, cidx, phi))
    return out + out.T if symmetric else out


def _sum_in_place(base, rows, cols, out: torch.Tensor, step: int, symmetric: bool) -> torch.Tensor:
    """:func:`_sum_into`'s loop for an RBF base on first-order atoms without gradients: each chunk's blocks written
    into one buffer (:func:`~learners.shadow.rbf_block.first_order_block`), the chunk against itself halved in place,
    the column sums into a second one -- the same values summed in the same order (bit for bit)."""
    ls = base.lengthscale.reshape(-1)  # scaled once (elementwise: a row's numbers as when scaled chunk by chunk)
    Xp, Up, ra = rows[0] / ls, rows[1] / ls, rows[2]
    Yp, Vp, ca = cols[0] / ls, cols[1] / ls, cols[2]
    yy, vy = column_terms(Yp, Vp)
    block = Xp.new_empty(min(step, Xp.shape[0]), Yp.shape[0])
    summed = Xp.new_empty(block.shape[0], out.shape[1])
    for s in range(0, Xp.shape[0], step):
        sl = slice(s, s + step)
        r = Xp[sl].shape[0]
        if symmetric:  # the chunk against itself counts half (both orders are in it), then the columns after it
            e = min(s + step, Yp.shape[0])
            phi, cidx = block[:r, : Yp.shape[0] - s], ca[s:]
            first_order_block(Xp[sl], Up[sl], Yp[s:e], Vp[s:e], phi[:, : e - s], (yy[s:e], vy[s:e])).mul_(0.5)
            first_order_block(Xp[sl], Up[sl], Yp[e:], Vp[e:], phi[:, e - s:], (yy[e:], vy[e:]))
        else:
            phi, cidx = first_order_block(Xp[sl], Up[sl], Yp, Vp, block[:r], (yy, vy)), ca
        out.index_add_(0, ra[sl], summed[:r].zero_().index_add_(1, cidx, phi))
    return out + out.T if symmetric else out


def _project(M: torch.Tensor, b: torch.Tensor, X: torch.Tensor, U: torch.Tensor):
    """Atoms ``X`` (A, D), ``U`` (A, a, D) as every instance of ``M`` (m, k, D), ``b`` (m, k) sees them: (m, A, k),
    (m, A, a, k)."""
    Mt = M.transpose(1, 2)
    return X @ Mt + b[:, None], U @ Mt[:, None]


def _gather(P, Q, keep=None, sign: float = 1.0):
    """The active projected atoms of ``P`` (m, A, k), ``Q`` (m, A, a, k) (of the instances ``keep``), times ``sign``:
    points, directions and their atoms' indices."""
    if keep is not None:
        P, Q = P[keep], Q[keep]
    e, a = active_atoms(P, Q)
    return sign * P[e, a], sign * Q[e, a], a


class ColumnCache:
    r"""The gathered column atoms of the last call, reused while the maps and the atoms are the same: an assembly calls
    the block once per row chunk against the same columns (or, for one triangle, the columns from the chunk's first on:
    a suffix of the same tensor, taken from the cached list by its atoms' indices). Only where nothing requires grad
    (a cached graph would be differentiated twice) and outside inference mode (inference tensors have no version
    counter). The tensors are held, so an address cannot be reused unseen, and in-place writes through
    autograd-visible views are seen (version counters); writes that bypass them (``.data``, raw storage) are not."""

    def __init__(self):
        self._last = None

    def columns(self, M: torch.Tensor, b: torch.Tensor, Y: torch.Tensor, V: torch.Tensor):
        """:func:`_gather` of the projections of ``Y``, ``V`` by every instance of ``M``, ``b``."""
        if (torch.is_inference_mode_enabled() or any(t.is_inference() for t in (M, b, Y, V))
                or (torch.is_grad_enabled() and any(t.requires_grad for t in (M, b, Y, V)))):
            return _gather(*_project(M, b, Y, V))
        hit = self._last
        if hit is not None:
            r = self._rows_of(hit, M, b, Y, V)
            if r is not None:
                P, Q, a = hit[4]
                keep = (a >= r) & (a < r + Y.shape[0])
                return P[keep], Q[keep], a[keep] - r
        cols = _gather(*_project(M, b, Y, V))
        self._last = (M.detach().clone(), b.detach().clone(), Y, V, cols, (Y._version, V._version))
        return cols

    @staticmethod
    def _rows_of(hit, M, b, Y, V):
        """The first row of ``Y`` within the cached atoms when ``Y``, ``V`` are a row range of them under equal maps, else
        None."""
        M0, b0, Y0, V0, _, versions = hit
        if (Y.untyped_storage().data_ptr() != Y0.untyped_storage().data_ptr() or Y.stride() != Y0.stride()
                or V.untyped_storage().data_ptr() != V0.untyped_storage().data_ptr() or V.stride() != V0.stride()
                or V.shape[1:] != V0.shape[1:] or Y.shape[1:] != Y0.shape[1:] or versions != (Y0._version, V0._version)):
            return None
        dy, dv = Y.storage_offset() - Y0.storage_offset(), V.storage_offset() - V0.storage_offset()
        sy, sv = Y.stride(0), V.stride(0)
        if sy <= 0 or dy % sy or (sv > 0 and dv != (dy // sy) * sv) or dy < 0:
            return None
        r = dy // sy
        if r + Y.shape[0] > Y0.shape[0] or not (torch.equal(M, M0) and torch.equal(b, b0)):
            return None
        return r


def group_block(base, M: torch.Tensor, b: torch.Tensor, half: Optional[torch.Tensor], X, U, Y, V,
                cache: Optional[ColumnCache] = None) -> torch.Tensor:
    r""":math:`S` (A, B) of the module docstring for one group: ``M`` (m, k, D), ``b`` (m, k) its projected maps,
    ``half`` the indices of one orientation (:func:`negation_half`, only for an :func:`even_base`) or None; ``cache``
    keeps the gathered columns between calls (:class:`ColumnCache`)."""
    A, B = X.shape[0], Y.shape[0]
    Xe, Ue = _project(M, b, X, U)
    if same_atoms(X, U, Y, V):
        if half is None:
            g = _gather(Xe, Ue)
            return _sum_into(base, g, g, A, B, True)
        g = _gather(Xe, Ue, half)
        return 2.0 * (_sum_into(base, g, g, A, B, True) + _sum_into(base, g, _gather(Xe, Ue, half, -1.0), A, B, True))
    cols = (cache or ColumnCache()).columns(M, b, Y, V)
    if half is None:
        return _sum_into(base, _gather(Xe, Ue), cols, A, B, False)
    return 2.0 * _sum_into(base, _gather(Xe, Ue, half), cols, A, B, False)
