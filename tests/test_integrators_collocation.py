"""Chebyshev collocation flows (integrators.collocation) against SciPy's DOP853, and the generic modified flow.

Tolerances: DOP853 at rtol = atol = 1e-13 and the collocation at 1e-12 agree to about 1e-13 on these
unit-time runs; 1e-11 leaves a margin of 100 and is still far below the errors the convergence studies
measure (>= 1e-10).
"""

import numpy as np
import pytest
import torch

from integrators import ReferenceFlowError, convergence as C, reference_flow, systems
from integrators.collocation import chebyshev_matrices, collocation_flow, el_acceleration

CHAIN = systems.n_pendulum(6)
Q0 = torch.tensor([[0.3, -0.2, 0.1, 0.4, -0.3, 0.2], [0.0, 0.1, -0.1, 0.2, 0.1, -0.2]])
V0 = torch.tensor([[0.1, 0.2, -0.3, 0.1, 0.0, -0.2], [0.3, 0.0, 0.1, -0.2, 0.2, 0.1]])


def test_chebyshev_integration_matrix_is_exact_for_polynomials():
    x, W, C_ = chebyshev_matrices(12)
    f = 3 * x**5 - x**2 + 0.5  # degree <= 12: integrated exactly
    exact = (x**6 - (-1) ** 6) / 2 - (x**3 + 1) / 3 + 0.5 * (x + 1)
    assert np.abs(W @ f - exact).max() <= 1e-14
    assert abs((C_ @ f)[-1]) <= 1e-14  # no component beyond degree 5


def test_replicated_acceleration_equals_sympy():
    a = el_acceleration(CHAIN, Q0, V0)
    ref = torch.from_numpy(CHAIN.acceleration_numpy()(Q0.numpy(), V0.numpy()))
    assert float((a - ref).abs().max()) <= 1e-12
    # extra leading batch axes pass through
    assert el_acceleration(CHAIN, Q0.expand(3, 2, 6), V0.expand(3, 2, 6)).shape == (3, 2, 6)


@pytest.mark.parametrize("route", ["sympy", "torch", "torch_near_sympy"])
def test_collocation_matches_dop853(route):
    times = np.linspace(0.0, 2.0, 9)
    flow = reference_flow(CHAIN, Q0, V0, times)
    q_ref, v_ref = flow.q, flow.v
    L, near = {"sympy": (CHAIN, None), "torch": (lambda q, v: CHAIN(q, v), None),
               "torch_near_sympy": (lambda q, v: CHAIN(q, v), CHAIN)}[route]
    flow = collocation_flow(L, Q0, V0, times, near=near)
    q, v = flow.q, flow.v
    assert q.shape == v.shape == (9, 2, 6)
    assert float((q - q_ref).abs().max()) <= 1e-11 and float((v - v_ref).abs().max()) <= 1e-11


def test_collocation_backward_in_time_and_t0_inside():
    times = np.linspace(-1.0, 1.0, 5)
    q_ref = reference_flow(CHAIN, Q0, V0, times, t0=0.0).q
    q = collocation_flow(CHAIN, Q0, V0, times, t0=0.0, max_segment=0.5).q
    assert float((q - q_ref).abs().max()) <= 1e-11
    assert torch.equal(q[2], Q0)  # the output at t0 is the initial data


def test_collocation_input_errors():
    with pytest.raises(ValueError, match="nodes"):
        collocation_flow(CHAIN, Q0, V0, [0.0, 1.0], nodes=2)
    with pytest.raises(ValueError, match="rtol"):
        collocation_flow(CHAIN, Q0, V0, [0.0, 1.0], rtol=0)
    with pytest.raises(ValueError, match="strictly"):
        collocation_flow(CHAIN, Q0, V0, [0.0, 1.0, 0.5])
    with pytest.raises(ValueError, match="max_segment"):
        collocation_flow(CHAIN, Q0, V0, [0.0, 1.0], max_segment=-1.0)
    with pytest.raises(TypeError, match="callable"):
        collocation_flow("L", Q0, V0, [0.0, 1.0])
    with pytest.raises(ReferenceFlowError, match="not regular"):
        collocation_flow(lambda q, v: (q * v).sum(-1), Q0, V0, [0.0, 1.0])


def test_singular_mass_on_the_way_raises():
    # M = 1 - q^2 vanishes at |q| = 1, which the free motion from q = 0.9 with v = 1 reaches
    L = lambda q, v: 0.5 * (1 - q**2).squeeze(-1) * v.squeeze(-1) ** 2  # noqa: E731
    with pytest.raises(ReferenceFlowError, match="collocation failed"):
        collocation_flow(L, torch.tensor([[0.9]]), torch.tensor([[1.0]]), [0.0, 1.0])


def test_generic_modified_flow_matches_concrete_derivation():
    """The generic route (dimension-free series by autograd, collocation with the companion L) against the
    concrete one (SymPy L_mod, DOP853), on the pendulum: errors of the discrete solution agree to 1e-12."""
    pendulum = systems.pendulum()
    q0, v0 = torch.tensor([[1.0], [2.0]]), torch.tensor([[0.5], [0.0]])
    hs = [0.2, 0.1]
    generic = C.discrete_vs_modified_flow(pendulum, "midpoint", 4, hs, 1.0, q0, v0)
    concrete = C.discrete_vs_modified_flow(pendulum, "midpoint", 4, hs, 1.0, q0, v0, formula="concrete")
    assert all(e > 1e-10 for e in generic)
    assert np.allclose(generic, concrete, rtol=0, atol=1e-12)
    # one flow for all step sizes equals the flows one at a time
    both = C.modified_flows(pendulum, "trapezoidal", 2, hs, 1.0, q0, v0)
    for h, q in zip(hs, both):
        (single,) = C.modified_flows(pendulum, "trapezoidal", 2, [h], 1.0, q0, v0)
        assert q.shape == (round(1.0 / h) + 1, 2, 1) and float((q - single).abs().max()) <= 1e-12
    with pytest.raises(ValueError, match="formula"):
        C.discrete_vs_modified_flow(pendulum, "midpoint", 2, hs, 1.0, q0, v0, formula="symbolic")
