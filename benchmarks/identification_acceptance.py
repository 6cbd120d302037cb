"""Issue 23's acceptance systems (tests/test_learners_shadow_auto.py) under the library defaults, one kernel per
run: energy differences to a reference state after the best scale (N = 2, 4), their calibration (RMS z, fraction
within 2 sigma of 40 held-out differences), velocities within 2 sigma along a held-out trajectory, fit time.

Reuses the slow acceptance tests' systems, data (seed 0, 5 steps) and metrics, so a row here is what those tests
see. Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/identification_acceptance.py --system anharmonic3 --kernel mechanical
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/identification_acceptance.py --system toda3 --orders 2 --without-differences
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/identification_acceptance.py --system toda4 --no-std   # dE2, dE4 only
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/identification_acceptance.py --system henon3 --seed 1   # untuned
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/identification_acceptance.py --system pendula3 --degree 4   # diagnostic
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/identification_acceptance.py --system pendula3 --h 0.1 --steps 10
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/identification_acceptance.py --system wells3 --kernel auto --no-mass-target
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/identification_acceptance.py --system anharmonic6 --folds 5
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/identification_acceptance.py --system two_body4 --kernel element

``--seed`` draws other data (initial states) of the same system; the held-out states stay those of the tests.
``--h`` / ``--steps``: another step and trajectory length (a diagnostic: ``--h 0.1 --steps 10`` covers the same time
span as the default 0.2 x 5).
:data:`UNTUNED` holds systems that no test uses and nothing was tuned on: written for issue 23's session 8 (branch
id-auto) before any fit of them was run, to recheck the acceptance where nobody looked while choosing the default
(session 10 added two two-body problems, unequal masses with a trap and without one, the same way, and branch idmass
three coupled systems with unequal masses: cubic oscillators, an alternating FPU chain, a position-dependent-mass
chain; session 11's branch alt a Morse chain and coupled pendula with unequal masses, to validate its fix; branch six
the first n = 6 systems: cubic oscillators, a position-dependent-mass chain, three softened bodies in a trap, and
the README's FPU chain at h = 0.3; session 12's branch cal a ring of four unequal masses, to check a calibration
rule; session 13's branch elsearch two bodies in 3-d with a Morse bond, to check the element search's fix; session
22's branch sweep12 four more in _systems12.NEW12, and ``--units A C``: positions x A, the step x C; session 24's
branch sweep14 three more in _systems24b.NEW24B; session 25's branch pair15 _systems25.NEW25: the session 24
reviewer's two per-body systems and a softened Coulomb repulsion, masses 1 : 4). The last column
is the process's peak RSS (data, fit, std).

(``--orders``: the header keeps the N = 2, 4 columns; with one order the row has the first four: dE, RMS z, 2σ, max |z|.)
"""

from __future__ import annotations

import argparse
import resource
import time
import warnings

import sympy


def henon3():
    """A three-degree-of-freedom Henon-Heiles-like oscillator: unequal frequencies, cubic couplings of the
    Henon-Heiles form between neighbouring coordinates (session 8's untuned system)."""
    import integrators

    q = sympy.symbols("q0:3", real=True)
    v = sympy.symbols("v0:3", real=True)
    w2 = (1, sympy.Rational(3, 2), sympy.Rational(4, 5))
    V = sum(c * x**2 for c, x in zip(w2, q)) / 2 + sympy.Rational(1, 2) * (q[0]**2 * q[1] - q[1]**3 / 3) \
        + sympy.Rational(2, 5) * (q[1]**2 * q[2] - q[2]**3 / 3)
    return integrators.systems.from_sympy(sum(x**2 for x in v) / 2 - V, q, v, "henon3", domain=[(-0.5, 0.5)] * 6)


def pendula3():
    """Three unit pendula (gravity 1) coupled by torsion springs of stiffness 0.3 between neighbours (session 8's
    untuned system: a cosine potential, unlike every test system)."""
    import integrators

    q = sympy.symbols("q0:3", real=True)
    v = sympy.symbols("v0:3", real=True)
    V = -sum(sympy.cos(x) for x in q) + sympy.Rational(3, 20) * ((q[0] - q[1])**2 + (q[1] - q[2])**2)
    return integrators.systems.from_sympy(sum(x**2 for x in v) / 2 - V, q, v, "pendula3", domain=[(-0.9, 0.9)] * 6)


def wells3():
    """Three unit masses, each in a Poschl-Teller well -sech(q_i)^2, neighbours joined by springs of stiffness 1/2
    (session 9's untuned system, written before any fit of it: a potential rational in exp(q), unlike every other)."""
    import integrators

    q = sympy.symbols("q0:3", real=True)
    v = sympy.symbols("v0:3", real=True)
    V = -sum(sympy.sech(x)**2 for x in q) + sympy.Rational(1, 4) * ((q[0] - q[1])**2 + (q[1] - q[2])**2)
    return integrators.systems.from_sympy(sum(x**2 for x in v) / 2 - V, q, v, "wells3", domain=[(-0.7, 0.7)] * 6)


def two_body_unequal4():
    """Two bodies of masses 1 and 2 in the plane, softened attraction m1 m2 / (2 sqrt(r^2 + 1/4)), in a harmonic trap
    proportional to each mass (stiffness m_i / 8), so the centre of mass and the relative motion still separate
    (session 10's untuned system, written before any fit of it: the second two-body problem of issue 23, with unequal
    masses, so the mass matrix is not a multiple of the identity in the standardised coordinates)."""
    import integrators

    q = sympy.symbols("x1 y1 x2 y2", real=True)
    v = sympy.symbols("u1 w1 u2 w2", real=True)
    m = (1, 1, 2, 2)
    r2 = (q[0] - q[2])**2 + (q[1] - q[3])**2 + sympy.Rational(1, 4)
    T = sum(mi * x**2 for mi, x in zip(m, v)) / 2
    V = -1 / sympy.sqrt(r2) + sum(mi * x**2 for mi, x in zip(m, q)) / 16
    return integrators.systems.from_sympy(T - V, q, v, "two_body_unequal4", domain=[(-0.7, 0.7)] * 4 + [(-0.35, 0.35)] * 4)


def two_body_free4():
    """Two bodies of masses 1 and 3/2 in the plane, softened attraction m1 m2 / (2 sqrt(r^2 + 1/3)), no trap: the centre
    of mass moves freely, so the data show no force along it (session 10's second untuned two-body system, written
    before any fit of it)."""
    import integrators

    q = sympy.symbols("x1 y1 x2 y2", real=True)
    v = sympy.symbols("u1 w1 u2 w2", real=True)
    m = (1, 1, sympy.Rational(3, 2), sympy.Rational(3, 2))
    r2 = (q[0] - q[2])**2 + (q[1] - q[3])**2 + sympy.Rational(1, 3)
    T = sum(mi * x**2 for mi, x in zip(m, v)) / 2
    V = -sympy.Rational(3, 4) / sympy.sqrt(r2)
    return integrators.systems.from_sympy(T - V, q, v, "two_body_free4", domain=[(-0.8, 0.8)] * 4 + [(-0.3, 0.3)] * 4)


def anharmonic_unequal3():
    """Three oscillators of masses 1, 2, 1/2 with cubic couplings q0 q1 q2, q0^2 q1, q1 q2^2 and stiffnesses 1, 2, 3/4
    (issue 23's unequal-mass class, session 10 branch idmass: written before any fit of it)."""
    import integrators

    q = sympy.symbols("q0:3", real=True)
    v = sympy.symbols("v0:3", real=True)
    m = (1, 2, sympy.Rational(1, 2))
    k = (1, 2, sympy.Rational(3, 4))
    T = sum(mi * x**2 for mi, x in zip(m, v)) / 2
    V = sum(ki * x**2 for ki, x in zip(k, q)) / 2 + sympy.Rational(3, 10) * q[0] * q[1] * q[2] \
        + sympy.Rational(1, 4) * q[0]**2 * q[1] - sympy.Rational(1, 5) * q[1] * q[2]**2
    return integrators.systems.from_sympy(T - V, q, v, "anharmonic_unequal3", domain=[(-0.6, 0.6)] * 3 + [(-0.5, 0.5)] * 3)


def fpu_alternating4():
    """An FPU-beta chain of four masses 1, 3, 1, 3 between fixed ends, springs r^2 / 2 + r^4 / 4 (issue 23's
    unequal-mass class, session 10 branch idmass: written before any fit of it)."""
    import integrators

    q = sympy.symbols("q0:4", real=True)
    v = sympy.symbols("v0:4", real=True)
    ext = [0, *q, 0]
    m = (1, 3, 1, 3)
    T = sum(mi * x**2 for mi, x in zip(m, v)) / 2
    V = sum((ext[i + 1] - ext[i])**2 / 2 + (ext[i + 1] - ext[i])**4 / 4 for i in range(5))
    return integrators.systems.from_sympy(T - V, q, v, "fpu_alternating4", domain=[(-0.6, 0.6)] * 4 + [(-0.4, 0.4)] * 4)


def mass_chain_unequal4():
    """Four masses m_i (1 + 0.3 q_i^2), m = (1, 1.5, 2, 0.8), on unit springs between fixed ends with quartic on-site
    terms q^4 / 10 (issue 23's unequal-mass class, session 10 branch idmass: written before any fit of it)."""
    import integrators

    q = sympy.symbols("q0:4", real=True)
    v = sympy.symbols("v0:4", real=True)
    ext = [0, *q, 0]
    m = (1, sympy.Rational(3, 2), 2, sympy.Rational(4, 5))
    T = sum(mi * (1 + sympy.Rational(3, 10) * q[i]**2) * v[i]**2 / 2 for i, mi in enumerate(m))
    V = sum((ext[i + 1] - ext[i])**2 / 2 for i in range(5)) + sum(x**4 for x in q) / 10
    return integrators.systems.from_sympy(T - V, q, v, "mass_chain_unequal4", domain=[(-0.6, 0.6)] * 4 + [(-0.5, 0.5)] * 4)


def morse_chain_unequal3():
    """Three masses 1/2, 2, 1 between fixed ends joined by Morse springs (1 - exp(-r))^2 / 2 (issue 23's unequal-mass
    class, session 11 branch alt: written and committed before any fit of it, to validate a fix found on
    fpu_alternating4 -- other mass ratios, an exponential potential, n = 3)."""
    import integrators

    q = sympy.symbols("q0:3", real=True)
    v = sympy.symbols("v0:3", real=True)
    ext = [0, *q, 0]
    m = (sympy.Rational(1, 2), 2, 1)
    T = sum(mi * x**2 for mi, x in zip(m, v)) / 2
    V = sum((1 - sympy.exp(-(ext[i + 1] - ext[i])))**2 / 2 for i in range(4))
    return integrators.systems.from_sympy(T - V, q, v, "morse_chain_unequal3", domain=[(-0.5, 0.5)] * 3 + [(-0.5, 0.5)] * 3)


def pendula_unequal4():
    """Four pendula of masses 2, 1, 3/2, 1/2 with on-site potential -cos q_i (not -m_i cos q_i: each pendulum in effect
    has its own g/l, 1/m_i) joined by torsion couplings 2/5 (1 - cos(q_i - q_(i+1))) (issue 23's unequal-mass class,
    session 11 branch alt: written and committed before any fit of it -- a cosine potential, other mass ratios, n = 4)."""
    import integrators

    q = sympy.symbols("q0:4", real=True)
    v = sympy.symbols("v0:4", real=True)
    m = (2, 1, sympy.Rational(3, 2), sympy.Rational(1, 2))
    T = sum(mi * x**2 for mi, x in zip(m, v)) / 2
    V = -sum(sympy.cos(x) for x in q) + sympy.Rational(2, 5) * sum(1 - sympy.cos(q[i] - q[i + 1]) for i in range(3))
    return integrators.systems.from_sympy(T - V, q, v, "pendula_unequal4", domain=[(-0.8, 0.8)] * 4 + [(-0.5, 0.5)] * 4)


def anharmonic6():
    """Six unit-mass oscillators of unequal stiffnesses 1, 1.3, 1.6, 0.8, 1.9, 1.15 with cubic couplings: q_i^2 q_{i+1}
    between neighbours, q0 q2 q4 and q1 q3 q5 (issue 23's anharmonic class at n = 6, session 11 branch six: written
    before any fit of it)."""
    import integrators

    q = sympy.symbols("q0:6", real=True)
    v = sympy.symbols("v0:6", real=True)
    k = (1, sympy.Rational(13, 10), sympy.Rational(8, 5), sympy.Rational(4, 5), sympy.Rational(19, 10), sympy.Rational(23, 20))
    c = (sympy.Rational(1, 4), -sympy.Rational(1, 5), sympy.Rational(3, 10), sympy.Rational(1, 5), -sympy.Rational(1, 4))
    V = sum(ki * x**2 for ki, x in zip(k, q)) / 2 + sum(ci * q[i]**2 * q[i + 1] for i, ci in enumerate(c)) \
        + sympy.Rational(3, 10) * q[0] * q[2] * q[4] - sympy.Rational(1, 5) * q[1] * q[3] * q[5]
    return integrators.systems.from_sympy(sum(x**2 for x in v) / 2 - V, q, v, "anharmonic6",
                                          domain=[(-0.6, 0.6)] * 6 + [(-0.5, 0.5)] * 6)


def mass_chain6():
    """Six unit masses with position-dependent mass 1 + q_i^2 / 4 on unit springs between fixed ends, quartic on-site
    terms q^4 / 8 (issue 23's position-dependent-mass class at n = 6, session 11 branch six: written before any fit)."""
    import integrators

    q = sympy.symbols("q0:6", real=True)
    v = sympy.symbols("v0:6", real=True)
    ext = [0, *q, 0]
    T = sum((1 + q[i]**2 / 4) * v[i]**2 / 2 for i in range(6))
    V = sum((ext[i + 1] - ext[i])**2 / 2 for i in range(7)) + sum(x**4 for x in q) / 8
    return integrators.systems.from_sympy(T - V, q, v, "mass_chain6", domain=[(-0.6, 0.6)] * 6 + [(-0.5, 0.5)] * 6)


def three_body6():
    """Three unit masses in the plane, softened pairwise attraction 1 / (2 sqrt(r_ij^2 + 1/2)), in a harmonic trap of
    stiffness 1/4 (issue 23's softened few-body class at n = 6, session 11 branch six: written before any fit of it;
    the trap makes the centre of mass a 2-d oscillator, separate from the relative motion)."""
    import integrators

    q = sympy.symbols("x1 y1 x2 y2 x3 y3", real=True)
    v = sympy.symbols("u1 w1 u2 w2 u3 w3", real=True)
    pairs = [(0, 1), (0, 2), (1, 2)]
    V = -sum(1 / (2 * sympy.sqrt((q[2 * i] - q[2 * j])**2 + (q[2 * i + 1] - q[2 * j + 1])**2 + sympy.Rational(1, 2)))
             for i, j in pairs) + sum(x**2 for x in q) / 8
    return integrators.systems.from_sympy(sum(x**2 for x in v) / 2 - V, q, v, "three_body6",
                                          domain=[(-0.8, 0.8)] * 6 + [(-0.4, 0.4)] * 6)


def fpu6():
    """The README's FPU-beta chain of six unit masses between fixed ends, springs r^2 / 2 + r^4 / 4, initial states in
    [-0.6, 0.6]^12 (pipelines.identification; here at h = 0.3, inside issue 23's 0.1-0.3, not the README's 0.45)."""
    import integrators

    s = integrators.systems.fpu_chain(6)
    return integrators.systems.from_sympy(s.expr, s.q, s.v, "fpu6", domain=[(-0.6, 0.6)] * 12)


def ring_unequal4():
    """Four masses 1, 5/4, 3/4, 3/2 on a closed ring (each joined to both neighbours) by springs r^2 / 2 + r^4 / 12, each
    pinned to its site by q^2 / 4 and a softening -q^4 / 40 (issue 23, session 12 branch cal: written and committed
    before any fit of it, to check a calibration rule on a system nobody tuned on -- a periodic coupling, other mass
    ratios, a softening on-site term, n = 4)."""
    import integrators

    q = sympy.symbols("q0:4", real=True)
    v = sympy.symbols("v0:4", real=True)
    m = (1, sympy.Rational(5, 4), sympy.Rational(3, 4), sympy.Rational(3, 2))
    T = sum(mi * x**2 for mi, x in zip(m, v)) / 2
    r = [q[(i + 1) % 4] - q[i] for i in range(4)]
    V = sum(x**2 / 2 + x**4 / 12 for x in r) + sum(x**2 / 4 - x**4 / 40 for x in q)
    return integrators.systems.from_sympy(T - V, q, v, "ring_unequal4", domain=[(-0.6, 0.6)] * 4 + [(-0.45, 0.45)] * 4)


def two_body_morse4():
    """Two unit masses in the plane joined by a softened Morse well (1 - exp(1 - s))^2 / 2, s = sqrt(r^2 + 1/5) (its
    minimum at s = 1), each in the same anisotropic trap x^2 / 8 + y^2 / 5 (session 12 branch trial: written and
    committed before any fit of it, to try the element kernel's bodies(2, 2) as a new user would -- a well with a
    repulsive core instead of a pure attraction, a trap that is not isotropic, h = 0.25)."""
    import integrators

    q = sympy.symbols("x1 y1 x2 y2", real=True)
    v = sympy.symbols("u1 w1 u2 w2", real=True)
    s = sympy.sqrt((q[0] - q[2])**2 + (q[1] - q[3])**2 + sympy.Rational(1, 5))
    V = (1 - sympy.exp(1 - s))**2 / 2 + sum(q[i]**2 / 8 + q[i + 1]**2 / 5 for i in (0, 2))
    return integrators.systems.from_sympy(sum(x**2 for x in v) / 2 - V, q, v, "two_body_morse4",
                                          domain=[(-0.75, 0.75)] * 4 + [(-0.4, 0.4)] * 4)


def morse_pinned_chain4():
    """Four unit masses between fixed ends joined by Morse bonds (1 - exp(-3 r / 2))^2 / 2, each pinned to its site by
    a cosine (1 - cos q_i) / 2 (a Frenkel-Kontorova-like substrate) (session 12 branch trial: written and committed
    before any fit of it, for the element kernel's chain(4) -- an asymmetric bond and a bounded on-site term, h = 0.15)."""
    import integrators

    q = sympy.symbols("q0:4", real=True)
    v = sympy.symbols("v0:4", real=True)
    ext = [0, *q, 0]
    V = sum((1 - sympy.exp(-sympy.Rational(3, 2) * (ext[i + 1] - ext[i])))**2 / 2 for i in range(5)) \
        + sum(1 - sympy.cos(x) for x in q) / 2
    return integrators.systems.from_sympy(sum(x**2 for x in v) / 2 - V, q, v, "morse_pinned_chain4",
                                          domain=[(-0.5, 0.5)] * 4 + [(-0.5, 0.5)] * 4)


def two_body_lj6():
    """Two unit masses in space (q = (x1, y1, z1, x2, y2, z2)) with a softened Lennard-Jones-like well
    (1 / s^4 - 2 / s^2) / 4, s^2 = r^2 + 1/2 (minimum -1/4 at r^2 = 1/2), in an isotropic trap |x_i|^2 / 8 (session 12
    branch trial: written and committed before any fit of it, for the element kernel's bodies(2, 3), n = 6)."""
    import integrators

    q = sympy.symbols("x1 y1 z1 x2 y2 z2", real=True)
    v = sympy.symbols("u1 w1 e1 u2 w2 e2", real=True)
    s2 = sum((q[k] - q[k + 3])**2 for k in range(3)) + sympy.Rational(1, 2)
    V = (1 / s2**2 - 2 / s2) / 4 + sum(x**2 for x in q) / 8
    return integrators.systems.from_sympy(sum(x**2 for x in v) / 2 - V, q, v, "two_body_lj6",
                                          domain=[(-0.7, 0.7)] * 6 + [(-0.4, 0.4)] * 6)


def two_body_morse6():
    """Two unit masses in space joined by a softened Morse bond (1 - exp(-6 (s - 4/5) / 5))^2 / 2, s = sqrt(r^2 + 3/10)
    (its minimum at s = 4/5), each in the same weak anisotropic trap x^2 / 10 + y^2 / 8 + z^2 / 6 (session 13 branch
    elsearch: written and committed before any fit of it, to check the element search's fix for bodies(2, 3) on a
    system it was not tuned on -- a bond with a minimum at a finite distance, a trap that is not isotropic, h 0.2)."""
    import integrators

    q = sympy.symbols("x1 y1 z1 x2 y2 z2", real=True)
    v = sympy.symbols("u1 w1 e1 u2 w2 e2", real=True)
    s = sympy.sqrt(sum((q[k] - q[k + 3])**2 for k in range(3)) + sympy.Rational(3, 10))
    V = (1 - sympy.exp(-sympy.Rational(6, 5) * (s - sympy.Rational(4, 5))))**2 / 2 \
        + sum(q[i]**2 / 10 + q[i + 1]**2 / 8 + q[i + 2]**2 / 6 for i in (0, 3))
    return integrators.systems.from_sympy(sum(x**2 for x in v) / 2 - V, q, v, "two_body_morse6",
                                          domain=[(-0.7, 0.7)] * 6 + [(-0.4, 0.4)] * 6)


#: systems no test uses, measured here only (h, trajectories within the issue's 0.1-0.3 and 100-200)
UNTUNED = [(henon3, 0.25, 120), (pendula3, 0.2, 120), (wells3, 0.2, 120), (two_body_unequal4, 0.15, 150),
           (two_body_free4, 0.25, 120), (anharmonic_unequal3, 0.2, 120), (fpu_alternating4, 0.2, 150),
           (mass_chain_unequal4, 0.2, 150), (morse_chain_unequal3, 0.25, 140), (pendula_unequal4, 0.15, 180),
           (anharmonic6, 0.2, 200), (mass_chain6, 0.25, 200), (three_body6, 0.2, 200), (fpu6, 0.3, 200),
           (ring_unequal4, 0.2, 150), (two_body_morse4, 0.25, 150), (morse_pinned_chain4, 0.15, 120),
           (two_body_lj6, 0.2, 150), (two_body_morse6, 0.2, 150)]


def _arguments(argv, systems):
    """The command line; the process-wide diagnostics (``--without-differences``, ``--no-principal``) applied."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=sorted(systems), required=True)
    ap.add_argument("--kernel", default=None, help="kernel= of the model (default: the library's)")
    ap.add_argument("--element-degree", type=int, default=None,
                    help="--kernel element: mechanical base kernels of this degree (default: RBF)")
    ap.add_argument("--no-correction", action="store_true", help="--kernel element: without the full-dimensional correction")
    ap.add_argument("--traj", type=int, default=None, help="trajectories (default: the acceptance test's)")
    ap.add_argument("--seed", type=int, default=0, help="data seed (the tests': 0)")
    ap.add_argument("--h", type=float, default=None, help="step (default: the system's; a diagnostic)")
    ap.add_argument("--steps", type=int, default=5, help="steps per trajectory (the tests': 5)")
    ap.add_argument("--units", type=float, nargs=2, default=None, metavar=("A", "C"),
                    help="positions x A, the step x C (benchmarks/_systems12.rescaled: the same physical data and states)")
    ap.add_argument("--orders", type=int, nargs="+", default=[2, 4], help="orders N of the energy differences")
    ap.add_argument("--without-differences", action="store_true",
                    help="calibrate the energy std without the distant differences (the method before them)")
    ap.add_argument("--degree", type=int, default=None,
                    help="MechanicalKernel(degree=D) with the whole mass matrix fixed, or with --diagonal the diagonal one "
                         "(a diagnostic; overrides --kernel)")
    ap.add_argument("--no-principal", action="store_true",
                    help="never keep the principal-direction candidate (this process only: a diagnostic)")
    ap.add_argument("--no-std", action="store_true", help="energy differences only (no std, no calibration: fast)")
    ap.add_argument("--no-mass-target", action="store_true",
                    help="the whole-matrix targets as before session 9 (learners/shadow/mass_target.py off; a diagnostic)")
    ap.add_argument("--diagonal", action="store_true",
                    help='normalisation=MassNormalisation(matrix="diagonal"): no equal masses assumed (the remedy)')
    ap.add_argument("--matrix", action="store_true", help='normalisation=MassNormalisation(matrix=True): the whole matrix fixed')
    ap.add_argument("--iterations", type=int, default=None, help="iterations= of the model: refinement solves (a diagnostic)")
    ap.add_argument("--no-mechanical-trace", action="store_true",
                    help="position_search.MECHANICAL_TRACE = False (this process only: the default before session 23)")
    ap.add_argument("--trace", action="store_true",
                    help="with --degree: normalisation=MassNormalisation(matrix=False), the trace alone (only the scale)")
    ap.add_argument("--searched-diagonal", action="store_true",
                    help='normalisation.SEARCHED_MATRIX = "diagonal" (this process only): the default scores the diagonal '
                         "condition, not the whole matrix, against the trace")
    ap.add_argument("--diagonal-rbf-margin", type=float, default=None,
                    help="position_search.DIAGONAL_RBF_MARGIN (this process only; 0: the choice before session 11)")
    ap.add_argument("--folds", type=int, default=None,
                    help="folds of the distant-difference calibration (this process only, FOLD_BUDGET lifted: a diagnostic; "
                         "the budget holds n = 6 at 200 trajectories to 2)")
    args = ap.parse_args(argv)
    if args.diagonal_rbf_margin is not None:
        import learners.shadow.position_search as S

        S.DIAGONAL_RBF_MARGIN = args.diagonal_rbf_margin
    if args.no_mechanical_trace:
        import learners.shadow.position_search as S

        S.MECHANICAL_TRACE = False
    if args.folds is not None:
        import learners.shadow.difference_calibration as D

        D.CALIBRATION_FOLDS, D.FOLD_BUDGET = args.folds, 10**9
    if args.searched_diagonal:
        import learners.shadow.normalisation as N

        N.SEARCHED_MATRIX = "diagonal"
    if args.no_mass_target:
        import learners.shadow.mass_target as T

        T.STEPS = 0  # this process only: no move, the linear targets' solve (bit for bit)
    if args.without_differences:
        import learners.shadow.calibration as C

        C.difference_calibration = lambda model, floor: None  # this process only: the conservation and DEL scales
    if args.no_principal:
        import learners.shadow.principal as P

        P.PRINCIPAL_MARGIN = float("inf")  # scored, never kept: the tied fit (bit for bit, test_learners_rotation)
    return args


def _model_options(args) -> dict:
    """The model's keyword arguments: ``--kernel``, or ``--degree`` (which also names the row's kernel), with the whole
    mass matrix fixed or, with ``--diagonal``, ``MassNormalisation(matrix="diagonal")``, with ``--trace`` the trace alone
    (``matrix=False``); ``args.kernel`` becomes the row's kernel column (``+diagonal`` / ``+trace`` where given)."""
    from learners.shadow.normalisation import MassNormalisation

    kw = {} if args.kernel is None else {"kernel": _element_kernel(args) if args.kernel == "element" else args.kernel}
    if args.iterations is not None:
        kw["iterations"] = args.iterations
    if args.degree is not None:
        from learners.shadow.mechanical import MechanicalKernel

        kw["kernel"] = MechanicalKernel(degree=args.degree)
        matrix = "diagonal" if args.diagonal else (False if args.trace else True)
        args.kernel = f"mechanical{args.degree}+" + {"diagonal": "diagonal", False: "trace", True: "matrix"}[matrix]
        kw["normalisation"] = MassNormalisation(matrix=matrix)
    elif args.matrix:
        kw["normalisation"] = MassNormalisation(matrix=True)
        args.kernel = f"{args.kernel or 'default'}+matrix"
    elif args.diagonal:
        kw["normalisation"] = MassNormalisation(matrix="diagonal")
        args.kernel = f"{args.kernel or 'default'}+diagonal"
    return kw


#: ``--kernel element``: the structure of each system that has one (bodies: count, dim, identical masses; chains: n)
ELEMENT_STRUCTURES = {"two_body4": ("bodies", 2, 2, True), "two_body_unequal4": ("bodies", 2, 2, False),
                      "two_body_free4": ("bodies", 2, 2, False), "three_body6": ("bodies", 3, 2, True),
                      "fpu6": ("chain", 6, "fixed", True), "two_body_morse4": ("bodies", 2, 2, True),
                      "morse_pinned_chain4": ("chain", 4, "fixed", True), "two_body_lj6": ("bodies", 2, 3, True),
                      "two_body_morse6": ("bodies", 2, 3, True)}


def _element_kernel(args):
    """The :class:`~learners.shadow.ElementKernel` of ``args.system`` (:data:`ELEMENT_STRUCTURES`: what a user who
    knows the system's bodies, masses and bonds would give); the row's kernel column names it."""
    from learners.shadow import ElementKernel

    kind, a, b, identical = ELEMENT_STRUCTURES[args.system]
    opts = {"identical": identical, "degree": args.element_degree, "correction": not args.no_correction}
    args.kernel = (f"element({kind}{'' if identical else ', unequal'}, {args.element_degree or 'rbf'}"
                   f"{', no correction' if args.no_correction else ''})")
    return ElementKernel.bodies(a, b, **opts) if kind == "bodies" else ElementKernel.chain(a, b, **opts)


def _velocity_error(A, model, system, h) -> float:
    """RMS error of the N = 2 velocities over the RMS velocity, along the held-out trajectory of ``A.velocity_z`` (interior
    states; no std needed: ``--no-std`` rows)."""
    from integrators import reference_flow
    from integrators.data import snapshots

    _, (q0, v0) = snapshots(system, h, 1, 1, seed=5, return_initial=True)
    ref = reference_flow(system, q0, v0, h * A.torch.arange(21, dtype=A.torch.float64))
    v = model.velocities(ref.q, 2)[1:-1]
    return float((v - ref.v[1:-1]).pow(2).mean().sqrt() / ref.v[1:-1].pow(2).mean().sqrt())


def _peak_rss_mib() -> float:
    """The process's peak resident set so far, MiB (Linux reports ``ru_maxrss`` in KiB): data, fit and calibration."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv=None) -> None:
    import tests.test_learners_shadow_auto as A
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP
    from learners.shadow.hyperparameters import IdentifiabilityWarning

    systems = {make.__name__: (make, h, T) for make, h, T in A.SYSTEMS}
    from _systems12 import NEW12, rescaled
    from _systems23 import NEW23
    from _systems24 import NEW24
    from _systems24b import NEW24B
    from _systems25 import NEW25
    from _systems25w import NEW25W

    systems.update({make.__name__: (make, h, T)
                    for make, h, T in A.UNTUNED + UNTUNED + NEW12 + NEW23 + NEW24 + NEW24B + NEW25 + NEW25W})
    args = _arguments(argv, systems)
    make, h, T = systems[args.system]
    h = args.h or h
    system = make()
    if args.units is not None:  # the same motion in other units: positions x a, the step x c
        system, h = rescaled(system, *args.units), h * args.units[1]
    data = snapshots(system, h, args.traj or T, args.steps, seed=args.seed)
    kw = _model_options(args)
    t, c = time.perf_counter(), time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", IdentifiabilityWarning)
        m = InverseModifiedLagrangianGP(h, progress=False, **kw).fit(data)
        fit_s, cpu_s = time.perf_counter() - t, time.process_time() - c
        print(f"matrix target moves (relative, before each): {m.history.get('mass_target')}")
        kept = (m.history.get('mechanical_kept_name') if m.kernel_degree is not None
                else 'element' if getattr(m, 'kernel_structure', None) is not None
                else 'RBF' if m._kernel_template is None else type(m._kernel_template).__name__)  # None: the default's RBF
        print(f"fitted: {fit_s:.0f} s wall, {cpu_s:.0f} s cpu, peak RSS {_peak_rss_mib():.0f} MiB, objective {m.objective_used}, "
              f"normalisation conditions "
              f"{m._norm_count}, kernel degree {m.kernel_degree} (kept: "
              f"{kept}; best mechanical candidate {m.history.get('mechanical_kept_name')}), "
              f"the default kernels' held-out "
              f"{dict(zip(m.history.get('normalisation_candidates', []), m.history.get('normalisation_values', [])))}",
              flush=True)
        from _acceptance_fit import structure_report

        structures = structure_report(m.history)
        print(f"element structures: kept {m.history.get('structure_kept')}, default kernels' held-out "
              f"{m.history.get('default_objective')}, {structures}", flush=True)
        principal = m.history.get("principal")
        if principal is not None and "skipped" in principal:  # not scored: a structure kept
            print(f"principal directions: not scored, {principal['skipped']}", flush=True)
        elif principal is not None:  # the principal-direction candidate (learners.shadow.principal)
            print(f"principal directions: kept {principal['kept']}, held-out tied {principal['objective']:.3f}, "
                  f"principal {principal['candidate_objective']}, factors {[round(f, 3) for f in principal['factors']]}",
                  flush=True)
        if args.no_std:
            rel = [A.energy_differences(m, system, N, return_std=False)[0] for N in (2, 4)]
            # every kernel's row has the velocity column (the RESULTS default-kernel rows compare with it): say so
            print("| system | kernel | cpu s | dE2 | dE4 | v rel. error (N = 2) | peak RSS |")
            print(f"| {args.system} | {args.kernel or 'default'} | {cpu_s:.0f} | {rel[0]:.3g} | {rel[1]:.3g} | "
                  f"{_velocity_error(A, m, system, h):.3g} | {_peak_rss_mib():.0f} MiB |")
            for w in caught:  # the fit's warnings (a user sees them): a --no-std row has no calibration to print them
                print(f"    warning: {w.message}")
            return
        row = [args.system, args.kernel or "default", m.objective_used, f"{fit_s:.0f}", f"{cpu_s:.0f}"]
        for N in args.orders:
            rel, z = A.energy_differences(m, system, N)
            row += [f"{rel:.2e}", f"{float(z.pow(2).mean().sqrt()):.2f}", f"{float((z.abs() <= 2).double().mean()):.2f}",
                    f"{float(z.abs().max()):.2f}"]
        zv = A.velocity_z(m, system, h)
        row += [f"{float((zv.abs() <= 2).double().mean()):.2f}", f"{time.process_time() - c:.0f}", f"{_peak_rss_mib():.0f}"]
    print(f"seed {args.seed}, kernel degree {m.kernel_degree}, energy resolution (calibrated std / RMS of the "
          f"differences, held-back states) {m.history.get('energy_resolution')}")
    print("| system | kernel | objective | fit s | cpu s | dE2 | rms z2 | 2σ2 | max z2 | dE4 | rms z4 | 2σ4 | max z4 | v 2σ "
          "| total cpu s | peak RSS MiB |")
    print("| " + " | ".join(row) + " |")
    for w in caught:
        print(f"    warning: {w.message}")


if __name__ == "__main__":
    main()
