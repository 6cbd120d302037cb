"""Reliability of bea's inputs (issue 12, items 3, 6, 7, 12): strings never evaluated, degenerate
Lagrangians and schemes refused with the cause named, the step h's contract, closed forms for
Lagrangians whose derivatives do not all depend on the state."""

import time
from fractions import Fraction

import pytest
import sympy
import torch

import bea
from bea.errors import BeaError, BeaTypeError, BeaValueError, InconsistentSchemeError, UnsupportedSchemeError
from bea.schemes import CustomScheme

q_, v_ = sympy.symbols("q v", real=True)


def _ho(q, v):
    return 0.5 * (v**2).sum(-1) - 0.5 * (q**2).sum(-1)


# ------------------------------------------------------------------ item 3: strings are not evaluated


def test_string_lagrangian_is_refused_not_run(tmp_path):
    marker = tmp_path / "ran"
    evil = f"__import__('os').system('touch {marker}') + v**2"
    for kind in (bea.modified_lagrangian, bea.inverse_modified_lagrangian, bea.modified_equation):
        with pytest.raises(BeaTypeError, match="not a string.*evaluates them as Python code"):
            kind("midpoint", 2, lagrangian=evil, q=[q_], v=[v_])
    with pytest.raises(TypeError):  # still a TypeError for callers that catch that
        bea.modified_lagrangian("midpoint", 2, lagrangian=evil.encode(), q=[q_], v=[v_])
    with pytest.raises(BeaTypeError, match="list of SymPy symbols"):
        bea.modified_lagrangian("midpoint", 2, lagrangian=v_**2 / 2, q="q", v="v")
    assert not marker.exists()


# ------------------------------------------------------------------ item 6: degenerate input


@pytest.mark.parametrize("bad", [sympy.oo * q_, -sympy.oo, q_ / sympy.S(0), sympy.nan * v_, sympy.Float("inf") * q_])
def test_non_finite_constant_in_lagrangian(bad):
    with pytest.raises(BeaValueError, match="non-finite constant"):
        bea.modified_lagrangian("midpoint", 2, lagrangian=v_**2 / 2 + bad, q=[q_], v=[v_])


def test_inconsistent_schemes_name_the_cause():
    twice = CustomScheme(lambda L, a, b, h: 2 * h * L((a + b) / 2, (b - a) / h), name="twice")
    with pytest.raises(InconsistentSchemeError, match=r"tends to 2 \* L\(q, v\).*sum to 2, not 1"):
        twice.check_consistent()
    with pytest.raises(InconsistentSchemeError, match="sum to 2"):  # the API runs the same check first
        bea.compile_torch("modified_lagrangian", twice, 2)
    sine = CustomScheme(lambda L, a, b, h: h * sympy.sin(L((a + b) / 2, (b - a) / h)), name="sine")
    with pytest.raises(UnsupportedSchemeError, match="applies the function sin"):
        bea.modified_lagrangian(sine, 2)
    floats = CustomScheme(lambda L, a, b, h: h * (0.3 * L(a, (b - a) / h) + 0.7 * L(b, (b - a) / h)), name="floats")
    with pytest.raises(InconsistentSchemeError, match=r"0.3 is 5404319552844595/18014398509481984.*Fraction\(3, 10\)"):
        bea.modified_lagrangian(floats, 2)
    exact_w = CustomScheme(lambda L, a, b, h: h * (Fraction(3, 10) * L(a, (b - a) / h) + Fraction(7, 10) * L(b, (b - a) / h)), name="w")
    exact_w.check_consistent()  # the same weights written exactly are fine
    no_h = CustomScheme(lambda L, a, b, h: L((a + b) / 2, (b - a) / h), name="no_h")
    with pytest.raises(InconsistentSchemeError, match="needs an overall factor h"):
        no_h.check_consistent()
    shifted = CustomScheme(lambda L, a, b, h: h * L(a + b, (b - a) / h), name="a+b")
    with pytest.raises(InconsistentSchemeError, match="q_1 argument of L does not tend to q"):
        shifted.check_consistent()
    torchy = CustomScheme(lambda L, a, b, h: h * L(torch.as_tensor(a).mean(), (b - a) / h), name="torchy")
    with pytest.raises(UnsupportedSchemeError, match="could not be evaluated on symbols"):
        torchy.check_consistent()


def test_check_consistent_is_cached_and_cheap():
    s = bea.GeneralisedMidpoint("2/7")
    t0 = time.perf_counter()
    s.check_consistent()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(5):
        bea.GeneralisedMidpoint("2/7").check_consistent()
    again = (time.perf_counter() - t0) / 5
    assert again < 0.25 and first < 5.0  # ~5 ms and ~30 ms on an idle core; generous for shared machines
    from bea.scheme_check import _VERDICTS

    assert _VERDICTS[(s.fingerprint(), s.symmetric)] is None  # keyed by the declaration too (issue 24)


def test_matrix_lagrangian_and_coordinate_as_parameter():
    with pytest.raises(BeaTypeError, match="scalar SymPy expression, got a 1x1 Matrix"):
        bea.modified_lagrangian("midpoint", 2, lagrangian=sympy.Matrix([v_**2 / 2]), q=[q_], v=[v_])
    with pytest.raises(BeaValueError, match="params must not contain coordinates or velocities: q"):
        bea.modified_lagrangian("midpoint", 2, lagrangian=v_**2 / 2 - q_**2, q=[q_], v=[v_], params=[q_])
    with pytest.raises(BeaValueError, match="only meaningful with a concrete lagrangian"):
        bea.modified_lagrangian("midpoint", 2, params=[q_])


def test_order_and_dimension_bounds():
    t0 = time.perf_counter()
    with pytest.raises(BeaValueError, match="above the supported maximum 12"):
        bea.modified_lagrangian("midpoint", 100_000)
    with pytest.raises(BeaValueError, match="above the supported maximum 24"):
        bea.modified_lagrangian("midpoint", 26, lagrangian=v_**2 / 2 - q_**2 / 2, q=[q_], v=[v_])
    with pytest.raises(BeaValueError, match="n=100 is above the supported maximum 6"):
        bea.compile_torch("modified_lagrangian", "midpoint", 2, 100)
    assert time.perf_counter() - t0 < 2.0  # refused before any work


# ------------------------------------------------------------------ item 7: the step h and shapes


@pytest.fixture(scope="module")
def mod2():
    return bea.compile_torch("modified_lagrangian", "midpoint", 2, 1)


def test_h_shaped_like_q_is_refused(mod2):
    q, v = torch.tensor([[0.1], [0.2]]), torch.tensor([[0.3], [-0.4]])
    with pytest.raises(BeaValueError, match=r"h has shape \(2, 1\).*batch shape \(2,\).*squeeze"):
        mod2(_ho, q, v, torch.full((2, 1), 0.1))
    hb = torch.tensor([0.1, 0.2])  # one step per batch element: allowed, and pointwise
    out = mod2(_ho, q, v, hb)
    assert out.shape == (2,)
    for i in range(2):
        torch.testing.assert_close(out[i], mod2(_ho, q[i : i + 1], v[i : i + 1], float(hb[i]))[0], rtol=1e-15, atol=0)
    assert mod2(_ho, q, v, torch.tensor(0.1)).shape == (2,)
    with pytest.raises(BeaValueError, match="does not broadcast"):
        mod2(_ho, q, v, torch.tensor([0.1, 0.2, 0.3]))


@pytest.mark.parametrize("h", ["0.1", None, [0.1], True, complex(0.1, 0), torch.tensor(1)])
def test_h_of_the_wrong_type(mod2, h):
    q, v = torch.zeros(3, 1), torch.ones(3, 1)
    with pytest.raises(BeaTypeError, match="h must be"):
        mod2(_ho, q, v, h)


@pytest.mark.parametrize("h", [float("nan"), float("inf"), 10**400])
def test_h_not_finite(mod2, h):
    with pytest.raises(BeaValueError, match="finite"):
        mod2(_ho, torch.zeros(3, 1), torch.ones(3, 1), h)


def test_h_requiring_grad_is_differentiable(mod2):
    # midpoint, harmonic oscillator: L_mod = L + h^2/24 (A M A - v L_qq v) = L + h^2 (q^2 + v^2)/24
    q, v = torch.tensor([[0.3], [-1.2]]), torch.tensor([[0.5], [0.7]])
    h = torch.tensor(0.2, requires_grad=True)
    out = mod2(_ho, q, v, h)
    (dh,) = torch.autograd.grad(out.sum(), h)
    want = (h.detach() / 12 * (q**2 + v**2)).sum()
    torch.testing.assert_close(dh, want, rtol=1e-12, atol=0)
    hb = torch.tensor([0.2, 0.1], requires_grad=True)
    (dhb,) = torch.autograd.grad(mod2(_ho, q, v, hb).sum(), hb)
    torch.testing.assert_close(dhb, hb.detach() / 12 * (q**2 + v**2)[:, 0], rtol=1e-12, atol=0)


def test_state_shapes_and_types(mod2):
    with pytest.raises(BeaValueError, match="same shape"):
        mod2(_ho, torch.zeros(3, 1), torch.zeros(2, 1), 0.1)
    with pytest.raises(BeaValueError, match="derived for dimension n=1"):
        mod2(_ho, torch.zeros(3, 2), torch.zeros(3, 2), 0.1)
    with pytest.raises(BeaTypeError, match="same dtype"):
        mod2(_ho, torch.zeros(3, 1), torch.zeros(3, 1, dtype=torch.float32), 0.1)
    with pytest.raises(BeaTypeError, match="torch tensors"):
        mod2(_ho, [[0.0]], [[0.0]], 0.1)
    with pytest.raises(BeaTypeError, match="callable"):
        mod2("L", torch.zeros(3, 1), torch.zeros(3, 1), 0.1)
    with pytest.raises(BeaValueError, match="must return shape"):
        mod2(lambda q, v: v, torch.zeros(3, 1), torch.ones(3, 1), 0.1)


def test_concrete_compiled_function_checks_h_too():
    f = bea.modified_lagrangian("midpoint", 2, lagrangian=v_**2 / 2 - q_**2 / 2, q=[q_], v=[v_]).to_torch()
    with pytest.raises(BeaValueError, match=r"h has shape \(2, 1\)"):
        f(torch.zeros(2, 1), torch.ones(2, 1), torch.full((2, 1), 0.1))
    with pytest.raises(BeaTypeError):
        f(torch.zeros(2, 1), torch.ones(2, 1), "0.1")


# ------------------------------------------------------------------ item 12: closed forms with unused derivatives


def test_midpoint_mod2_linear_potential_and_free_particle(mod2):
    g, h = 9.81, 0.1
    falling = lambda q, v: 0.5 * (v**2).sum(-1) - g * q.sum(-1)  # noqa: E731
    free = lambda q, v: 0.5 * (v**2).sum(-1)  # noqa: E731
    q, v = torch.tensor([[0.3], [-1.0], [2.0]]), torch.tensor([[0.5], [0.0], [-3.0]])
    # A = -g, M = 1, L_qq = 0: the correction is g^2 h^2 / 24, as the generated code also gives
    want = falling(q, v) + g**2 * h**2 / 24
    torch.testing.assert_close(bea.midpoint_mod2(falling, h)(q, v), want, rtol=1e-14, atol=0)
    torch.testing.assert_close(mod2(falling, q, v, h), want, rtol=1e-14, atol=0)
    torch.testing.assert_close(bea.midpoint_inv2(falling, h)(q, v), falling(q, v) - g**2 * h**2 / 24, rtol=1e-14, atol=0)
    torch.testing.assert_close(bea.midpoint_mod2(free, h)(q, v), free(q, v), rtol=0, atol=0)
    torch.testing.assert_close(bea.energy(lambda q, v: -(q**2).sum(-1))(q, v), (q**2).sum(-1), rtol=0, atol=0)
    torch.testing.assert_close(bea.momentum(lambda q, v: -(q**2).sum(-1))(q, v), torch.zeros_like(v), rtol=0, atol=0)


def test_every_error_is_a_bea_error():
    for call in (
        lambda: bea.get_scheme(3),
        lambda: bea.get_scheme("rk4"),
        lambda: bea.GeneralisedMidpoint("1e999999999"),
        lambda: bea.modified_lagrangian("midpoint", 2.0),
        lambda: bea.modified_lagrangian("midpoint", 2, cache="no"),
        lambda: bea.compile_torch(3, "midpoint", 2),
        lambda: bea.compile_torch("nope", "midpoint", 2),
        lambda: CustomScheme(lambda L, a, b, h: h * L(a, b), name=""),
        lambda: bea.modified_lagrangian("midpoint", 2, lagrangian=v_**2, q=[q_], v=[v_]).coefficient(4),
    ):
        with pytest.raises(BeaError):
            call()
