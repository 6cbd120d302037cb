"""The tracing front-end (integrators.traced) and the model protocol (integrators.model_protocol).

Agreement with the eager path: the compiled march iterates Newton to rounding like the eager one, so the
two trajectories differ by accumulated rounding only; 1e-12 over 1,000 steps leaves a factor of about 100
over what the SymPy path shows (6e-15 over 20,000 pendulum steps, benchmarks/RESULTS_speed.md)."""

import math
import sys

import numpy as np
import pytest
import torch

import bea
from integrators import VariationalIntegrator, systems
from integrators.ccompile import find_compiler
from integrators.compiled import CompiledStepper, NotLowerable
from integrators.model_protocol import AffineModel, CompiledPathWarning, compiled_form, derivatives
from integrators.traced import trace_lagrangian

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no C compiler: only the eager path exists here")

STEPS = 1000


def pendulum(q, v):
    return v[..., 0] ** 2 / 2 + torch.cos(q[..., 0])


def _agree(L, q0, v0, h=0.1, steps=STEPS):
    eager = VariationalIntegrator(L, h, execution="eager").solve(q0, v0, steps).q
    vi = VariationalIntegrator(L, h, execution="compiled")
    fast = vi.solve(q0, v0, steps).q
    assert vi.last_execution == "compiled"
    return float((eager - fast).abs().max())


def _derivative_error(L, n, states):
    stepper = CompiledStepper(L, 0.1, bea.get_scheme("midpoint"), n)
    g, H = stepper.lagrangian_derivatives(states)
    _, g_ref, H_ref = derivatives(L, states)
    return max(float((g - g_ref).abs().max()), float((H - H_ref).abs().max()))


def test_plain_callable_equals_eager_smoke():
    """The cheap default-suite check (eager steps cost milliseconds each here); 1,000 steps below (slow)."""
    assert _agree(pendulum, torch.tensor([[0.5], [-1.2]]), torch.tensor([[0.1], [0.4]]), steps=150) < 1e-13


@pytest.mark.slow
def test_plain_callable_equals_eager_over_1000_steps():
    err = _agree(pendulum, torch.tensor([[0.5], [-1.2]]), torch.tensor([[0.1], [0.4]]))
    assert err < 1e-12


def test_traced_derivatives_and_parameters_follow_the_module():
    """Weights are run-time parameters: changing them (training) changes the C form's numbers, not its code."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()

    def L(q, v):
        return net(torch.cat([q, v], -1))[..., 0] + (v ** 2).sum(-1)

    states = torch.tensor([[0.3, -0.2], [1.1, 0.5]], dtype=torch.float64)
    clag = trace_lagrangian(L, 1)
    assert clag.refresh is not None and clag.params.size == 8 * 2 + 8 + 8 + 1
    assert _derivative_error(L, 1, states) < 1e-12
    with torch.no_grad():
        net[0].weight.mul_(1.5)
    assert np.abs(clag.refresh() - clag.params).max() > 0.1
    assert _derivative_error(L, 1, states) < 1e-12


def test_guards_and_refusals():
    # Python reading a tensor (.item()) is a guard: the traced form is only right at the traced state, and its guard
    # declines every other test state, so the Lagrangian is refused (and integrated eagerly)
    def reads_item(q, v):
        return v[..., 0] ** 2 / 2 + math.cos(float(q.detach().reshape(-1)[0])) * q[..., 0]

    with pytest.raises(NotLowerable, match="at the traced state only"):
        trace_lagrangian(reads_item, 1)
    with pytest.raises(NotLowerable, match="aten.erf"):
        trace_lagrangian(lambda q, v: (v ** 2).sum(-1) + torch.erf(q).sum(-1), 1)
    with pytest.raises(NotLowerable, match="does not depend on the state"):
        trace_lagrangian(lambda q, v: torch.ones(q.shape[:-1], dtype=q.dtype), 1)
    # a state-dependent branch in torch (where) is lowered as a select, exactly
    def branch(q, v):
        return v[..., 0] ** 2 / 2 - torch.where(q[..., 0] > 0, q[..., 0] ** 2, 0.5 * q[..., 0] ** 2)

    states = torch.tensor([[0.3, 0.1], [-0.4, 0.2]], dtype=torch.float64)
    assert _derivative_error(branch, 1, states) < 1e-13


def test_norms_and_clamps_are_lowered():
    def kepler_like(q, v):
        return (v ** 2).sum(-1) / 2 + 1 / torch.linalg.norm(q, dim=-1) + torch.clamp(q[..., 0], -5.0, 0.5) ** 2

    states = torch.tensor([[1.0, 0.3, 0.2, -0.1], [0.7, -0.4, 0.0, 0.3]], dtype=torch.float64)  # 0.7 is clamped
    assert _derivative_error(kepler_like, 2, states) < 1e-12
    # one bound a tensor, the other absent (each bound is tested only if given): q = (1.0, 0.3) clamped in both
    # coordinates, (0.7, -0.4) in neither; the clamped ones have zero derivatives, which the error would show
    top = torch.tensor([0.8, 0.1], dtype=torch.float64)

    def capped(q, v):
        return (v ** 2).sum(-1) / 2 + (torch.clamp(q, max=top) ** 3).sum(-1)
    assert _derivative_error(capped, 2, states) < 1e-12


def test_affine_model_composes_the_compiled_form():
    """L(x) = c M((x - o)/u) for a System M: the C form (chain rule in C) against autograd."""
    model = AffineModel(systems.kepler(), 2.5, [0.5, 2.0, 1.5, 0.25], [0.1, -0.2, 0.0, 0.0])
    clag = compiled_form(model, 2)
    assert clag.params[0] == 2.5
    states = torch.tensor([[1.0, 0.3, 0.2, -0.1], [0.7, -0.4, 0.0, 0.3]], dtype=torch.float64)
    assert _derivative_error(model, 2, states) < 1e-12


@pytest.mark.slow
def test_mlp_lagrangian_equals_eager_over_1000_steps():
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(2, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                              torch.nn.Linear(64, 1)).double()
    with torch.no_grad():
        for layer in (net[0], net[2], net[4]):
            layer.weight.mul_(0.2)

    def L(q, v):
        return (v ** 2).sum(-1) / 2 - q[..., 0] ** 2 / 2 + 0.1 * net(torch.cat([q, v], -1))[..., 0]

    assert _agree(L, torch.tensor([[0.5]]), torch.tensor([[0.1]])) < 1e-12


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 4])
def test_series_of_a_plain_callable_equals_eager_over_1000_steps(n):
    inv = bea.compile_torch("inverse_modified_lagrangian", "midpoint", 4)
    h = 0.1

    def base(q, v):  # coupled pendula
        return (v ** 2).sum(-1) / 2 + torch.cos(q).sum(-1) + 0.05 * (q[..., :1] * q).sum(-1)

    def L(q, v):
        return inv(base, q, v, h)

    q0 = torch.linspace(0.2, 0.5, n, dtype=torch.float64)[None]
    v0 = torch.linspace(-0.1, 0.1, n, dtype=torch.float64)[None]
    assert _agree(L, q0, v0, h=h) < 1e-12


@pytest.mark.slow
def test_lnn_baseline_rolls_out_in_c():
    """The LNN baseline of learners.neural (softplus, width 64) takes the traced path: same trajectory as eager."""
    from learners.neural.baselines import LNN

    torch.manual_seed(0)
    model = LNN(1, width=64).double()

    def L(q, v):  # an untrained LNN alone is not regular: a harmonic oscillator plus a small LNN term
        return (v ** 2).sum(-1) / 2 - (q ** 2).sum(-1) / 2 + 0.05 * model(q, v)

    assert trace_lagrangian(L, 1).auto_max_batch == 100  # a network: large batches stay eager under auto
    assert _agree(L, torch.tensor([[0.5]]), torch.tensor([[0.1]]), h=0.05) < 1e-12


def test_a_tensor_built_inside_the_lagrangian_is_traced():
    # aten.lift_fresh: the bound is created inside L on every call
    def L(q, v):
        return 0.5 * (v ** 2).sum(-1) - torch.clamp(q, min=torch.tensor(-0.5, dtype=torch.float64)).pow(2).sum(-1)

    q0 = torch.tensor([[0.3]], dtype=torch.float64)
    assert _agree(L, q0, torch.zeros_like(q0), steps=50) < 1e-12


def test_indexing_inside_a_gradient_is_traced():
    """A gradient taken inside L through cat, unbind, select, slice and stack: the backward of indexing (select_backward,
    slice_backward: torch's decompositions, scatters into zeros) is lowered; C derivatives equal autograd's (O(1): 1e-12)."""
    def L(q, v):
        x = torch.cat([q, v], -1)
        first, _, third, _ = torch.unbind(x, -1)
        e = first ** 2 * third + x[..., 1:].pow(3).sum(-1) + torch.stack([x[..., 0], x[..., 3]], -1).pow(2).sum(-1)
        (g,) = torch.autograd.grad(e.sum(), x, create_graph=True)
        return 0.5 * (v ** 2).sum(-1) + e + 0.1 * (g ** 2).sum(-1)

    states = torch.tensor([[1.0, 0.3, 0.2, -0.1], [0.7, -0.4, 0.0, 0.3]], dtype=torch.float64)
    assert _derivative_error(L, 2, states) < 1e-12


def test_series_with_row_interchanges_is_traced():
    """inv_2 of a Lagrangian whose mass matrix makes getrf interchange its rows (|M_10| > |M_00|: pivots (2, 2)): the
    traced LU (integrators._trace_linalg) follows the interchanges; C derivatives equal autograd's (O(1): 1e-12)."""
    M = torch.tensor([[0.1, 0.2], [0.2, 1.0]], dtype=torch.float64)
    assert torch.linalg.lu_factor(M)[1].tolist() == [2, 2]
    inv = bea.compile_torch("inverse_modified_lagrangian", "midpoint", 2)

    def base(q, v):
        return 0.5 * torch.einsum("...i,...ij,...j->...", v, M * (1 + 0.1 * torch.cos(q[..., :1, None])), v) - (q ** 2).sum(-1)

    states = torch.tensor([[0.3, -0.2, 0.5, 0.1], [0.1, 0.4, -0.3, 0.2]], dtype=torch.float64)
    assert _derivative_error(lambda q, v: inv(base, q, v, 0.1), 2, states) < 1e-12


def test_operations_without_a_rule_run_torchs_decomposition():
    """Operations with no lowering rule (SiLU, logsumexp, and those whose rules torch's decompositions replaced: square,
    rsub, dot, transpose, select_scatter, the backward of tanh, sigmoid and ReLU) are traced through torch's core-ATen
    decompositions; C derivatives equal autograd's to rounding (O(1) entries: 1e-12)."""
    from integrators._trace_aten import RULES

    assert not {"aten.silu.default", "aten.logsumexp.default", "aten.tanh_backward.default"} & set(RULES)
    M = torch.tensor([[2.0, 0.3], [0.3, 1.0]], dtype=torch.float64)
    act = (torch.tanh, torch.sigmoid, torch.relu)

    def L(q, v):
        x = torch.cat([q, v], -1)
        e = sum(f(x * (k + 1) - 0.2).sum(-1) for k, f in enumerate(act))
        (g,) = torch.autograd.grad(e.sum(), x, create_graph=True)
        s = torch.select_scatter(q, torch.cos(q[..., 0]), 1, 0)
        return (torch.dot(v[0], M @ v[0]) / 2 - torch.square(1 - s).sum() + torch.nn.functional.silu(q).sum()
                + torch.logsumexp(x, -1).sum() + (q.transpose(0, 1) ** 3).sum() + 0.1 * (g ** 2).sum())[None]

    states = torch.tensor([[1.0, 0.3, 0.2, -0.1], [0.7, -0.4, 0.0, 0.3]], dtype=torch.float64)
    assert _derivative_error(L, 2, states) < 1e-12


def test_in_place_writes_through_another_view_are_refused():
    """Rules are functional: an in-place write (masked_fill_, copy_ of ``x[:, :1] = ...``) updates the written geometry's
    array only, so a write to a storage another traced view holds is refused (the view would keep old values: 1.07 over
    100 steps before the fix); in place on a tensor no other view holds is exact (to rounding, 1e-12)."""
    from bea.errors import BeaValueError

    def viewed(q, v):  # y views x; masked_fill_ writes x
        x = torch.cat([q, v], -1) * 1.0
        y = x[..., :1]
        x.masked_fill_(x < 0, 0.0)
        return (y ** 2).sum(-1) + (v ** 2).sum(-1) / 2 + torch.cos(q).sum(-1)

    def sliced(q, v):  # copy_ into a slice of x, x read
        x = torch.cat([q, v], -1) * 1.0
        x[:, :1] = torch.clamp(q[:, :1], min=0.0)
        return (x ** 2).sum(-1)

    with pytest.raises(NotLowerable, match="in-place operation aten.masked_fill_"):
        trace_lagrangian(viewed, 1)
    with pytest.raises(NotLowerable, match="in-place operation aten.copy_"):
        trace_lagrangian(sliced, 1)
    with pytest.raises(BeaValueError, match="in-place operation aten.masked_fill_"):
        VariationalIntegrator(viewed, 0.1, execution="compiled").solve(torch.tensor([[-0.5]]), torch.tensor([[0.3]]), 5)
    # "auto" at AUTO_MIN_WORK (500 trajectory-steps) says why once and steps eagerly: the eager trajectory exactly
    q0, v0 = torch.tensor([[-0.5], [0.4]], dtype=torch.float64), torch.tensor([[0.3], [-0.2]], dtype=torch.float64)
    eager = VariationalIntegrator(viewed, 0.1, execution="eager").solve(q0, v0, 250).q
    with pytest.warns(CompiledPathWarning, match="in-place operation aten.masked_fill_"):
        vi = VariationalIntegrator(viewed, 0.1, execution="auto")
        assert torch.equal(vi.solve(q0, v0, 250).q, eager) and vi.last_execution == "eager"

    def plain(q, v):
        x = torch.cat([q, v], -1) * 1.0
        x.masked_fill_(x < 0, 0.0)
        return (x ** 3).sum(-1) + (torch.empty_like(q).fill_(2.0) * q).sum(-1) + (v ** 2).sum(-1)

    states = torch.tensor([[0.3, -0.2, 0.5, 0.1], [-0.8, 0.4, -0.3, -0.2]], dtype=torch.float64)
    assert _derivative_error(plain, 2, states) < 1e-12


def test_casts_branches_and_decomposed_refusals():
    """A cast to another dtype is refused (float32 rounds: it passed verification at 5.9e-8 before); a refusal inside a
    decomposition names the operation the user wrote; a branch on a NumPy copy of q (the trace sees q > 0 only) is
    found at the mirrored verification states -x0, -2 x0 (the three near states all have q > 0.05); a Lagrangian raising
    there is checked at the near states only."""
    kin = lambda v: (v ** 2).sum(-1) / 2  # noqa: E731
    with pytest.raises(NotLowerable, match="torch.float32"):
        trace_lagrangian(lambda q, v: kin(v) + (q.float().double() ** 2).sum(-1), 1)
    with pytest.raises(NotLowerable, match="torch.int64"):
        trace_lagrangian(lambda q, v: kin(v) + ((3 * q).long().double() * q).sum(-1), 1)
    with pytest.raises(NotLowerable, match="aten.isnan.*while decomposing aten.nan_to_num"):
        trace_lagrangian(lambda q, v: kin(v) + torch.nan_to_num(torch.log(q.abs())).sum(-1), 1)
    assert _derivative_error(lambda q, v: kin(v) + ((q > 0).double() * q ** 2).sum(-1), 1,
                             torch.tensor([[0.3, 0.1], [-0.4, 0.2]], dtype=torch.float64)) < 1e-13

    def numpy_branch(q, v):
        return kin(v) + (torch.from_numpy(np.where(q.detach().numpy() > 0, 2.0, 1.0)) * q ** 2).sum(-1)

    with pytest.raises(NotLowerable, match="differ from autograd"):
        trace_lagrangian(numpy_branch, 1)

    def positive_only(q, v):  # raises at the mirrored states: only the near ones are checked, and it is traced
        if bool((q < 0).any()):
            raise ValueError("q < 0")
        return kin(v) + (q ** 3).sum(-1)
    assert trace_lagrangian(positive_only, 1).n == 1

    def bounded(q, v):  # raises at the wider states and at the near q = 0.76 (seed 0): its error names both
        if bool((q < 0).any()) or bool((q > 0.75).any()):
            raise ValueError("q < 0" if bool((q < 0).any()) else "q > 0.75")
        return kin(v) + (q ** 3).sum(-1)
    with pytest.raises(ValueError, match="q > 0.75") as raised:
        trace_lagrangian(bounded, 1)
    if sys.version_info >= (3, 11):  # exception notes
        assert "at the wider states -x0, 2 x0, -2 x0 first: ValueError('q" in raised.value.__notes__[0]


def test_lu_pivot_order_is_guarded():
    """M(q) = [[0.004, b], [b, 1]], b = q0/(10 (1 + q0^2)), is SPD and swapped by partial pivoting while b > 0.004 (so at
    the traced and verification states). At q0 = 1e-11 the traced swap divides by b: without the pivot guards the C
    derivatives were off by 2.5e14 (relative); guarded, C declines there (g and H NaN: that step goes eager) and
    stays exact (1e-12) where the swap is right."""
    def L(q, v):
        b = 0.1 * q[0, 0] / (1 + q[0, 0] ** 2)
        M = torch.stack([torch.stack([0.004 + 0 * b, b]), torch.stack([b, 1.0 + 0 * b])])
        LU, piv = torch.linalg.lu_factor(M)
        return (0.5 * v[0] @ torch.linalg.lu_solve(LU, piv, v[0][:, None])[:, 0] + torch.cos(q).sum())[None]

    stepper = CompiledStepper(L, 0.1, bea.get_scheme("midpoint"), 2)
    swapped, kept = (torch.tensor([[c, 0.2, 0.3, -0.4]], dtype=torch.float64) for c in (0.5, 1e-11))
    assert _derivative_error(L, 2, swapped) < 1e-12
    assert all(d.isnan().all() for d in stepper.lagrangian_derivatives(kept))  # a failed guard: all NaN (codegen.emit)


def _pivoting_mass(q, v):
    """M(q) = [[q0, 0.65], [0.65, 2]] (SPD for q0 > 0.22): partial pivoting swaps its rows where q0 < 0.65."""
    M = torch.stack([torch.stack([q[0, 0], 0.65 + 0 * q[0, 0]]), torch.tensor([0.65, 2.0], dtype=q.dtype)])
    LU, piv = torch.linalg.lu_factor(M)
    kinetic = 0.5 * v[0] @ torch.linalg.lu_solve(LU, piv, v[0][:, None])[:, 0]
    return (kinetic - 2.0 * (q[0, 0] - 0.7) ** 2 - 0.5 * q[0, 1] ** 2)[None]


def test_a_guard_failing_at_a_near_test_state_is_skipped_not_refused():
    """The traced state (seed 0) has q0 = 0.688, unswapped; the near test state q0 = 0.616 is swapped, a failed pivot
    guard where the C form declines (every derivative NaN, the Lagrangian's and the Taylor form's through
    derivs_of_taylor): the form is kept (it was refused before), exact (1e-12) where unswapped, and a march crossing
    q0 = 0.65 with execution='compiled' (30 steps to q0 = 0.69: eager ones cost ~0.1 s here) equals eager to 1e-12
    (rounding; the declined steps run eagerly)."""
    from integrators.codegen.emit import derivs_of_taylor
    from integrators.compiled import CLagrangian
    from integrators.traced import trace_taylor

    swapped, kept = (torch.tensor([[c, 0.1, 0.3, -0.4]], dtype=torch.float64) for c in (0.6, 0.8))
    assert _derivative_error(_pivoting_mass, 2, kept) < 1e-12
    taylor = trace_taylor(_pivoting_mass, 2, 4)
    check = CLagrangian(n=2, source=taylor.source + derivs_of_taylor(4, 4), params=taylor.params)
    for form in (trace_lagrangian(_pivoting_mass, 2), check):
        g, H = CompiledStepper(form, 0.1, bea.get_scheme("midpoint"), 2).lagrangian_derivatives(swapped)
        assert g.isnan().all() and H.isnan().all()
    q0, v0 = torch.tensor([[0.6, 0.1]], dtype=torch.float64), torch.tensor([[0.0, 0.3]], dtype=torch.float64)
    eager = VariationalIntegrator(_pivoting_mass, 0.1, execution="eager").solve(q0, v0, 30).q  # about one period
    vi = VariationalIntegrator(_pivoting_mass, 0.1, execution="compiled")
    fast = vi.solve(q0, v0, 30).q
    assert vi.last_execution == "compiled+eager" and float(fast[..., 0].max()) > 0.68  # crosses q0 = 0.65
    assert float((eager - fast).abs().max()) < 1e-12


def test_a_taylor_form_declines_where_its_sign_guard_fails():
    """L = v^2/2 + s q^3, s = sign(q).item() (a guard): the Taylor form traced at q > 0 gives NaN in every derivative
    read off it at q = -0.5 (was: T[0] alone NaN, g = -0.75 where autograd's is +0.75) and autograd's to 1e-12 at 0.5."""
    from integrators.codegen.emit import derivs_of_taylor
    from integrators.compiled import CLagrangian
    from integrators.traced import trace_taylor

    def L(q, v):
        return v[..., 0] ** 2 / 2 + torch.sign(q[..., 0]).reshape(-1)[0].item() * q[..., 0] ** 3

    taylor = trace_taylor(L, 1, 4)
    check = CLagrangian(n=1, source=taylor.source + derivs_of_taylor(2, 4), params=taylor.params)
    g, H = CompiledStepper(check, 0.1, bea.get_scheme("midpoint"), 1).lagrangian_derivatives(
        torch.tensor([[-0.5, 0.2], [0.5, 0.2]], dtype=torch.float64))
    assert g[0].isnan().all() and H[0].isnan().all()
    assert float((g[1] - torch.tensor([0.75, 0.2], dtype=torch.float64)).abs().max()) < 1e-12
