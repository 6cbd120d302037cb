r"""Results that keep only their own trees, and the modified equation of a stage scheme without its derivation's memory.

A derivation registers every intermediate tree in its :class:`~bea.free.trees.Forest` and memoises graphs and
partial results beside it (galerkin3 at :math:`h^8`: about 3 GB). A result is a few thousand trees of that forest:
:func:`compact` copies them into a fresh forest (the relabelling is increasing, so every monomial stays sorted).

:func:`lean_equation` is the public modified equation of a stage scheme by the route of
:meth:`~bea.free.derive.FreeDerivation.equation` (the Euler--Lagrange equations of its modified Lagrangian below twice
the first correction, :mod:`bea.free.euler_lagrange`), with the modified Lagrangian compacted and the derivation
released before the Euler--Lagrange step: that step's memory then adds to the Lagrangian's trees, not to the whole
derivation (galerkin3 at :math:`h^8`: the peak of the modified Lagrangian alone instead of that plus the step).
The series is the same.
"""

from __future__ import annotations

import gc
from typing import Dict, List, Optional, Tuple

from ..hseries import HSeries, Poly
from .algebra import Algebra
from .euler_lagrange import acceleration, equation_from_lagrangian, route_applies
from .trees import Forest


def compact(forest: Forest, polys: List[Poly]) -> Tuple[Forest, List[Poly]]:
    """The polynomials ``polys`` over a fresh forest holding only the trees they use, in the same order."""
    used = sorted({x for p in polys for m in p for x in m})
    fresh = Forest()
    new = {x: fresh.id(forest.trees[x]) for x in used}
    return fresh, [{tuple(new[x] for x in m): c for m, c in p.items()} for p in polys]


def lean_equation(derivation, order: int) -> Optional[Tuple[Forest, Dict[int, Poly], bool]]:
    """``(forest, coefficients, symmetric)`` of the modified equation to ``h^order`` of the stage-scheme
    ``derivation`` (a :class:`~bea.free.derive.FreeDerivation` nobody else holds: its memos are cleared), or ``None``
    where this route does not apply (not a stage scheme, ``order < 2``, or ``order`` not below twice the first
    correction); the caller then takes :meth:`~bea.free.derive.FreeDerivation.equation`."""
    if not derivation.is_stage_scheme or order < 2:
        return None
    lmod = derivation.modified_lagrangian(order)
    if not route_applies(lmod, order):
        return None
    symmetric = derivation.symmetric
    forest, polys = compact(derivation.forest, [lmod[k] for k in range(order + 1)])
    derivation.release()  # the caller's only reference: release the intermediate trees and memos now
    del lmod
    gc.collect()
    F = equation_from_lagrangian(Algebra(forest), HSeries(polys, order), acceleration(forest), order)
    forest, polys = compact(forest, [F[k] for k in range(order + 1)])  # not the Lagrangian's trees the step left
    return forest, dict(enumerate(polys)), symmetric
