"""The compiled stepping path (integrators.compiled): agreement with the eager path, fall-back, caching."""

import warnings

import pytest
import sympy
import torch

import bea
from bea.errors import BeaValueError
from integrators import ConvergenceError, VariationalIntegrator, systems
from integrators.ccompile import find_compiler
from integrators.compiled import CompiledStepper, NotLowerable, scheme_points
from integrators.model_protocol import CompiledPathWarning

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no C compiler: only the eager path exists here")


def _both(L, h, scheme, q0, v0, steps, **options):
    """The positions and the momenta (the march's own, Trajectory.p) of the eager and compiled runs."""
    eager = VariationalIntegrator(L, h, scheme, execution="eager", **options).solve(q0, v0, steps)
    vi = VariationalIntegrator(L, h, scheme, execution="compiled", **options)
    compiled = vi.solve(q0, v0, steps)
    assert vi.last_execution == "compiled"
    return (eager.q, eager.p), (compiled.q, compiled.p)


# Both paths run the same Newton iteration to the rounding floor (xtol 1e-16, stall test), so each
# step agrees to a few ulps; over 200 steps of these regular motions the difference stays near 1e-13.
@pytest.mark.parametrize("system, scheme, q0, v0", [
    (systems.pendulum(), "midpoint", [[0.5], [2.5], [-1.0]], [[0.1], [0.0], [1.5]]),
    # n = 1 inlines the derivative code into the march; with two points the general Newton loop runs it
    (systems.pendulum(), "trapezoidal", [[0.5], [2.5], [-1.0]], [[0.1], [0.0], [1.5]]),
    (systems.kepler(), "trapezoidal", [[1.0, 0.0], [0.0, 0.6]], [[0.0, 1.0], [-1.5, 0.1]]),
    # the double pendulum: a 2-D Lagrangian whose mass matrix depends on the positions (not separable)
    (systems.n_pendulum(2), "generalised_midpoint(alpha=0.3)", [[0.5, -0.2], [1.0, 1.2]], [[0.3, -0.1], [0.0, 0.4]]),
    # the march is built for each n as a compile-time constant (integrators._march_c.march_source): n = 3 and n = 5
    (systems.n_pendulum(3), "midpoint", [[0.5, -0.2, 0.1], [1.0, 0.3, -0.4]], [[0.3, -0.1, 0.0], [0.0, 0.4, 0.2]]),
    (systems.coupled_oscillators(5), "midpoint", [[0.5, -0.2, 0.1, 0.0, 0.3]], [[0.3, -0.1, 0.0, 0.2, -0.4]]),
])
def test_compiled_and_eager_paths_agree(system, scheme, q0, v0):
    (eager, pe), (compiled, pc) = _both(system, 0.05, scheme, torch.tensor(q0), torch.tensor(v0), 200)
    assert float((eager - compiled).abs().max()) <= 1e-12
    assert float((eager[-1] - eager[0]).abs().max()) > 0.05  # the motions did go somewhere
    # the momenta each path computed while stepping (the C loop's, not recomputed) agree as the positions do, and
    # both are the discrete momenta of the positions to Newton's tolerance (xtol 1e-16: a few ulps of |p| ~ 1)
    assert float((pe - pc).abs().max()) <= 1e-12 and float((pe[-1] - pe[0]).abs().max()) > 0.05
    vi = VariationalIntegrator(system, 0.05, scheme, execution="eager")
    assert float((vi.momenta(compiled) - pc).abs().max()) <= 1e-12


def test_gp_learned_lagrangian_paths_agree():
    """The GP posterior mean steps in C (closed-form gradient and Hessian over its atoms). A nugget of
    1e-4 keeps its coefficients ~30, so the mean itself is accurate to ~1e-14 in either evaluation
    order (with coefficients ~1e4 both paths are only as close as the mean's rounding, ~1e-11)."""
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP
    from learners.shadow.lsi import StandardisedMean

    S = snapshots(systems.pendulum(), 0.5, 12, 5, seed=0)
    model = InverseModifiedLagrangianGP(0.5, lengthscale=[1.5, 1.5], noise=1e-4).fit(S)
    # the GP lives in standardised coordinates and time (learners.shadow.units): its C form is that of StandardisedMean
    stepper = CompiledStepper(StandardisedMean(model), model._h_std, model.scheme, 1)
    x = torch.tensor([[0.3, 0.1], [0.5, -0.2], [-0.1, 0.4]]).requires_grad_(True)
    g, H = stepper.lagrangian_derivatives(x.detach())
    (ga,) = torch.autograd.grad(model.gp.mean(x).sum(), x, create_graph=True)
    Ha = torch.stack([torch.autograd.grad(ga[:, i].sum(), x, retain_graph=True)[0] for i in range(2)], 1)
    assert float((g - ga.detach()).abs().max()) <= 1e-13 and float((H - Ha).abs().max()) <= 1e-13
    q0, v0 = torch.tensor([[0.3], [-0.6]]), torch.tensor([[0.0], [0.2]])
    L2 = model._recovered_std(2)
    eager = model._integrator_std(execution="eager", xtol=1e-16).solve(q0, v0, 100, legendre=L2).q
    vi = model._integrator_std(execution="compiled", xtol=1e-16)
    compiled = vi.solve(q0, v0, 100, legendre=L2).q
    assert vi.last_execution == "compiled"
    assert float((eager - compiled).abs().max()) <= 1e-12
    # the public integrator (data's units) takes the same C form, composed with the standardisation
    assert model._standardised
    public = model.integrator(execution="compiled", xtol=1e-16)
    fast = public.solve(q0, v0, 100).q
    slow = model.integrator(execution="eager", xtol=1e-16).solve(q0, v0, 100).q
    assert public.last_execution == "compiled" and float((fast - slow).abs().max()) <= 1e-12


def test_sympy_derivatives_match_autograd():
    stepper = CompiledStepper(systems.kepler(), 0.1, bea.get_scheme("midpoint"), 2)
    x = torch.tensor([[1.0, 0.2, 0.1, 0.9], [-0.5, 0.7, 1.1, -0.3]]).requires_grad_(True)
    g, H = stepper.lagrangian_derivatives(x.detach())
    (ga,) = torch.autograd.grad(systems.kepler()(x[:, :2], x[:, 2:]).sum(), x, create_graph=True)
    Ha = torch.stack([torch.autograd.grad(ga[:, i].sum(), x, retain_graph=True)[0] for i in range(4)], 1)
    assert float((g - ga.detach()).abs().max()) <= 1e-14 and float((H - Ha).abs().max()) <= 1e-14
    # states of another width (the C code reads 2n = 4 numbers per state) or rank are refused, not read past
    for shape in ((3, 2), (3, 6), (4,)):
        with pytest.raises(BeaValueError):
            stepper.lagrangian_derivatives(torch.zeros(shape, dtype=torch.float64))


def test_sympy_lowering_covers_the_functions_and_refuses_the_rest():
    """Every node rule of integrators.codegen.from_sympy (sums with negative terms, products with denominators,
    integer, negative and half-integer powers, named functions and the three composed ones) against SymPy's own
    derivatives evaluated to 30 digits: agreement to rounding (1e-13 of the entries' scale ~ 10)."""
    import sympy
    from integrators.compiled import lower_lagrangian
    from integrators.symbolic import SymbolicLagrangian

    x, y, u, w, k = sympy.symbols("x y u w k", real=True)
    expr = ((u**2 + w**2) / 2 - k * sympy.cos(x) * sympy.sin(y) + sympy.exp(x * u) / (1 + y**2) ** 3
            + sympy.sqrt(2 + x**2) - 1 / sympy.sqrt(3 + y**2) + (1 + w**2) ** sympy.Rational(3, 4) + x**5 * w
            + sympy.log(2 + u**2) * sympy.atan(y) + sympy.tanh(x - w) - sympy.sinh(y) * sympy.cosh(u) + sympy.tan(x / 3)
            + sympy.asin(x / 4) + sympy.acos(y / 5) + sympy.Abs(u + 3) + sympy.pi * w
            + sympy.atan2(y + 2, x + 3) + sympy.atan2(w - 2, x - 1))  # atan2's two half-angle forms (x > 0, x < 0)
    L = SymbolicLagrangian(expr, [x, y], [u, w], params=[k]).bind(k=1.5)
    stepper = CompiledStepper(L, 0.1, bea.get_scheme("midpoint"), 2)
    states = [[0.3, -0.4, 0.2, 0.7], [-0.6, 0.5, -0.1, -0.3]]
    g, H = stepper.lagrangian_derivatives(torch.tensor(states, dtype=torch.float64))
    X = (x, y, u, w)
    for row, state in enumerate(states):
        at = {**dict(zip(X, state)), k: sympy.Rational(3, 2)}
        for i in range(4):
            gi = sympy.diff(expr, X[i])
            assert abs(float(g[row, i]) - float(gi.evalf(30, subs=at))) <= 1e-12
            for j in range(4):
                assert abs(float(H[row, i, j]) - float(sympy.diff(gi, X[j]).evalf(30, subs=at))) <= 1e-12
    with pytest.raises(NotLowerable, match="does not depend on the state"):
        lower_lagrangian(SymbolicLagrangian(k + 1, [x], [u], params=[k]).bind(k=1.0))
    # a Piecewise is refused by its name (not for its arguments, which are no expressions)
    with pytest.raises(NotLowerable, match="Piecewise"):
        lower_lagrangian(SymbolicLagrangian(u**2 / 2 + sympy.Piecewise((x, x > 0), (0, True)), [x], [u]))


def _sympy_derivatives_agree(expr, X, states, subs=None, tol=1e-12):
    """The compiled gradient and Hessian of ``expr`` against SymPy's derivatives evaluated to 30 digits."""
    from integrators.symbolic import SymbolicLagrangian

    n = len(X) // 2
    L = SymbolicLagrangian(expr, list(X[:n]), list(X[n:]), params=list(subs or {})).bind(
        **{str(s): float(v) for s, v in (subs or {}).items()})
    stepper = CompiledStepper(L, 0.1, bea.get_scheme("midpoint"), n)
    g, H = stepper.lagrangian_derivatives(torch.tensor(states, dtype=torch.float64))
    for row, state in enumerate(states):
        at = {**dict(zip(X, [sympy.Float(s, 30) for s in state])), **(subs or {})}
        for i in range(2 * n):
            gi = sympy.diff(expr, X[i])
            assert abs(float(g[row, i]) - float(gi.evalf(30, subs=at))) <= tol, (state, i)
            for j in range(2 * n):
                assert abs(float(H[row, i, j]) - float(sympy.diff(gi, X[j]).evalf(30, subs=at))) <= tol, (state, i, j)


def test_sympy_lowering_of_special_functions_and_state_dependent_exponents():
    """erf, erfc (a runtime rule), asinh on both signs, acosh, atanh, acot (by composition) and powers whose
    exponent depends on the state (exp(e log b)): SymPy's derivatives to 1e-12 (entries of scale ~ 10)."""
    x, y, u, w, k = sympy.symbols("x y u w k", real=True)
    expr = ((u**2 + w**2) / 2 + sympy.erf(x / 2 + u) - 3 * sympy.erfc(y * w) + sympy.asinh(2 * x - y) + sympy.acosh(2 + u**2)
            + sympy.atanh(w / 2 + x / 3) + sympy.acot(3 + x) + 2**x + k**(y * u) + (1 + x**2)**(1 + x**2)
            + (2 + y**2)**(x / 5) + (1 + u**2)**x)
    states = [[0.3, -0.4, 0.2, 0.7], [-0.6, 0.5, -0.1, -0.3], [0.0, 0.0, 0.0, 0.0]]  # asinh's argument > 0, < 0, 0
    _sympy_derivatives_agree(expr, (x, y, u, w), states, {k: sympy.Rational(5, 2)})


def test_atan2_across_the_negative_x_axis():
    """atan2's derivatives on and near its cut (x < 0, y -> 0): finite and SymPy's to 1e-12 (they were NaN)."""
    x, y, u, w = sympy.symbols("x y u w", real=True)
    states = [[-1.0, 0.0, 0.1, 0.2], [-1.0, 1e-8, 0.0, 0.0], [-1.0, -1e-8, 0.0, 0.0], [-0.5, 0.3, 0.0, 0.0],
              [0.7, -0.2, 0.0, 0.0], [0.0, 0.4, 0.0, 0.0]]
    _sympy_derivatives_agree((u**2 + w**2) / 2 + 3 * sympy.atan2(y, x) + x * sympy.atan2(y - 1, x + 0.5),
                             (x, y, u, w), states)


def test_large_sympy_systems_compile():
    """The largest systems the loop takes (n = MAX_N = 32) lower and compile: each term of L keeps its own small
    jet (its derivatives added into g and H), so nothing holds n full-size jets; derivatives = autograd's."""
    from integrators.compiled import MAX_N, lower_lagrangian

    lower_lagrangian(systems.coupled_oscillators(MAX_N))
    L = systems.fpu_chain(MAX_N)
    stepper = CompiledStepper(L, 0.1, bea.get_scheme("midpoint"), MAX_N)
    x = (torch.rand(3, 2 * MAX_N, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) - 0.5)
    g, H = stepper.lagrangian_derivatives(x)
    x.requires_grad_(True)
    (ga,) = torch.autograd.grad(L(x[:, :MAX_N], x[:, MAX_N:]).sum(), x, create_graph=True)
    Ha = torch.stack([torch.autograd.grad(ga[:, i].sum(), x, retain_graph=True)[0] for i in range(2 * MAX_N)], 1)
    assert float((g - ga.detach()).abs().max()) <= 1e-13 and float((H - Ha).abs().max()) <= 1e-13


def test_lower_sympy_leaves_the_callers_names_alone():
    from integrators.codegen import Program, lower_sympy

    x = sympy.Symbol("x")
    prog = Program(2, 2)
    names = {x: prog.seed(0)}
    lower_sympy(prog, names, [sympy.sin(x) ** 2 + sympy.sin(x)])
    assert list(names) == [x]


def test_failure_hands_the_step_to_the_eager_path_and_resumes():
    """A far root at some step: the compiled loop stops before it, the eager path masks the trajectory
    there, and the compiled loop continues with the others; identical to the eager run."""
    q0, v0 = torch.tensor([[0.3], [0.1], [-0.4]]), torch.tensor([[0.0], [20.0], [0.1]])
    runs = {}
    for ex in ("eager", "compiled"):
        vi = VariationalIntegrator(systems.pendulum(), 0.1, max_step=0.5, execution=ex)
        runs[ex] = vi.solve(q0, v0, 30, on_failure="mask")
        if ex == "compiled":
            assert vi.last_execution == "compiled+eager"
            with pytest.raises(ConvergenceError, match="max_step") as info:
                vi.solve(q0, v0, 30).q
            assert info.value.step == 1 and info.value.indices == [(1,)]
    (qe, ve), (qc, vc) = [(runs[ex].q, runs[ex].valid) for ex in ("eager", "compiled")]
    assert torch.equal(ve, vc) and vc[:, 1].tolist() == [True] + [False] * 30 and bool(vc[:, [0, 2]].all())
    assert float((qe[vc] - qc[vc]).abs().max()) <= 1e-13 and bool(qc[~vc].isnan().all())
    # the momenta through the hand-over (compiled on the remaining rows after the eager step): as the positions
    pe, pc = runs["eager"].p, runs["compiled"].p
    assert float((pe[vc] - pc[vc]).abs().max()) <= 1e-13 and bool(pc[~vc].isnan().all()) and bool(pe[~ve].isnan().all())


def test_compiled_once_and_where_it_applies():
    import sympy

    x, y, u, w = sympy.symbols("x y u w", real=True)
    # a Lagrangian no other test compiles, so that the first integrator really builds its library
    L = systems.from_sympy((u**2 + w**2) / 2 - sympy.Rational(3, 7) * (x**2 + y**2) - x**2 * y / 11, [x, y], [u, w])
    a = VariationalIntegrator(L, 0.1, execution="compiled")
    a.solve(torch.tensor([[0.1, 0.2]]), torch.tensor([[0.0, 0.1]]), 5).q
    b = VariationalIntegrator(L, 0.2, "trapezoidal", execution="compiled")  # same Lagrangian: the library is reused
    b.solve(torch.tensor([[0.1, 0.2]]), torch.tensor([[0.0, 0.1]]), 5).q
    assert a._steppers[2].compile_seconds > 0 and b._steppers[2].compile_seconds == 0.0
    assert b.solve(torch.tensor([[0.1, 0.2]]), torch.tensor([[0.0, 0.1]]), 5).q is not None and list(b._steppers) == [2]
    # auto: short runs stay eager until the stepper exists, long ones compile
    auto = VariationalIntegrator(systems.pendulum(), 0.1)
    auto.solve(torch.tensor([[0.1]]), torch.tensor([[0.0]]), 3).q
    assert auto.last_execution == "eager"
    auto.solve(torch.tensor([[0.1]]), torch.tensor([[0.0]]), 1000).q
    assert auto.last_execution == "compiled"
    # a torch closure is traced (integrators.traced); one with an operation that has no lowering (erf) is not, and
    # with Python control flow on a tensor's value torch.compile(fullgraph=True) refuses it too
    # (integrators.compiled_func): auto falls back and says why once (CompiledPathWarning), "compiled" raises
    closure = lambda q, v: 0.5 * (v**2).sum(-1) + torch.cos(q).sum(-1)  # noqa: E731
    traced = VariationalIntegrator(closure, 0.1)
    traced.solve(torch.zeros(3, 1), torch.ones(3, 1), 200).q  # 600 trajectory-steps >= AUTO_MIN_WORK
    assert traced.last_execution == "compiled"
    opaque = lambda q, v: (0.5 * (v**2).sum(-1) + torch.erf(q).sum(-1)) * float(q.detach().abs().sum() < 1e9)  # noqa: E731
    fallback = VariationalIntegrator(opaque, 0.1)
    with pytest.warns(CompiledPathWarning, match="aten.erf"):
        fallback.solve(torch.zeros(3, 1), torch.ones(3, 1), 200).q
    assert fallback.last_execution == "eager"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per integrator and n: the second run is silent
        fallback.solve(torch.zeros(3, 1), torch.ones(3, 1), 200).q
    with pytest.raises(ValueError, match="execution='compiled' is not available.*aten.erf"):
        VariationalIntegrator(opaque, 0.1, execution="compiled").solve(torch.tensor([[0.1]]), torch.tensor([[0.0]]), 3).q
    with pytest.raises(ValueError, match="execution must be one of"):
        VariationalIntegrator(L, 0.1, execution="fast")


def test_scheme_points_are_found_or_refused():
    pts = scheme_points(0.5, bea.get_scheme("trapezoidal"), 1)
    # rows (w, o (2), A (2x1), B (2x1), S (2x1)): L(a, (b-a)/h) and L(b, (b-a)/h), weights h/2
    assert pts.shape == (2, 9)
    assert pts[:, 0].tolist() == [0.25, 0.25] and pts[0, 3:5].tolist() == [1.0, -2.0] and pts[1, 5:7].tolist() == [1.0, 2.0]
    squared = bea.CustomScheme(lambda L, a, b, h: h * L(a, (b - a) / h) ** 2, "squared")
    with pytest.raises(NotLowerable, match="not a weighted sum"):
        scheme_points(0.1, squared, 1)
    nonaffine = bea.CustomScheme(lambda L, a, b, h: h * L(a * b, (b - a) / h), "product")
    with pytest.raises(NotLowerable, match="not affine"):
        scheme_points(0.1, nonaffine, 1)


def test_sympy_terms_stay_in_their_small_spaces():
    """Why a chain's or an N-body sum's derivatives cost what the printed SymPy derivatives cost
    (benchmarks/sympy_derivs.py): no jet of the emitted program lives in all 2n variables (each term's gradient
    and Hessian are added into g and H at the output), and the small polynomials' runtime is always inlined."""
    from integrators.compiled import lower_lagrangian

    for L in (systems.fpu_chain(8), systems.coupled_oscillators(16), systems.n_body((1,) * 5)):
        body = lower_lagrangian(L).source.split("static void lag_derivs")[1]
        assert "jt_" not in body and "jts1_" in body and "jts2_" in body  # only the small spaces' runtime
        assert "noinline" not in lower_lagrangian(L).source and "always_inline" in lower_lagrangian(L).source


def test_a_term_in_many_variables_is_added_by_a_loop():
    """A term in more than SCATTER_UNROLL variables (here all 10) is added into g and H by the table loop:
    SymPy's derivatives to 1e-12, beside terms in one variable (straight-line)."""
    from integrators.codegen.emit import SCATTER_UNROLL

    X = sympy.symbols("q0:5 v0:5", real=True)
    assert len(X) > SCATTER_UNROLL
    expr = sum(X[5:]) * sympy.sin(sum(X[:5])) + sum(v**2 for v in X[5:]) / 2 - sum(q**4 for q in X[:5]) / 4
    _sympy_derivatives_agree(expr, X, [[0.1 * k - 0.3 for k in range(10)], [0.05 * (-1) ** k for k in range(10)]])


def test_regularity_check_takes_the_compiled_hessian_once_built(monkeypatch):
    """A solve on the compiled path checks regularity with the stepper's C Hessian (microseconds, not autograd's
    0.5 ms: integrators._admissible.check_regular_at): it equals autograd's, and a singular state is still refused."""
    import integrators._admissible as admissible
    from integrators import NotRegularError

    q, v = sympy.symbols("q v", real=True)
    L = systems.from_sympy(q ** 2 * v ** 2 / 2 - q ** 2 / 2, [q], [v])  # mass matrix q^2: singular at q = 0
    vi = VariationalIntegrator(L, 0.05, execution="compiled")
    first = vi.solve(torch.tensor([[1.0]]), torch.tensor([[0.1]]), 20)  # builds the stepper
    x = torch.tensor([[1.0, 0.1], [0.3, -2.0], [0.0, 0.5]], dtype=torch.float64)
    H_auto = admissible._autograd_hessian(vi._L, x[:, :1], x[:, 1:])
    assert torch.allclose(vi._steppers[1].lagrangian_derivatives(x)[1], H_auto, rtol=1e-14, atol=1e-14)

    def no_autograd(*args):
        raise AssertionError("the autograd Hessian was taken although a compiled stepper is built")

    monkeypatch.setattr(admissible, "_autograd_hessian", no_autograd)
    again = vi.solve(torch.tensor([[1.0]]), torch.tensor([[0.1]]), 20)
    assert torch.equal(again.q, first.q)
    with pytest.raises(NotRegularError):
        vi.solve(torch.tensor([[0.0]]), torch.tensor([[0.1]]), 20)
