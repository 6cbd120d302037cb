r"""Lowering rules for the LU factorisation and solves of :mod:`bea` series, with the row interchanges traced.

Factor (LAPACK ``getrf``, right-looking Doolittle): for each k swap rows k and :math:`p_k`, then
:math:`\ell_{ik} = a_{ik}/a_{kk}`, :math:`a_{ij} \mathrel{-}= \ell_{ik} a_{kj}` (i, j > k). Solve: the interchanges,
then the unit lower and the upper triangular substitutions. The traced pivot order is guarded (docs/theory/tracing.md).
"""

from __future__ import annotations

import numpy as np

from ._trace_aten import _fold, _reduce, _rule
from .codegen.ir import OPAQUE, Program
from .compiled import NotLowerable

__all__ = []


def _pivot_guards(p: Program, col, r: int) -> None:
    """Guards that row ``r`` is the pivot partial pivoting chooses in ``col`` (the first largest magnitude): at a state
    needing other interchanges the element goes eager (a fixed row order is not stable: [[0.1, c], [c, 1]] swapped)."""
    mag = [abs(x) if isinstance(x, float) else p.value("max", x, p.value("sub", 0.0, x)) for x in col]
    for i, m in enumerate(mag):
        if i != r and not (isinstance(m, float) and isinstance(mag[r], float)):
            p.guard(p.value("gt" if i < r else "ge", mag[r], m), 1.0)


def _factor(p: Program, A: np.ndarray, piv) -> np.ndarray:
    a = A.copy()
    m = a.shape[0]
    for k in range(m):
        r = int(piv[k]) - 1
        _pivot_guards(p, a[k:, k], r - k)
        if r != k:
            a[[k, r]] = a[[r, k]]
        for i in range(k + 1, m):
            a[i, k] = p.div(a[i, k], a[k, k])
            for j in range(k + 1, m):
                a[i, j] = p.sub(a[i, j], p.mul(a[i, k], a[k, j]))
    return a


def _solve(p: Program, LU: np.ndarray, piv, B: np.ndarray) -> np.ndarray:
    x = B.copy()
    m = LU.shape[0]
    for k in range(m):
        r = int(piv[k]) - 1
        if r != k:
            x[[k, r]] = x[[r, k]]
    for i in range(m):  # unit lower triangular
        for j in range(i):
            x[i] = [p.sub(x[i, c], p.mul(LU[i, j], x[j, c])) for c in range(x.shape[1])]
    for i in reversed(range(m)):  # upper triangular
        for j in range(i + 1, m):
            x[i] = [p.sub(x[i, c], p.mul(LU[i, j], x[j, c])) for c in range(x.shape[1])]
        x[i] = [p.div(x[i, c], LU[i, i]) for c in range(x.shape[1])]
    return x


@_rule("aten.linalg_lu_factor_ex.default")
def _lu_factor_ex(p, args, kw, out):
    A = args[0]
    pivots = out[1].detach().cpu().numpy()
    LU = np.empty(A.shape, dtype=object)
    for idx in np.ndindex(*A.shape[:-2]):
        LU[idx] = _factor(p, A[idx], pivots[idx])
    return [LU, pivots.astype(float).astype(object), np.full(tuple(out[2].shape), 0.0, dtype=object)]


@_rule("aten.linalg_lu_solve.default")
def _lu_solve(p, args, kw, out):
    LU, piv, B = args[0], args[1], args[2]
    left = args[3] if len(args) > 3 else kw.get("left", True)
    adjoint = args[4] if len(args) > 4 else kw.get("adjoint", False)
    if not left or adjoint:
        raise NotLowerable("lu_solve with left=False or adjoint=True has no compiled form here")
    shape = tuple(out.shape)
    LU, piv, B = np.broadcast_to(LU, shape[:-2] + LU.shape[-2:]), np.broadcast_to(piv, shape[:-2] + piv.shape[-1:]), \
        np.broadcast_to(B, shape)
    X = np.empty(shape, dtype=object)
    for idx in np.ndindex(*shape[:-2]):
        if any(x is OPAQUE for x in piv[idx]):
            raise NotLowerable("lu_solve with pivots that were not traced")
        X[idx] = _solve(p, LU[idx], piv[idx], B[idx])
    return X


@_rule("aten.max.dim", "aten.min.dim")
def _max_dim(p, args, kw, out):
    op = "max" if kw["_op"].startswith("aten.max") else "min"
    values = _reduce(args[0], args[1], out[0].shape, _fold(p, op))
    return [values, np.full(tuple(out[1].shape), OPAQUE, dtype=object)]  # an argmax: no derivative, no lowering

