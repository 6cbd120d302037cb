"""A second system of the class "mass matrix that depends on q and is not diagonal", written by session 23 (branch
tp13) and committed BEFORE any fit of it, to check whether a kernel/normalisation that helps the triple pendulum
(_systems12.triple_pendulum3) helps that class and not only that system.

Unlike the triple pendulum it mixes a translation and angles (a cart and two links), has a spring, and its masses
and lengths are other numbers; like it, ``M(q)`` couples every pair of coordinates and varies over the box.
"""

from __future__ import annotations

import sympy

__all__ = ["cart_double_pendulum3", "NEW23"]


def cart_double_pendulum3():
    """A cart of mass 3/2 on a horizontal rail held by a spring of stiffness 1/2 (position ``x``), carrying a planar
    double pendulum (absolute angles ``a``, ``b`` from the downward vertical), bob masses 1 and 3/4, lengths 1 and 7/10,
    gravity 1. Bob positions ``(x + l1 sin a, -l1 cos a)`` and ``(x + l1 sin a + l2 sin b, -l1 cos a - l2 cos b)``;
    ``L = T - V`` with ``V = k x^2 / 2 - g (m1 + m2) l1 cos a - g m2 l2 cos b``. The mass matrix has
    ``M_xa = (m1 + m2) l1 cos a``, ``M_xb = m2 l2 cos b``, ``M_ab = m2 l1 l2 cos(a - b)``: all off-diagonal and
    q-dependent (over the box the matrix moves by up to 13% of its largest entry; ``M_ab`` alone by up to 83%)."""
    import integrators

    q = sympy.symbols("x a b", real=True)
    v = sympy.symbols("u w z", real=True)
    x, a, b = q
    u, w, z = v
    M, m1, m2 = sympy.Rational(3, 2), 1, sympy.Rational(3, 4)
    l1, l2, k = 1, sympy.Rational(7, 10), sympy.Rational(1, 2)
    # velocities of the bobs
    x1, y1 = u + l1 * sympy.cos(a) * w, l1 * sympy.sin(a) * w
    x2, y2 = x1 + l2 * sympy.cos(b) * z, y1 + l2 * sympy.sin(b) * z
    T = M * u**2 / 2 + m1 * (x1**2 + y1**2) / 2 + m2 * (x2**2 + y2**2) / 2
    V = k * x**2 / 2 - (m1 + m2) * l1 * sympy.cos(a) - m2 * l2 * sympy.cos(b)
    return integrators.systems.from_sympy(sympy.expand(T) - V, q, v, "cart_double_pendulum3",
                                          domain=[(-0.7, 0.7)] * 3 + [(-0.5, 0.5)] * 3)


#: (system, h, trajectories): the triple pendulum's step and count (issue 23's ranges), chosen before any fit
NEW23 = [(cart_double_pendulum3, 0.15, 150)]
