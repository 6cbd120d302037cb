"""Devices and dtypes (issue 14, item 4): every entry point of ``bea`` and ``integrators`` follows its
inputs (or takes ``device=``), and every tensor it returns is on the input's device with the input's
dtype (``integrators`` works in float64 and says so).

Each test runs once per available device (the ``device`` fixture of ``tests/conftest.py``: the CPU
always, CUDA when present). Results on a device are compared with the same computation on the CPU:
the arithmetic is the same IEEE float64, only the order of reductions may differ, hence tolerances of
1e-12 relative (a few hundred ulps over the tens of operations of one formula evaluation).
"""

import math

import numpy as np
import pytest
import torch

import bea
from bea.errors import BeaValueError
from integrators import VariationalIntegrator, reference_flow, systems
from integrators.data import halton_initial_conditions, load_snapshots, save_snapshots, snapshots

PENDULUM = systems.pendulum()


def L_coupled(q, v):
    """A 2-D Lagrangian with a position-dependent mass and q-v coupling: every derivative slot is used."""
    return ((1 + q[..., 0] ** 2 / 4) * v[..., 0] ** 2 / 2 + v[..., 1] ** 2 / 2 + v[..., 0] * v[..., 1] / 3
            + torch.cos(q[..., 0]) - q[..., 1] ** 2 / 2 + q[..., 0] * v[..., 1] / 7)


def L_pendulum(q, v):
    return 0.5 * (v**2).sum(-1) + torch.cos(q).sum(-1)


def _states(n, batch=5, dtype=torch.float64, seed=0):
    g = np.random.default_rng(seed)
    return (torch.tensor(g.uniform(-0.8, 0.8, (batch, n)), dtype=dtype),
            torch.tensor(g.uniform(-0.8, 0.8, (batch, n)), dtype=dtype))


def _same_place(t, like):
    assert t.device == like.device, f"result on {t.device}, input on {like.device}"
    assert t.dtype == like.dtype, f"result of dtype {t.dtype}, input {like.dtype}"


# ------------------------------------------------------------------------------------------------ bea
@pytest.mark.parametrize("kind", ["modified_lagrangian", "inverse_modified_lagrangian", "modified_equation"])
def test_component_formula_follows_its_inputs(device, kind):
    """compile_torch with dim=2 (generated code): on the input's device and dtype, equal to the CPU result."""
    f = bea.compile_torch(kind, "midpoint", 2, n=2)
    q, v = _states(2)
    want = f(L_coupled, q, v, 0.1).detach()
    for dtype in (torch.float64, torch.float32):
        qd, vd = q.to(device, dtype), v.to(device, dtype)
        got = f(L_coupled, qd, vd, 0.1)
        _same_place(got, qd)
        tol = 1e-12 if dtype == torch.float64 else 1e-5  # float32: ~1e-7 per operation, tens of operations
        np.testing.assert_allclose(got.detach().cpu().double().numpy(), want.numpy(), rtol=tol, atol=tol)


def test_dimension_free_function_follows_its_inputs(device):
    """The dimension-free engine (bea.free's tree function, series_function with n > 1) at n = 2 agrees with
    the component formula (same series, different evaluation) on every device."""
    free = bea.series_function("modified_lagrangian", "midpoint", 2, n=2)
    comp = bea.compile_torch("modified_lagrangian", "midpoint", 2, n=2)
    q, v = _states(2)
    want = comp(L_coupled, q, v, 0.1).detach()
    qd, vd = q.to(device), v.to(device)
    got = free(L_coupled, qd, vd, 0.1)
    _same_place(got, qd)
    np.testing.assert_allclose(got.detach().cpu().numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


def test_a_tensor_step_on_the_data_device_and_a_differentiable_result(device):
    """h as a per-state tensor on the same device; the result is differentiable in q there (a backward
    pass leaves a gradient on the device)."""
    f = bea.compile_torch("modified_lagrangian", "midpoint", 2, n=1)
    q, v = _states(1)
    q, v = q.to(device).requires_grad_(True), v.to(device)
    h = torch.full((5,), 0.1, dtype=torch.float64, device=device)
    out = f(L_pendulum, q, v, h)
    _same_place(out, v)
    (g,) = torch.autograd.grad(out.sum(), q)
    _same_place(g, v)
    # the series starts with L itself: d/dq of L_mod = -sin q + O(h^2)
    assert float((g.detach().cpu()[:, 0] + torch.sin(q.detach().cpu()[:, 0])).abs().max()) < 0.1 ** 2


def test_step_on_another_device_is_refused():
    """A batch-shaped h on another device than q is a BeaValueError naming both devices (the meta device
    stands for 'another device' on a CPU-only machine); a 0-d CPU tensor mixes with any device."""
    f = bea.compile_torch("modified_lagrangian", "midpoint", 2, n=1)
    q, v = _states(1)
    with pytest.raises(BeaValueError, match="h is a tensor on meta, but q is on cpu"):
        f(L_pendulum, q, v, torch.full((5,), 0.1, device="meta"))
    got = f(L_pendulum, q, v, torch.tensor(0.1))
    np.testing.assert_allclose(got.detach().numpy(), f(L_pendulum, q, v, 0.1).detach().numpy(), rtol=1e-15, atol=0)


def test_gradcheck_of_the_generated_code_on_the_cpu():
    """Analytic derivatives of the generated modified Lagrangian (autograd through autograd) against finite
    differences, in float64 on the CPU (gradcheck's own tolerances: eps=1e-6, atol=1e-5, rtol=1e-3)."""
    f = bea.compile_torch("modified_lagrangian", "midpoint", 2, n=2)
    q, v = _states(2, batch=2)
    q, v = q.requires_grad_(True), v.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: f(L_coupled, a, b, 0.2), (q, v))


def test_energy_momentum_acceleration_follow_their_inputs(device):
    q, v = _states(2)
    qd, vd = q.to(device), v.to(device)
    for make in (bea.energy, bea.momentum, bea.acceleration):
        got, want = make(L_coupled)(qd, vd), make(L_coupled)(q, v)
        _same_place(got, qd)
        np.testing.assert_allclose(got.detach().cpu().numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------------------------ integrators
def test_solve_on_the_device_of_the_data(device):
    """The eager path on every device (and the default execution too), positions, validity, momenta,
    velocities and energies on the data's device; equal to the CPU run to 1e-12."""
    q0, v0 = _states(1, batch=4)
    ref = VariationalIntegrator(L_pendulum, 0.1, execution="eager")
    want = ref.solve(q0, v0, 30)
    for execution in ("eager", "auto"):
        vi = VariationalIntegrator(L_pendulum, 0.1, execution=execution)
        qd, vd = q0.to(device), v0.to(device)
        sol = vi.solve(qd, vd, 30)
        _same_place(sol.q, qd)
        assert sol.valid.device == qd.device and bool(sol.valid.all())
        np.testing.assert_allclose(sol.q.cpu().numpy(), want.q.numpy(), rtol=1e-12, atol=1e-12)
        for got in (vi.momenta(sol.q), vi.velocities(sol.q), vi.energies(sol.q)):
            _same_place(got, qd)
        sol2 = vi.solve_from_positions(sol.q[0], sol.q[1], 5)
        _same_place(sol2.q, qd)


def test_symbolic_system_integrates_on_the_device_and_compiles_on_the_cpu(device):
    """A SymPy system: eager on any device; with execution='auto' the compiled C loop on the CPU (when a
    compiler exists) and the eager path elsewhere, without error; the two paths agree to rounding."""
    from integrators.ccompile import find_compiler

    q0, v0 = _states(1, batch=4)
    qd, vd = q0.to(device), v0.to(device)
    eager = VariationalIntegrator(PENDULUM, 0.1, execution="eager").solve(qd, vd, 40)
    _same_place(eager.q, qd)
    auto = VariationalIntegrator(PENDULUM, 0.1, execution="auto")
    sol = auto.solve(qd, vd, 200)  # 800 trajectory-steps: above AUTO_MIN_WORK, so 'auto' compiles where it can
    _same_place(sol.q, qd)
    compiled_here = device.type == "cpu" and find_compiler() is not None
    assert auto.last_execution == ("compiled" if compiled_here else "eager")
    np.testing.assert_allclose(sol.q[:41].cpu().numpy(), eager.q.cpu().numpy(), rtol=1e-12, atol=1e-12)


def test_compiled_execution_refuses_data_on_another_device():
    """execution='compiled' with data off the CPU is a ValueError that says what to do; 'auto' takes the
    eager path. The meta device stands for a GPU on a CPU-only machine (no Newton runs: the stepper choice
    is made first)."""
    out = torch.empty(3, 2, 1, device="meta")
    vi = VariationalIntegrator(PENDULUM, 0.1, execution="compiled")
    with pytest.raises(ValueError, match=r"runs in C on the CPU, but the data are on meta.*execution='auto' or 'eager'"):
        vi._stepper(1, 10**6, out)
    assert VariationalIntegrator(PENDULUM, 0.1, execution="auto")._stepper(1, 10**6, out) is None


def test_compiled_stepper_refuses_tensors_off_the_cpu():
    from integrators.ccompile import find_compiler
    from integrators.compiled import CompiledStepper

    if find_compiler() is None:
        pytest.skip("no C compiler: there is no compiled stepper to call")
    stepper = CompiledStepper(PENDULUM, 0.1, bea.get_scheme("midpoint"), 1)
    with pytest.raises(ValueError, match="runs in C on the CPU, but x is on meta"):
        stepper.lagrangian_derivatives(torch.empty(4, 2, device="meta"))
    out, p = torch.zeros(3, 4, 1), torch.empty(4, 1, device="meta")
    with pytest.raises(ValueError, match="but p is on meta"):
        stepper.advance(out, 0, 2, p, None, None, None, VariationalIntegrator(PENDULUM, 0.1).options, None)


def test_reference_flow_follows_the_initial_data(device):
    """Symbolic and torch Lagrangians (the torch one evaluated on the device) give the same flow on the
    device of q0 as on the CPU; the pendulum's energy is conserved to the integration tolerance."""
    q0, v0 = _states(1, batch=3)
    times = np.linspace(0.0, 2.0, 5)
    want = reference_flow(PENDULUM, q0, v0, times).q
    qd, vd = q0.to(device), v0.to(device)
    for L in (PENDULUM, L_pendulum):
        flow = reference_flow(L, qd, vd, times)
        qs, vs = flow.q, flow.v
        _same_place(qs, qd)
        _same_place(vs, qd)
        np.testing.assert_allclose(qs.cpu().numpy(), want.numpy(), rtol=1e-10, atol=1e-10)
    E = 0.5 * vs**2 - torch.cos(qs)  # the pendulum's energy, m = l = g = 1
    assert float((E - E[0]).abs().max()) < 1e-10


def test_snapshot_data_on_a_device(device, tmp_path):
    """snapshots, halton_initial_conditions and load_snapshots take device=; the numbers are those of the
    CPU (the draws and the reference integration run there) up to the torch Lagrangian's rounding."""
    q0, v0 = halton_initial_conditions([(-1, 1), (-0.5, 0.5)], 8, seed=3, device=device)
    assert q0.device == v0.device == device and q0.dtype == torch.float64
    cpu = snapshots(PENDULUM, 0.1, 3, 6, seed=1, noise=1e-3)
    dev = snapshots(PENDULUM, 0.1, 3, 6, seed=1, noise=1e-3, device=device)
    assert dev.device == device and dev.dtype == torch.float64
    np.testing.assert_allclose(dev.cpu().numpy(), cpu.numpy(), rtol=0, atol=1e-14)
    torch_L = snapshots(L_pendulum, 0.1, 3, 6, domain=PENDULUM.domain, seed=1, device=device)
    assert torch_L.device == device
    np.testing.assert_allclose(torch_L.cpu().numpy(), snapshots(PENDULUM, 0.1, 3, 6, seed=1).numpy(), rtol=1e-10, atol=1e-10)
    path = save_snapshots(tmp_path / "s.npz", dev, 0.1)
    snap = load_snapshots(path, device=device)
    assert snap.q.device == snap.t0.device == device
    assert torch.equal(snap.q.cpu(), dev.cpu()) and math.isclose(snap.h, 0.1, rel_tol=1e-12)
