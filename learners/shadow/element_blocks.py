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
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from .kernels import CHUNK_ATOMS, RBFKernel
from .mechanical import MechanicalKernel

__all__ = ["ELEMENT_BLOCK_ENTRIES", "negation_half", "even_base", "group_block", "active_atoms", "same_atoms"]

#: most gathered (row, column) entries per base call: the default assembly's cache-sized block (CHUNK_ATOMS**2)
ELEMENT_BLOCK_ENTRIES = CHUNK_ATOMS * CHUNK_ATOMS
_MIN_ROWS = 16  # >= 16 rows a call: bounded Python overhead (as FunctionalKernel's row chunks)


def even_base(base) -> bool:
    """Whether ``base`` is known to satisfy :math:`k(-s, -t) = k(s, t)` (module docstring; exact classes only, so a
    subclass with another form is not assumed even)."""
    return type(base) in (RBFKernel, MechanicalKernel)


def negation_half(M: torch.Tensor, b: torch.Tensor) -> Optional[torch.Tensor]:
    r"""Indices :math:`H` of one orientation when the instances pair up exactly as :math:`(A_{\bar e}, b_{\bar e}) =
    -(A_e, b_e)`, :math:`\bar e \ne e`, each instance in one pair; else None. ``M`` (m, k, D), ``b`` (m, k)."""
    m = M.shape[0]
    if m < 2 or m % 2:
        return None
    flat = torch.cat([M.reshape(m, -1), b.reshape(m, -1)], 1)
    match = (flat[:, None, :] == -flat[None, :, :]).all(-1)  # match[e, f]: w_f = -w_e exactly
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
    for s in range(0, Xp.shape[0], step):
        sl = slice(s, s + step)
        if symmetric:  # the chunk against itself counts half (both orders are in it), then the columns after it
            e = min(s + step, Yp.shape[0])
            phi = torch.cat([0.5 * base.derivative_block(Xp[sl], Up[sl], Yp[s:e], Vp[s:e]),
                             base.derivative_block(Xp[sl], Up[sl], Yp[e:], Vp[e:])], 1)
            cidx = ca[s:]
        else:
            phi, cidx = base.derivative_block(Xp[sl], Up[sl], Yp, Vp), ca
        cols_sum = phi.new_zeros(phi.shape[0], B).index_add(1, cidx, phi)
        out = out.index_add(0, ra[sl], cols_sum)  # out of place: differentiable in the hyperparameters
    return out + out.T if symmetric else out


def group_block(base, M: torch.Tensor, b: torch.Tensor, half: Optional[torch.Tensor], X, U, Y, V) -> torch.Tensor:
    r""":math:`S` (A, B) of the module docstring for one group: ``M`` (m, k, D), ``b`` (m, k) its projected maps,
    ``half`` the indices of one orientation (:func:`negation_half`, only for an :func:`even_base`) or None."""
    A, B = X.shape[0], Y.shape[0]
    Mt = M.transpose(1, 2)
    Xe, Ue = X @ Mt + b[:, None], U @ Mt[:, None]  # (m, A, k), (m, A, a, k)

    def gather(P, Q, keep=None, sign=1.0):
        if keep is not None:
            P, Q = P[keep], Q[keep]
        e, a = active_atoms(P, Q)
        return sign * P[e, a], sign * Q[e, a], a

    if same_atoms(X, U, Y, V):
        if half is None:
            g = gather(Xe, Ue)
            return _sum_into(base, g, g, A, B, True)
        g = gather(Xe, Ue, half)
        return 2.0 * (_sum_into(base, g, g, A, B, True) + _sum_into(base, g, gather(Xe, Ue, half, -1.0), A, B, True))
    Ye, Ve = Y @ Mt + b[:, None], V @ Mt[:, None]
    cols = gather(Ye, Ve)
    if half is None:
        return _sum_into(base, gather(Xe, Ue), cols, A, B, False)
    return 2.0 * _sum_into(base, gather(Xe, Ue, half), cols, A, B, False)
