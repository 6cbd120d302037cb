"""One system written by session 25 (branch widestd15) and committed BEFORE any fit of it: the outsider's check of the
energy std's calibration diagnosis (benchmarks/RESULTS_calibration.md, Session 25 widestd15) on a system nobody tuned on.

- ``soft_mass_chain3``: three sites, constant masses 1, 3/2, 2/3 plus a position-dependent part on the middle one
  (``1 + q1^2 / 5``), quartic on-site pins, two springs of other stiffnesses; n = 3 at h = 0.25 (no other list has
  n = 3 at that step with a position-dependent mass).
"""

from __future__ import annotations

import sympy

__all__ = ["soft_mass_chain3", "NEW25W"]

_R = sympy.Rational


def soft_mass_chain3():
    """Masses ``(1, 3/2 (1 + q1^2 / 5), 2/3)``, on-site pins ``k_i q_i^2 / 2 + q_i^4 / 10`` with ``k = (9/10, 7/5, 3/5)``,
    springs ``7/20 (q1 - q0)^2 + 1/4 (q2 - q1)^2``."""
    import integrators

    q = sympy.symbols("q0:3", real=True)
    v = sympy.symbols("v0:3", real=True)
    m = (1, _R(3, 2) * (1 + q[1]**2 / 5), _R(2, 3))
    k = (_R(9, 10), _R(7, 5), _R(3, 5))
    T = sum(mi * x**2 for mi, x in zip(m, v)) / 2
    V = sum(ki * x**2 / 2 + x**4 / 10 for ki, x in zip(k, q)) + _R(7, 20) * (q[1] - q[0])**2 + (q[2] - q[1])**2 / 4
    return integrators.systems.from_sympy(T - V, q, v, "soft_mass_chain3", domain=[(-0.7, 0.7)] * 3 + [(-0.5, 0.5)] * 3)


#: (system, h, trajectories), chosen before any fit
NEW25W = [(soft_mass_chain3, 0.25, 120)]
