r"""Linear functionals of a Lagrangian on :math:`TQ = \mathbb R^{2n}`, as sums of derivative atoms.

Every functional used here is a finite sum of *atoms*, directional derivatives of order 0, 1 or 2
at a point :math:`x = (q, v) \in \mathbb R^{D}`, :math:`D = 2n` (positions first, then velocities):

.. math::  \Lambda[L] = \sum_{\text{atoms}} c\; \partial_{u_1} \cdots \partial_{u_m} L(x),
           \qquad m \in \{0, 1, 2\},

with :math:`\partial_u L(x) = u\cdot\nabla L(x)`. Examples:

* point evaluation :math:`L(x)`: one atom of order 0;
* the DEL residual of a scheme at a triple :math:`(q_{j-1}, q_j, q_{j+1})`, component ``i``:
  :math:`\partial_{q_j^i}\big[L_\Delta(q_{j-1}, q_j) + L_\Delta(q_j, q_{j+1})\big]`. A scheme
  evaluates ``L`` at points :math:`x_k(a, b)` with weights :math:`\alpha_k`, so the residual is
  :math:`\sum_k \alpha_k\, (\partial x_k/\partial q_j^i)\cdot\nabla L(x_k)` (order-1 atoms, plus
  order-0 atoms if a weight depends on the positions). :func:`del_residual_functionals` finds the points and
  directions by running the scheme on a *probe* Lagrangian through torch autograd, so any
  :mod:`bea` scheme works unchanged;
* the continuous Euler--Lagrange residual
  :math:`e_{v_i}^\top\nabla^2L\,(v, a) - \partial_{q_i}L` (an order-2 and an order-1 atom; the
  LGP baseline);
* normalisations that rule out :math:`L \equiv \mathrm{const}` (:mod:`learners.shadow.normalisation`).

A :class:`Functionals` object holds ``F`` functionals: per order, the atoms' points, directions,
coefficients and the index of the functional each atom belongs to (``owner``). The kernel
:class:`learners.shadow.kernels.FunctionalKernel` applies two such families to a base kernel on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Union

import torch

import bea
from bea.deprecation import renamed_attributes
from bea.errors import BeaValueError

__all__ = [
    "AtomSet",
    "Functionals",
    "point_evaluations",
    "gradient_evaluations",
    "del_residual_functionals",
    "discrete_momentum_functionals",
    "euler_lagrange_residuals",
    "snapshot_functionals",
    "triples_from_snapshots",
]


@dataclass
class AtomSet:
    r"""Atoms of one derivative order ``m``: ``points`` (A, D), ``dirs`` (A, m, D), ``coef`` (A,),
    ``owner`` (A,) (index of the functional the atom belongs to)."""

    points: torch.Tensor
    dirs: torch.Tensor
    coef: torch.Tensor
    owner: torch.Tensor

    @property
    def order(self) -> int:
        return self.dirs.shape[1]

    def __len__(self) -> int:
        return self.points.shape[0]

    def shifted(self, offset: int) -> "AtomSet":
        return AtomSet(self.points, self.dirs, self.coef, self.owner + offset)

    def select(self, mask: torch.Tensor) -> "AtomSet":
        return AtomSet(self.points[mask], self.dirs[mask], self.coef[mask], self.owner[mask])


@dataclass
class Functionals:
    r"""``count`` linear functionals on functions of :math:`x \in \mathbb R^{D}`, as atoms by order.

    ``atoms[m]`` is an :class:`AtomSet` of order ``m``; ``targets`` (optional, shape ``(count,)``)
    are observed values (zero for DEL residuals).
    """

    dim: int
    count: int
    atoms: Dict[int, AtomSet] = field(default_factory=dict)
    targets: Optional[torch.Tensor] = None

    def __post_init__(self):
        for m, a in self.atoms.items():
            if a.dirs.shape[1] != m or a.points.shape[-1] != self.dim:
                raise BeaValueError(f"atom set of order {m} has directions {tuple(a.dirs.shape)} and points {tuple(a.points.shape)} "
                                 f"for dimension D={self.dim}")
        if self.targets is not None and self.targets.shape != (self.count,):
            raise BeaValueError(f"targets must have shape ({self.count},), got {tuple(self.targets.shape)}")

    @property
    def n_atoms(self) -> int:
        return sum(len(a) for a in self.atoms.values())

    @property
    def device(self) -> torch.device:
        """Where the atoms live (the data's device; index tensors made for them must be there too)."""
        for a in self.atoms.values():
            return a.points.device
        return self.targets.device if self.targets is not None else torch.device("cpu")

    @staticmethod
    def cat(parts: Sequence["Functionals"]) -> "Functionals":
        """Concatenate families (same ``dim``); targets are concatenated when all parts have them."""
        parts = list(parts)
        if not parts:
            raise BeaValueError("nothing to concatenate")
        dim = parts[0].dim
        if any(p.dim != dim for p in parts):
            raise BeaValueError(f"functionals of different dimensions: {[p.dim for p in parts]}")
        atoms: Dict[int, List[AtomSet]] = {}
        offset = 0
        for p in parts:
            for m, a in p.atoms.items():
                atoms.setdefault(m, []).append(a.shifted(offset))
            offset += p.count
        merged = {m: AtomSet(torch.cat([a.points for a in al]), torch.cat([a.dirs for a in al]), torch.cat([a.coef for a in al]),
                             torch.cat([a.owner for a in al])) for m, al in atoms.items()}
        targets = torch.cat([p.targets for p in parts]) if all(p.targets is not None for p in parts) else None
        return Functionals(dim, offset, merged, targets)

    def subset(self, index: torch.Tensor) -> "Functionals":
        """The functionals ``index`` (1-D long tensor, distinct entries), renumbered 0..len-1."""
        dev = self.device
        index = torch.as_tensor(index, dtype=torch.long, device=dev)
        new_id = torch.full((self.count,), -1, dtype=torch.long, device=dev)
        new_id[index] = torch.arange(index.numel(), device=dev)
        atoms = {}
        for m, a in self.atoms.items():
            keep = new_id[a.owner] >= 0
            sel = a.select(keep)
            atoms[m] = AtomSet(sel.points, sel.dirs, sel.coef, new_id[sel.owner])
        targets = None if self.targets is None else self.targets[index]
        return Functionals(self.dim, int(index.numel()), atoms, targets)

    def apply(self, f: Callable[[torch.Tensor], torch.Tensor], create_graph: bool = False) -> torch.Tensor:
        r"""Apply the functionals to a function ``f(x)`` (x of shape (..., D), result (...)) by autograd;
        returns shape ``(count,)``. Used to check kernels and posterior means."""
        out = None
        for m, a in self.atoms.items():
            x = a.points.detach().clone().requires_grad_(True)
            val = f(x)
            if m >= 1:
                (g,) = torch.autograd.grad(val.sum(), x, create_graph=True)
                val = (g * a.dirs[:, 0]).sum(-1)
            if m == 2:
                (g2,) = torch.autograd.grad(val.sum(), x, create_graph=create_graph)
                val = (g2 * a.dirs[:, 1]).sum(-1)
            contrib = val.new_zeros(self.count).index_add(0, a.owner, a.coef * val)
            out = contrib if out is None else out + contrib
        return torch.zeros(self.count, dtype=torch.float64, device=self.device) if out is None else out


def _state(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.cat([q, v], -1)


def point_evaluations(x: torch.Tensor) -> Functionals:
    r"""Point evaluations :math:`L(x_k)` at ``x`` of shape (K, D)."""
    K, D = x.shape
    atoms = {0: AtomSet(x, x.new_zeros(K, 0, D), x.new_ones(K), torch.arange(K, device=x.device))}
    return Functionals(D, K, atoms)


def gradient_evaluations(x: torch.Tensor, direction: torch.Tensor) -> Functionals:
    r"""Directional derivatives :math:`u_k\cdot\nabla L(x_k)`, ``x`` and ``direction`` of shape (K, D)."""
    K, D = x.shape
    atoms = {1: AtomSet(x, direction[:, None, :], x.new_ones(K), torch.arange(K, device=x.device))}
    return Functionals(D, K, atoms)


def triples_from_snapshots(snapshots: torch.Tensor) -> torch.Tensor:
    r"""All consecutive triples :math:`(q_{j-1}, q_j, q_{j+1})` of snapshots (T, S+1, n), as (T·(S-1), 3, n),
    trajectory-major."""
    a, b, c = snapshots[:, :-2], snapshots[:, 1:-1], snapshots[:, 2:]
    return torch.stack([a, b, c], -2).reshape(-1, 3, snapshots.shape[-1])


class _Probe:
    r"""A stand-in Lagrangian that records where a scheme evaluates it.

    Call ``k`` returns :math:`S_k + G_k\cdot(x - \bar x)` with zero-valued leaves :math:`S_k` (B,) and
    :math:`G_k` (B, D) and :math:`\bar x` the detached input: its value and gradient are zero, but
    the derivative of anything linear in ``L`` with respect to :math:`G_k` (resp. :math:`S_k`) is the
    weight of :math:`\nabla L(x_k)` (resp. :math:`L(x_k)`) in it.
    """

    def __init__(self):
        self.calls = []

    def __call__(self, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        x = _state(q, v)
        G = torch.zeros_like(x, requires_grad=True)
        S = x.new_zeros(x.shape[:-1]).requires_grad_(True)
        self.calls.append((x.detach(), G, S))
        return S + (G * (x - x.detach())).sum(-1)


def _linear_atoms(make_value: Callable[[Callable], torch.Tensor], wrt: torch.Tensor, n_out: int) -> Functionals:
    r"""Atoms of the functionals :math:`L \mapsto \partial_{w_i}\,\mathrm{make\_value}(L)` for each row of
    ``wrt`` (B, n) and component ``i`` (functional ``b * n + i``); ``make_value`` builds a (B,) tensor
    from a Lagrangian and must depend on it linearly (a scheme does)."""
    probe = _Probe()
    with torch.enable_grad():
        val = make_value(probe)
        (R,) = torch.autograd.grad(val.sum(), wrt, create_graph=True)
        B = R.shape[0]
        D = probe.calls[0][0].shape[-1]
        leaves = [t for _, G, S in probe.calls for t in (G, S)]
        pts1, dirs1, own1, pts0, coef0, own0 = [], [], [], [], [], []
        for i in range(n_out):
            grads = torch.autograd.grad(R[:, i].sum(), leaves, retain_graph=True, allow_unused=True)
            for k, (x, _, _) in enumerate(probe.calls):
                gG, gS = grads[2 * k], grads[2 * k + 1]
                owner = torch.arange(B, device=R.device) * n_out + i
                if gG is not None and bool((gG != 0).any()):
                    pts1.append(x.reshape(B, D))
                    dirs1.append(gG.detach().reshape(B, 1, D))
                    own1.append(owner)
                if gS is not None and bool((gS != 0).any()):
                    pts0.append(x.reshape(B, D))
                    coef0.append(gS.detach().reshape(B))
                    own0.append(owner)
    atoms = {}
    if pts1:
        P = torch.cat(pts1)
        atoms[1] = AtomSet(P, torch.cat(dirs1), P.new_ones(P.shape[0]), torch.cat(own1))
    if pts0:
        P0 = torch.cat(pts0)
        atoms[0] = AtomSet(P0, P0.new_zeros(P0.shape[0], 0, D), torch.cat(coef0), torch.cat(own0))
    return Functionals(D, B * n_out, atoms)


def del_residual_functionals(triples: torch.Tensor, h: float, scheme: Union[str, "bea.Scheme"] = "midpoint",
                             axes: Optional[torch.Tensor] = None) -> Functionals:
    r"""DEL residual functionals :math:`\partial_{b_i}\big[L_\Delta(a, b) + L_\Delta(b, c)\big]` for
    triples (B, 3, n) with rows :math:`(a, b, c) = (q_{j-1}, q_j, q_{j+1})`; functional ``b * n + i``
    is component ``i`` of triple ``b``. Targets are zero. Works for any :mod:`bea` scheme (autograd
    through the scheme's discrete Lagrangian on a probe).

    ``axes`` (n, n): component ``i`` is instead the derivative along row ``i``, :math:`\sum_j A_{ij}\,\partial_{b_j}`
    (taken as :math:`\partial_{w_i}` at :math:`w = 0` of :math:`b + wA`: the same points, directions combined). With
    the rows of a rotation these are the residual's components along other axes, one functional each, so their
    posterior variances are exact (a combination of the plain components' stds would need their covariances)."""
    sch = bea.get_scheme(scheme)
    a, b, c = (triples[:, k].detach() for k in range(3))
    if axes is None:
        b = wrt = b.clone().requires_grad_(True)
    else:
        wrt = torch.zeros_like(b, requires_grad=True)
        with torch.enable_grad():
            b = b + wrt @ axes.to(b)
    F = _linear_atoms(lambda L: sch(L, a, b, h) + sch(L, b, c, h), wrt, triples.shape[-1])
    F.targets = triples.new_zeros(F.count)
    return F


def discrete_momentum_functionals(pairs: torch.Tensor, h: float, scheme: Union[str, "bea.Scheme"] = "midpoint") -> Functionals:
    r"""Discrete momenta :math:`p = D_2L_\Delta(a, b)` for pairs (B, 2, n), functional ``b * n + i``."""
    sch = bea.get_scheme(scheme)
    a = pairs[:, 0].detach()
    b = pairs[:, 1].detach().clone().requires_grad_(True)
    return _linear_atoms(lambda L: sch(L, a, b, h), b, pairs.shape[-1])


def snapshot_functionals(S: torch.Tensor, h: float, scheme: Union[str, "bea.Scheme"] = "midpoint"):
    r"""What LSI conditions on and validates with, for snapshots ``S`` ``(T, M + 1, n)``: the DEL residual functionals
    of all triples and the discrete momenta of all steps, each with the trajectory of every functional --
    ``(F, groups, P, P_groups)``."""
    T, M1, n = S.shape
    F = del_residual_functionals(triples_from_snapshots(S), h, scheme)
    groups = torch.arange(T, device=S.device).repeat_interleave((M1 - 2) * n)
    P = discrete_momentum_functionals(torch.stack([S[:, :-1], S[:, 1:]], -2).reshape(-1, 2, n), h, scheme)
    return F, groups, P, torch.arange(T, device=S.device).repeat_interleave((M1 - 1) * n)


def euler_lagrange_residuals(q: torch.Tensor, v: torch.Tensor, a: torch.Tensor) -> Functionals:
    r"""Continuous Euler--Lagrange residuals at states ``(q, v)`` with accelerations ``a`` (all (B, n)):

    .. math::  E_i[L] = \sum_j \partial_{v_i}\partial_{v_j}L\, a_j + \sum_j \partial_{v_i}\partial_{q_j}L\, v_j
               - \partial_{q_i}L = e_{v_i}^\top \nabla^2 L\, d - e_{q_i}\cdot\nabla L,
               \qquad d = (v, a),

    functional ``b * n + i``; targets zero. The second-order part is one bilinear atom
    :math:`\partial_{e_{v_i}}\partial_d L`."""
    B, n = q.shape
    D = 2 * n
    x = _state(q, v)
    d = _state(v, a)
    eye = torch.eye(D, dtype=x.dtype, device=x.device)
    pts2, dirs2, pts1, dirs1, owners = [], [], [], [], []
    for i in range(n):
        own = torch.arange(B, device=x.device) * n + i
        pts2.append(x)
        dirs2.append(torch.stack([eye[n + i].expand(B, D), d], 1))
        pts1.append(x)
        dirs1.append((-eye[i]).expand(B, D)[:, None, :])
        owners.append(own)
    own = torch.cat(owners)
    atoms = {2: AtomSet(torch.cat(pts2), torch.cat(dirs2), x.new_ones(B * n), own),
             1: AtomSet(torch.cat(pts1), torch.cat(dirs1), x.new_ones(B * n), own)}
    return Functionals(D, B * n, atoms, x.new_zeros(B * n))


# one name, one idea (issue 29): del_residuals are the residuals' values (InverseModifiedLagrangianGP.del_residuals),
# discrete_momenta the momenta along positions (integrators.modified.discrete_momenta); these build functionals
__getattr__ = renamed_attributes(__name__, {"del_residuals": "del_residual_functionals",
                                            "discrete_momenta": "discrete_momentum_functionals"}, globals())
