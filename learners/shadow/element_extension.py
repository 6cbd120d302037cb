r"""A fitted element GP carried to another system with the same groups: ``model.extend(ElementKernel.chain(10))``.

*The model.* An :class:`~learners.shadow.element_kernel.ElementKernel` fit is a GP over one function :math:`u_g` per
group (independent, :math:`u_g \sim GP(0, \sigma_f^2 s_g^2 k_g(D_g\cdot, D_g\cdot))`) and a correction
:math:`c \sim GP(0, \sigma_f^2 s_c^2 k_{RBF}(D_c\cdot, D_c\cdot))` on the source's states :math:`y`,
:math:`L(y) = \sum_g\sum_{e' \in g} u_g(w_{e'}(y)) + c(y)`, conditioned on the training functionals
:math:`\Lambda_j L = y_j` (:math:`\beta = \Theta^{-1}y`, :math:`\Theta = R R^\top`). The extension to a target
structure with the same groups (names, input widths, bases) is

.. math::  L_{new}(z) = \sum_g \sum_{e \in g_{new}} u_g(w_e(z)) + c_{new}(z)

under the *same* posterior over the :math:`u_g` (same functionals, weights, hyperparameters, factor): its
covariance with the data is :math:`\mathrm{Cov}(L_{new}(z), \Lambda_j L) = \sigma_f^2\sum_g s_g^2\sum_{e \in
g_{new}}\sum_{e' \in g}\Lambda_j^y k_g(D_g w_e(z), D_g w_{e'}(y))` -- the element kernel with the target's maps on the
states and the source's on the atoms (:meth:`ExtendedElementKernel._atom_side`) --, so the mean is that times
:math:`\beta` and the covariance :math:`k_{new}(z, z') - k_{new,\Lambda}\Theta^{-1}k_{\Lambda,new}`, exact (the
element std, :mod:`~learners.shadow.element_uncertainty`, with those maps).

*The correction* is a function on the source's :math:`\mathbb R^{2n}`: it cannot be carried to another dimension.
There :math:`c_{new}` is an independent GP of the fitted scale :math:`s_c` and lengthscales (if the target structure
has a correction; ``correction=False`` leaves it out), unconditioned: mean 0, and its prior variance
:math:`\sigma_f^2 s_c^2` enters every std -- the data say nothing about the larger system's terms that are not
element-additive (:math:`L_{inv}`'s :math:`h^2` terms: products of two pairs' forces). Its cost: the fitted
correction's part of the mean is lost, and the std has that floor wherever the element part is well determined.
On the source's own dimension the target must be the source's structure (another one there would make the two sides
indistinguishable by their dimension, which the blocks dispatch on) and the correction is the fitted one, in the
source's coordinates: the extension is then the fitted model (to rounding; tests).

*Coordinates and calibration.* The target's coordinates are the source's units :math:`\sigma`, :math:`s` and time
unit, centred at 0 without rotation (on the source's dimension: the source's centre and rotation), its maps bound
there (:meth:`~learners.shadow.element_kernel.ElementKernel.bind`): an element sees its input in the same units as in
the fit. The variance scales are the source's (its ``"del"`` scale, and the energy calibrations run on the source's
held-back data on the first std, as for the source itself); nothing is recalibrated on the target system, of which
the model has seen no data. On another dimension the truncation term (:mod:`~learners.shadow.truncation`) is kept
whole: a fitted model fits its unit part on the reported states only where they spread in energy by a share of the
data pairs' spread, and there are no data pairs of the target system to give that scale (a batch on one orbit would get the term
fitted away): an over-statement, never an under-statement. Energies without ``reference=`` have a std dominated by the
group constants there (the data fix them only in the source's combination of instance counts): ask for differences.
"""

from __future__ import annotations

import copy
from typing import Optional

import torch

from bea.errors import BeaRuntimeError, BeaTypeError, BeaValueError

from .element_blocks import _gather, _project, _sum_into
from .element_kernel import ElementKernel
from .gp import FunctionalGP
from .kernels import FunctionalKernel

__all__ = ["ExtendedElementKernel", "extend_model", "check_extension"]


class ExtendedElementKernel(ElementKernel):
    r"""The element kernel of a target structure whose training atoms belong to the fitted ``source`` kernel (module
    docstring): its own maps on states of dimension ``dim``, the source's on atoms of the source's dimension, the
    correction independent of the atoms unless both dimensions agree. Hyperparameters: the source's, frozen."""

    def __init__(self, groups: list, correction: bool, source: ElementKernel):
        super().__init__(groups, correction)
        object.__setattr__(self, "_source", source)  # not a submodule: the fitted kernel, shared and frozen
        self.atom_correction = self.dim == source.dim
        self.cross_dimensions = () if self.atom_correction else ((self.dim, source.dim), (source.dim, self.dim))

    def _atom_side(self, i: int, scales: torch.Tensor):
        return self._source._projected(i, scales)

    def _half(self, i: int) -> Optional[torch.Tensor]:
        r"""One orientation only where the source's group is negation-closed too: :math:`\sum_{e \in g_{new}}F_g(w_e)
        = 2\sum_{e \in H}F_g(w_e)` needs :math:`F_g` even, which the source's instances give."""
        return None if self._source._half(i) is None else super()._half(i)

    def _swap(self, i: int) -> Optional[torch.Tensor]:
        """As :meth:`_half`, for the swap of a group's two halves (:func:`~learners.shadow.element_blocks.swap_half`)."""
        return None if self._source._swap(i) is None else super()._swap(i)

    def derivative_block(self, X, U, Y, V) -> torch.Tensor:
        r"""The block between atoms on the target's states and/or the source's (told apart by their dimension): both on
        the target, the target's prior (its correction included); both on the source, the source's kernel; across,
        :math:`\sum_g s_g^2\sum_{e, e'}` over the target's instances on one side and the source's on the other, the
        active (instance, atom) pairs only (:mod:`~learners.shadow.element_blocks`), no correction term."""
        mine = (X.shape[-1] == self.dim, Y.shape[-1] == self.dim)
        if self.atom_correction or all(mine):
            return super().derivative_block(X, U, Y, V)
        if not any(mine):
            return self._source.derivative_block(X, U, Y, V)
        groups, _ = self._layout()
        total = X.new_zeros(X.shape[0], Y.shape[0])
        for i, (scales, var) in enumerate(groups):
            Mx, bx = self._projected(i, scales) if mine[0] else self._atom_side(i, scales)
            My, by = self._projected(i, scales) if mine[1] else self._atom_side(i, scales)
            rows, cols = _gather(*_project(Mx, bx, X, U)), _gather(*_project(My, by, Y, V))
            total = total + var * _sum_into(self._bases[i], rows, cols, X.shape[0], Y.shape[0], False)
        return total


def check_extension(source: ElementKernel, target) -> None:
    """Refuse (typed) a ``target`` that is not an :class:`ElementKernel` whose groups match the fitted ``source``'s:
    the same names in the same order, input widths, position counts and bases; a correction only where the source has
    one (its scale is the fitted one); on the source's dimension, the source's structure itself (module docstring)."""
    if not isinstance(target, ElementKernel) or isinstance(target, ExtendedElementKernel):
        raise BeaTypeError(f"extend takes an ElementKernel structure (e.g. ElementKernel.chain(10)), got "
                           f"{type(target).__name__}")

    def shape(g):
        return g["name"], g["maps"].shape[1], g["positions"], g.get("degree")
    mine, theirs = [shape(g) for g in source.groups], [shape(g) for g in target.groups]
    if mine != theirs:
        raise BeaValueError(f"the target structure's groups (name, inputs, positions, degree) {theirs} do not match the "
                            f"fitted model's {mine}: build it with the same constructor and options for the larger system")
    if target.dim != source.dim and any(g.get("swap", False) for g in source.groups):
        # keyed on the structural marker (body_groups sets "swap" on the triples only), not on a name a user may reuse;
        # sum_{i, j != k} g(r_ij) = (count - 2) sum_{i != j} g(r_ij): a triple function holds pair terms, counted with a
        # factor that changes with the bodies' count, and the fit does not tell them from the pair group's
        raise BeaValueError("a fit with the triple group cannot be extended to another count of bodies: its pair-like "
                            "part (a function of one difference) counts count - 2 times, and the fit does not separate "
                            "it from the pair group (measured: level sets 0.82 on bodies4 from bodies3): fit the larger "
                            "system directly, or extend a fit without triples")
    if target.correction and not source.correction:
        raise BeaValueError("the target structure has a correction term, the fitted model none (no fitted scale for it): "
                            "give correction=False")
    if target.dim == source.dim:
        same = target.correction == source.correction and all(
            torch.equal(a["maps"], b["maps"].to(a["maps"])) and torch.equal(a["offsets"], b["offsets"].to(a["offsets"]))
            for a, b in zip(source.groups, target.groups))
        if not same:
            raise BeaValueError(f"a target structure on the fitted dimension ({target.dim}) must be the fitted structure "
                                "itself (the extension tells the two systems apart by their dimension): refit the model "
                                "on data of this system instead")


def _extended_gp(model, kernel: ExtendedElementKernel) -> FunctionalGP:
    """A GP with ``kernel`` holding the fitted GP's posterior as it is (functionals, factor, weights, scales)."""
    src = model.gp
    fk = FunctionalKernel(kernel, closed_form=src.kernel.closed_form)
    fk.register_constraint("raw_outputscale", copy.deepcopy(src.kernel.raw_outputscale_constraint))
    fk = fk.to(src.kernel.raw_outputscale)
    with torch.no_grad():
        fk.raw_outputscale.copy_(src.kernel.raw_outputscale.detach())
    fk.requires_grad_(False)
    return src.sharing_posterior(fk)


def extend_model(model, structure: ElementKernel):
    """The extension of the fitted element ``model`` to ``structure`` (module docstring): an
    :class:`~learners.shadow.element_model.ElementExtension`."""
    from .element_model import ElementExtension

    model._require_fit()
    source = model._element_kernel()
    if source is None:
        raise BeaTypeError("extend needs a model fitted with an ElementKernel (kernel=ElementKernel.chain(n) or "
                           ".bodies(count, dim)); this one has another kernel")
    check_extension(source, structure)
    same = structure.dim == source.dim
    kernel = ExtendedElementKernel(structure.groups, structure.correction, source)
    kernel.register_constraint("raw_lengthscale", copy.deepcopy(source.raw_lengthscale_constraint))
    dev = source.raw_lengthscale.device
    kernel = kernel.to(device=dev, dtype=torch.float64)
    with torch.no_grad():  # the source's scales; the correction's last, dropped where the target has none
        kernel.raw_lengthscale.copy_(source.raw_lengthscale.detach()[..., :kernel.raw_lengthscale.shape[-1]])
    kernel.requires_grad_(False)
    n = structure.dim // 2
    center = model._center if same else torch.zeros(n, dtype=torch.float64, device=dev)
    rotation = model._rotation if same else None
    kernel.bind(center, model._unit, model._speed, rotation)
    if not bool(torch.isfinite(kernel.lengthscale).all()):
        raise BeaRuntimeError("the fitted model's element scales are not finite: refit it")
    return ElementExtension(model, _extended_gp(model, kernel), n, center, rotation)
