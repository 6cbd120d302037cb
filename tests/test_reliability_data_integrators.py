"""Reliability of the integrators: a Lagrangian that is not regular at the initial state, or an inconsistent
scheme, is rejected before any step (issue 12, item 6); bea's relative regularity test covers n = 1."""

import pytest
import torch

import bea
from bea.schemes import CustomScheme
from integrators import InconsistentSchemeError, NotRegularError, VariationalIntegrator


def singular(q, v):  # M = d2L/dv2 = 0 everywhere
    return (q * v - q**2).sum(-1)


def quartic(q, v):  # M = v^2: regular except at v = 0
    return (v**4 / 12 + torch.cos(q)).sum(-1)


def oscillator(q, v):
    return 0.5 * (v**2 - q**2).sum(-1)


def test_singular_lagrangian_is_rejected_before_any_step():
    """Before the fix the integrator ran L = q v - q^2 and returned an oscillation."""
    integ = VariationalIntegrator(singular, 0.1)
    with pytest.raises(NotRegularError, match="not regular at 1 of 1 initial states.*smallest singular value 0"):
        integ.solve([[0.3]], [[0.1]], 5).q
    with pytest.raises(NotRegularError, match="initial midpoints"):
        integ.solve_from_positions([[0.3]], [[0.31]], 5).q


def test_nearly_singular_mass_is_relative_to_the_other_derivatives():
    """M = 1e-200 at v = 1e-100 is singular relative to h^2 L_qq ~ 1e-2; at v = 0.5 (M = 0.25) it is regular.
    In a batch, the first bad state is named."""
    integ = VariationalIntegrator(quartic, 0.1)
    with pytest.raises(NotRegularError, match="1 of 2 initial states .*index 1.*1e-200"):
        integ.solve([[0.3], [0.3]], [[0.5], [1e-100]], 3).q
    q = integ.solve([[0.3]], [[0.5]], 3).q
    assert bool(torch.isfinite(q).all())
    # a stiff but regular system (h^2 k / m = 1e8) is accepted
    stiff = VariationalIntegrator(lambda q, v: 0.5 * (v**2 - 1e10 * q**2).sum(-1), 0.1)
    assert stiff.solve([[1e-3]], [[0.0]], 2).q.shape == (3, 1, 1)


def test_bea_n1_nearly_singular_raises_instead_of_overflowing():
    """bea's generated code for n = 1 tested M only against 0; M = 1e-200 gave 1e195-size (or infinite) values.
    Now M is compared with L's other first and second derivatives (|L_q| = sin 0.3 here)."""
    q, v = torch.tensor([[0.3]], dtype=torch.float64), torch.tensor([[1e-100]], dtype=torch.float64)
    with pytest.raises(ValueError, match="not regular"):
        bea.acceleration(quartic)(q, v)
    f = bea.compile_torch("modified_lagrangian", "midpoint", 2, n=1)
    with pytest.raises(ValueError, match="not regular"):
        f(quartic, q, v, 0.1)
    out = f(quartic, q, torch.tensor([[0.5]], dtype=torch.float64), 0.1)  # regular: fine
    assert bool(torch.isfinite(out).all())


def test_inconsistent_scheme_is_rejected_at_construction():
    """2 h L(...) is the midpoint rule of 2L: its momenta are twice dL/dv, so from p0 = dL/dv the trajectory is
    wrong. bea rejects it; before the fix the integrator ran it."""
    twice = CustomScheme(lambda L, a, b, h: 2 * h * L((a + b) / 2, (b - a) / h), name="twice")
    with pytest.raises(InconsistentSchemeError, match="inconsistent scheme"):
        VariationalIntegrator(oscillator, 0.1, twice)
    good = CustomScheme(lambda L, a, b, h: h * L((a + b) / 2, (b - a) / h), name="my_midpoint")
    q = VariationalIntegrator(oscillator, 0.1, good).solve([[1.0]], [[0.0]], 10).q
    ref = VariationalIntegrator(oscillator, 0.1, "midpoint").solve([[1.0]], [[0.0]], 10).q
    assert torch.allclose(q, ref, rtol=0, atol=1e-14)
    assert good._integrators_consistent  # checked once per scheme object
