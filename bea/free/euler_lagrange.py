r"""The modified equation from the modified Lagrangian, below twice its first correction.

The Euler--Lagrange equations of :math:`L_{mod} = L + \sum_{k \ge c} h^k L_k` are the modified equation
(Vermeeren 2017; :mod:`bea.free.derive`). Written out,

.. math::  M\ddot q - (L_q - L_{qv}[v]) + \sum_{k \ge c} h^k \big(D\,\partial_v L_k - \partial_q L_k\big) = 0,

and in the sum :math:`D` acts along :math:`\ddot q = A + O(h^c)`, so to :math:`h^r` with :math:`r < 2c`

.. math::  F = A - \sum_{c \le k \le r} h^k M^{-1}\big(D_A\,\partial_v L_k - \partial_q L_k\big).

Why this is the modified equation to :math:`h^r`. The Euler--Lagrange equations of the full series
:math:`L_{mod}` hold on the modified flow exactly (as formal series); dropping its terms above :math:`h^r` changes them
only from :math:`h^{r+1}` on. In them :math:`D\,\partial_v L_k` holds :math:`\ddot q` (through
:math:`\partial_v\partial_v L_k\,\ddot q`), a higher time derivative of the curve, which is eliminated by the
modified equation itself; it is multiplied by :math:`h^k`, so :math:`\ddot q` is needed only to :math:`h^{r-k}` with
:math:`r-k \le r-c < c`, where :math:`F = A`. This is the reason for the limit :math:`r < 2c`: from :math:`h^{2c}` on,
:math:`h^k D_F\,\partial_v L_k` needs the correction of :math:`F` itself (the products of corrections,
:math:`M^{-1}\partial_v\partial_v L_k\,M^{-1}(\dots)`), and the discrete Euler--Lagrange residual is used instead
(:meth:`bea.free.derive.FreeDerivation.equation`). For a scheme of order :math:`2s` (:math:`c = 2s`) the orders
:math:`2s` and :math:`2s+2` lie below :math:`4s` for every :math:`s \ge 2`.

For a stage scheme this replaces the discrete Euler--Lagrange residual to :math:`h^{r+2}`, whose interior points must
be solved to that full order (a first variation has no envelope bound, :func:`bea.free.stages.interior_precision`),
by the modified Lagrangian to :math:`h^r`, two orders lower, and a few derivatives of its trees.
"""

from __future__ import annotations

from typing import Optional

from ..hseries import EXACT, HSeries, Q
from .algebra import Algebra
from .surgery import partial_parts
from .trees import A, OPEN, Forest


def _partial(alg: Algebra, S: HSeries, kind: int) -> HSeries:
    r""":math:`\partial_q` (``kind`` 0) or :math:`\partial_v` (1) of a scalar tree series, a covector series whose free
    slot is :data:`~bea.free.trees.OPEN`, normalised."""
    f = alg.forest
    memo = {}

    def d_tree(i: int, prec: int) -> HSeries:
        if i not in memo:
            out = {}
            for coef, g in partial_parts(f.graph(i), kind, OPEN):
                m = f.monomial(g)
                out[m] = out.get(m, 0) + coef
            memo[i] = alg.normalize(HSeries([{m: Q(c) for m, c in out.items() if c}], EXACT))
        return memo[i]

    return alg.normalize(alg.leibniz(S, d_tree, S.order))


def acceleration(forest: Forest) -> HSeries:
    r""":math:`F_0 = A`, the Euler--Lagrange acceleration of ``L`` (the zeroth order of every scheme's modified
    equation), as the vector tree ``A`` of ``forest``, known exactly."""
    return HSeries([{(forest.id((3, A)),): Q(1)}], EXACT)


def first_correction(lmod: HSeries, r: int) -> Optional[int]:
    r"""The lowest power :math:`c \in [1, r]` of ``h`` with a nonzero term of ``lmod`` (``None`` if all vanish). The
    route of :func:`equation_from_lagrangian` holds for ``r < 2c``: below that no product of two corrections enters."""
    return next((k for k in range(1, r + 1) if lmod[k]), None)


def route_applies(lmod: HSeries, r: int) -> bool:
    """Whether :func:`equation_from_lagrangian` holds to ``h^r``: ``r`` below twice the first correction (or none)."""
    c = first_correction(lmod, r)
    return c is None or r < 2 * c


def equation_from_lagrangian(alg: Algebra, lmod: HSeries, F0: HSeries, r: int) -> Optional[HSeries]:
    """:math:`F` to ``h^r`` from the modified Lagrangian ``lmod`` (known to ``h^r``) and :math:`F_0 = A` (module
    docstring); ``None`` where ``r`` is not below twice the first correction (the products of corrections enter)."""
    if not route_applies(lmod, r):
        return None
    c = first_correction(lmod, r)
    FA = HSeries(F0.c[:1], EXACT)
    out = [dict(F0.c[0])] + [{} for _ in range(r)]
    for k in range(c or r + 1, r + 1):
        if not lmod[k]:
            continue
        Lk = HSeries([lmod[k]], EXACT)
        E = alg.derivative(_partial(alg, Lk, 1), FA, 0) - _partial(alg, Lk, 0)
        Fk = alg.normalize(alg.raise_index(alg.normalize(E.truncate(0))))
        out[k] = {m: -x for m, x in Fk[0].items() if x}
    return HSeries(out, r)
