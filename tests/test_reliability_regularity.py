"""Regularity is one check on every path (issue 24, class 3).

``bea.autodiff.check_regular`` compares ``M = d^2L/dv^2`` with L's first derivatives at every ``n`` (the
dimension-free trees did so only at ``n = 1``) and refuses a mass below ``sqrt(tiny)`` of its dtype;
``bea.autodiff.check_finite_result`` refuses a non-finite result wherever q, v, h, L and dL are finite. Both
the component functions (``dim=n``) and the dimension-free ones run them.
"""

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

import bea
from bea.autodiff import check_finite_result, mass_floor
from bea.errors import NotRegularError

KINDS = ["modified_equation", "modified_lagrangian", "inverse_modified_lagrangian"]


def quartic(q, v):
    return (v**4).sum(-1) / 12 + torch.cos(q).sum(-1)


def pendulums(c):
    return lambda q, v: c * ((v**2).sum(-1) / 2 + torch.cos(q).sum(-1))


def states(n, vv=0.5, B=3, dtype=torch.float64):
    g = torch.Generator().manual_seed(n)
    q = torch.rand(B, n, generator=g, dtype=dtype)
    return q, torch.full((B, n), vv, dtype=dtype)


def _functions(kind, n):
    """The dimension-free function, series_function (which takes it at n >= 2) and the component one."""
    fs = {"free": bea.compile_torch(kind, "midpoint", 2), "series_function": bea.series_function(kind, "midpoint", 2, n)}
    if n <= 2:
        fs["components"] = bea.compile_torch(kind, "midpoint", 2, n=n)
    return fs


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [2, 3])
def test_uniformly_small_masses_are_not_regular_on_every_path(kind, n):
    cases = {
        "quartic at v = 1e-100 (issue)": (quartic, states(n, 1e-100)),
        "1e-300 |v|^2 (issue)": (lambda q, v: 1e-300 * (v**2).sum(-1), states(n)),
        "1e-200 pendulums (M dwarfed by L_q)": (lambda q, v: 1e-200 * (v**2).sum(-1) + torch.cos(q).sum(-1), states(n)),
        "anisotropic 1e-170..1e-160 (spread 1e-10, below the floor)":
            (lambda q, v: (torch.logspace(-170, -160, n, dtype=torch.float64) * (v**2 / 2 + torch.cos(q))).sum(-1), states(n)),
    }
    for name, fn in _functions(kind, n).items():
        for case, (L, (q, v)) in cases.items():
            with pytest.raises(NotRegularError, match="not regular"):
                fn(L, q, v, 0.1)
                pytest.fail(f"{name}: {case} gave no error")


def test_float32_has_its_own_floor():
    assert mass_floor(torch.float64) == pytest.approx(1.49e-154, rel=1e-2)
    assert mass_floor(torch.float32) == pytest.approx(1.08e-19, rel=1e-2)
    q, v = states(2, dtype=torch.float32)
    f = bea.compile_torch("modified_lagrangian", "midpoint", 2)
    with pytest.raises(NotRegularError, match="below 1.1e-19"):
        f(pendulums(1e-25), q, v, 0.1)
    assert torch.isfinite(f(pendulums(1.0), q, v, 0.1)).all()


def test_underflowing_determinant_is_caught_by_the_output_check():
    """n = 3, M = 1e-150 I: above the floor, but det M = 1e-450 underflows in the component formula (1/det M);
    the dimension-free function, which solves with M, is exact: c L_mod[L] = L_mod[c L]."""
    q, v = states(3)
    comp = bea.compile_torch("modified_lagrangian", "midpoint", 2, n=3)
    with pytest.raises(NotRegularError, match="series is not finite at 3 of 3 points"):
        comp(pendulums(1e-150), q, v, 0.1)
    free = bea.compile_torch("modified_lagrangian", "midpoint", 2)
    ref = free(pendulums(1.0), q, v, 0.1)
    torch.testing.assert_close(free(pendulums(1e-150), q, v, 0.1) / 1e-150, ref, rtol=1e-12, atol=0)
    torch.testing.assert_close(comp(pendulums(1.0), q, v, 0.1), ref, rtol=1e-12, atol=1e-14)


def test_non_finite_inputs_still_propagate():
    """Integrators mask diverged iterates: a NaN state (or an L that is infinite there) gives NaN/inf at that
    point only, never an error for the batch."""
    for dim in (None, 2):
        f = bea.compile_torch("modified_equation", "midpoint", 2, n=dim)
        q, v = states(2)
        q[1, 0] = float("nan")
        out = f(pendulums(1.0), q, v, 0.1)
        assert torch.isnan(out[1]).all() and torch.isfinite(out[[0, 2]]).all()
        kepler = lambda q, v: (v**2).sum(-1) / 2 + 1 / q.norm(dim=-1)  # noqa: E731 - infinite at q = 0
        q, v = states(2)
        q[2] = 0.0
        out = f(kepler, q, v, 0.1)
        assert not torch.isfinite(out[2]).all() and torch.isfinite(out[:2]).all()


def test_the_shared_output_check_itself():
    q, v = states(2, B=4)
    L = pendulums(1.0)
    out = torch.ones(4)
    assert check_finite_result(L, q, v, 0.1, out) is out
    out[2] = float("inf")
    with pytest.raises(NotRegularError, match=r"1 of 4 points .*first at batch index \(2,\)"):
        check_finite_result(L, q, v, 0.1, out)
    h = torch.full((4,), 0.1)
    h[2] = float("nan")
    assert check_finite_result(L, q, v, h, out) is out  # h not finite there: propagates
    vec = torch.ones(4, 2)
    vec[3, 1] = float("nan")
    with pytest.raises(NotRegularError, match=r"first at batch index \(3,\)"):
        check_finite_result(L, q, v, 0.1, vec)


@settings(max_examples=25, deadline=None)
@given(st.floats(-200, 140))
def test_scaled_lagrangians_scale_or_are_refused(log10_c):
    """L -> c L: the modified Lagrangian scales by c (it is homogeneous of degree 1 in L) and the modified
    equation is unchanged -- to 1e-12 -- while M = c I is above the floor, and NotRegularError below it;
    never NaN, inf or a wrong number."""
    c = 10.0**log10_c
    q, v = states(2)
    fl = bea.compile_torch("modified_lagrangian", "midpoint", 2)
    fe = bea.compile_torch("modified_equation", "midpoint", 2)
    floor = mass_floor(torch.float64)
    if c < floor:
        for f in (fl, fe):
            with pytest.raises(NotRegularError, match="too small for torch.float64"):
                f(pendulums(c), q, v, 0.1)
        return
    lag, acc = fl(pendulums(c), q, v, 0.1), fe(pendulums(c), q, v, 0.1)
    torch.testing.assert_close(lag / c, fl(pendulums(1.0), q, v, 0.1), rtol=1e-12, atol=0)
    torch.testing.assert_close(acc, fe(pendulums(1.0), q, v, 0.1), rtol=1e-12, atol=1e-14)
