"""Stage schemes on the torch.func / torch.compile path (integrators.compiled_stages, issue 26 item 3): one Newton
solve on the interior points and the next position, equal to the eager nested solve, with the eager fallback.

Tolerances: both paths solve every step to rounding (Newton's xtol 1e-16 with the stall test), so they differ by
summation orders, about 1e-16 per step; 1e-13 over 10 steps and 1e-12 over 1,000 leave two decades of room
(measured: 4e-14 over 200 steps, Henon-Heiles galerkin2)."""

import functools
import warnings

import pytest
import torch

import bea
from bea.errors import BeaValueError
from integrators import VariationalIntegrator, systems
from integrators import compiled_stages as CS
from integrators.compiled_func import FuncPathError
from integrators.compiled_stages import StageStepper, stage_points
from integrators.model_protocol import CompiledPathWarning

PENDULUM, HH = systems.pendulum(), systems.henon_heiles()


def _start(batch, n):
    g = torch.Generator().manual_seed(3)
    return (0.3 * torch.rand(batch, n, generator=g, dtype=torch.float64),
            0.1 * torch.rand(batch, n, generator=g, dtype=torch.float64))


def _with_stepper(L, h, scheme, n, batch=2):
    """An "auto" integrator holding an uncompiled stage stepper (the compiled functions, run eagerly: no build) with
    the bucket of ``batch`` built, so that short runs at that batch use it."""
    vi = VariationalIntegrator(L, h, scheme)
    vi._func_steppers[n] = StageStepper(L, h, vi.scheme, n, compile=False, batch=batch)
    return vi


@pytest.fixture
def uncompiled(monkeypatch):
    """stage_stepper builds uncompiled steppers (no torch.compile: milliseconds) and "auto" its stepper from 6 steps."""
    monkeypatch.setattr(CS, "StageStepper", functools.partial(StageStepper, compile=False))
    monkeypatch.setattr(CS, "STAGE_MIN_STEPS", 6)


def test_stage_points_are_the_quadrature_of_galerkin2_and_the_sub_steps_of_the_triple_jump():
    """Phi = sum_k W_k L(alpha_k X, beta_k X), X = (a, Q_1.., b): Simpson's rule on the quadratic through
    (a, Q, b) at nodes 0, 1/2, 1 (velocities l_j'(c)/h), and the midpoint rule on each sub-step g_j h."""
    h = 0.1
    W, alpha, beta = stage_points(h, bea.get_scheme("galerkin2"))
    assert torch.allclose(W, h * torch.tensor([1 / 6, 2 / 3, 1 / 6], dtype=torch.float64), rtol=0, atol=1e-16)
    assert torch.equal(alpha, torch.eye(3, dtype=torch.float64))
    dl = torch.tensor([[-3, 4, -1], [-1, 0, 1], [1, -4, 3]], dtype=torch.float64)  # l_j'(c) on nodes 0, 1/2, 1
    assert torch.allclose(beta, dl / h, rtol=1e-15, atol=0)
    W, alpha, beta = stage_points(h, bea.get_scheme("triple_jump"))
    g1 = 1 / (2 - 2 ** (1 / 3))
    gam = torch.tensor([g1, 1 - 2 * g1, g1], dtype=torch.float64)
    assert torch.allclose(W, h * gam, rtol=1e-14, atol=0)
    step = torch.tensor([[-1, 1, 0, 0], [0, -1, 1, 0], [0, 0, -1, 1]], dtype=torch.float64)
    assert torch.allclose(alpha, step.abs() / 2, rtol=0, atol=0)
    assert torch.allclose(beta, step / (gam[:, None] * h), rtol=1e-14, atol=0)


def test_one_newton_solve_on_all_stages_equals_the_eager_nested_solve():
    """Henon-Heiles with galerkin2 (solve) and the pendulum with the triple jump (solve_from_positions), 10 steps at
    a batch of 2: positions and momenta equal the eager path's to 1e-13, and so do velocities and energies computed
    from them; every step was taken by the stage stepper."""
    cases = ((HH, 2, "galerkin2", "solve"), (PENDULUM, 1, "triple_jump", "solve_from_positions"))
    for L, n, scheme, how in cases:
        q0, v0 = _start(2, n)
        args = (q0, v0, 10) if how == "solve" else (q0, q0 + 0.1 * v0, 10)
        eager = VariationalIntegrator(L, 0.1, scheme, execution="eager")
        ref = getattr(eager, how)(*args)
        vi = _with_stepper(L, 0.1, scheme, n)
        got = getattr(vi, how)(*args)
        assert got.stats["execution"] == "torch.compile" and got.stats["eager_steps"] == 0
        assert float((got.q - ref.q).abs().max()) <= 1e-13 and float((got.p - ref.p).abs().max()) <= 1e-13
        assert float((vi.energies(got, momenta=got.p) - eager.energies(ref, momenta=ref.p)).abs().max()) <= 1e-13
        # the momenta carried by the steps are the discrete Legendre transform of the positions (eager nested solve)
        assert float((eager.momenta(got.q[:4]) - got.p[:4]).abs().max()) <= 1e-13


def test_a_mixed_run_and_a_second_run_restart_the_interior_predictor():
    """A step the stepper hands to the eager path (forced here at step 5) leaves a gap in the ring of interior
    points: Newton restarts from the straight line and the result still equals eager; a second run (another batch)
    does not reuse the first run's interior points."""
    q0, v0 = _start(2, 2)
    ref = VariationalIntegrator(HH, 0.1, "galerkin2", execution="eager").solve(q0, v0, 12)
    vi = _with_stepper(HH, 0.1, "galerkin2", 2)
    stepper = vi._func_steppers[2]
    advance = stepper.advance

    def refuse_step_5(out, j, j_end, *rest):
        if j == 5:
            return j, rest[0], None, 1
        j_stop, p, jac, more = advance(out, j, min(j_end, 5) if j < 5 else j_end, *rest)
        return (j_stop, p, None, 1) if j_stop == 5 else (j_stop, p, jac, more)  # stopping early: no Jacobian, as advance

    stepper.advance = refuse_step_5
    got = vi.solve(q0, v0, 12)
    assert got.stats["execution"] == "eager+torch.compile" and got.stats["eager_steps"] == 1
    assert float((got.q - ref.q).abs().max()) <= 1e-13
    stepper.advance = advance
    again = vi.solve(q0[:1], v0[:1], 12)
    assert float((again.q - ref.q[:, :1]).abs().max()) <= 1e-13


def test_masked_trajectories_leave_the_stage_stepper_the_others():
    """on_failure="mask" with max_step: the trajectory whose steps are longer than the bound fails on the stepper,
    the eager path masks it, and the stepper goes on with the remaining rows; equal to the all-eager run (1e-13)."""
    q0 = torch.tensor([[0.2], [0.1]], dtype=torch.float64)
    v0 = torch.tensor([[0.1], [3.0]], dtype=torch.float64)  # the second moves about 0.3 per step
    kw = dict(max_step=0.2)
    ref = VariationalIntegrator(PENDULUM, 0.1, "galerkin2", execution="eager", **kw).solve(q0, v0, 8, on_failure="mask")
    vi = VariationalIntegrator(PENDULUM, 0.1, "galerkin2", **kw)
    vi._func_steppers[1] = StageStepper(PENDULUM, 0.1, vi.scheme, 1, compile=False, batch=2)
    got = vi.solve(q0, v0, 8, on_failure="mask")
    assert got.stats["execution"] == "eager+torch.compile" and got.stats["compiled_steps"] == 7
    assert torch.equal(got.valid, ref.valid) and bool(got.valid[:, 0].all()) and not bool(got.valid[1:, 1].any())
    assert float((got.q[:, 0] - ref.q[:, 0]).abs().max()) <= 1e-13


def _branching(q, v):
    """Python control flow on a tensor's value, which torch.compile(fullgraph=True) refuses."""
    scale = 1.0 if float(q.detach().abs().sum()) < 1e9 else 2.0
    return scale * (0.5 * (v ** 2).sum(-1) - 0.5 * (q ** 2).sum(-1))


def test_what_torch_compile_refuses_falls_back_to_eager_and_says_why_once(monkeypatch):
    monkeypatch.setattr(CS, "STAGE_MIN_STEPS", 1)
    q0, v0 = _start(2, 1)
    vi = VariationalIntegrator(_branching, 0.1, "galerkin2")
    with pytest.warns(CompiledPathWarning, match="stage scheme.*torch.compile could not compile") as record:
        got = vi.solve(q0, v0, 8)
    assert [w.filename for w in record] == [__file__]  # the warning points at the caller of solve
    assert got.stats["execution"] == "eager" and vi._func_steppers == {1: None}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per integrator and n
        vi.solve(q0, v0, 8)
    ref = VariationalIntegrator(_branching, 0.1, "galerkin2", execution="eager").solve(q0, v0, 8)
    assert torch.equal(got.q, ref.q)
    with pytest.raises(BeaValueError):
        VariationalIntegrator(_branching, 0.1, "galerkin2", execution="compiled").solve(q0, v0, 8)


def test_short_stage_runs_stay_eager_without_a_word():
    """Below STAGE_MIN_STEPS steps "auto" neither builds nor warns (a build costs 2-113 s: RESULTS_speed.md)."""
    q0, v0 = _start(2, 1)
    vi = VariationalIntegrator(PENDULUM, 0.1, "galerkin2")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert vi.solve(q0, v0, 4).stats["execution"] == "eager"
    assert vi._func_steppers == {}


def test_short_runs_use_only_compiled_buckets_and_runs_count_their_steps(uncompiled):
    """"auto" (threshold 6 steps here): a run of 6 steps builds the stepper, from solve_from_positions too (its
    steps, not the 5 it takes); a shorter run uses it at a compiled bucket and steps eagerly at a new one (no
    compile for 2 steps); a long run at the new bucket compiles it, and short runs then use it. The check's
    reference is L as the eager path evaluates it."""
    q0, v0 = _start(5, 1)
    vi = VariationalIntegrator(PENDULUM, 0.1, "galerkin2")
    assert vi.solve_from_positions(q0[:2], q0[:2] + 0.1 * v0[:2], 5).stats["execution"] == "eager"
    assert vi._func_steppers == {}
    assert vi.solve_from_positions(q0[:2], q0[:2] + 0.1 * v0[:2], 6).stats["execution"] == "torch.compile"
    stepper = vi._func_steppers[1]
    assert stepper.buckets == {2} and stepper._reference is vi._L
    assert vi.solve(q0[:2], v0[:2], 2).stats["execution"] == "torch.compile"
    assert vi.solve(q0, v0, 2).stats["execution"] == "eager" and stepper.buckets == {2}  # batch 5: bucket 8
    assert vi.solve(q0, v0, 6).stats["execution"] == "torch.compile" and stepper.buckets == {2, 8}
    assert vi.solve(q0, v0, 2).stats["execution"] == "torch.compile"


def test_a_stage_scheme_without_interior_points_takes_the_stage_path(uncompiled):
    """galerkin_lobatto(1) (no interior point: the unknown is the next position alone) and a user Galerkin(1, ...):
    every step on the stage stepper, equal to the eager path to 1e-13."""
    q0, v0 = _start(2, 1)
    for scheme in (bea.galerkin_lobatto(1), bea.Galerkin(1, [0, 1], ["1/2", "1/2"], name="trapezoid")):
        ref = VariationalIntegrator(PENDULUM, 0.1, scheme, execution="eager").solve(q0, v0, 8)
        vi = VariationalIntegrator(PENDULUM, 0.1, scheme)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = vi.solve(q0, v0, 8)
        assert got.stats["execution"] == "torch.compile" and got.stats["eager_steps"] == 0
        assert vi._func_steppers[1].m == 0
        assert float((got.q - ref.q).abs().max()) <= 1e-13 and float((got.p - ref.p).abs().max()) <= 1e-13


class _SquaredGalerkin(bea.Galerkin):
    """A user stage scheme whose action is not a weighted sum of values of L (each value squared)."""

    def stage_action(self, L, a, Q, b, h):
        return super().stage_action(lambda q, v: L(q, v) ** 2, a, Q, b, h)


def test_a_stage_action_that_is_not_a_weighted_sum_of_L_is_refused():
    scheme = _SquaredGalerkin(2, [0, "1/2", 1], ["1/6", "2/3", "1/6"], name="squared")
    with pytest.raises(FuncPathError, match="not a weighted sum"):  # caught by the probe, before any compile
        StageStepper(PENDULUM, 0.1, scheme, 1, compile=False)


@pytest.mark.slow
@pytest.mark.parametrize("system,n", [(PENDULUM, 1), (HH, 2)], ids=["pendulum", "henon_heiles"])
@pytest.mark.parametrize("scheme", ["galerkin2", "triple_jump"])
def test_compiled_stage_steps_equal_eager_over_1000_steps(system, n, scheme, monkeypatch):
    """torch.compile (5-30 s to build on a loaded 2-core machine; the eager reference 1-7 minutes): "auto" takes the
    compiled stage path for 1,000 steps, and positions and momenta equal the eager path's to 1e-12; no global torch
    setting (default dtype, threads, RNG state) changed."""
    monkeypatch.setattr(CS, "STAGE_MIN_STEPS", 1000)  # "auto" from 1,000 steps (the default, 1,500: a longer eager run)
    q0, v0 = _start(2, n)
    before = torch.get_default_dtype(), torch.get_num_threads(), torch.random.get_rng_state().clone()
    vi = VariationalIntegrator(system, 0.1, scheme)
    got = vi.solve(q0, v0, 1000)
    assert got.stats["execution"] == "torch.compile" and vi.compile_seconds > 0
    assert before[:2] == (torch.get_default_dtype(), torch.get_num_threads())
    assert torch.equal(before[2], torch.random.get_rng_state())
    ref = VariationalIntegrator(system, 0.1, scheme, execution="eager").solve(q0, v0, 1000)
    assert float((got.q - ref.q).abs().max()) <= 1e-12 and float((got.p - ref.p).abs().max()) <= 1e-12
