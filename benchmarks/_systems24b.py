"""Three systems written for issue 23's acceptance by session 24 (branch sweep14) and committed BEFORE any fit of them:
the outsider's check on main with library defaults, one per class the issue names (an anharmonic oscillator with cubic
couplings, a chain with position-dependent mass, a softened planar two-body problem), each with numbers that no other
list uses.

- ``cubic_coupled3`` differs from ``anharmonic3`` / ``anharmonic_unequal3`` / ``henon3``: a harmonic coupling between
  coordinates 0 and 2 (the normal modes are not the coordinate axes), a cubic self-term, and other stiffnesses and
  cubic couplings.
- ``tanh_mass_chain4`` differs from ``mass_chain4`` / ``mass_chain_unequal4`` / ``mass_chain6``: masses that are odd in
  ``q`` (``1 + 3/10 tanh q_i``, so lighter on one side), free ends with on-site pins, springs with a cubic term.
- ``gravity_unequal4``: masses 1 : 5/2, the gravitational ``-m1 m2 / sqrt(r^2 + 1/2)``, one isotropic trap of
  stiffness 1/6 for both bodies (not proportional to the masses: the centre of mass and the relative motion couple).
"""

from __future__ import annotations

import sympy

__all__ = ["cubic_coupled3", "tanh_mass_chain4", "gravity_unequal4", "NEW24B"]

_R = sympy.Rational


def cubic_coupled3():
    """Three unit masses, stiffnesses 7/10, 6/5, 9/5, a harmonic coupling ``q0 q2 / 5``, and the cubic terms
    ``q0 q1^2 / 6 - q0^2 q2 / 5 + 3 q1 q2^2 / 20 + q1^3 / 10`` (``V``'s Hessian stays positive definite in the box: its
    smallest eigenvalue on a 9^3 grid of it is 0.124, at a corner; 0.665 at the centre)."""
    import integrators

    q = sympy.symbols("q0:3", real=True)
    v = sympy.symbols("v0:3", real=True)
    k = (_R(7, 10), _R(6, 5), _R(9, 5))
    V = sum(ki * x**2 for ki, x in zip(k, q)) / 2 + q[0] * q[2] / 5 + q[0] * q[1]**2 / 6 \
        - q[0]**2 * q[2] / 5 + _R(3, 20) * q[1] * q[2]**2 + q[1]**3 / 10
    return integrators.systems.from_sympy(sum(x**2 for x in v) / 2 - V, q, v, "cubic_coupled3",
                                          domain=[(-0.65, 0.65)] * 3 + [(-0.55, 0.55)] * 3)


def tanh_mass_chain4():
    """Four sites with masses ``mu_i (1 + 3/10 tanh q_i)``, ``mu = (1, 6/5, 4/5, 1)``, pinned on site by
    ``p_i q_i^2 / 2``, ``p = (1, 3/4, 5/4, 1)``, neighbours (free ends) joined by springs ``r^2 / 4 + r^3 / 12``
    (``r = q_(i+1) - q_i``)."""
    import integrators

    q = sympy.symbols("q0:4", real=True)
    v = sympy.symbols("v0:4", real=True)
    mu, p = (1, _R(6, 5), _R(4, 5), 1), (1, _R(3, 4), _R(5, 4), 1)
    T = sum(mu[i] * (1 + _R(3, 10) * sympy.tanh(q[i])) * v[i]**2 / 2 for i in range(4))
    r = [q[i + 1] - q[i] for i in range(3)]
    V = sum(pi * x**2 / 2 for pi, x in zip(p, q)) + sum(x**2 / 4 + x**3 / 12 for x in r)
    return integrators.systems.from_sympy(T - V, q, v, "tanh_mass_chain4", domain=[(-0.6, 0.6)] * 4 + [(-0.5, 0.5)] * 4)


def gravity_unequal4():
    """Two bodies in the plane, masses 1 and 5/2, the softened gravitational attraction ``-m1 m2 / sqrt(r^2 + 1/2)``
    and one weak isotropic trap ``|x_i|^2 / 12`` for each body."""
    import integrators

    q = sympy.symbols("x1 y1 x2 y2", real=True)
    v = sympy.symbols("u1 w1 u2 w2", real=True)
    m = (1, 1, _R(5, 2), _R(5, 2))
    r2 = (q[0] - q[2])**2 + (q[1] - q[3])**2 + _R(1, 2)
    V = -_R(5, 2) / sympy.sqrt(r2) + sum(x**2 for x in q) / 12
    T = sum(mi * x**2 for mi, x in zip(m, v)) / 2
    return integrators.systems.from_sympy(T - V, q, v, "gravity_unequal4", domain=[(-0.75, 0.75)] * 4 + [(-0.35, 0.35)] * 4)


#: (system, h, trajectories): the brief's steps and counts (issue 23's 0.1-0.3 and 100-200), chosen before any fit
NEW24B = [(cubic_coupled3, 0.2, 120), (tanh_mass_chain4, 0.15, 150), (gravity_unequal4, 0.2, 150)]
