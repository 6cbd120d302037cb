"""Issue 27's systems (benchmarks/element_acceptance.py): the FPU-beta chain with fixed ends and softened planar
few-body problems in a weak harmonic trap, each with its step ``h`` and the box of its initial states.

* ``chain{n}``: :func:`integrators.systems.fpu_chain` (unit masses, springs r^2/2 + r^4/4 between fixed ends,
  q_0 = q_{n+1} = 0), initial states in [-0.6, 0.6]^{2n} (the README's box), ``h = 0.3`` (issue 23's range
  0.1-0.3; at ``n = 6`` the exact inverse modified Lagrangian gains 8x from H_rec[2] to H_rec[4] at this step, 3x at
  the README's 0.45, so the order-4 gain measures the learner, not the truncation).
* ``bodies{c}``: ``c`` unit masses in the plane, ``q = (x_1, y_1, x_2, ...)``, softened pairwise attraction
  -1 / (2 sqrt(r_ij^2 + 1/2)) and a harmonic trap |x_i|^2 / 8 (stiffness 1/4: weak against the pairs' curvature,
  and it makes the centre of mass a 2-d oscillator, separate from the relative motion, as in
  benchmarks/identification_acceptance.py's three_body6, which ``bodies3`` equals term for term); positions in
  [-0.8, 0.8], velocities in [-0.4, 0.4], ``h = 0.2``.

:data:`SYSTEMS` maps a name to ``(make, h, kind, size)``: ``kind`` is ``"chain"`` or ``"bodies"``, ``size`` the masses
of the chain or the bodies' count. :data:`EXTENSION` pairs each acceptance system with the smaller one of the same kind
that issue 27's extension fits on (chain 6 -> 10, 3 bodies -> 4).
"""

from __future__ import annotations

import sympy

#: the trap's stiffness and the softening of the pair potential (r^2 + SOFTENING)
TRAP, SOFTENING = sympy.Rational(1, 4), sympy.Rational(1, 2)


def chain(n: int):
    """The FPU-beta chain of ``n`` unit masses with fixed ends (:func:`integrators.systems.fpu_chain`, its vectorised
    torch form kept), initial states in [-0.6, 0.6]^{2n}."""
    from integrators import systems

    s = systems.fpu_chain(n)
    s.domain = [(-0.6, 0.6)] * (2 * n)  # the README's box (the constructor's default is 0.5)
    return s


def bodies(count: int):
    r"""``count`` unit masses in the plane: :math:`L = \tfrac12|v|^2 + \sum_{i<j} \tfrac12 (r_{ij}^2 + \tfrac12)^{-1/2}
    - \tfrac18\sum_i |x_i|^2`."""
    import integrators

    q = sympy.symbols(" ".join(f"x{i} y{i}" for i in range(1, count + 1)), real=True)
    v = sympy.symbols(" ".join(f"u{i} w{i}" for i in range(1, count + 1)), real=True)
    pairs = [(i, j) for i in range(count) for j in range(i + 1, count)]
    V = -sum(1 / (2 * sympy.sqrt((q[2 * i] - q[2 * j])**2 + (q[2 * i + 1] - q[2 * j + 1])**2 + SOFTENING))
             for i, j in pairs) + TRAP * sum(x**2 for x in q) / 2
    return integrators.systems.from_sympy(sum(x**2 for x in v) / 2 - V, q, v, f"bodies{count}",
                                          domain=[(-0.8, 0.8)] * (2 * count) + [(-0.4, 0.4)] * (2 * count))


def _chain(n):
    return lambda: chain(n)


def _bodies(c):
    return lambda: bodies(c)


#: name -> (constructor, h, kind, size); chain4 and bodies2 are the CI test's sizes
SYSTEMS = {**{f"chain{n}": (_chain(n), 0.3, "chain", n) for n in (4, 6, 10)},
           **{f"bodies{c}": (_bodies(c), 0.2, "bodies", c) for c in (2, 3, 4)}}
#: the larger system -> the smaller one of the same kind that the extension fits on
EXTENSION = {"chain10": "chain6", "bodies4": "bodies3", "chain6": "chain4", "bodies3": "bodies2"}


def element_kernel(kind: str, size: int, window=None, triples: bool = False):
    """The element-structured kernel for the system (branch elem's ``learners.shadow.ElementKernel``; ``window``: the
    chain's windows of that many bonds, ``ElementKernel.chain(n, window=w)``; ``triples``: the bodies' triple group,
    positions only, ``ElementKernel.bodies(c, 2, triples=True)``); raises ImportError where it does not exist."""
    from learners.shadow import ElementKernel

    if kind == "chain":
        return ElementKernel.chain(size, ends="fixed", **({} if window is None else {"window": window}))
    return ElementKernel.bodies(size, 2, **({"triples": True} if triples else {}))
