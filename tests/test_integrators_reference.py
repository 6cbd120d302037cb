"""Reference flows (SciPy DOP853) and the example systems."""

import math

import numpy as np
import pytest
import sympy
import torch

import bea
from integrators import SymbolicLagrangian, VariationalIntegrator, reference_flow, systems

ALL_SYSTEMS = [
    systems.pendulum(),
    systems.pendulum(m=2, length=0.5, g=9.81),
    systems.variable_mass_pendulum(),
    systems.n_pendulum(2),
    systems.n_pendulum(3, masses=[1, 2, 1], lengths=[1, 0.5, 0.7]),
    systems.coupled_oscillators(3),
    systems.fpu_chain(4, beta=0.5, k=2),
    systems.henon_heiles(),
    systems.kepler(),
    systems.n_body((1, 1, 1)),
    systems.n_body((1, 2, 1.5, 1)),
]


def _sample(system, count=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    box = torch.tensor(system.domain)
    x = box[:, 0] + (box[:, 1] - box[:, 0]) * torch.rand(count, 2 * system.n, generator=g)
    return x[:, : system.n], x[:, system.n:]


@pytest.mark.parametrize("system", ALL_SYSTEMS, ids=lambda s: s.name)
def test_system_torch_and_sympy_agree_and_energy_is_exact(system):
    q, v = _sample(system)
    L = system(q, v)
    assert L.shape == (16,) and L.dtype == torch.float64
    f = sympy.lambdify([*system.q, *system.v], system.expr, "numpy")
    ref = np.broadcast_to(f(*q.T.numpy(), *v.T.numpy()), (16,))
    assert np.allclose(L.numpy(), ref, rtol=1e-13, atol=1e-13)
    # exact energy = p.v - L computed by autograd
    assert torch.allclose(system.energy(q, v), bea.energy(system)(q, v).detach(), rtol=1e-12, atol=1e-12)
    assert len(system.domain) == 2 * system.n


@pytest.mark.parametrize("system", ALL_SYSTEMS, ids=lambda s: s.name)
def test_reference_flow_conserves_energy_and_symbolic_matches_autograd(system):
    q0, v0 = _sample(system, count=3, seed=1)
    times = np.linspace(0, 2, 11)
    flow = reference_flow(system, q0, v0, times)
    q, v = flow.q, flow.v
    assert q.shape == v.shape == (11, 3, system.n)
    H = system.energy(q, v)
    assert float((H - H[0]).abs().max()) <= 1e-10 * max(1.0, float(H[0].abs().max()))
    # the torch route (M^-1 from autograd) gives the same flow
    flow = reference_flow(lambda a, b: system(a, b), q0, v0, times[:3])
    qa, va = flow.q, flow.v
    assert float((qa - q[:3]).abs().max()) <= 1e-10 and float((va - v[:3]).abs().max()) <= 1e-10


def test_harmonic_oscillator_closed_form():
    osc = systems.coupled_oscillators(1, k=4)  # omega = 2
    q0, v0 = torch.tensor([[1.0], [0.3]]), torch.tensor([[0.0], [-1.0]])
    t = np.linspace(0, 10, 41)
    flow = reference_flow(osc, q0, v0, t)
    q, v = flow.q, flow.v
    tt = torch.from_numpy(t)[:, None, None]
    exact_q = q0 * torch.cos(2 * tt) + v0 / 2 * torch.sin(2 * tt)
    exact_v = -2 * q0 * torch.sin(2 * tt) + v0 * torch.cos(2 * tt)
    assert float((q - exact_q).abs().max()) <= 1e-11 and float((v - exact_v).abs().max()) <= 1e-11


def test_kepler_circular_orbit_returns_after_one_period():
    flow = reference_flow(systems.kepler(), [1.0, 0.0], [0.0, 1.0], [0.0, math.pi, 2 * math.pi])
    q, v = flow.q, flow.v
    assert float((q[-1] - torch.tensor([1.0, 0.0])).abs().max()) <= 1e-11
    assert float((q[1] - torch.tensor([-1.0, 0.0])).abs().max()) <= 1e-11


def test_double_pendulum_mass_matrix():
    dp = systems.n_pendulum(2)
    M, _ = dp.euler_lagrange_data()
    t1, t2 = dp.q
    expected = sympy.Matrix([[2, sympy.cos(t1 - t2)], [sympy.cos(t1 - t2), 1]])
    assert sympy.simplify(M - expected) == sympy.zeros(2, 2)


def test_n_body_discrete_linear_momentum_is_conserved():
    """Translation invariance of L_d: the total discrete momentum is conserved (Noether)."""
    body = systems.n_body((1.0, 2.0, 1.5))
    q0, v0 = _sample(body, count=2, seed=3)
    vi = VariationalIntegrator(body, 0.01, "midpoint")
    qs = vi.solve(q0, v0, 200).q
    p = vi.momenta(qs)
    P = torch.stack([p[..., 0::2].sum(-1), p[..., 1::2].sum(-1)], -1)
    assert float((P - P[0]).abs().max()) <= 1e-12


def test_sympy_expression_with_symbols_and_bound_parameters():
    q, v, w = sympy.symbols("q v w")
    times = [0.0, 0.5, 1.0]
    a = reference_flow(v**2 / 2 - 9 * q**2 / 2, [0.5], [0.0], times, q=[q], v=[v]).q
    b = reference_flow(SymbolicLagrangian(v**2 / 2 - w**2 * q**2 / 2, [q], [v], params=[w]).bind(w=3), [0.5], [0.0], times).q
    assert torch.allclose(a, b, atol=1e-13)
    assert torch.allclose(a[:, 0], 0.5 * torch.cos(3 * torch.tensor(times, dtype=torch.float64)), atol=1e-11)


def test_t0_and_backward_times():
    P = systems.pendulum()
    ahead = reference_flow(P, [1.0], [0.2], [0.0, 1.0])
    fwd = ahead.q
    flow = reference_flow(P, fwd[1], ahead.v[1], [1.0, 0.0])
    back, vb = flow.q, flow.v
    assert float((back[1] - torch.tensor([1.0])).abs().max()) <= 1e-11
    later = reference_flow(P, [1.0], [0.2], [0.5, 1.0], t0=0.0).q
    assert float((later[1] - fwd[1]).abs().max()) <= 1e-11
    # times on both sides of t0: the harmonic oscillator q = cos(3 t) + sin(3 t) through (1, 3) at t0 = 0.2
    q, v = sympy.symbols("q v")
    ts = torch.linspace(-1.0, 1.4, 13, dtype=torch.float64)
    for times in (ts, ts.flip(0)):  # increasing or decreasing
        flow = reference_flow(v**2 / 2 - 9 * q**2 / 2, [math.cos(0.6) + math.sin(0.6)], [3 * (math.cos(0.6) - math.sin(0.6))],
                                times, q=[q], v=[v], t0=0.2)
        qs, vs = flow.q, flow.v
        assert float((qs[:, 0] - (torch.cos(3 * times) + torch.sin(3 * times))).abs().max()) <= 1e-11
        assert float((vs[:, 0] - 3 * (torch.cos(3 * times) - torch.sin(3 * times))).abs().max()) <= 1e-11



def test_taylor_reference_is_exact_to_rounding_and_bounds_dop853():
    """method="taylor" (mpmath's Taylor series in 30 digits): on the oscillator q = cos(3t) + sin(3t) through t0 = 0.2,
    times on both sides, within 2e-15 of the closed form (float64 rounding of values up to 1.4; DOP853 at its default
    1e-13 is within 1e-11 above); on Henon-Heiles from (0.2, -0.1), (0.1, 0.15) to T = 2, DOP853 at its defaults
    is within 5e-13 of it (measured 1.59e-13; still 1e4 below the 5e-9 floor this justifies), and 30 digits agree
    with 50 to the last bit of float64. 0.6 s."""
    q, v = sympy.symbols("q v")
    times = torch.linspace(-1.0, 1.4, 7, dtype=torch.float64)
    flow = reference_flow(v**2 / 2 - 9 * q**2 / 2, [math.cos(0.6) + math.sin(0.6)], [3 * (math.cos(0.6) - math.sin(0.6))],
                          times, q=[q], v=[v], t0=0.2, method="taylor")
    assert float((flow.q[:, 0] - (torch.cos(3 * times) + torch.sin(3 * times))).abs().max()) <= 2e-15
    assert float((flow.v[:, 0] - 3 * (torch.cos(3 * times) - torch.sin(3 * times))).abs().max()) <= 6e-15
    HH, ts = systems.henon_heiles(), np.arange(0, 2.0 + 1e-12, 0.25)
    q0, v0 = torch.tensor([[0.2, -0.1]], dtype=torch.float64), torch.tensor([[0.1, 0.15]], dtype=torch.float64)
    taylor = reference_flow(HH, q0, v0, ts, method="taylor").q
    assert float((taylor - reference_flow(HH, q0, v0, ts, method="taylor", rtol=1e-40, atol=1e-40).q).abs().max()) <= 1e-16
    assert float((taylor - reference_flow(HH, q0, v0, ts).q).abs().max()) <= 5e-13


def test_taylor_rational_constants_carry_full_precision():
    """A coefficient 1/3 is mpf(1)/mpf(3) in the private context, not the float 1/3 (off by 1.9e-17): at 40 digits the
    oscillator L = v^2/2 - q^2/6 from (1, 0) follows q = cos(t/sqrt(3)), v = -sin(t/sqrt(3))/sqrt(3) to 1e-30 at t = 1
    before rounding to float64 (measured ~1e-40; with the float constant 1e-17). The global mpmath.mp keeps its dps."""
    import mpmath

    from integrators.taylor import _compile, _rhs

    q, v = sympy.symbols("q v")
    dps = mpmath.mp.dps
    ctx = mpmath.MPContext()
    ctx.dps = 40
    assert abs(_compile(ctx, [q], [sympy.Rational(1, 3) * q])(ctx.mpf(1))[0] - ctx.mpf(1) / 3) <= ctx.mpf(10) ** -39
    f = _rhs(SymbolicLagrangian(v**2 / 2 - q**2 / 6, [q], [v]), ctx, [])
    y = ctx.odefun(lambda t, y: f(y), 0, [ctx.mpf(1), ctx.mpf(0)])(1)
    w = 1 / ctx.sqrt(3)
    assert abs(y[0] - ctx.cos(w)) <= ctx.mpf(10) ** -30 and abs(y[1] + w * ctx.sin(w)) <= ctx.mpf(10) ** -30
    assert mpmath.mp.dps == dps


def test_taylor_energy_check_and_singular_mass():
    """Each output state must be real, finite and keep the initial energy to 10^(-digits/2) (relative to the start's
    term size |v.p| + |L|): on the oscillator L = v^2/2 - q^2/2 at 30 digits the exact state passes, one off by 1e-14
    in q (relative energy drift ~1e-14 > 1e-15) or complex raises ReferenceFlowError; a mass matrix d^2L/dv^2 = v
    singular at the start raises ReferenceFlowError too (it raised the bare BeaValueError before)."""
    import mpmath

    from integrators import ReferenceFlowError
    from integrators.taylor import _energy_check

    q, v = sympy.symbols("q v")
    ctx = mpmath.MPContext()
    ctx.dps = 30
    sl = SymbolicLagrangian(v**2 / 2 - q**2 / 2, [q], [v])
    check = _energy_check(sl, ctx, [], 30)([ctx.mpf(1), ctx.mpf(0)])
    check(1.0, [ctx.cos(1), -ctx.sin(1)])
    with pytest.raises(ReferenceFlowError):
        check(1.0, [ctx.cos(1) + ctx.mpf(10) ** -14, -ctx.sin(1)])
    with pytest.raises(ReferenceFlowError):
        check(1.0, [ctx.mpc(1, 1e-3), ctx.mpf(0)])
    with pytest.raises(ReferenceFlowError):
        reference_flow(v**3 / 6, [0.0], [0.0], [0.0, 1.0], q=[q], v=[v], method="taylor")


@pytest.mark.slow
def test_taylor_reference_stops_at_a_collision():
    """L = v^2/2 + 1/q from q = 1 at rest collides with q = 0 at t = pi/2^(3/2) ~ 1.11; the Taylor series steps over
    the pole and returned q(1.5) = -3.2e11 silently before; the energy check names t = 1.5 (drift 3.5e23). 15 s alone,
    76 s wall at load ~5 (the series creeps up to the pole)."""
    from integrators import ReferenceFlowError

    q, v = sympy.symbols("q v")
    with pytest.raises(ReferenceFlowError, match="t=1.5"):
        reference_flow(v**2 / 2 + 1 / q, [1.0], [0.0], [0.0, 0.5, 1.0, 1.5, 2.0], q=[q], v=[v], method="taylor")


def test_taylor_reference_bad_input():
    """The Taylor route needs a symbolic Lagrangian; an unknown method is named before SciPy sees it."""
    from bea.errors import BeaTypeError, BeaValueError

    with pytest.raises(BeaTypeError):
        reference_flow(lambda q, v: (v**2).sum(-1) / 2, [0.1], [0.0], [0.0, 1.0], method="taylor")
    with pytest.raises(BeaValueError):
        reference_flow(systems.pendulum(), [0.1], [0.0], [0.0, 1.0], method="dop853")
    with pytest.raises(BeaValueError, match="atol must be >= 1e-190"):
        reference_flow(systems.pendulum(), [0.1], [0.0], [0.0, 1.0], method="taylor", atol=1e-191)
    q, v = sympy.symbols("q v")
    for method in ("taylor", "DOP853"):  # a System carries its own symbols: q=, v= were accepted silently
        with pytest.raises(BeaValueError, match="only for a SymPy expression"):
            reference_flow(systems.pendulum(), [0.1], [0.0], [0.0, 1.0], q=[q], v=[v], method=method)

def test_reference_flow_bad_input():
    P = systems.pendulum()
    with pytest.raises(ValueError, match="non-finite"):
        reference_flow(P, [float("nan")], [0.0], [0.0, 1.0])
    with pytest.raises(ValueError, match="same shape"):
        reference_flow(P, [0.0, 1.0], [0.0], [0.0, 1.0])
    with pytest.raises(ValueError, match="strictly increasing"):
        reference_flow(P, [0.0], [0.0], [0.0, 1.0, 0.5])
    with pytest.raises(ValueError, match="n=1"):
        reference_flow(P, [0.0, 1.0], [0.0, 1.0], [0.0, 1.0])
    q, v = sympy.symbols("q v")
    with pytest.raises(ValueError, match="symbols"):
        reference_flow(v**2 / 2, [0.0], [1.0], [0.0, 1.0])
    with pytest.raises(ValueError, match="singular"):
        reference_flow(q * v - q**2 / 2, [0.1], [1.0], [0.0, 1.0], q=[q], v=[v])
    with pytest.raises(ValueError, match="undeclared symbols"):
        SymbolicLagrangian(v**2 / 2 - sympy.Symbol("k") * q**2, [q], [v])
    with pytest.raises(ValueError, match="give numbers for the parameters"):
        SymbolicLagrangian(v**2 / 2 - sympy.Symbol("k") * q**2, [q], [v], params=[sympy.Symbol("k")])(torch.zeros(1), torch.zeros(1))


@pytest.mark.parametrize("call", [lambda: systems.pendulum(m=-1), lambda: systems.n_pendulum(0), lambda: systems.kepler(mu=0),
                                  lambda: systems.n_body((1,)), lambda: systems.n_pendulum(2, masses=[1, 2, 3]),
                                  lambda: systems.variable_mass_pendulum(c=-1)])
def test_system_parameters_are_validated(call):
    with pytest.raises(ValueError):
        call()
