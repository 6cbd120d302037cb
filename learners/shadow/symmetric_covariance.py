r"""The covariance :math:`\Theta(F, F)` of one family of functionals with itself, each atom pair computed once.

:meth:`~learners.shadow.kernels.FunctionalKernel.forward` computes every entry of :math:`\Theta(F, F)`, both
triangles, and the GP then averages them (:meth:`~learners.shadow.gp.FunctionalGP.factor`). Because the kernel
is symmetric,

.. math::  \Theta = U + U^\top, \qquad U = \sum_{m < m'} P(A_m, A_{m'}) + \sum_m P^{\triangle}(A_m),

where :math:`P(A, A')_{ij} = \sigma_f^2\sum_{k \in A \cap i}\sum_{l \in A' \cap j} c_k c_l\,\partial\partial k(x_k, y_l)`
is the summed covariance of two atom sets (orders :math:`m, m'`) and :math:`P^{\triangle}(A)` the same for one set
with itself restricted to the atom pairs :math:`k \le l` in the set's order, the pairs of a chunk with itself
weighted :math:`\tfrac12` (so they count once, symmetrised). Each atom pair's kernel block -- the expensive
part: a mechanical kernel's is a few dozen dense products -- is then evaluated about once instead of twice. The
result equals the averaged full matrix to rounding (each entry is one of the two computed triangles' values
instead of their mean; tests/test_learners_symmetric_covariance.py), not bit for bit, so only the evaluations of
the ``"positions"`` objective use it (:func:`~learners.shadow.hyperparameter_search.objective`; n <= 2 defaults
too where the likelihood collapses into it), and so do the two solves after such a search -- the calibration's on
the training functionals (:func:`~learners.shadow.calibration.del_calibration`; where the kept GP's last solve in the
search was at the point kept, that solve is reused: the assembly is part of :class:`~learners.shadow.gp.FunctionalGP`'s
solve key) and the dense final solve on all data: the same footing as the values that chose the point, at about half
the assembly (fpu6's final solve, 4,828 functionals: 10-12 CPU s with both triangles, 6.0-6.4 without). Their values
move at rounding amplified by the solve, which could only change a search's choice between points that tie to that
level. Every other solve assembles the full matrix as before: the likelihood and held-out objectives (the n <= 2
defaults), the calibration and final solves of the fits they search, and, after a positions search too, the solves
on other functionals or targets under the fitted hyperparameters -- the conservation calibration's
(:func:`~learners.shadow.calibration._conservation`), the difference calibration's
(:func:`~learners.shadow.difference_calibration._conditioned`) and a stage scheme's iterations after its fit
(:func:`~learners.shadow.stage_lsi.fit_stages`); these move at rounding only through what they take from the fitted
model. (:meth:`~learners.shadow.gp.FunctionalGP.retarget` keeps the stored factor, whichever its assembly.) In the
element search's stages 2b-3 (within :func:`~learners.shadow.element_gram.reusing_parts`) an element kernel's
covariance is summed in another order again -- each part (group, correction) assembled alone, then the parts added
with their variances --: equal to rounding too, the same footing. Those solves carry the same key (``symmetric=True``),
so the calibration may reuse one of them: a part-by-part solve, equal to the symmetric assembly's to rounding, not bit
for bit.
"""

from __future__ import annotations

import torch

from .element_gram import part_covariance
from .functionals import Functionals
from .kernels import FunctionalKernel

__all__ = ["symmetric_covariance"]


def symmetric_covariance(kernel: FunctionalKernel, F: Functionals) -> torch.Tensor:
    r""":math:`\Theta(F, F)` (module docstring), exactly symmetric, without gradients in the hyperparameters (a
    search's evaluations need none; :meth:`FunctionalKernel.forward` is the path with them): that method's own
    assembly with ``symmetric=True``, under ``torch.no_grad()`` -- part by part, each part's Gram reused, for an element
    kernel within :func:`~learners.shadow.element_gram.reusing_parts` (the element search's later stages)."""
    with torch.no_grad():
        parts = part_covariance(kernel, F)  # an element kernel's parts, reused between the element search's trials
        return kernel.forward(F, F, symmetric=True) if parts is None else parts
