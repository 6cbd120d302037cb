"""The torch.func / torch.compile path (integrators.compiled_func): equal to eager, used where tracing to C fails
or a network's batch is large, and a fallback to eager that says why once."""

import warnings

import pytest
import torch

import bea
from integrators import VariationalIntegrator
from integrators import compiled_func as CF
from integrators import variational as V
from integrators.compiled_func import FuncPathError, FuncStepper, bucket
from integrators.model_protocol import CompiledPathWarning
from integrators.traced import NETWORK_MAX_BATCH


def erf_oscillator(q, v):
    """No C form (aten.erf has no lowering rule), ordinary torch code otherwise."""
    return 0.5 * (v ** 2).sum(-1) - 0.5 * (q ** 2).sum(-1) + 0.1 * torch.erf(q).sum(-1)


def erf_branching(q, v):
    """No C form, and Python control flow on a tensor's value, which torch.compile(fullgraph=True) refuses."""
    scale = 1.0 if float(q.detach().abs().sum()) < 1e9 else 2.0
    return erf_oscillator(q, v) * scale


def _start(batch, n=1):
    g = torch.Generator().manual_seed(3)
    return 0.2 + 0.5 * torch.rand(batch, n, generator=g, dtype=torch.float64), 0.1 * torch.rand(batch, n, generator=g,
                                                                                                 dtype=torch.float64)


def _globals():
    return torch.get_default_dtype(), torch.get_num_threads(), torch.random.get_rng_state().clone()


def test_bucket_sizes_are_powers_of_two():
    assert [bucket(b) for b in (1, 2, 3, 4, 5, 1000, 1024, 1025)] == [2, 2, 4, 4, 8, 1024, 1024, 2048]


def test_the_func_steps_equal_eager_uncompiled(monkeypatch):
    """The stepper's derivatives (torch.func, here without torch.compile, the same functions) drive Newton to the
    eager path's trajectory: 60 midpoint and trapezoidal steps at a batch of 3 agree to 1e-13 (both solve every
    step to rounding; the differences are summation orders, about 1e-16 per step)."""
    monkeypatch.setattr(V, "AUTO_MIN_WORK", 1)
    q0, v0 = _start(3)
    for scheme in ("midpoint", "trapezoidal"):
        eager = VariationalIntegrator(erf_oscillator, 0.1, scheme, execution="eager")
        ref = eager.solve(q0, v0, 60)
        vi = VariationalIntegrator(erf_oscillator, 0.1, scheme, execution="auto")
        vi._stepper_errors[1] = "no C form (test)"
        vi._func_steppers[1] = FuncStepper(erf_oscillator, 0.1, bea.get_scheme(scheme), 1, compile=False)
        got = vi.solve(q0, v0, 60)
        assert got.stats["execution"] == "torch.compile" and got.stats["eager_steps"] == 0
        assert float((got.q - ref.q).abs().max()) <= 1e-13 and float((got.p - ref.p).abs().max()) <= 1e-13


def test_what_torch_compile_refuses_falls_back_to_eager_and_says_why_once(monkeypatch):
    monkeypatch.setattr(V, "AUTO_MIN_WORK", 1)
    monkeypatch.setattr(CF, "FUNC_MIN_WORK", 1)
    q0, v0 = _start(2)
    before = _globals()
    vi = VariationalIntegrator(erf_branching, 0.1)
    with pytest.warns(CompiledPathWarning, match="aten.erf.*torch.compile could not compile"):
        got = vi.solve(q0, v0, 20)
    assert got.stats["execution"] == "eager" and vi._func_steppers == {1: None}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per integrator and n
        vi.solve(q0, v0, 20)
    ref = VariationalIntegrator(erf_branching, 0.1, execution="eager").solve(q0, v0, 20)
    assert torch.equal(got.q, ref.q)
    after = _globals()
    assert before[:2] == after[:2] and torch.equal(before[2], after[2])
    with pytest.raises(FuncPathError, match="torch.compile"):
        FuncStepper(erf_branching, 0.1, bea.get_scheme("midpoint"), 1)


@pytest.mark.slow
def test_untraceable_code_runs_compiled_and_equals_eager_over_1000_steps(monkeypatch):
    """torch.compile (about 10-100 s to build on a loaded 2-core machine): 1,000 steps equal eager to 1e-12."""
    monkeypatch.setattr(CF, "FUNC_MIN_WORK", 1000)
    q0, v0 = _start(4, 2)
    before = _globals()
    vi = VariationalIntegrator(erf_oscillator, 0.1)
    got = vi.solve(q0, v0, 1000)
    assert got.stats["execution"] == "torch.compile"
    stepper = vi._func_steppers[2]  # torch's scan compiled (no unrolled rebuild) wherever torch has it
    assert stepper._scan == CF._func_parts.has_scan() and stepper.chord_steps == (8 if stepper._scan else 2)
    # the graph was called at a batch equal to its bucket (its history a view of the march's buffer, unpadded); at
    # xtol 1e-16 and h = 0.1 it certifies no step here (measured: 21 calls, all refused, newton() takes the 1000)
    assert stepper.stats["chord_steps"] + stepper._refusals > 0
    ref = VariationalIntegrator(erf_oscillator, 0.1, execution="eager").solve(q0, v0, 1000)
    assert float((got.q - ref.q).abs().max()) <= 1e-12 and float((got.p - ref.p).abs().max()) <= 1e-12
    after = _globals()
    assert before[:2] == after[:2] and torch.equal(before[2], after[2])


@pytest.mark.slow
def test_a_network_at_large_batch_takes_the_torch_compile_path(monkeypatch):
    """An MLP Lagrangian (LNN baseline, 2 hidden layers of 64): its traced C form is used for one trajectory and
    torch.compile above NETWORK_MAX_BATCH; both equal eager to 1e-12 over 1,000 steps (200 at the large batch)."""
    monkeypatch.setattr(CF, "FUNC_MIN_WORK", 1000)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(2, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                              torch.nn.Linear(64, 1)).double()

    def L(q, v):
        return (v ** 2).sum(-1) / 2 - (q ** 2).sum(-1) / 2 + 0.01 * net(torch.cat([q, v], -1))[..., 0]

    vi, eager = VariationalIntegrator(L, 0.05), VariationalIntegrator(L, 0.05, execution="eager")
    for batch, steps, path in ((1, 1000, "compiled"), (NETWORK_MAX_BATCH + 28, 200, "torch.compile")):
        q0, v0 = _start(batch)
        got, ref = vi.solve(q0, v0, steps), eager.solve(q0, v0, steps)
        assert got.stats["execution"] == path
        assert float((got.q - ref.q).abs().max()) <= 1e-12


def test_a_failure_during_the_run_hands_the_rest_to_eager_and_says_so_once(monkeypatch):
    """A compiled evaluation that raises mid-run (e.g. torch.compile's recompile limit) stops that stepper; the
    eager path takes the remaining steps, with the eager trajectory's very numbers from there on."""
    monkeypatch.setattr(V, "AUTO_MIN_WORK", 1)
    q0, v0 = _start(3)
    stepper = FuncStepper(erf_oscillator, 0.1, bea.get_scheme("midpoint"), 1, compile=False)
    calls = []
    chord = stepper._chord

    def flaky(*args):
        calls.append(1)
        if len(calls) == 5:
            raise RuntimeError("recompile limit (test)")
        return chord(*args)

    stepper._chord = flaky
    vi = VariationalIntegrator(erf_oscillator, 0.1)
    vi._stepper_errors[1], vi._func_steppers[1] = "no C form (test)", stepper
    with pytest.warns(CompiledPathWarning, match="failed during the run.*recompile limit"):
        got = vi.solve(q0, v0, 40)
    assert got.stats["execution"] == "eager+torch.compile" and 0 < got.stats["compiled_steps"] < 40
    assert got.stats["compiled_steps"] + got.stats["eager_steps"] == 40
    ref = VariationalIntegrator(erf_oscillator, 0.1, execution="eager").solve(q0, v0, 40)
    assert float((got.q - ref.q).abs().max()) <= 1e-13
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the broken stepper is not tried again, and not announced again
        assert vi.solve(q0, v0, 5).stats["execution"] == "eager"


def test_short_runs_do_not_build_the_torch_compile_path(monkeypatch):
    """Below FUNC_MIN_WORK trajectory-steps "auto" steps eagerly without compiling, and says so once."""
    monkeypatch.setattr(V, "AUTO_MIN_WORK", 1)
    monkeypatch.setattr(CF, "FUNC_MIN_WORK", 10 ** 9)
    q0, v0 = _start(2)
    vi = VariationalIntegrator(erf_oscillator, 0.1)
    with pytest.warns(CompiledPathWarning, match="aten.erf.*runs of at least 1000000000"):
        assert vi.solve(q0, v0, 10).stats["execution"] == "eager"
    assert 1 not in vi._func_steppers
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert vi.solve(q0, v0, 10).stats["execution"] == "eager"


def test_the_order_10_predictor_is_exact_on_degree_9_and_order_6_is_unchanged():
    """``extrapolate(..., order=10)`` is the degree-9 polynomial through the last ten positions: exact (integer
    arithmetic, below 2^53) on k^9, not on k^10; the default order 6 is the eager path's formula, bit for bit."""
    from integrators._stepping import extrapolate

    k = torch.arange(12, dtype=torch.float64)[:, None]
    assert float(extrapolate(k ** 9, 10, None, order=10)[0]) == 11.0 ** 9
    assert float(extrapolate(k ** 10, 10, None, order=10)[0]) != 11.0 ** 10
    q = torch.sin(0.3 * k) + 0.1 * k ** 2
    assert torch.equal(extrapolate(q, 10, None, order=6), extrapolate(q, 10, None))
    assert torch.equal(extrapolate(q, 4, None, order=10), extrapolate(q, 4, None))  # too few positions: order 4


def _counted(stepper):
    """Count the stepper's gradient evaluations (``r``: two per time step of a one-graph chord call) and Jacobians."""
    calls = {"r": 0, "J": 0}
    residual, jacobian, chord = stepper._residual, stepper._jacobian, stepper._chord
    stepper._residual = lambda *a: calls.__setitem__("r", calls["r"] + 1) or residual(*a)
    stepper._jacobian = lambda *a: calls.__setitem__("J", calls["J"] + 1) or jacobian(*a)
    stepper._chord = lambda *a: calls.__setitem__("r", calls["r"] + 2 * stepper.chord_steps) or chord(*a)
    return calls


def test_the_func_path_takes_two_gradients_per_step_and_rarely_a_hessian(monkeypatch):
    """From the order-10 predictor one chord correction reaches rounding level: over 300 midpoint steps of a smooth
    oscillator (h = 0.05) the stepper evaluates about 2 gradients per step, almost every step in the one-graph chord
    step (order 6 needs 3 and a Hessian, as the eager path does) and Hessians only while the predictor warms up; the
    trajectory still equals eager to 1e-13."""
    monkeypatch.setattr(V, "AUTO_MIN_WORK", 1)
    monkeypatch.setattr(CF, "COMPILE_NEWTON_WORK", 10 ** 12)  # keep the counters in place
    q0, v0 = _start(4)
    ref = VariationalIntegrator(erf_oscillator, 0.05, execution="eager").solve(q0, v0, 300)
    counts, stats = {}, {}
    for order in (6, 10):
        monkeypatch.setattr(CF, "PREDICTOR_ORDER", order)
        stepper = FuncStepper(erf_oscillator, 0.05, bea.get_scheme("midpoint"), 1, compile=False)
        calls = _counted(stepper)
        vi = VariationalIntegrator(erf_oscillator, 0.05, execution="auto")
        vi._stepper_errors[1] = "no C form (test)"
        vi._func_steppers[1] = stepper
        got = vi.solve(q0, v0, 300)
        assert got.stats["eager_steps"] == 0 and float((got.q - ref.q).abs().max()) <= 1e-13
        counts[order], stats[order] = calls, stepper.stats
    # order 10 (measured 707 and 18; 283 of the 300 steps in the one graph, 41 calls): 2 gradients a step, plus the
    # warm-up's Newton iterations and the steps of an eight-step call voided after a step the chord cannot certify
    assert counts[10]["r"] <= 2.4 * 300 and counts[10]["J"] <= 20
    assert stats[10]["chord_steps"] >= 275 and stats[10]["chord_steps"] + stats[10]["newton_steps"] == 300
    assert counts[6]["r"] >= 2.5 * 300 and counts[6]["J"] >= 250
    # order 6: no step certified; the back-off keeps the graph's wasted calls to 10 (measured 1060 gradients in all;
    # without it 5620: 16 per step)
    assert counts[6]["r"] <= 3.6 * 300


def _no_chord(stepper):
    """The stepper with its one-graph step disabled: every step by newton()."""
    stepper._chord_step = lambda *a: ((), ())
    return stepper


@pytest.mark.parametrize("scheme,n", [("midpoint", 1), ("trapezoidal", 2)])
def test_the_one_graph_chord_step_is_newtons_step_bit_for_bit(scheme, n):
    """The one-graph step takes Newton's decisions with Newton's arithmetic (same predictor, residual, chord
    correction and acceptance test): without torch.compile the march with it and the march through newton() alone
    give identical positions and momenta, on all trajectories (rows None) and on a subset (rows), with a chunk end
    inside a two-step call (j_end odd)."""
    g = torch.Generator().manual_seed(5)
    B, steps, h = 5, 41, 0.05
    q0 = 0.3 + 0.3 * torch.rand(B, n, generator=g, dtype=torch.float64)
    ref_vi = VariationalIntegrator(erf_oscillator, h, scheme, execution="eager")
    start = ref_vi.solve(q0, 0.1 * torch.ones(B, n, dtype=torch.float64), 1)  # q_1, p_1 and nothing else
    results = []
    for chord in (True, False):
        stepper = FuncStepper(erf_oscillator, h, bea.get_scheme(scheme), n, compile=False)
        stepper = stepper if chord else _no_chord(stepper)
        for rows in (None, torch.tensor([0, 2, 3])):
            out = torch.zeros(steps + 1, B, n, dtype=torch.float64)
            pout = torch.zeros_like(out)
            out[:2], pout[:2] = start.q, start.p
            p = start.p[1] if rows is None else start.p[1, rows]
            j, p, jac, stop = 1, p, None, None
            while j < steps:  # chunks of 7 steps: the chord calls straddle the chunk ends
                j, p, jac, stop = stepper.advance(out, j, min(steps, j + 7), p, jac, rows, None, ref_vi.options, None, pout)
                assert stop is None
            results.append((out, pout))
        if chord:
            assert stepper.stats["chord_steps"] >= 2 * 25 and stepper.stats["newton_steps"] <= 2 * 15
    for (o1, p1), (o2, p2) in zip(results[:2], results[2:]):
        assert torch.equal(o1, o2) and torch.equal(p1, p2)
    assert not bool(results[1][0][2:, [1, 4]].any())  # the rows not stepped are left alone


def _edit_verdict(stepper, edit) -> None:
    """Wrap ``stepper``'s one-graph step so that ``edit`` changes (a copy of) its accept flags in place."""
    chord = stepper._chord

    def edited(*args):
        x, pn, ok = chord(*args)
        ok = ok.clone()
        edit(ok)
        return x, pn, ok

    stepper._chord = edited


def test_a_step_the_chord_cannot_certify_goes_to_newton():
    """Where the one-graph step reports an element not accepted at its second step, the first step is kept and
    newton() takes the second (the graph is not asked again: same inputs, same verdict), with the numbers of newton()
    alone; a root beyond max_step stops the march there."""
    q0, v0 = _start(3)
    vi = VariationalIntegrator(erf_oscillator, 0.05, execution="eager")
    ref = vi.solve(q0, v0, 30)
    stepper = FuncStepper(erf_oscillator, 0.05, bea.get_scheme("midpoint"), 1, compile=False)
    _edit_verdict(stepper, lambda ok: ok[1:, 1].fill_(False))  # the second step of every call refused at row 1
    stepper._back_off = lambda certified: None  # (one step kept a call would back off: here the graph is asked each time)
    out, pout = torch.zeros(31, 3, 1, dtype=torch.float64), torch.zeros(31, 3, 1, dtype=torch.float64)
    out[:10], pout[:10] = ref.q[:10], ref.p[:10]
    j, p, jac, stop = stepper.advance(out, 9, 30, ref.p[9], None, None, None, vi.options, None, pout)
    assert (j, stop) == (30, None)
    assert stepper.stats["chord_steps"] >= 9 and stepper.stats["newton_steps"] >= 9  # alternating
    assert float((out - ref.q).abs().max()) <= 1e-13 and float((pout - ref.p).abs().max()) <= 1e-13
    j, _, jac_back, stop = stepper.advance(out, 12, 30, pout[12], jac, None, None, vi.options, 1e-9, pout)
    assert j == 12 and stop is not None
    assert jac_back is jac  # the refused root's Jacobian is not handed back: the last step taken's is
    # newton() refused for max_step (no Jacobian to reuse: no chord call) gives back the Jacobian passed in as well
    jac_in = torch.full((3, 1, 1), 7.0, dtype=torch.float64)
    refuse = _no_chord(FuncStepper(erf_oscillator, 0.05, bea.get_scheme("midpoint"), 1, compile=False))
    j, _, jac_back, stop = refuse.advance(out, 12, 30, pout[12], jac_in, None, None, vi.options, 1e-9, pout)
    assert j == 12 and stop is not None and torch.equal(jac_back, jac_in)
    assert refuse.stats["newton_steps"] == refuse._newton_work == 0  # the refused root is no step newton() took


def test_padding_rows_do_not_refuse_a_step():
    """Three trajectories run padded to a bucket of 4: a padding row that fails the acceptance test is no
    trajectory's, so the call's steps are kept (all CHORD_STEPS of them by the graph)."""
    q0, v0 = _start(3)
    vi = VariationalIntegrator(erf_oscillator, 0.05, execution="eager")
    ref = vi.solve(q0, v0, 14)
    stepper = FuncStepper(erf_oscillator, 0.05, bea.get_scheme("midpoint"), 1, compile=False)

    def padding_fails(ok):
        assert ok.shape[1] == 4
        ok[:, 3] = False

    out, pout = torch.zeros(15, 3, 1, dtype=torch.float64), torch.zeros(15, 3, 1, dtype=torch.float64)
    out[:10], pout[:10] = ref.q[:10], ref.p[:10]
    _, _, jac, _ = stepper.advance(out, 9, 10, ref.p[9], None, None, None, vi.options, None, pout)  # newton(): a Jacobian
    _edit_verdict(stepper, padding_fails)
    j, _, _, stop = stepper.advance(out, 10, 14, pout[10], jac, None, None, vi.options, None, pout)
    assert (j, stop) == (14, None) and stepper.stats == {"chord_steps": 4, "newton_steps": 1}
    assert float((out - ref.q).abs().max()) <= 1e-13


def test_what_the_run_compiles_counts_in_the_integrators_compile_seconds(monkeypatch):
    """The torch.compile path compiles newton()'s derivatives during a run (COMPILE_NEWTON_WORK): that time is
    added to VariationalIntegrator.compile_seconds, not only the build's."""
    vi = VariationalIntegrator(erf_oscillator, 0.05, execution="eager")

    class Stepper:  # the march's view of a stepper: each call compiles 0.5 s more and takes one step
        label, compile_seconds = "stub", 2.0

        def chunk_steps(self, batch):
            return 1

        def advance(self, out, j, j_end, p, jac, rows, first_guess, options, max_step, pout):
            self.compile_seconds += 0.5
            out[j + 1] = out[j]
            return j + 1, p, jac, None

    monkeypatch.setattr(vi, "_stepper", lambda *a: Stepper())
    vi.solve(torch.zeros(2, 1, dtype=torch.float64), torch.zeros(2, 1, dtype=torch.float64), 4)
    assert vi.compile_seconds == pytest.approx(4 * 0.5, abs=1e-12)


def test_the_build_verifies_at_the_first_runs_bucket_only(monkeypatch):
    """A torch.compile build costs seconds per batch bucket, so the verification evaluates at the bucket of the run
    that asked for the stepper (1000 trajectories: 1024 rows), not at a bucket of its own; one trajectory: 2 rows
    (the chord step's eager reference, which is not compiled, at the checking states alone)."""
    sizes = []
    residual, by_autograd = FuncStepper._residual_fn, CF.autograd_derivatives
    monkeypatch.setattr(FuncStepper, "_residual_fn", lambda self, x, a, p: sizes.append(x.shape[0]) or residual(self, x, a, p))
    monkeypatch.setattr(CF, "autograd_derivatives", lambda st, x, *a: sizes.append(x.shape[0]) or by_autograd(st, x, *a))
    for batch, size in ((1000, 1024), (1, 2)):
        sizes.clear()
        FuncStepper(erf_oscillator, 0.1, bea.get_scheme("midpoint"), 1, compile=False, batch=batch)
        assert sizes[0] == size and set(sizes) <= {size, min(4, size)}  # the chord step's eager reference: 4 rows


def test_after_a_step_refused_at_its_first_position_the_chord_graph_takes_the_next():
    """A call that certifies none of its steps hands step j to newton() in the same iteration, and the call for step
    j + 1 goes to the graph again: from step 9 (no Jacobian yet: newton()) newton() takes exactly two steps."""
    q0, v0 = _start(3)
    ref = VariationalIntegrator(erf_oscillator, 0.05, execution="eager").solve(q0, v0, 30)
    stepper = FuncStepper(erf_oscillator, 0.05, bea.get_scheme("midpoint"), 1, compile=False)
    chord, calls = stepper._chord, []

    def first_refused(*args):
        x, pn, ok = chord(*args)
        calls.append(1)
        return x, pn, ok & (len(calls) > 1)

    stepper._chord = first_refused
    out, pout = torch.zeros(31, 3, 1, dtype=torch.float64), torch.zeros(31, 3, 1, dtype=torch.float64)
    out[:10], pout[:10] = ref.q[:10], ref.p[:10]
    j, _, _, stop = stepper.advance(out, 9, 30, ref.p[9], None, None, None,
                                    VariationalIntegrator(erf_oscillator, 0.05).options, None, pout)
    assert (j, stop) == (30, None) and stepper.stats == {"chord_steps": 19, "newton_steps": 2}
    assert float((out - ref.q).abs().max()) <= 1e-13


def test_the_chord_graph_gets_xtol_as_a_one_element_tensor(monkeypatch):
    """The graph's xtol has shape (1,) at build and in a run: a 0-d tensor read in the scan body made Dynamo restart
    the analysis of a build (the graph traced and lowered twice, RESULTS_speed.md, session 17). The run's value is
    the integrator's xtol."""
    q0, v0 = _start(3)
    ref = VariationalIntegrator(erf_oscillator, 0.05, execution="eager").solve(q0, v0, 12)
    original, seen = FuncStepper._chord_fn, []

    def recording(self, *args):
        seen.append(args[-1])
        return original(self, *args)

    monkeypatch.setattr(FuncStepper, "_chord_fn", recording)
    stepper = FuncStepper(erf_oscillator, 0.05, bea.get_scheme("midpoint"), 1, compile=False)
    built = len(seen)  # the build's checks of the graph
    out, pout = torch.zeros(13, 3, 1, dtype=torch.float64), torch.zeros(13, 3, 1, dtype=torch.float64)
    out[:10], pout[:10] = ref.q[:10], ref.p[:10]
    options = VariationalIntegrator(erf_oscillator, 0.05, xtol=1e-15).options
    stepper.advance(out, 9, 12, ref.p[9], ref_jacobian(stepper, ref), None, None, options, None, pout)
    assert built >= 2 and len(seen) > built
    assert all(t.shape == (1,) and t.dtype == torch.float64 for t in seen)
    assert float(seen[-1]) == 1e-15


def ref_jacobian(stepper, ref):
    """The Newton Jacobian at step 9 of ``ref`` (so that the run's first call goes to the chord graph)."""
    return stepper.derivatives(ref.q[10], ref.q[9], ref.p[9])[2]


def test_newtons_derivatives_are_compiled_once_it_has_taken_enough_steps(monkeypatch):
    """newton()'s derivatives stay uncompiled at first (no build cost for them: a run's predictor warm-up is a few
    steps) and are compiled, and checked against autograd at the run's bucket, when newton() has taken
    COMPILE_NEWTON_WORK trajectory-steps (here 3 steps of 3 trajectories; every step is newton()'s: no chord steps
    without Jacobian reuse); the trajectory is unchanged."""
    from integrators.newton import NewtonOptions

    monkeypatch.setattr(CF, "COMPILE_NEWTON_WORK", 9)
    q0, v0 = _start(3)
    ref = VariationalIntegrator(erf_oscillator, 0.05, execution="eager").solve(q0, v0, 20)
    stepper = FuncStepper(erf_oscillator, 0.05, bea.get_scheme("midpoint"), 1, compile=False)
    wrapped, verified = [], []
    stepper._wrap = lambda f: wrapped.append(f.__name__) or f
    verify = stepper._verify
    stepper._verify = lambda size: verified.append(size) or verify(size)
    out = torch.zeros(21, 3, 1, dtype=torch.float64)
    pout = torch.zeros_like(out)
    out[:10], pout[:10] = ref.q[:10], ref.p[:10]
    options = NewtonOptions(reuse_jacobian=False)
    for j, j_end, compiled in ((9, 12, False), (12, 13, True), (13, 20, True)):  # steps 9-11, 12 (compiled first), the rest
        stepper.advance(out, j, j_end, pout[j], None, None, None, options, None, pout)
        assert wrapped == (["_residual_fn", "_jacobian_fn"] if compiled else [])
    assert stepper.stats["chord_steps"] == 0 and verified == [bucket(3)]
    assert float((out - ref.q).abs().max()) <= 1e-13


@pytest.mark.parametrize("verdict", ["all", "none", "same"])
def test_the_build_checks_the_compiled_acceptance_test(monkeypatch, verdict):
    """A compiled one-graph step whose acceptance verdicts are wrong (every step certified, or none) is refused at
    build time even where its positions and momenta are right; the true verdicts at the two checking states are all
    false (scaled correction 2) and all true (a root, xtol 1e-8), so each wrong one differs from them."""
    seen = []

    def fake_compile(f, **kw):
        def run(*args):
            x, pn, ok = f(*args)
            seen.append(ok[0].clone())
            return x, pn, {"all": torch.ones_like(ok), "none": torch.zeros_like(ok), "same": ok}[verdict]
        return run

    monkeypatch.setattr(torch, "compile", fake_compile)
    if verdict == "same":
        FuncStepper(erf_oscillator, 0.05, bea.get_scheme("trapezoidal"), 2)
        assert [bool(ok.any()) for ok in seen] == [False, True] and bool(seen[1].all())
    else:
        with pytest.raises(FuncPathError):
            FuncStepper(erf_oscillator, 0.05, bea.get_scheme("trapezoidal"), 2)


def test_the_graphs_acceptance_test_is_newtons():
    """integrators.newton's acceptance test (iteration 0, and 1 after a chord correction) and chord admission, which
    the one-graph step restates: from starts 0 to 1e-2 away from the root and xtols 1e-16 to 1e-6, the graph's
    first-step verdict is true exactly where newton() (maxiter 1, Jacobian reuse, any fresh Jacobian NaN so that only
    the chord correction can succeed) converges, with the same position and momenta bit for bit there."""
    from integrators.newton import NewtonOptions, newton

    n, B = 2, 6
    vi = VariationalIntegrator(erf_oscillator, 0.05, "midpoint", execution="eager")
    g = torch.Generator().manual_seed(11)
    ref = vi.solve(0.3 + 0.3 * torch.rand(B, n, generator=g, dtype=torch.float64), 0.1 * torch.ones(B, n, dtype=torch.float64), 12)
    stepper = FuncStepper(erf_oscillator, 0.05, bea.get_scheme("midpoint"), n, compile=False)
    stepper._size = bucket(B)
    J = stepper.derivatives(ref.q[11], ref.q[10], ref.p[10])[2]
    hist = ref.q[1:11].clone()
    hist[-1] += torch.tensor([0.0, 1e-13, 1e-11, 1e-9, 1e-6, 1e-3])[:, None]  # the start moves about 10x as far

    def evaluate(x, a, p):  # newton()'s evaluator with a NaN Jacobian: only the chord correction can converge
        r, aux, _ = stepper._evaluate(x, a, p)
        return r, aux, lambda: torch.full((x.shape[0], n, n), float("nan"), dtype=torch.float64)

    outcomes = []
    for tol in (1e-16, 1e-13, 1e-10, 1e-6):
        x, pn, ok = stepper._chord_fn(hist, ref.q[10], ref.p[10], J, torch.tensor([tol], dtype=torch.float64))
        x0 = CF.extrapolate(hist, CF.PREDICTOR_ORDER - 1, None, CF.PREDICTOR_ORDER)
        res = newton(evaluate, x0, (ref.q[10], ref.p[10]), options=NewtonOptions(xtol=tol, maxiter=1), jac0=J)
        assert torch.equal(ok[0], res.converged)
        assert torch.equal(x[0][ok[0]], res.x[ok[0]]) and torch.equal(pn[0][ok[0]], res.aux[ok[0]])
        outcomes += ok[0].tolist()
    assert True in outcomes and False in outcomes


def test_newtons_uncompiled_derivatives_are_the_torch_func_forms_bit_for_bit():
    """Before they are compiled, newton()'s residual, momenta and Jacobian come from plain autograd (faster eagerly
    than torch.func): the same numbers, bit for bit, as the torch.func forms that get compiled (midpoint n = 1,
    trapezoidal n = 2)."""
    from integrators._func_parts import autograd_derivatives

    g = torch.Generator().manual_seed(2)
    for scheme, n in (("midpoint", 1), ("trapezoidal", 2)):
        stepper = FuncStepper(erf_oscillator, 0.05, bea.get_scheme(scheme), n, compile=False)
        a = 0.3 + 0.4 * torch.rand(6, n, generator=g, dtype=torch.float64)
        x, p = a + 0.01 * torch.rand(6, n, generator=g, dtype=torch.float64), torch.rand(6, n, generator=g, dtype=torch.float64)
        r, p1, J = autograd_derivatives(stepper, x, a, p, True)
        with torch.no_grad():
            r_ref, p1_ref = stepper._residual_fn(x, a, p)
            J_ref = stepper._jacobian_fn(x, a)
        assert torch.equal(r, r_ref) and torch.equal(p1, p1_ref) and torch.equal(J, J_ref)
        assert torch.equal(autograd_derivatives(stepper, x, a, p, False)[0], r_ref)


def test_a_lagrangian_with_a_constant_gradient_has_a_zero_jacobian():
    """Autograd has no graph for a gradient that does not depend on the point (L linear in v and q): its Jacobian
    is zero, not an error."""
    from integrators._func_parts import autograd_derivatives

    import types

    real = FuncStepper(erf_oscillator, 0.1, bea.get_scheme("midpoint"), 2, compile=False)  # its scheme's w, A, B
    stepper = types.SimpleNamespace(n=2, w=real.w, A=real.A, B=real.B, _points=real._points,
                                    L=lambda q, v: (2.0 * v - q).sum(-1))
    x = torch.ones(3, 2, dtype=torch.float64)
    r, _, J = autograd_derivatives(stepper, x, 0.5 * x, torch.zeros_like(x), True)
    assert J.shape == (3, 2, 2) and not bool(J.any())
    # midpoint: dL/dq = -1, dL/dv = 2: r = h/2 (-1) - 2 = -2.05 in every component
    assert torch.allclose(r, torch.full_like(r, -2.05), rtol=0, atol=1e-15)
    # a network whose gradient depends on its parameters but not on the point (an affine layer): still J = 0, and the
    # residual and momenta are the torch.func forms' (no build for it: its J = 0 makes the chord graph refuse it)
    lin = torch.nn.Linear(4, 1).double()
    affine = real
    affine.L = lambda q, v: lin(torch.cat([q, v], -1)).squeeze(-1)
    r, p1, J = autograd_derivatives(affine, x, 0.5 * x, torch.zeros_like(x), True)
    assert J.shape == (3, 2, 2) and not bool(J.any())
    with torch.no_grad():
        r_ref, p1_ref = affine._residual_fn(x, 0.5 * x, torch.zeros_like(x))
        assert not bool(affine._jacobian_fn(x, 0.5 * x).any())
    assert torch.equal(r, r_ref) and torch.equal(p1, p1_ref)
    W = lin.weight.detach()[0]  # dL/dq = W[:2], dL/dv = W[2:]: r = h/2 W[:2] - W[2:]
    assert torch.allclose(r, (0.05 * W[:2] - W[2:]).expand(3, 2), rtol=0, atol=1e-15)


@pytest.mark.parametrize("part", ["_residual_fn", "_jacobian_fn"])
def test_the_build_checks_the_torch_func_forms_against_autograd(monkeypatch, part):
    """newton() starts on autograd, but the chord graph evaluates the torch.func residual and newton() the torch.func
    Jacobian once compiled: a torch.func form off by 1e-6 (100x VERIFY_RTOL) is refused at build time, though the
    chord graph then equals its own eager run; off by 1e-12 it is accepted."""
    right = getattr(FuncStepper, part)

    def off_by(eps):
        def wrong(self, *args):
            got = right(self, *args)
            return (got[0] + eps,) + got[1:] if isinstance(got, tuple) else got + eps
        return wrong

    monkeypatch.setattr(FuncStepper, part, off_by(1e-12))
    FuncStepper(erf_oscillator, 0.05, bea.get_scheme("trapezoidal"), 2, compile=False)
    monkeypatch.setattr(FuncStepper, part, off_by(1e-6))
    with pytest.raises(FuncPathError):
        FuncStepper(erf_oscillator, 0.05, bea.get_scheme("trapezoidal"), 2, compile=False)


def _chord_run(stepper, steps=30, start=9):
    """``stepper.advance`` over steps ``start -> steps`` of 3 midpoint trajectories from the eager solution's first
    ``start + 1`` positions: the positions and the eager reference."""
    q0, v0 = _start(3)
    vi = VariationalIntegrator(erf_oscillator, 0.05, execution="eager")
    ref = vi.solve(q0, v0, steps)
    out, pout = torch.zeros(steps + 1, 3, 1, dtype=torch.float64), torch.zeros(steps + 1, 3, 1, dtype=torch.float64)
    out[:start + 1], pout[:start + 1] = ref.q[:start + 1], ref.p[:start + 1]
    j, _, _, stop = stepper.advance(out, start, steps, ref.p[start], None, None, None, vi.options, None, pout)
    assert (j, stop) == (steps, None)
    return out, ref.q


def test_without_torchs_scan_the_chord_graph_takes_two_steps_a_call(monkeypatch):
    """Where torch has no scan the chord graph's steps are unrolled in Python (compile time grows with them): 2 steps
    a call, not CHORD_STEPS = 8; the march equals eager (1e-13) either way."""
    from integrators import _func_parts as FP

    taken = {}
    for scan, steps in ((FP._torch_scan, CF.CHORD_STEPS), (None, CF.UNROLLED_CHORD_STEPS)):
        monkeypatch.setattr(FP, "_torch_scan", scan)
        stepper = FuncStepper(erf_oscillator, 0.05, bea.get_scheme("midpoint"), 1, compile=False)
        chord = stepper._chord
        stepper._chord = lambda *args: taken.__setitem__(scan, chord(*args)[0].shape[0]) or chord(*args)
        out, ref = _chord_run(stepper)
        assert stepper.chord_steps == steps == taken[scan] and float((out - ref).abs().max()) <= 1e-13
    assert (CF.CHORD_STEPS, CF.UNROLLED_CHORD_STEPS) == (8, 2)


def test_a_scan_that_does_not_compile_is_rebuilt_unrolled_once(monkeypatch):
    """torch's scan is private: where it exists but fails inside the compiled graph (here a stand-in compiler that
    runs the graph eagerly with a scan that raises), the build compiles the chord graph once more with its steps
    unrolled (2 a call) instead of refusing the path, and the march equals eager; a graph that fails unrolled as
    well is refused (FuncPathError) after that one retry."""
    from integrators import _func_parts as FP

    scans, builds = [], []

    def broken_scan(*args):
        scans.append(1)
        raise RuntimeError("scan does not lower here (test)")

    def fake_compile(f, **kw):
        builds.append(f.__name__)

        def run(*args):
            monkeypatch.setattr(FP, "_in_graph", lambda: True)  # inside the "graph" only
            try:
                return f(*args)
            finally:
                monkeypatch.setattr(FP, "_in_graph", lambda: False)
        return run

    monkeypatch.setattr(FP, "_torch_scan", broken_scan)
    monkeypatch.setattr(torch, "compile", fake_compile)
    stepper = FuncStepper(erf_oscillator, 0.05, bea.get_scheme("midpoint"), 1)
    assert (stepper.chord_steps, len(scans), builds) == (2, 1, ["_chord_fn", "_chord_fn"])
    out, ref = _chord_run(stepper)
    assert len(scans) == 1 and stepper.stats["chord_steps"] >= 15 and float((out - ref).abs().max()) <= 1e-13
    builds.clear()
    monkeypatch.setattr(torch, "compile", lambda f, **kw: builds.append(f.__name__) or broken_scan)  # fails unrolled too
    with pytest.raises(FuncPathError):
        FuncStepper(erf_oscillator, 0.05, bea.get_scheme("midpoint"), 1)
    assert builds == ["_chord_fn", "_chord_fn"]


def test_a_call_that_keeps_fewer_than_half_its_steps_backs_off(monkeypatch):
    """A call whose fourth step is refused keeps 3 of its CHORD_STEPS = 8 steps: a partial refusal, so the back-off
    grows (without it, graph and newton() alternate: 15 and 6 steps); the numbers stay newton()'s. Steps 10-12 graph,
    13 newton(); 14-16, 17 and 18 (one skipped); 19-21, 22-24 (three); 25-27, 28-29: 12 and 9 steps, four calls in a
    row that kept too few. Keeping half resets the count, and so does a new run."""
    stepper = FuncStepper(erf_oscillator, 0.05, bea.get_scheme("midpoint"), 1, compile=False)
    _edit_verdict(stepper, lambda ok: ok[3:, 0].fill_(False))
    out, ref = _chord_run(stepper)
    assert stepper.stats == {"chord_steps": 12, "newton_steps": 9} and stepper._refusals == 4
    assert float((out - ref).abs().max()) <= 1e-13
    stepper._back_off(True)  # a call that kept half of its steps
    assert (stepper._refusals, stepper._skip) == (0, 0)
    stepper = FuncStepper(erf_oscillator, 0.05, bea.get_scheme("midpoint"), 1, compile=False)
    stepper._refusals, stepper._skip = 7, 64  # left by an earlier run
    monkeypatch.setattr(V, "AUTO_MIN_WORK", 1)
    vi = VariationalIntegrator(erf_oscillator, 0.05, execution="auto")
    vi._stepper_errors[1], vi._func_steppers[1] = "no C form (test)", stepper
    got = vi.solve(*_start(3), 40)
    assert got.stats["eager_steps"] == 0 and stepper.stats["chord_steps"] >= 25 and stepper._refusals == 0


def test_a_failure_compiling_newtons_derivatives_mid_run_hands_the_run_to_eager(monkeypatch):
    """newton()'s derivatives are compiled during a run (COMPILE_NEWTON_WORK, here 3 steps of 3 trajectories): where
    that compile or its check fails, the stepper stops (CompiledPathWarning, once) at the step it was about to take,
    with the steps before it stored, and raises nothing."""
    from integrators.newton import NewtonOptions

    monkeypatch.setattr(CF, "COMPILE_NEWTON_WORK", 9)
    q0, v0 = _start(3)
    ref = VariationalIntegrator(erf_oscillator, 0.05, execution="eager").solve(q0, v0, 20)
    stepper = FuncStepper(erf_oscillator, 0.05, bea.get_scheme("midpoint"), 1, compile=False)
    stepper._verify = lambda size: (_ for _ in ()).throw(FuncPathError("mismatch (test)"))
    out, pout = torch.zeros(21, 3, 1, dtype=torch.float64), torch.zeros(21, 3, 1, dtype=torch.float64)
    out[:10], pout[:10] = ref.q[:10], ref.p[:10]
    with pytest.warns(CompiledPathWarning):
        j, _, _, stop = stepper.advance(out, 9, 20, pout[9], None, None, None, NewtonOptions(reuse_jacobian=False),
                                        None, pout)
    assert (j, stepper.stats["newton_steps"]) == (12, 3) and stop is not None and stepper.failure is not None
    assert float((out[:13] - ref.q[:13]).abs().max()) <= 1e-13 and not bool(out[13:].any())
