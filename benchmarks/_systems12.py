"""Four systems written for issue 23's acceptance by session 22 (branch sweep12) BEFORE any fit of them was run: the
checker's view, "systems, seeds and units that the tests never saw". None is in the suite or in
identification_acceptance.py's other lists; each is a class those lists lack: a mass matrix that depends strongly on
``q`` (the triple pendulum), a term linear in ``v`` (charges in a magnetic field), masses 1 : 4 with a pair force
that decays exponentially and a trap not proportional to the masses (so the centre of mass and the relative motion
do not separate), and a periodic Toda ring of six unequal masses.

:func:`rescaled` gives one of them in other units: positions times ``a``, the step times ``c`` (the same motion; the
energy is unchanged, ``E'(q', v') = E(q, v)``, so the acceptance numbers must be the same).
"""

from __future__ import annotations

import sympy

__all__ = ["triple_pendulum3", "magnetic4", "yukawa4", "toda_ring6", "rescaled", "NEW12"]


def triple_pendulum3():
    """A planar triple pendulum (absolute angles from the downward vertical), masses 2, 1, 1/2, lengths 1, 4/5, 3/5,
    gravity 1: ``M_jk(q) = l_j l_k S_max(j,k) cos(q_j - q_k)``, a mass matrix that changes by up to 25% over the box."""
    import integrators

    s = integrators.systems.n_pendulum(3, masses=[2, 1, sympy.Rational(1, 2)],
                                       lengths=[1, sympy.Rational(4, 5), sympy.Rational(3, 5)])
    return integrators.systems.System(s.expr, s.q, s.v, "triple_pendulum3", domain=[(-0.7, 0.7)] * 3 + [(-0.5, 0.5)] * 3,
                                      torch_form=s._torch_form)


def magnetic4():
    """Two charges in the plane (masses 1 and 2, charges 1 and -1/2) in a uniform magnetic field B = 3/5, vector
    potential ``A(x, y) = B (-y, x) / 2``, in a trap ``(x^2 + 3 y^2 / 2) / 8`` each, softened Coulomb attraction
    ``e1 e2 / sqrt(r^2 + 1/2)``: ``L = sum m_i |v_i|^2 / 2 + e_i A(q_i) . v_i - V(q)``, a term linear in ``v`` that is
    not a total derivative (curl A = B)."""
    import integrators

    q = sympy.symbols("x1 y1 x2 y2", real=True)
    v = sympy.symbols("u1 w1 u2 w2", real=True)
    m, e, B = (1, 2), (1, -sympy.Rational(1, 2)), sympy.Rational(3, 5)
    T = sum(m[i] * (v[2 * i]**2 + v[2 * i + 1]**2) for i in range(2)) / 2
    lin = sum(e[i] * B / 2 * (-q[2 * i + 1] * v[2 * i] + q[2 * i] * v[2 * i + 1]) for i in range(2))
    r2 = (q[0] - q[2])**2 + (q[1] - q[3])**2 + sympy.Rational(1, 2)
    V = e[0] * e[1] / sympy.sqrt(r2) + sum(q[2 * i]**2 + sympy.Rational(3, 2) * q[2 * i + 1]**2 for i in range(2)) / 8
    return integrators.systems.from_sympy(T + lin - V, q, v, "magnetic4", domain=[(-0.7, 0.7)] * 4 + [(-0.4, 0.4)] * 4)


def yukawa4():
    """Two bodies in the plane, masses 1 and 4, a softened Yukawa attraction ``-exp(-s) / s``, ``s = sqrt(r^2 + 1/4)``,
    in the same trap ``|x_i|^2 / 10`` for both (not proportional to the mass: the centre of mass and the relative
    motion are coupled)."""
    import integrators

    q = sympy.symbols("x1 y1 x2 y2", real=True)
    v = sympy.symbols("u1 w1 u2 w2", real=True)
    m = (1, 1, 4, 4)
    s = sympy.sqrt((q[0] - q[2])**2 + (q[1] - q[3])**2 + sympy.Rational(1, 4))
    V = -sympy.exp(-s) / s + sum(x**2 for x in q) / 10
    T = sum(mi * x**2 for mi, x in zip(m, v)) / 2
    return integrators.systems.from_sympy(T - V, q, v, "yukawa4", domain=[(-0.8, 0.8)] * 4 + [(-0.35, 0.35)] * 4)


def toda_ring6():
    """Six masses 1, 3/2, 3/4, 2, 5/4, 1/2 on a closed ring of Toda bonds ``exp(r) - 1 - r`` (``r = q_(i+1) - q_i``,
    periodic), each pinned weakly by ``q_i^2 / 10``."""
    import integrators

    q = sympy.symbols("q0:6", real=True)
    v = sympy.symbols("v0:6", real=True)
    m = (1, sympy.Rational(3, 2), sympy.Rational(3, 4), 2, sympy.Rational(5, 4), sympy.Rational(1, 2))
    r = [q[(i + 1) % 6] - q[i] for i in range(6)]
    V = sum(sympy.exp(x) - 1 - x for x in r) + sum(x**2 for x in q) / 10
    T = sum(mi * x**2 for mi, x in zip(m, v)) / 2
    return integrators.systems.from_sympy(T - V, q, v, "toda_ring6", domain=[(-0.6, 0.6)] * 6 + [(-0.5, 0.5)] * 6)


def rescaled(system, a: float, c: float):
    """``system`` with positions in a unit ``1/a`` times as large (``q' = a q``) and times in one where the step reads
    ``c`` times as much (``t' = c t``, so ``v' = a v / c``): ``L'(q', v') = L(q' / a, c v' / a)``. The energy
    ``v' . dL'/dv' - L'`` equals the old one at the same state, and the box is mapped, so the held-out states, the
    data's initial states (same seed) and the reference energies are the same physical ones."""
    import integrators

    sub = {x: x / a for x in system.q}
    sub.update({x: c * x / a for x in system.v})
    box = [(lo * a, hi * a) for lo, hi in system.domain[:system.n]] + [(lo * a / c, hi * a / c)
                                                                       for lo, hi in system.domain[system.n:]]
    return integrators.systems.from_sympy(system.expr.xreplace(sub), system.q, system.v,
                                          f"{system.name}(q x {a:g}, h x {c:g})", domain=box)


#: (system, h, trajectories): h in the issue's 0.1-0.3, trajectories in its 100-200; chosen before any fit
NEW12 = [(triple_pendulum3, 0.15, 150), (magnetic4, 0.2, 150), (yukawa4, 0.25, 150), (toda_ring6, 0.2, 200)]
