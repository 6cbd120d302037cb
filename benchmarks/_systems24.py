"""A per-body system with unequal masses written by session 24 (branch unequal14) and committed BEFORE any fit of it,
to check that a remedy for two_body_unequal4 (whose trap is proportional to the masses, so the centre of mass and the
relative motion separate exactly) fixes the class and not only that system.

Masses 1 : 3, a softened Plummer attraction, and an anharmonic trap that is the same for both bodies (not proportional
to the masses) and not isotropic, so ``L`` does not split into a centre-of-mass part and a relative part.
"""

from __future__ import annotations

import sympy

__all__ = ["plummer_unequal4", "lj_unequal4", "NEW24"]


def plummer_unequal4():
    """Two bodies in the plane, masses 1 and 3, a softened Plummer attraction ``-m1 m2 / (2 sqrt(r^2 + 2/5))``, in the
    same anharmonic trap for both, ``(x^2 + 2 y^2 / 3) / 10 + x^4 / 12`` per body: the trap's force per unit mass differs
    between the bodies, so the centre of mass and the relative motion are coupled."""
    import integrators

    q = sympy.symbols("x1 y1 x2 y2", real=True)
    v = sympy.symbols("u1 w1 u2 w2", real=True)
    m = (1, 1, 3, 3)
    r2 = (q[0] - q[2])**2 + (q[1] - q[3])**2 + sympy.Rational(2, 5)
    trap = sum((q[2 * i]**2 + sympy.Rational(2, 3) * q[2 * i + 1]**2) / 10 + q[2 * i]**4 / 12 for i in range(2))
    V = -sympy.Rational(3, 2) / sympy.sqrt(r2) + trap
    T = sum(mi * x**2 for mi, x in zip(m, v)) / 2
    return integrators.systems.from_sympy(T - V, q, v, "plummer_unequal4", domain=[(-0.7, 0.7)] * 4 + [(-0.35, 0.35)] * 4)


def lj_unequal4():
    """Session 24 (branch pick14), written before any fit: two bodies in the plane, masses 1 and 2, a softened
    Lennard-Jones-like (4-2) pair ``(s^-2 / 16 - s^-1 / 2) / 2`` with ``s = r^2 + 1/4`` (session 24 wrote "minimum
    at ``r = 1/2``, repulsive inside"; session 25: its minimum is at ``r = 0``, depth 1/2, a flat quartic bottom
    ``-1/2 + 8 r^4``, the force ``r^3 / (2 s^3)`` largest at ``r = 1/2``, then falling as ``r^-3``), in the same
    quartic trap for both, ``(x^2 + y^2) / 10 + (x^4 + y^4) / 8`` per body (not proportional to the masses: centre
    of mass and relative motion coupled)."""
    import integrators

    q = sympy.symbols("x1 y1 x2 y2", real=True)
    v = sympy.symbols("u1 w1 u2 w2", real=True)
    m = (1, 1, 2, 2)
    s = (q[0] - q[2])**2 + (q[1] - q[3])**2 + sympy.Rational(1, 4)
    pair = (1 / (16 * s**2) - 1 / (2 * s)) / 2
    trap = sum(x**2 / 10 + x**4 / 8 for x in q)
    T = sum(mi * x**2 for mi, x in zip(m, v)) / 2
    return integrators.systems.from_sympy(T - pair - trap, q, v, "lj_unequal4", domain=[(-0.7, 0.7)] * 4 + [(-0.35, 0.35)] * 4)


NEW24 = [(plummer_unequal4, 0.2, 150), (lj_unequal4, 0.2, 150)]
