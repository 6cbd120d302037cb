r"""An element-structured kernel on :math:`TQ`: a Lagrangian as a sum of element energies (issue 27).

Groups :math:`g` of identical elements (:mod:`learners.shadow.element_structure`), each a GP on its own input
:math:`w_e = A_e z + b_e` with a base kernel :math:`k_g` (an RBF, or the mechanical kernel), *one* function per group
(identical elements share it), plus an optional full-dimensional correction:

.. math::  k(z, z') = \sum_g s_g^2 \sum_{e, e' \in g} k_g\big(D_g(A_e z + b_e),\, D_g(A_{e'} z' + b_{e'})\big)
           + s_c^2\, k_{RBF}(D_c z, D_c z'),

:math:`D_g = \mathrm{diag}(1/\ell_g, \dots, 1/\lambda_g, \dots)` (one position lengthscale and one velocity scale per
group: isotropic, so rotations of the bodies' space are kept), :math:`D_c` the correction's two scales. The DEL
functionals are linear, so conditioning on them is exact for any :math:`L` in this space. :math:`L_{inv}`'s terms from
:math:`h^2` on are not all element-additive (three bodies: products of two pairs' forces; a chain: neighbouring bonds'),
which the correction (a small full-dimensional RBF, scale :math:`s_c` learned) absorbs, or for a chain a group of
windows of consecutive bonds (``chain(n, window=2)``; at :math:`n = 10` the correction could not learn them).

*Functional blocks in closed form.* A derivative of :math:`k_g(A z + b, \cdot)` along :math:`u` is one of :math:`k_g`
along :math:`A u`: the atoms are projected, :math:`X \to D_g(A_e X + b_e)`, :math:`U \to D_g A_e U`, and the base
kernel's own closed-form ``derivative_block`` (unit scales) gives each of the :math:`m^2` instance pairs of a group of
:math:`m` instances -- in fact only the instances an atom's directions reach, one orientation of a negation-closed
group, one triangle of the same atoms (:mod:`~learners.shadow.element_blocks`: the same sums; for the DEL functionals
6 base blocks per atom pair for a chain of any length, 20 for ``bodies(4, 2)``, against :math:`\sum_g m_g^2 + 1` =
222 and 161, each count with the correction's one block on :math:`\mathbb R^{2n}`). Differentiable in the
hyperparameters; agrees with the generic autograd path (:func:`learners.shadow.kernels._autograd_block`) to rounding (tests).

*Coordinates.* The maps are given in the user's coordinates; the model fits in standardised ones,
:math:`z = T z' + t` (:mod:`learners.shadow.units`: :math:`q = \sigma R q' + \bar q`, :math:`v = s R v'`).
:meth:`ElementKernel.bind` carries the maps there, :math:`A_e \to U^{-1} A_e T`, :math:`b_e \to U^{-1}(A_e t + b_e)`, with
:math:`U` the unit of each output (:math:`\sigma` for position-like, :math:`s` for velocity-like), so an element sees
its own input in the data's geometry, scaled like the GP's inputs (lengthscales of order one).

*Hyperparameters* are one vector (the ``lengthscale`` of this kernel, so the searches treat it as they treat an RBF's):
per group :math:`(\ell_g, \lambda_g, s_g)` (no :math:`\lambda_g` for a position-only input), then the correction's
:math:`(\ell_c, \lambda_c, s_c)`; :meth:`ElementKernel.parameter_names` names them.
"""

from __future__ import annotations

from typing import List, Optional

import torch
from gpytorch.constraints import Positive

from bea.errors import BeaValueError

from ..saving import recorded, register
from .element_blocks import ColumnCache, active_atoms, even_base, group_block, negation_half, swap_half, swap_invariant_base
from .element_structure import body_groups, chain_groups, check_groups
from .kernels import RBFKernel, SmoothKernel
from .mechanical import MechanicalKernel
from .transpose_sum import fresh_block

__all__ = ["ElementKernel", "ElementExpansion"]


def _unit_kernel(degree: Optional[int]) -> SmoothKernel:
    """A base kernel with unit scales (the element kernel scales the inputs itself); exact 1 through exp(log 1)."""
    k = RBFKernel() if degree is None else MechanicalKernel(degree)
    k.register_constraint("raw_lengthscale", Positive(transform=torch.exp, inv_transform=torch.log))
    k = k.to(torch.float64)
    k.lengthscale = 1.0
    k.requires_grad_(False)
    return k


@register
class ElementKernel(SmoothKernel):
    r"""The element-structured kernel of the module docstring. ``groups``: the structure
    (:mod:`learners.shadow.element_structure`; built by :meth:`bodies` and :meth:`chain`); ``correction``: add the
    full-dimensional RBF term. As a ``kernel=`` option of :class:`~learners.shadow.lsi.InverseModifiedLagrangianGP` it
    is a template: the model builds its own copy in its coordinates and learns the scales."""

    has_lengthscale = True
    @property
    def missing_std(self) -> Optional[str]:
        """Why the std of recovered quantities raises (:mod:`learners.shadow.uncertainty`), and the fix; None where it is
        supported (RBF bases: :mod:`learners.shadow.element_uncertainty`)."""
        from .element_uncertainty import unsupported

        return unsupported(self)

    @recorded
    def __init__(self, groups: list, correction: bool = True):
        D = check_groups(groups)
        count = sum(1 + (g["positions"] < g["maps"].shape[1]) + 1 for g in groups) + (3 if correction else 0)
        super().__init__(ard_num_dims=count)
        self.groups, self.correction, self.dim = groups, bool(correction), D
        for i, g in enumerate(groups):  # the maps in the GP's coordinates (bind); moved by .to(), not saved (rebuilt)
            self.register_buffer(f"maps_{i}", g["maps"].to(torch.float64).clone(), persistent=False)
            self.register_buffer(f"offsets_{i}", g["offsets"].to(torch.float64).clone(), persistent=False)
        # unit-scale base kernels, deliberately not submodules: no parameters, state or kernel checks of their own
        object.__setattr__(self, "_bases", [_unit_kernel(g.get("degree")) for g in groups] + [_unit_kernel(None)])

    # ------------------------------------------------------------------ structures
    @classmethod
    def bodies(cls, count: int, dim: int, identical: bool = True, degree: Optional[int] = None,
               correction: bool = True, triples: bool = False, triple_velocities: bool = False) -> "ElementKernel":
        r"""``count`` bodies in ``dim`` dimensions, :math:`q = (x_1, y_1, x_2, \dots)`: body elements :math:`(q_i, v_i)`
        (one shared function with ``identical``: give ``identical=False`` for unequal masses) and exchange-symmetric
        pair elements :math:`(q_i - q_j, v_i - v_j)`; ``degree``: mechanical base kernels (None: RBF); ``triples``: also
        triple elements :math:`(q_i - q_j, q_i - q_k)` (:func:`~learners.shadow.element_structure.body_groups`)."""
        return cls(body_groups(count, dim, identical, degree, triples=triples, triple_velocities=triple_velocities),
                   correction)

    @classmethod
    def chain(cls, n: int, ends: str = "fixed", identical: bool = True, degree: Optional[int] = None,
              correction: bool = True, window: Optional[int] = None) -> "ElementKernel":
        r"""A chain of ``n`` sites: site elements :math:`(q_i, v_i)` and bond elements :math:`(q_{i+1} - q_i, v_{i+1} -
        v_i)` with ``ends`` ``"fixed"`` (walls at 0), ``"periodic"`` or ``"free"``; ``window``: also windows of that
        many consecutive bonds (:func:`~learners.shadow.element_structure.chain_groups`)."""
        return cls(chain_groups(n, ends, identical, degree, window=window), correction)

    # ------------------------------------------------------------------ the model's copy
    def build(self, D: int, ard: bool = True, constraint=None) -> "ElementKernel":
        """A fresh copy on :math:`\\mathbb R^D` (``ard`` is ignored: the scales are per group), scales positive through
        ``constraint``."""
        if D != self.dim:
            raise BeaValueError(f"the element structure acts on states of dimension {self.dim} (n = {self.dim // 2}), "
                                f"the data have {D} (n = {D // 2}): build it for the data's bodies or sites")
        k = ElementKernel(self.groups, self.correction)
        k._unbound = True  # a model's copy: its maps must be carried into the model's coordinates first (bind)
        if constraint is not None:
            k.register_constraint("raw_lengthscale", constraint)
        return k.to(torch.float64)

    def bind(self, center: Optional[torch.Tensor], unit: float, speed: float, rotation: Optional[torch.Tensor]) -> None:
        r"""Carry the maps into the standardised coordinates :math:`q = \sigma R q' + \bar q`, :math:`v = s R v'`
        (module docstring, *Coordinates*)."""
        n = self.dim // 2
        dev = self.raw_lengthscale.device
        self._unbound = False
        self._forget()
        R = torch.eye(n, dtype=torch.float64, device=dev) if rotation is None else rotation.to(dev, torch.float64)
        T = torch.block_diag(unit * R, speed * R)
        t = torch.zeros(self.dim, dtype=torch.float64, device=dev)
        if center is not None:
            t[:n] = center.to(dev, torch.float64)
        for i, g in enumerate(self.groups):
            M, b, p = g["maps"].to(dev, torch.float64), g["offsets"].to(dev, torch.float64), g["positions"]
            units = torch.tensor([unit] * p + [speed] * (M.shape[1] - p), dtype=torch.float64, device=dev)
            setattr(self, f"maps_{i}", (M @ T) / units[:, None])
            setattr(self, f"offsets_{i}", (M @ t + b) / units)

    def _apply(self, fn, recurse: bool = True):
        super()._apply(fn, recurse)
        for b in self._bases:  # the unit kernels follow the device
            b._apply(fn, recurse)
        self._forget()
        return self

    def _forget(self) -> None:
        """Drop the orientations and gathered columns found on the old maps (new maps or device: they would only hold
        memory; the caches check identity, so they could not be wrongly reused)."""
        self.__dict__.pop("_halves", None)
        self.__dict__.pop("_columns", None)

    def equal_masses(self) -> bool:
        r"""Whether the structure implies equal masses: one group's instances, together, select every velocity
        coordinate once (a unit row each, as the shared body or site element :math:`(q_i, v_i)` does), so every
        coordinate has the same kinetic energy function."""
        n = self.dim // 2
        for g in self.groups:
            rows = g["maps"][:, g["positions"]:, :].reshape(-1, self.dim)
            unit = (rows.abs().sum(-1) == 1) & ((rows == 1).sum(-1) == 1)
            if rows.shape[0] == n and bool(unit.all()) and sorted(rows.argmax(-1).tolist()) == list(range(n, 2 * n)):
                return True
        return False

    def instance_pairs(self) -> int:
        r""":math:`\sum_g m_g^2` (+1 with the correction): the kernel entries per pair of points, against one kernel's 1."""
        return sum(g["maps"].shape[0] ** 2 for g in self.groups) + int(self.correction)

    def state_entries(self, atoms) -> int:
        r"""Kernel entries of the closed-form mean (:class:`ElementExpansion`) per state, for the atoms ``atoms``
        (order -> AtomSet): per group the instances evaluated (one orientation of a negation-closed group, one of
        each swapped pair of a ``"swap"`` group: :meth:`_rows`) times the projected atoms with non-vanishing
        directions, plus the atoms once for the correction; at most :meth:`instance_pairs` times the atoms."""
        total = sum(len(A) for A in atoms.values()) if self.correction and self.atom_correction else 0
        for i in range(len(self.groups)):
            M = getattr(self, f"maps_{i}")
            Ma, ba = self._atom_side(i, M.new_ones(M.shape[1]))  # unit scales: they do not change which directions vanish
            total += _entries(M[self._rows(i)[0]], _projected_atoms(atoms, Ma.transpose(1, 2), ba))
        return total

    # ------------------------------------------------------------------ hyperparameters
    def parameter_names(self) -> List[str]:
        """The names of the entries of ``lengthscale`` (module docstring, *Hyperparameters*)."""
        names = []
        for g in self.groups:
            v = g["positions"] < g["maps"].shape[1]
            names += [f"{g['name']}:lengthscale"] + ([f"{g['name']}:velocity_scale"] if v else []) + [f"{g['name']}:scale"]
        return names + (["correction:lengthscale", "correction:velocity_scale", "correction:scale"] if self.correction else [])

    def _layout(self):
        """Per group ``(input scales (k,), variance s^2)`` and the correction's ``(scales (D,), s_c^2)`` or None."""
        if getattr(self, "_unbound", False):
            raise BeaValueError("this ElementKernel copy was built for a model that does not carry its maps into the fit's "
                                "standardised coordinates: learn it with InverseModifiedLagrangianGP(h, kernel=ElementKernel...)")
        ls = self.lengthscale.reshape(-1)
        out, i = [], 0
        for g in self.groups:
            k, p = g["maps"].shape[1], g["positions"]
            if p < k:
                scales = torch.cat([ls[i].expand(p), ls[i + 1].expand(k - p)])
                i += 2
            else:
                scales, i = ls[i].expand(p), i + 1
            out.append((scales, ls[i] ** 2))
            i += 1
        n = self.dim // 2
        corr = (torch.cat([ls[i].expand(n), ls[i + 1].expand(n)]), ls[i + 2] ** 2) if self.correction else None
        return out, corr

    # ------------------------------------------------------------------ the kernel
    def _projected(self, i: int, scales: torch.Tensor):
        return getattr(self, f"maps_{i}") / scales[:, None], getattr(self, f"offsets_{i}") / scales

    def _atom_side(self, i: int, scales: torch.Tensor):
        """The scaled maps that see the training atoms (the mean's and the std's sections): this kernel's own; an
        extension's are its source's (:mod:`~learners.shadow.element_extension`)."""
        return self._projected(i, scales)

    #: whether the correction term is the one the training atoms condition (an extension to another dimension: an
    #: independent one, its cross terms with the atoms zero)
    atom_correction = True

    def _half(self, i: int) -> Optional[torch.Tensor]:
        """One orientation of group ``i`` when its instances pair up under negation and its base is even
        (:mod:`~learners.shadow.element_blocks`), else None; cached on the maps it was found from (bind replaces them)."""
        return self._cached_half(i, "negation")

    def _swap(self, i: int) -> Optional[torch.Tensor]:
        """One of each pair of instances that differ by the swap of their two halves (a triple's two others:
        :func:`~learners.shadow.element_blocks.swap_half`) for a group marked ``"swap"`` (opt-in: only the triple
        builder sets it) with a base known to be invariant under it; else None."""
        return self._cached_half(i, "swap")

    def _cached_half(self, i: int, kind: str) -> Optional[torch.Tensor]:
        """:meth:`_half` or :meth:`_swap`, cached on the maps it was found from (bind replaces them)."""
        M, b = getattr(self, f"maps_{i}"), getattr(self, f"offsets_{i}")
        cache = self.__dict__.setdefault("_halves", {})
        hit = cache.get((i, kind))  # holds the tensors themselves: an identity check that a freed address cannot fool
        if hit is None or hit[0] is not M or hit[1] is not b or hit[2] != (M._version, b._version):
            if kind == "negation":
                half = negation_half(M, b) if even_base(self._bases[i]) else None
            else:  # only where the structure asks for it: a group that merely happens to be swap-closed keeps its sums
                marked = self.groups[i].get("swap", False) and swap_invariant_base(self._bases[i])
                half = swap_half(M, b, self.groups[i]["positions"]) if marked else None
            hit = cache[(i, kind)] = (M, b, (M._version, b._version), half)
        return hit[3]

    def _column_cache(self, i: int) -> ColumnCache:
        """Group ``i``'s gathered columns between the calls of an assembly
        (:class:`~learners.shadow.element_blocks.ColumnCache`)."""
        caches = self.__dict__.setdefault("_columns", {})
        return caches.setdefault(i, ColumnCache())

    def _rows(self, i: int):
        """The instances a sum over ``e`` of a symmetric function runs on and its factor: one orientation (or one of
        each swapped pair) twice, or all once."""
        half = self._half(i)
        half = self._swap(i) if half is None else half
        return (slice(None), 1.0) if half is None else (half, 2.0)

    def pointwise(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        groups, corr = self._layout()
        total = 0.0
        for i, (scales, var) in enumerate(groups):
            M, b = self._projected(i, scales)
            xs, ys = x @ M.transpose(1, 2) + b[:, None], y @ M.transpose(1, 2) + b[:, None]  # (m, P, k)
            rows, factor = self._rows(i)
            m, P, k = ys.shape
            flat = ys.reshape(m * P, k)  # every instance e' at once, one base call per instance e
            acc = sum(self._bases[i].pointwise(xe.expand(m, P, k).reshape(m * P, k), flat).reshape(m, P).sum(0)
                      for xe in xs[rows])
            total = total + (factor * var) * acc
        if corr is not None:
            total = total + corr[1] * self._bases[-1].pointwise(x / corr[0], y / corr[0])
        return total

    def expansion(self, atoms, outputscale: torch.Tensor) -> "ElementExpansion":
        """The posterior mean over ``atoms`` (orders <= 2) in closed form, hyperparameters frozen."""
        return ElementExpansion(self, atoms, outputscale)

    @fresh_block
    def derivative_block(self, X, U, Y, V) -> torch.Tensor:
        r"""The functional block of the module docstring: per group, the active (instance, atom) pairs of both sides
        in one base call, one orientation of a negation-closed group, one triangle of the same atoms
        (:func:`~learners.shadow.element_blocks.group_block`: the same sums as over every instance pair, to rounding);
        every instance of a ``"swap"`` group (its halving is the closed-form mean's only, :meth:`_rows`)."""
        groups, corr = self._layout()
        part = getattr(self, "_part", None)  # one part alone at unit variance (element_gram.part_covariance), else all
        total = None  # the first term alone, not added to zeros (0 + x is x): one pass and one matrix less a chunk
        for i, (scales, var) in enumerate(groups):
            if part is None or part == i:
                M, b = self._projected(i, scales)
                block = group_block(self._bases[i], M, b, self._half(i), X, U, Y, V, self._column_cache(i))
                total = block if part is not None else var * block if total is None else total + var * block
        if corr is not None and part in (None, len(groups)):
            s = corr[0]
            block = self._bases[-1].derivative_block(X / s, U / s, Y / s, V / s)
            total = block if part is not None else corr[1] * block if total is None else total + corr[1] * block
        return X.new_zeros(X.shape[0], Y.shape[0]) if total is None else total


class ElementExpansion:
    r"""The posterior mean :math:`f(z) = \sigma_f^2\sum_k c_k\,\partial_{w_k} k(z, y_k)` of the element kernel in closed
    form, hyperparameters frozen: :math:`f(z) = \sum_g \sum_{e \in g} F_g(D_g w_e(z)) + F_c(D_c z)`, where :math:`F_g`
    is the base kernel's own closed-form mean (:class:`~learners.shadow.kernels.AtomExpansion`: the RBF's fused
    node, the mechanical kernel's :class:`~learners.shadow.mechanical.MechanicalExpansion`) over the atoms projected
    by every instance :math:`e'` of the group, outputscale :math:`\sigma_f^2 s_g^2` -- the generic path (blocks
    through autograd, for every derivative ``mod_N`` takes) needed 8 GB at n = 4. Exactly as in the blocks
    (:mod:`~learners.shadow.element_blocks`): a projected atom whose direction vanishes adds zero and is left out, and
    for a negation-closed group with an even base :math:`F_g(-w) = F_g(w)`, so :math:`\sum_e F_g(w_e) = 2\sum_{e \in
    H} F_g(w_e)`; likewise for a group marked ``"swap"`` (the body triples) with a swap-invariant base,
    :math:`F_g(\Pi w) = F_g(w)` and :math:`H` one of each swapped pair (:func:`~learners.shadow.element_blocks.swap_half`;
    the blocks do not use this one). ``entries``: kernel entries per state (instances evaluated x projected atoms kept,
    summed)."""

    def __init__(self, kernel: ElementKernel, atoms, outputscale: torch.Tensor):
        from .kernels import AtomExpansion, FunctionalKernel

        with torch.no_grad():
            groups, corr = kernel._layout()
            maps = [kernel._projected(i, scales) + kernel._atom_side(i, scales) + (var, kernel._bases[i]) + kernel._rows(i)
                    for i, (scales, var) in enumerate(groups)]
            if corr is not None and kernel.atom_correction:
                eye = torch.diag(1.0 / corr[0])[None]
                maps.append((eye, eye.new_zeros(1, eye.shape[1])) * 2 + (corr[1], kernel._bases[-1], slice(None), 1.0))
            self._parts, self.entries = [], 0
            for M, b, Ma, ba, var, base, rows, factor in maps:  # states through (M, b), the atoms through (Ma, ba)
                M, b = M.detach(), b.detach()
                proj = _projected_atoms(atoms, Ma.detach().transpose(1, 2), ba.detach())
                if not proj:  # no atom sees this group: it adds nothing
                    continue
                fk = FunctionalKernel(base).to(device=M.device, dtype=torch.float64)
                fk.outputscale = factor * float(var) * float(outputscale)
                fk.requires_grad_(False)
                Mt = M[rows].transpose(1, 2)
                self.entries += _entries(Mt, proj)
                self._parts.append((Mt, b[rows], AtomExpansion(fk, proj)))

    def __call__(self, X: torch.Tensor) -> torch.Tensor:
        out = X.new_zeros(X.shape[0])
        for Mt, b, ex in self._parts:
            W = X @ Mt + b[:, None]  # (m, B, k): every instance's input
            out = out + ex(W.reshape(-1, W.shape[-1])).reshape(W.shape[0], X.shape[0]).sum(0)
        return out


def _entries(M: torch.Tensor, projected: dict) -> int:
    """Kernel entries per state of one group: its instances evaluated (``M``'s first dimension) times the projected
    atoms kept (:func:`_projected_atoms`)."""
    return M.shape[0] * sum(len(A) for A in projected.values())


def _projected_atoms(atoms, Mt: torch.Tensor, b: torch.Tensor) -> dict:
    """The atoms as every instance sees them, ``Mt`` (m, D, k), ``b`` (m, k): those with a vanishing direction left
    out (they add zero), orders left with none dropped."""
    from .functionals import AtomSet

    out = {}
    for order, A in atoms.items():
        P, Q = A.points @ Mt + b[:, None], A.dirs @ Mt[:, None]  # (m, A, k), (m, A, a, k)
        e, a = active_atoms(P, Q)
        if len(a):
            out[order] = AtomSet(P[e, a], Q[e, a], A.coef[a], A.owner[a])
    return out
