"""Property-based tests of the public bea API's argument validation (issue 12): arbitrary arguments
either work or raise the documented typed error (a :class:`bea.BeaError`), never anything else and
never a hang. Orders and dimensions that would work are kept tiny, so valid draws are cheap (and
cached after the first)."""

import math
from fractions import Fraction

import pytest
import sympy
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bea
from bea.errors import BeaError

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-10**6, 10**6),
    st.integers(13, 10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.binary(max_size=10),
    st.lists(st.integers(-3, 3), max_size=3),
    st.fractions(),
    st.just(object()),
)
schemes = st.one_of(
    st.sampled_from(["midpoint", "trapezoidal", "generalised_midpoint:0.3", "generalised-midpoint(alpha=1/4)", "leapfrog",
                     "generalised_midpoint:7", "generalised_midpoint:1e99999999", "", " MIDPOINT "]),
    st.builds(lambda a: f"generalised_midpoint:{a}", st.one_of(st.text(max_size=8), st.floats(), st.integers())),
    junk,
)
small_orders = st.one_of(st.integers(-2, 2), junk)
small_dims = st.one_of(st.integers(-1, 2), st.none(), junk)


def _works_or_bea_error(call):
    try:
        return call()
    except BeaError:
        return None


@SETTINGS
@given(schemes)
def test_get_scheme(scheme):
    out = _works_or_bea_error(lambda: bea.get_scheme(scheme))
    if out is not None:
        assert isinstance(out, bea.Scheme)


@SETTINGS
@given(schemes, small_orders, small_dims, st.one_of(st.booleans(), junk))
def test_modified_lagrangian(scheme, order, dim, cache):
    out = _works_or_bea_error(lambda: bea.modified_lagrangian(scheme, order, dim, cache=cache))
    if out is not None:
        assert out.order == order and out.n == (dim or 1)


@SETTINGS
@given(st.one_of(st.sampled_from(["modified_lagrangian", "inverse_modified_lagrangian", "modified_equation"]), junk),
       schemes, small_orders, st.one_of(st.integers(-1, 2), junk))
def test_compile_torch(kind, scheme, order, dim):
    out = _works_or_bea_error(lambda: bea.compile_torch(kind, scheme, order, dim))
    if out is not None:
        assert callable(out)


q_, v_, k_ = sympy.symbols("q v k")
lagrangians = st.one_of(
    st.sampled_from([v_**2 / 2 - q_**2 / 2, v_**2 / 2 + sympy.cos(q_), q_ * v_, v_**2 + sympy.oo, sympy.zoo * q_ + v_**2,
                     sympy.Matrix([v_**2]), v_**2 / 2 - k_ * q_**2, sympy.Function("f")(q_) + v_**2, sympy.I * v_**2]),
    junk,
)
symbol_lists = st.one_of(st.sampled_from([[q_], [v_], [k_], [q_, v_], [], q_, "q"]), junk)


@SETTINGS
@given(lagrangians, symbol_lists, symbol_lists, st.one_of(st.sampled_from([(), [k_], [q_], [k_, k_]]), junk), st.integers(-1, 2))
def test_concrete_lagrangian(L, q, v, params, order):
    out = _works_or_bea_error(lambda: bea.modified_lagrangian("midpoint", order, lagrangian=L, q=q, v=v, params=params))
    if out is not None:
        assert out.order == order


@pytest.fixture(scope="module")
def compiled():
    return bea.compile_torch("modified_lagrangian", "midpoint", 2, 1)


def _pendulum(q, v):
    return 0.5 * (v**2).sum(-1) + torch.cos(q).sum(-1)


shapes = st.lists(st.integers(0, 3), min_size=0, max_size=3).map(tuple)
tensors = st.builds(
    lambda shape, dtype: torch.rand(shape, dtype=dtype) if dtype.is_floating_point else torch.ones(shape, dtype=dtype),
    shapes, st.sampled_from([torch.float64, torch.float32, torch.int64, torch.complex128]))
steps = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**400, 10**400), st.fractions(), tensors, junk)
lagrangian_fns = st.sampled_from([_pendulum, "L", None, lambda q, v: v, lambda q, v: 1.0, lambda q, v: (v**2).sum(-1)])


@SETTINGS
@given(lagrangian_fns, tensors, tensors, steps)
def test_generated_function(compiled, L, q, v, h):
    out = _works_or_bea_error(lambda: compiled(L, q, v, h))
    if out is not None:
        assert out.shape == q.shape[:-1]
        if isinstance(h, (int, float, Fraction)) and math.isfinite(float(h)) and L is _pendulum:
            assert torch.isfinite(out).all()
