r"""A high-precision reference flow: Taylor series in multiple-precision arithmetic (mpmath).

The Euler--Lagrange equations :math:`\ddot q = M^{-1}(\partial L/\partial q - L_{vq}\dot q)` of a
symbolic Lagrangian are integrated by :func:`mpmath.odefun` (a Taylor series method whose degree and
steps follow the working precision) with ``digits`` significant decimal digits, and rounded to float64
at the output times. Its error is far below a float64 solver's (a few units of ``10^-digits``
relative), so it resolves the global error of a scheme where SciPy's DOP853 at ``rtol = 1e-13``
(:func:`integrators.reference_flow`) would itself be of the size of what is measured.

The arithmetic runs in a private :class:`mpmath.MPContext`: ``M``, ``b`` and the energy are compiled
with ``sympy.lambdify`` and SymPy's ``MpmathPrinter``, which writes a rational constant :math:`p/q` as
``mpf(p)/mpf(q)`` (so it carries ``digits`` digits, not float64's 16), with the module name ``mpmath``
bound to that context; the precision of the global ``mpmath.mp`` is never touched.

A Taylor series steps over a pole (a collision) without noticing and returns finite garbage beyond it,
so every output state is checked: real and finite, and its energy
:math:`H = v\cdot\partial L/\partial v - L` (conserved by the exact flow) within ``10^{-digits/2}`` of its
initial value, relative to the size :math:`|v\cdot\partial L/\partial v| + |L|` of the terms at the start;
otherwise :class:`~integrators.ReferenceFlowError` names the time and the drift. Slow: one trajectory at a
time, seconds per trajectory for the Lagrangians in :mod:`integrators.systems`.
"""

from __future__ import annotations

import mpmath
import numpy as np
import sympy
from sympy.printing.pycode import MpmathPrinter

from bea.errors import BeaValueError
from .flow_errors import ReferenceFlowError

__all__ = ["taylor_integrate", "MAX_DIGITS"]

#: the most significant digits a Taylor reference works in (its cost grows quickly with the precision)
MAX_DIGITS = 200


def _compile(ctx, args, exprs):
    """``exprs`` as one function of ``args`` computing in ``ctx``'s numbers (``mpmath.x`` resolves to ``ctx.x``)."""
    return sympy.lambdify(args, exprs, modules=[{"mpmath": ctx}], printer=MpmathPrinter({"fully_qualified_modules": True}))


def _rhs(sl, ctx, params):
    """``f(y)`` for ``y = (q, v)`` in ``ctx``'s numbers: ``(v, M^{-1} b)``."""
    M, b = sl.euler_lagrange_data()
    n = sl.n
    fn = _compile(ctx, [*sl.q, *sl.v, *sl.params], [*M, *b])

    def f(y):
        vals = fn(*y, *params)
        Mm = ctx.matrix(n, n)
        for i in range(n * n):
            Mm[i // n, i % n] = vals[i]
        try:
            acc = ctx.lu_solve(Mm, ctx.matrix(vals[n * n:]))
        except ZeroDivisionError:
            raise ReferenceFlowError(f"the mass matrix d^2L/dv^2 of {sl.name} is singular on the way: the Euler-Lagrange "
                                     "equations do not determine the acceleration") from None
        return list(y[n:]) + [acc[i] for i in range(n)]

    return f


def _energy_check(sl, ctx, params, digits: int):
    """``for_start(init)``, which gives ``check(t, y)``: raises :class:`ReferenceFlowError` unless ``y`` is real,
    finite, and conserves the energy of ``init`` to ``10^(-digits/2)`` relative to the start's term size (see the
    module docstring). The energy's terms are compiled once, for every trajectory."""
    p_dot_v = sum(vi * pi for vi, pi in zip(sl.v, sl.momentum_exprs))
    fn = _compile(ctx, [*sl.q, *sl.v, *sl.params], [p_dot_v, sl.expr])
    tol = ctx.mpf(10) ** (-(digits // 2))

    def for_start(init):
        pv0, L0 = fn(*init, *params)
        return _checker(fn, params, ctx, pv0 - L0, abs(pv0) + abs(L0), tol)

    return for_start


def _checker(fn, params, ctx, H0, scale, tol):
    """The check of one trajectory (:func:`_energy_check`)."""

    def check(t: float, y) -> None:
        if not all(isinstance(c, ctx.mpf) and ctx.isfinite(c) for c in y):
            raise ReferenceFlowError(f"the Taylor reference reached a complex or non-finite state at t={t!r} "
                                     "(a singularity on the way? the Euler-Lagrange equations cannot be continued there)")
        pv, L = fn(*y, *params)
        drift = abs(pv - L - H0) / scale if scale else abs(pv - L - H0)
        if not drift <= tol:
            raise ReferenceFlowError(f"the Taylor reference's energy drifted by {float(drift):.3g} (relative, allowed "
                                     f"{float(tol):.0e}) at t={t!r}: a singularity or collision on the way?")

    return check


def taylor_integrate(sl, y0: np.ndarray, t0: float, ts: np.ndarray, digits: int) -> np.ndarray:
    r"""States ``(len(ts), B, 2n)`` of the Euler--Lagrange flow of the symbolic Lagrangian ``sl`` (its
    parameters bound) from ``y0`` ``(B, 2n)`` at ``t0``, one Taylor integration per trajectory and per
    side of ``t0`` (times before ``t0`` run the reversed field :math:`-f` forward in :math:`t_0 - t`:
    mpmath integrates forward only). Raises :class:`ReferenceFlowError` where a state fails the check above."""
    if not (isinstance(digits, int) and 20 <= digits <= MAX_DIGITS):
        raise BeaValueError(f"digits must be an integer in [20, {MAX_DIGITS}], got {digits!r}")
    ctx = mpmath.MPContext()
    ctx.dps = digits
    params = [ctx.mpf(p) for p in sl._param_values()]
    f = _rhs(sl, ctx, params)
    check_from = _energy_check(sl, ctx, params, digits)
    out = np.empty((ts.size, y0.shape[0], y0.shape[1]))
    start = ctx.mpf(t0)
    for b in range(y0.shape[0]):
        init = [ctx.mpf(float(x)) for x in y0[b]]
        check = check_from(init)
        for sign in (1, -1):
            # in the direction of integration, so that the first failing time is the one reported
            idx = sorted(np.nonzero(sign * (ts - t0) >= 0)[0], key=lambda k: abs(ts[k] - t0))
            if not idx:
                continue
            sol = ctx.odefun(lambda s, y, sign=sign: [sign * c for c in f(y)], 0, init)
            for k in idx:
                y = sol(abs(ctx.mpf(float(ts[k])) - start))
                check(float(ts[k]), y)
                out[k, b] = [float(c) for c in y]
    return out
