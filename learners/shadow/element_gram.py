r"""The element kernel's covariance as a sum of its parts' Grams, each reused while its own scales stay.

The element kernel (:mod:`~learners.shadow.element_kernel`) is a sum over its groups and the correction,

.. math::  \Theta(F, F) = \sum_p s_p^2\, G_p(\ell_p, \lambda_p), \qquad
           G_p = \sigma_f^2\,\Lambda\Lambda^\top k_p, \quad k_p = \sum_{e, e' \in p} k_g(D_p w_e, D_p w_{e'})
           \ \text{(the correction: one term)},

where a part's Gram :math:`G_p` depends on its own scales :math:`(\ell_p, \lambda_p)` only and its variance
:math:`s_p^2` enters linearly. The element search's later stages (:mod:`~learners.shadow.element_search`: the
correction's scan, 2b, and the untied coordinate search, 3) move one parameter at a time, so most parts' Grams of a
trial are those of the point it moves from: under :func:`reusing_parts` the positions objective's covariance
(:func:`~learners.shadow.symmetric_covariance.symmetric_covariance`) is assembled part by part, a part's Gram taken
from the last :data:`KEPT` of its own that were assembled with the same functionals, maps, scales and outputscale,
and only a part whose scales moved is assembled again (the closed-form blocks only: ``closed_form=False`` assembles in
one pass). A trial that moves a variance :math:`s_p` (the correction's scale, a group's scale) then costs its Cholesky
factor and the objective, no assembly.

The sum is the same as the one-pass assembly, in another order (each part's atoms summed into functionals, then the
parts added): equal to rounding, not bit for bit -- the footing of the symmetric assembly itself, whose values the
objective may move at rounding amplified by the solve. Only these search evaluations use it; the fit's final solve
assembles in one pass as before. Memory, worked out (not measured): :data:`KEPT` Grams per part, :math:`F^2` doubles
each -- fpu6 at h 0.3 (chain(6), 3,868 functionals): 120 MB a Gram, 0.7 GB for its three parts --, freed when the stage
ends.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import List, Optional

import torch

from .functionals import Functionals

__all__ = ["KEPT", "reusing_parts", "part_covariance"]

#: Grams kept per part: the point the search moves from (the latest that improved, :meth:`_PartGrams.keeping`) and its
#: latest trial
KEPT = 2


def _same(a: tuple, b: Optional[tuple]) -> bool:
    """Keys equal: tensors (a part's maps) by identity -- the entry holds them, so a freed address cannot fool it, as
    :meth:`~learners.shadow.element_kernel.ElementKernel._half` -- everything else by value."""
    return b is not None and len(a) == len(b) and all(x is y if torch.is_tensor(x) else x == y for x, y in zip(a, b))


class _PartGrams:
    """Per part at most :data:`KEPT` entries ``[key, Gram, hit, stamp]``; the functionals they were assembled on. Full,
    a part never drops the Gram of the point the search moves from (``current``, :meth:`keeping`), then drops a Gram
    never reused before one that was (before any point is known: a trial's, which moved this part, before the start,
    which every trial moving another part reuses), else the one reused least recently."""

    def __init__(self):
        self.functionals: Optional[Functionals] = None
        self.kept: dict = {}
        self.clock = 0
        self.last: dict = {}  # per part, the key the latest assembly used
        self.current: dict = {}  # per part, the key of the point the search moves from

    def get(self, F: Functionals, part: int, key: tuple) -> Optional[torch.Tensor]:
        if F is not self.functionals:
            return None
        hit = next((entry for entry in self.kept.get(part, []) if _same(entry[0], key)), None)
        if hit is None:
            return None
        self.clock += 1
        hit[2:] = [True, self.clock]
        return hit[1]

    def put(self, F: Functionals, part: int, key: tuple, G: torch.Tensor) -> None:
        if F is not self.functionals:  # other functionals: nothing kept applies to them
            self.functionals, self.kept = F, {}
        entries = self.kept.setdefault(part, [])
        if len(entries) >= KEPT:  # the current point's last, then never reused first, then the oldest
            entries.remove(min(entries, key=lambda e: (_same(e[0], self.current.get(part)), e[2], e[3])))
        self.clock += 1
        entries.append([key, G, False, self.clock])

    def keeping(self, evaluate, best: float):
        """``evaluate`` that marks the parts' Grams of each evaluation lower than ``best`` and every value before it as
        the point the search moves from: a coordinate search (and the correction's scan) moves to exactly those."""
        lowest = [best]

        def marked(theta):
            self.last = {}
            val = evaluate(theta)
            if val < lowest[0]:
                lowest[0], self.current = val, dict(self.last)
            return val
        return marked


@contextmanager
def reusing_parts(kernel):
    """Within the block, the positions objective's covariance under the element kernel ``kernel`` (the GP's base
    kernel) is assembled part by part, each part's Gram reused while its scales stay (module docstring); the Grams are
    dropped on exit. Yields the :class:`_PartGrams` (its :meth:`~_PartGrams.keeping` marks the search's point)."""
    kernel._part_grams = _PartGrams()
    try:
        yield kernel._part_grams
    finally:
        kernel.__dict__.pop("_part_grams", None)


def _keys(kernel, outputscale: float) -> List[tuple]:
    """Per part (groups in order, then the correction) what its Gram depends on besides the functionals: its maps (the
    tensors themselves, compared by identity, and their versions; bind and ``.to`` replace them), its input scales and
    the outputscale."""
    groups, corr = kernel._layout()
    keys = []
    for i, (scales, _) in enumerate(groups):
        M, b = getattr(kernel, f"maps_{i}"), getattr(kernel, f"offsets_{i}")
        keys.append((M, M._version, b, b._version, tuple(scales.tolist()), outputscale))
    if corr is not None:
        keys.append(("correction", tuple(corr[0].tolist()), outputscale))
    return keys


def part_covariance(fk, F: Functionals) -> Optional[torch.Tensor]:
    r""":math:`\Theta(F, F)` of the functional kernel ``fk`` summed over its element kernel's parts (module docstring),
    without gradients; None where ``fk``'s base kernel is not within :func:`reusing_parts` or ``fk`` takes the autograd
    path (``closed_form=False``: its blocks come from ``pointwise``, which sums every part)."""
    kernel = fk.base_kernel
    grams = getattr(kernel, "_part_grams", None)
    if grams is None or not fk.closed_form:
        return None
    with torch.no_grad():
        groups, corr = kernel._layout()
        variances = [var for _, var in groups] + ([corr[1]] if corr is not None else [])
        total = None
        for part, (key, var) in enumerate(zip(_keys(kernel, float(fk.outputscale)), variances)):
            G = grams.get(F, part, key)
            if G is None:
                kernel._part = part  # derivative_block: this part alone, unit variance
                try:
                    G = fk.forward(F, F, symmetric=True)
                finally:
                    kernel.__dict__.pop("_part", None)
                grams.put(F, part, key, G)
            grams.last[part] = key
            total = var * G if total is None else total.add_(G, alpha=float(var))
        return total
