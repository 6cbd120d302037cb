"""Dimension-free formulas (bea.free): exact agreement with the component engine, torch evaluation for
any n, closed forms of coupled oscillators, and the guarantees of the torch functions.

Tolerances: exact (rational) comparisons where the component engine is the oracle; 1e-12 relative for
float64 evaluations of the same formula by two routes (a few hundred operations of O(1) values).
"""

import math

import pytest
import sympy
import torch

import bea
from bea.derive import Derivation, derive_raw
from bea.free.components import to_components
from bea.free.derive import FreeDerivation, derive_free

KINDS = ("modified_equation", "modified_lagrangian", "inverse_modified_lagrangian")
MIXED = bea.CustomScheme(lambda L, a, b, h: h / 2 * L((a + b) / 2, (b - a) / h) + h / 4 * (L(a, (b - a) / h) + L(b, (b - a) / h)),
                         name="mid-trap-average")
SCHEMES = [bea.Midpoint(), bea.Trapezoidal(), bea.GeneralisedMidpoint("1/3"), MIXED]
#: a discrete Lagrangian that is not linear in L (consistent: the square is O(h^3))
SQUARE = bea.CustomScheme(lambda L, a, b, h: h / 2 * (L(a, (b - a) / h) + L(b, (b - a) / h))
                          + h / 8 * (L(a, (b - a) / h) - L(b, (b - a) / h)) ** 2, name="trap-plus-square")


def _agree(scheme, n, order, kinds=KINDS):
    free = FreeDerivation(scheme)
    comp = Derivation(scheme, n)
    for kind in kinds:
        # the modified equation one order lower: its h^4 term alone has ~6,000 trees (a minute to derive)
        order = min(order, 2) if kind == "modified_equation" and scheme.symmetric else order
        fr = derive_free(scheme, kind, order, free)
        cr = derive_raw(scheme, kind, order, n, comp)
        ex = to_components(fr, n, comp.jets)
        for k in range(order + 1):
            assert ex.coeffs[k] == cr.coeffs[k], f"{scheme!r} {kind} n={n}: h^{k} differs"


@pytest.mark.parametrize("scheme", SCHEMES, ids=repr)
def test_exact_agreement_with_components_n1(scheme):
    _agree(scheme, 1, 4 if scheme.symmetric else 3)


def test_scheme_not_linear_in_L_agrees_with_components():
    # products of values of L: the first variation keeps the terms linear in the variation, and the
    # inverse falls back to substitution into the modified Lagrangian
    _agree(SQUARE, 1, 4)
    _agree(SQUARE, 2, 2)


@pytest.mark.parametrize("scheme,order", [
    *[(sch, 4) for sch in SCHEMES if not isinstance(sch, bea.GeneralisedMidpoint)],
    pytest.param(bea.GeneralisedMidpoint("1/3"), 3, id="GeneralisedMidpoint(alpha=1/3)-3"),
    pytest.param(bea.GeneralisedMidpoint("1/3"), 4, id="GeneralisedMidpoint(alpha=1/3)-4", marks=pytest.mark.slow)], ids=repr)
def test_inverse_by_mean_value_equals_inverse_by_substitution(scheme, order):
    """Two independent constructions of L_inv (exact mean of L minus the scheme's expansion, against substituting L_inv
    into the generic modified Lagrangian) give the same normal form, exactly. GeneralisedMidpoint(1/3), not symmetric,
    to h^3 in the default suite (0.24 CPU s; h^1, h^2 and h^3 non-zero: 2, 2 and 4 trees), to h^4 under -m slow
    (7.8 CPU s, 23 s wall at load 4: the substitution route needs its modified Lagrangian to h^4; 30 trees at h^4)."""
    d = FreeDerivation(scheme)
    new = d.inverse_modified_lagrangian(order)
    old = d._inverse_by_substitution(order)
    assert [dict(new[k]) for k in range(order + 1)] == [dict(old[k]) for k in range(order + 1)]
    assert sum(len(new[k]) for k in range(1, order + 1)) > 0


@pytest.mark.parametrize("scheme", [bea.Midpoint(), bea.Trapezoidal(), bea.GeneralisedMidpoint("1/3")], ids=repr)
def test_exact_agreement_with_components_n2(scheme):
    _agree(scheme, 2, 2)


def test_midpoint_h2_term_is_the_vector_closed_form():
    s = bea.modified_lagrangian("midpoint", 2, cache=False)
    assert s.n is None
    # (A^T M A - v^T L_qq v)/24 with A = M^{-1}(L_q - L_qv[v]) the Euler-Lagrange acceleration
    assert str(s.coefficient(2)) == "-L_qq[v, v]/24 + L_vv[A, A]/24"
    assert r"L_{qq}[v, v]" in s.latex()
    assert s.n_terms == {0: 1, 2: 2}
    # components(2) is today's component series, equal to the component derivation
    c = s.components(2)
    ref = bea.modified_lagrangian("midpoint", 2, n=2, cache=False)
    assert sympy.simplify(c.coefficients[2] - ref.coefficients[2]) == 0


def _lagrangian(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(n, n, generator=g, dtype=torch.float64) / n
    c = torch.rand(n, generator=g, dtype=torch.float64)

    def L(q, v):  # position-dependent mass, non-separable
        mass = 1 + 0.3 * torch.sin(q @ W).pow(2).sum(-1, keepdim=True)
        return 0.5 * (mass * v * v).sum(-1) + torch.cos(q).sum(-1) + 0.1 * (c * v * q).sum(-1)

    return L


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n,order,scheme", [(1, 4, "midpoint"), (2, 2, "midpoint"), (2, 2, SQUARE)])
def test_torch_agrees_with_component_code(kind, n, order, scheme):
    if kind == "modified_equation":
        order = 2
    L = _lagrangian(n)
    g = torch.Generator().manual_seed(1)
    q = torch.randn(7, n, generator=g, dtype=torch.float64)
    v = torch.randn(7, n, generator=g, dtype=torch.float64)
    free = bea.compile_torch(kind, scheme, order)
    comp = bea.compile_torch(kind, scheme, order, n=n)
    a, b = free(L, q, v, 0.3), comp(L, q, v, 0.3)
    assert a.shape == b.shape
    assert torch.allclose(a, b, rtol=1e-12, atol=1e-12 * float(b.detach().abs().max()))


def _omega2_series(kind, scheme, omega, order):
    """Taylor coefficients in h of the exact Omega^2 of the (inverse) modified oscillator."""
    h, w = sympy.symbols("h w", positive=True)
    f = {("modified_lagrangian", "midpoint"): sympy.atan, ("modified_lagrangian", "trapezoidal"): sympy.asin,
         ("inverse_modified_lagrangian", "midpoint"): sympy.tan, ("inverse_modified_lagrangian", "trapezoidal"): sympy.sin}[(kind, scheme)]
    ser = sympy.series((2 / h * f(w * h / 2)) ** 2, h, 0, order + 1).removeO()
    return [float(ser.coeff(h, k).subs(w, omega)) for k in range(order + 1)]


# 6: about 10 s each; 8: minutes each (43,184 trees at h^8 for the midpoint modified Lagrangian)
@pytest.mark.parametrize("order", [4, pytest.param(6, marks=pytest.mark.slow), pytest.param(8, marks=pytest.mark.slow)])
@pytest.mark.parametrize("scheme", ["midpoint", "trapezoidal"])
@pytest.mark.parametrize("kind", ["modified_lagrangian", "inverse_modified_lagrangian"])
def test_coupled_oscillators_n5_closed_forms(kind, scheme, order):
    """L = v.v/2 - q.Kq/2 with non-diagonal K, n = 5: the series is quadratic, and per eigenvalue w^2 of K
    the ratio of its q- and v-parts is the Taylor series of (2/h f(wh/2))^2 (f = arctan, arcsin, tan, sin)."""
    n = 5
    g = torch.Generator().manual_seed(3)
    B = torch.randn(n, n, generator=g, dtype=torch.float64)
    K = B @ B.T / n + torch.eye(n, dtype=torch.float64)
    f = bea.compile_torch(kind, scheme, order)

    def L(q, v):
        return 0.5 * (v * v).sum(-1) - 0.5 * ((q @ K) * q).sum(-1)

    # the series is a polynomial of degree `order` in h: recover its coefficients from order + 1 values
    hs = torch.arange(order + 1, dtype=torch.float64) - order / 2
    z = torch.zeros(1, n, dtype=torch.float64, requires_grad=True)
    hess = []
    for h in hs:
        def F(x):
            return f(L, x[:, :n], x[:, n:], float(h)).sum()

        hess.append(torch.autograd.functional.hessian(F, torch.zeros(1, 2 * n, dtype=torch.float64)).reshape(2 * n, 2 * n))
    V = torch.stack([hs**k for k in range(order + 1)], 1)
    coeffs = torch.linalg.solve(V, torch.stack(hess).reshape(order + 1, -1)).reshape(order + 1, 2 * n, 2 * n)
    assert coeffs[:, :n, n:].abs().max() < 1e-12  # no q-v coupling
    w2, U = torch.linalg.eigh(K)
    for j in range(n):
        u = U[:, j]
        a = [float(u @ c[n:, n:] @ u) for c in coeffs]  # v-part
        b = [-float(u @ c[:n, :n] @ u) for c in coeffs]  # q-part
        ratio = [b[0] / a[0]]
        for k in range(1, order + 1):  # series division b / a
            ratio.append((b[k] - sum(ratio[i] * a[k - i] for i in range(k))) / a[0])
        want = _omega2_series(kind, scheme, math.sqrt(float(w2[j])), order)
        for k in range(order + 1):
            assert abs(ratio[k] - want[k]) <= 1e-12 * max(1.0, abs(want[k])), (j, k, ratio[k], want[k])


def test_any_n_batch_shapes_and_no_grad():
    f = bea.compile_torch("modified_lagrangian", "midpoint", 2)
    for n in (1, 3, 12):
        L = _lagrangian(n)
        q = torch.randn(2, 3, n, dtype=torch.float64)
        v = torch.randn(2, 3, n, dtype=torch.float64)
        y = f(L, q, v, 0.1)
        assert y.shape == (2, 3)
        with torch.no_grad():
            z = f(L, q, v, 0.1)
        assert not z.requires_grad
        assert torch.allclose(y, z, rtol=1e-14, atol=0)
        assert torch.allclose(y[1, 2], f(L, q[1, 2:3], v[1, 2:3], 0.1)[0], rtol=1e-13)
    F = bea.compile_torch("modified_equation", "midpoint", 2)
    assert F(_lagrangian(4), q[..., :4], v[..., :4], 0.1).shape == (2, 3, 4)


def test_gradcheck_q_v_h_and_parameters():
    f = bea.compile_torch("inverse_modified_lagrangian", "trapezoidal", 2)
    lin = torch.nn.Linear(3, 1).double()

    def L(q, v):
        return 0.5 * (v * v).sum(-1) * (1.5 + torch.tanh(lin(q)).squeeze(-1)) - (q * q).sum(-1)

    q = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    v = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    h = torch.tensor(0.2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda q, v, h: f(L, q, v, h), (q, v, h))
    f(L, q, v, 0.2).sum().backward()
    assert lin.weight.grad is not None and torch.isfinite(lin.weight.grad).all() and lin.weight.grad.abs().sum() > 0


def test_energy_of_the_dimension_free_series():
    f = bea.compile_torch("modified_lagrangian", "midpoint", 4)
    L = _lagrangian(6)
    H = bea.energy(lambda q, v: f(L, q, v, 0.05))
    q = torch.randn(5, 6, dtype=torch.float64)
    v = torch.randn(5, 6, dtype=torch.float64)
    H0 = bea.energy(L)(q, v)
    assert H(q, v).shape == (5,)
    assert (H(q, v) - H0).abs().max() < 0.05  # an O(h^2) correction of an O(1) energy


def test_singular_mass_and_bad_input():
    f = bea.compile_torch("modified_lagrangian", "midpoint", 2)
    q = torch.randn(3, 2, dtype=torch.float64)
    v = torch.randn(3, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="not regular"):
        f(lambda q, v: (q * v).sum(-1) - (q * q).sum(-1), q, v, 0.1)  # M = 0
    with pytest.raises(ValueError, match="not regular"):
        f(lambda q, v: 0.5 * v[..., 0] ** 2 + torch.cos(q).sum(-1), q, v, 0.1)  # rank 1 of 2
    with pytest.raises(ValueError, match="not regular"):  # n = 1: M = v^2 = 1e-200 against L_q ~ 1
        f(lambda q, v: v[..., 0] ** 4 / 12 + torch.cos(q[..., 0]), q[:, :1], torch.full_like(q[:, :1], 1e-100), 0.1)
    with pytest.raises(TypeError, match="h must be"):
        f(lambda q, v: (v * v).sum(-1), q, v, "0.1")
    with pytest.raises(ValueError, match="broadcast"):
        f(lambda q, v: (v * v).sum(-1), q, v, torch.full((3, 2), 0.1, dtype=torch.float64))
    with pytest.raises(ValueError, match="same shape"):
        f(lambda q, v: (v * v).sum(-1), q, v[:, :1], 0.1)


def test_dimension_free_cache_is_data_keyed_without_n(tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("BEA_CACHE_DIR", str(tmp_path))
    f = bea.compile_torch("modified_lagrangian", "trapezoidal", 2)
    files = [p for p in tmp_path.iterdir() if p.name != "secret.key" and not p.name.startswith(".")]
    assert len(files) == 1
    record = json.loads(files[0].read_bytes().partition(b"\n")[2])
    assert record["key"]["dim"] == "any" and "source" not in json.dumps(record)
    L = _lagrangian(3)
    q, v = torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 3, dtype=torch.float64)
    g = bea.compile_torch("modified_lagrangian", "trapezoidal", 2)  # from the cache
    assert torch.equal(f(L, q, v, 0.1), g(L, q, v, 0.1))
    assert bea.compile_torch("modified_lagrangian", "trapezoidal", 2)(_lagrangian(1), q[:, :1], v[:, :1], 0.1).shape == (2,)


def test_invalid_dimension_free_entry_with_valid_hmac_is_rederived(tmp_path, monkeypatch):
    """An authenticated entry whose trees do not validate (here: a non-canonical tree, and a leaf code that
    cannot occur in a result) is never used: the series is derived again, with a CacheWarning."""
    from bea import cache
    from bea.api import _cache_key

    monkeypatch.setenv("BEA_CACHE_DIR", str(tmp_path))
    sch = bea.get_scheme("midpoint")
    good = bea.modified_lagrangian("midpoint", 2).raw
    key = _cache_key("modified_lagrangian", sch, 2, "any")
    # a jet leaf (never in a result), children out of canonical order, a leaf without its code
    for bad_tree in ([2, [], [[0, 1], [0, 2]]], [2, [[1, 0, [], []], [0, 1]], []], [2, [[0]], []]):
        body = {"trees": {"trees": [bad_tree], "coefficients": {"0": [[[0], "1/1"]], "1": [], "2": []}, "symmetric": True,
                          "order": 2, "kind": "modified_lagrangian"}}
        cache.save(key, body, part="trees")
        with pytest.warns(cache.CacheWarning):
            s = bea.modified_lagrangian("midpoint", 2)
        assert s.n_terms == {0: 1, 2: 2} and set(map(str, s.coefficients.values())) == set(
            map(str, bea.FreeSeries(good, sch).coefficients.values()))
