r"""A high-precision reference flow: Taylor series in multiple-precision arithmetic (mpmath).

The Euler--Lagrange equations :math:`\ddot q = M^{-1}(\partial L/\partial q - L_{vq}\dot q)` of a
symbolic Lagrangian are integrated by :func:`mpmath.odefun` (a Taylor series method whose degree and
steps follow the working precision) with ``digits`` significant decimal digits, and rounded to float64
at the output times. Its error is far below a float64 solver's (a few units of ``10^-digits``
relative), so it resolves the global error of a scheme where SciPy's DOP853 at ``rtol = 1e-13``
(:func:`integrators.reference_flow`) would itself be of the size of what is measured.

The arithmetic runs in a private :class:`mpmath.MPContext` (``M`` and ``b`` compiled against it with
``sympy.lambdify``), so the precision of the global ``mpmath.mp`` is never touched. Slow: one
trajectory at a time, seconds per trajectory for the Lagrangians in :mod:`integrators.systems`.
"""

from __future__ import annotations

import mpmath
import numpy as np
import sympy

from bea.errors import BeaValueError

__all__ = ["taylor_integrate"]


def _namespace(ctx) -> dict:
    """mpmath's names (``mpf``, ``sin``, ``sqrt``, ...) bound to ``ctx``, for ``sympy.lambdify``."""
    names = [k for k in dir(mpmath) if not k.startswith("_") and hasattr(ctx, k)]
    return {k: getattr(ctx, k) for k in names}


def _rhs(sl, ctx):
    """``f(y)`` for ``y = (q, v)`` in ``ctx``'s numbers: ``(v, M^{-1} b)``."""
    M, b = sl.euler_lagrange_data()
    n = sl.n
    fn = sympy.lambdify([*sl.q, *sl.v, *sl.params], [*M, *b], modules=[_namespace(ctx)])
    params = [ctx.mpf(p) for p in sl._param_values()]

    def f(y):
        vals = fn(*y, *params)
        Mm = ctx.matrix(n, n)
        for i in range(n * n):
            Mm[i // n, i % n] = vals[i]
        try:
            acc = ctx.lu_solve(Mm, ctx.matrix(vals[n * n:]))
        except ZeroDivisionError:
            raise BeaValueError(f"the mass matrix d^2L/dv^2 of {sl.name} is singular on the way: the Euler-Lagrange "
                                "equations do not determine the acceleration") from None
        return list(y[n:]) + [acc[i] for i in range(n)]

    return f


def taylor_integrate(sl, y0: np.ndarray, t0: float, ts: np.ndarray, digits: int) -> np.ndarray:
    r"""States ``(len(ts), B, 2n)`` of the Euler--Lagrange flow of the symbolic Lagrangian ``sl`` (its
    parameters bound) from ``y0`` ``(B, 2n)`` at ``t0``, one Taylor integration per trajectory and per
    side of ``t0`` (times before ``t0`` run the reversed field :math:`-f` forward in :math:`t_0 - t`:
    mpmath integrates forward only)."""
    if not (isinstance(digits, int) and 20 <= digits <= 200):
        raise BeaValueError(f"digits must be an integer in [20, 200], got {digits!r}")
    ctx = mpmath.MPContext()
    ctx.dps = digits
    f = _rhs(sl, ctx)
    out = np.empty((ts.size, y0.shape[0], y0.shape[1]))
    start = ctx.mpf(t0)
    for b in range(y0.shape[0]):
        init = [ctx.mpf(float(x)) for x in y0[b]]
        for sign in (1, -1):
            idx = np.nonzero(sign * (ts - t0) >= 0)[0]
            if idx.size == 0:
                continue
            sol = ctx.odefun(lambda s, y, sign=sign: [sign * c for c in f(y)], 0, init)
            for k in idx:
                out[k, b] = [float(c) for c in sol(abs(ctx.mpf(float(ts[k])) - start))]
    return out
