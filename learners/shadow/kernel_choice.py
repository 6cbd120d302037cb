r"""The ``kernel=`` option of the GP Lagrangian models: which kernel, and whether its hyperparameters are learned.

* ``"auto"`` (default): the RBF, except that the ``"positions"`` search, where it also chooses the normalisation
  (:mod:`learners.shadow.position_search`), scores the mechanical kernel of degree 2 with the whole mass matrix (or its
  diagonal where that predicts held-out positions better by MATRIX_MARGIN:
  position_search.MECHANICAL_DIAGONAL) against it by the same held-out one-step
  error and keeps the lower (``model.kernel_degree`` records the choice; degree 4 is scored too and replaces degree 2
  where lower by ``position_search.DEGREE_MARGIN``, Session 10; where the data contradict a mass matrix proportional to
  I, degree 4 with the trace alone too, ``position_search.MECHANICAL_TRACE``, Session 23: a mass matrix that depends on
  q and couples the coordinates, as a pendulum's, makes the whole matrix and the diagonal false);
  elsewhere (``n <= 2``, the likelihood) the RBF exactly. Why the default (benchmarks/RESULTS_identification.md,
  Session 8, eight systems at n = 3, 4, ten data sets; Session 9 for the cost): it is more accurate than the RBF on
  all ten (energy differences 1.1-25x at N = 2, 1.6-114x at N = 4; two_body4 misses 3e-3 with both kernels), and
  its energy stds leave the RMS-z band [0.5, 1.5] on fewer data sets than the RBF's: two, both at N = 4 -- three
  Henon-Heiles-coupled oscillators on data seed 0, where the principal-direction fit is kept (RMS z 1.61, 68%
  within :math:`2\sigma`; 0.92 without that fit, 1.06 on seed 1), and three coupled pendula (3.12, 30%: too
  narrow, not solved) -- against the RBF's four (a Toda lattice 1.68 / 2.31 at N = 2 / 4, the chain with
  position-dependent masses 2.36 / 2.35, the Henon-Heiles oscillators 0.41 / 0.52 and 0.38 / 0.49 on seeds 0 and
  1). At n = 6 (the FPU chain, 200 trajectories) it gains more from order 4 (1.88x against 1.67x; 2.13x before the
  mass-matrix target), and its fit there takes 69-84 s of CPU with one thread (~9 s more with the calibration's
  full solve; 175 s before the search assembled each covariance's atom pairs once, Session 9; budget 120 s).
  Then (Session 14, :mod:`learners.shadow.structure_choice`) the element structures the dimension admits --
  ``bodies(k, d)`` for ``d`` in 2, 3 with ``k d = n`` and ``chain(n)`` with fixed ends -- are screened by the same
  held-out error (stage 1 of the element search), the best refined where its screen already beats the kernel kept,
  and kept only where lower than the default kernels' unrotated fit by ``structure_choice.STRUCTURE_MARGIN`` (``model.kernel_structure`` records it, None
  otherwise). Measured (benchmarks/RESULTS_identification.md, Session 14, seed 0): bodies(2, 2) kept on two planar
  two-body problems (held-out -19.4 / -18.4 against the default kernels' -7.6 / -7.3; energy differences 2.14e-2 ->
  2.9e-4 and 3.83 -> 5.6e-4; fit 28 -> 58 / 76 s of CPU), chain(6) on the README's FPU chain (-12.3 against -9.7;
  order-4 gain 2.14x -> 3.71x; fit 127 -> 363 s: over the 120 s budget), chain(4) on a chain of identical
  position-dependent masses (at degenerate scales, kept by DEGENERATE_MARGIN: energy differences 4.3e-4 -> 1.25e-4),
  nothing on oscillators and an unequal-mass chain (screens 8-13 behind: the same fit; the screens' own CPU 9.5 and
  13.4 s, about 30% of those fits);
* ``"rbf"`` or None (None is not the default: it means the RBF, as model files from before the switch to ``"auto"``
  record it): :class:`~learners.shadow.kernels.RBFKernel` on :math:`(q, v)`, learned, at every ``n``;
* ``"mechanical"``: :class:`~learners.shadow.mechanical.MechanicalKernel` of the default degree, learned;
* a :class:`~learners.shadow.mechanical.MechanicalKernel` (e.g. ``MechanicalKernel(degree=4)``): a template that
  carries the options; the model builds its own copy for the data's dimension and learns its scales (the
  template is not modified, and a model file records it);
* an :class:`~learners.shadow.element_kernel.ElementKernel` (``ElementKernel.bodies(2, 2)``, ``ElementKernel.chain(6)``):
  a template too, opt-in (issue 27; :mod:`learners.shadow.element_search` learns its scales with the positions objective);
* a :class:`~learners.shadow.kernels.FunctionalKernel`: used exactly as given, no learning.
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

import gpytorch
import torch
from gpytorch.constraints import Positive

from bea.errors import BeaTypeError, BeaValueError

from .gp import FunctionalGP
from .element_kernel import ElementKernel
from .kernels import FunctionalKernel, RBFKernel, SmoothKernel
from .mechanical import MechanicalKernel

__all__ = ["KERNELS", "kernel_option", "base_kernel", "new_gp"]

#: the kernels a string may name
KERNELS = ("rbf", "mechanical", "auto")

KernelOption = Union[str, MechanicalKernel, ElementKernel, FunctionalKernel, None]


def kernel_option(kernel: KernelOption, lengthscale=None) -> Tuple[Optional[FunctionalKernel], Optional[SmoothKernel]]:
    """``(kernel used as given, template of a learned kernel)``; both None for the learned RBF. ``lengthscale``: the
    model's fixed one, which an element kernel's named scales cannot take."""
    if kernel is None or (isinstance(kernel, str) and kernel in ("rbf", "auto")):
        return None, None
    if isinstance(kernel, str):
        if kernel == "mechanical":
            return None, MechanicalKernel()
        raise BeaValueError(f"kernel must be one of {', '.join(map(repr, KERNELS))}, a MechanicalKernel or ElementKernel (a "
                            f"template, learned) or a FunctionalKernel (used as given), got {kernel!r}")
    if isinstance(kernel, ElementKernel) and lengthscale is not None:  # one value cannot set named scales of other kinds
        raise BeaValueError(f"lengthscale= (or epsilon=) sets one scale for every parameter, but an ElementKernel's "
                            f"{', '.join(kernel.parameter_names())} are lengthscales, velocity scales and relative "
                            f"group scales: leave lengthscale= out and let the model learn them")
    if isinstance(kernel, (MechanicalKernel, ElementKernel)):  # templates: the model builds and learns its own copy
        return None, kernel
    if isinstance(kernel, FunctionalKernel):
        if isinstance(kernel.base_kernel, ElementKernel):  # its maps would stay in the data's coordinates, not the fit's
            raise BeaTypeError("an ElementKernel cannot be used as given (FunctionalKernel(ElementKernel...)): the model "
                               "fits in standardised coordinates, which only a learned copy's maps are carried into; pass "
                               "kernel=ElementKernel.bodies(...) / .chain(...) itself (its scales are learned)")
        return kernel, None
    if isinstance(kernel, SmoothKernel):
        raise BeaTypeError(f"a {type(kernel).__name__} cannot be learned as kernel=: wrap it as FunctionalKernel(base) with its "
                           f"hyperparameters set (used as given), or use 'rbf', 'mechanical', a MechanicalKernel or an "
                           f"ElementKernel")
    raise BeaTypeError(f"kernel must be a string ({', '.join(map(repr, KERNELS))}), a MechanicalKernel, an ElementKernel or a "
                       f"FunctionalKernel, got a {type(kernel).__name__}")


def base_kernel(template: Optional[MechanicalKernel], D: int, ard: bool, constraint) -> SmoothKernel:
    """A fresh base kernel to learn on :math:`\\mathbb R^D`: the RBF, or a copy of ``template``."""
    if template is None:
        return RBFKernel(ard_num_dims=D if ard else None, lengthscale_constraint=constraint)
    return template.build(D, ard, constraint)


def _exp_positive() -> Positive:
    return Positive(transform=torch.exp, inv_transform=torch.log)


def new_gp(user_kernel: Optional[FunctionalKernel], template: Optional[MechanicalKernel], D: int, ard: bool,
           device: torch.device) -> FunctionalGP:
    r"""A GP to fit on :math:`\mathbb R^D`, on ``device`` in float64: with ``user_kernel`` as given, else with a fresh
    learned kernel (:func:`base_kernel`; scales positive through a log) and the nugget on a log scale (its floor
    ``MIN_NOISE``, relative to the outputscale, is enforced by ``set_hyperparameters``)."""
    # GPyTorch makes its parameters and constraint bounds on torch's default device: here, on the data's
    with torch.device(device):
        if user_kernel is not None:
            kernel = user_kernel
        else:
            kernel = FunctionalKernel(base_kernel(template, D, ard, _exp_positive()), outputscale_constraint=_exp_positive())
        gp = FunctionalGP(kernel, noise=1e-12, min_noise=0.0)
        gp.likelihood = gpytorch.likelihoods.GaussianLikelihood(noise_constraint=_exp_positive())
    gp.likelihood.noise = torch.tensor(1e-12, dtype=torch.float64, device=device)
    return gp.to(device=device, dtype=torch.float64)  # float64 whatever the caller's default dtype
