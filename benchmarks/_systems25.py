"""Per-body systems of unequal masses for session 25 (branch pair15), registered in the acceptance runner (``NEW25``).

``morse_unequal4`` and ``spring10_unequal4`` are the session 24 reviewer's (first written in
``benchmarks/exact_body_targets.py``, which now imports them from here). ``coulomb_unequal4`` was written and committed
by branch pair15 BEFORE any fit of it: masses 1 : 4, a softened Coulomb *repulsion* (every other pair on record
attracts), in an anisotropic, slightly anharmonic trap that is the same for both bodies (not proportional to the
masses: the centre of mass and the relative motion are coupled), h 0.2, 150 trajectories.
"""

from __future__ import annotations

import sympy

__all__ = ["morse_unequal4", "spring10_unequal4", "coulomb_unequal4", "NEW25"]


def _body_system(name, m, pair, trap, soft=sympy.Rational(1, 10)):
    """Two bodies in the plane, ``q = (x1, y1, x2, y2)``, masses ``m`` per coordinate, ``L = T - pair(r) - trap(q)`` with
    the softened distance ``r = sqrt(|q_1 - q_2|^2 + soft)``."""
    import integrators

    q = sympy.symbols("x1 y1 x2 y2", real=True)
    v = sympy.symbols("u1 w1 u2 w2", real=True)
    r = sympy.sqrt((q[0] - q[2])**2 + (q[1] - q[3])**2 + soft)
    T = sum(mi * x**2 for mi, x in zip(m, v)) / 2
    return integrators.systems.from_sympy(T - pair(r) - trap(q), q, v, name, domain=[(-0.7, 0.7)] * 4 + [(-0.35, 0.35)] * 4)


def morse_unequal4():
    """The session 24 reviewer's: masses 1 : 5, softened Morse pair (a = 3/2, rest 1/2), anisotropic trap x^2/8 + y^2/5."""
    half, a = sympy.Rational(1, 2), sympy.Rational(3, 2)
    return _body_system("morse_unequal4", (1, 1, 5, 5), lambda r: (1 - sympy.exp(-a * (r - half)))**2,
                        lambda q: sum(q[2 * i]**2 / 8 + q[2 * i + 1]**2 / 5 for i in range(2)))


def spring10_unequal4():
    """The session 24 reviewer's: masses 1 : 3, softened spring k = 10 (rest 1/2), trap |q|^2 / 10 per body."""
    return _body_system("spring10_unequal4", (1, 1, 3, 3), lambda r: 10 * (r - sympy.Rational(1, 2))**2 / 2,
                        lambda q: sum(x**2 for x in q) / 10)


def coulomb_unequal4():
    """Session 25 (branch pair15), written before any fit: masses 1 : 4, a softened Coulomb repulsion
    ``3 / (5 sqrt(|q_1 - q_2|^2 + 1/5))``, the trap ``x^2/6 + y^2/4 + x^4/20`` per body (anisotropic, anharmonic, the
    same for both bodies). Linear trap frequencies 0.58 / 0.71 (light) and 0.29 / 0.35 (heavy); the pair's radial
    curvature is at most ~1.3 (at r ~ 0.5), omega h <= 0.3 at h 0.2."""
    return _body_system("coulomb_unequal4", (1, 1, 4, 4), lambda r: sympy.Rational(3, 5) / r,
                        lambda q: sum(q[2 * i]**2 / 6 + q[2 * i + 1]**2 / 4 + q[2 * i]**4 / 20 for i in range(2)),
                        soft=sympy.Rational(1, 5))


NEW25 = [(morse_unequal4, 0.2, 150), (spring10_unequal4, 0.2, 150), (coulomb_unequal4, 0.2, 150)]
