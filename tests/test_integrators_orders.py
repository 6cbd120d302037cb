"""Observed orders of convergence (docs/theory/orders.md), fitted by least squares on log(error) vs log(h).

Tolerances: ±0.2 on the plain order 2, ±0.3 on the orders N + 2 (N + 1 for the generalised
midpoint rule) of modified and inverse modified Lagrangians, as the issue asks. Step sizes are chosen
so that the errors stay well above rounding (>= 1e-11) and the fits are in the asymptotic regime;
the observed slopes are within about 0.1 of the theory (see notebooks/02_convergence_orders.ipynb).
"""

import pytest
import torch

import bea
from integrators import convergence as C
from integrators import systems

PENDULUM = systems.pendulum()
HENON_HEILES = systems.henon_heiles()
VARIABLE_MASS = systems.variable_mass_pendulum()  # (1 + q^2/4) v^2/2 + cos q

# two trajectories each: the error is the max over both
P_Q0, P_V0 = torch.tensor([[1.0], [2.0]]), torch.tensor([[0.5], [0.0]])
HH_Q0, HH_V0 = torch.tensor([[0.3, -0.2], [0.0, 0.4]]), torch.tensor([[0.2, 0.3], [-0.3, 0.0]])
HS = [0.2, 0.1, 0.05]
T = 2.0


def _order(hs, errors):
    assert all(e > 1e-12 for e in errors), f"errors too close to rounding for a clean fit: {errors}"
    return C.observed_order(hs, errors)


@pytest.mark.parametrize("scheme", ["midpoint", "trapezoidal"])
@pytest.mark.parametrize("system,q0,v0", [(PENDULUM, P_Q0, P_V0), (HENON_HEILES, HH_Q0, HH_V0)], ids=["pendulum", "henon_heiles"])
@pytest.mark.usefixtures("execution_path")  # eager and compiled (tests/conftest.py)
def test_global_order_two(system, q0, v0, scheme):
    errors = C.discrete_vs_exact(system, scheme, HS, T, q0, v0)
    assert abs(_order(HS, errors) - 2) <= 0.2


@pytest.mark.parametrize("scheme", ["midpoint", "trapezoidal"])
@pytest.mark.parametrize("N", [0, 2, 4])
def test_pendulum_discrete_solution_follows_modified_flow(scheme, N):
    errors = C.discrete_vs_modified_flow(PENDULUM, scheme, N, HS, T, P_Q0, P_V0)
    assert abs(_order(HS, errors) - (N + 2)) <= 0.3


@pytest.mark.parametrize("scheme", ["midpoint", "trapezoidal"])
@pytest.mark.parametrize("N", [0, 2, 4])
def test_pendulum_inverse_modified_lagrangian_gives_exact_flow(scheme, N):
    # generic formula from bea applied to the torch Lagrangian: derivatives by autograd, as for a learned L
    errors = C.inverse_modified_vs_exact(PENDULUM, scheme, N, HS, T, P_Q0, P_V0, formula="generic")
    assert abs(_order(HS, errors) - (N + 2)) <= 0.3


@pytest.mark.parametrize("N", [2, 4])
def test_pendulum_inverse_modified_from_initial_velocity(N):
    """Predicting with L_inv from (q0, qdot0), the initial momentum taken from the true L (legendre=)."""
    errors = C.inverse_modified_vs_exact(PENDULUM, "midpoint", N, HS, T, P_Q0, P_V0, start="momentum")
    assert abs(_order(HS, errors) - (N + 2)) <= 0.3


@pytest.mark.parametrize("scheme", ["midpoint", "trapezoidal"])
@pytest.mark.parametrize("N", [0, 2])
def test_henon_heiles_modified_and_inverse_modified(scheme, N):
    errors = C.discrete_vs_modified_flow(HENON_HEILES, scheme, N, HS, T, HH_Q0, HH_V0)
    assert abs(_order(HS, errors) - (N + 2)) <= 0.3
    errors = C.inverse_modified_vs_exact(HENON_HEILES, scheme, N, HS, T, HH_Q0, HH_V0, formula="generic")
    assert abs(_order(HS, errors) - (N + 2)) <= 0.3


@pytest.mark.parametrize("N", [0, 1, 2])
def test_generalised_midpoint_position_dependent_mass(N):
    """alpha = 0.3 is not symmetric: odd powers of h, orders N + 1 = 1, 2, 3. With a position-dependent
    mass the h^1 term is not a total derivative, so N = 0 really is of order 1."""
    scheme = bea.GeneralisedMidpoint("0.3")
    hs = [0.05, 0.025, 0.0125]
    q0, v0 = torch.tensor([[1.0]]), torch.tensor([[0.5]])
    errors = C.discrete_vs_modified_flow(VARIABLE_MASS, scheme, N, hs, 1.0, q0, v0)
    assert abs(_order(hs, errors) - (N + 1)) <= 0.3
    errors = C.inverse_modified_vs_exact(VARIABLE_MASS, scheme, N, hs, 1.0, q0, v0, formula="generic")
    assert abs(_order(hs, errors) - (N + 1)) <= 0.3


@pytest.mark.usefixtures("execution_path")  # eager and compiled (tests/conftest.py)
def test_generalised_midpoint_is_second_order_for_separable_lagrangians():
    """For v^2/2 + cos q the h^1 term of L_mod is h v sin(q)/5 = -(h/5) d/dt cos q, a total derivative:
    the motions are those of L to O(h^2). Started from two exact positions the error is O(h^2).
    (From (q0, qdot0) with p0 = dL/dv it is O(h): the total derivative shifts the momentum by O(h).)"""
    scheme = bea.GeneralisedMidpoint("0.3")
    errors = C.discrete_vs_modified_flow(PENDULUM, scheme, 0, HS, T, P_Q0, P_V0)  # L_mod[0] = L
    assert abs(_order(HS, errors) - 2) <= 0.2
    errors = C.discrete_vs_exact(PENDULUM, scheme, HS, T, P_Q0, P_V0)
    assert abs(_order(HS, errors) - 1) <= 0.2


@pytest.mark.parametrize("N", [0, 2, 4])
def test_modified_energy_oscillates_with_amplitude_order_n_plus_2(N):
    amplitudes = C.modified_energy_oscillation(PENDULUM, "midpoint", N, HS, T, P_Q0, P_V0)
    assert abs(_order(HS, amplitudes) - (N + 2)) <= 0.3


def test_observed_order_rejects_bad_input():
    with pytest.raises(ValueError):
        C.observed_order([0.1], [1e-3])
    with pytest.raises(ValueError):
        C.observed_order([0.1, 0.05], [1e-3, 0.0])
