"""Stage schemes in the dimension-free engine (bea.free.stages, issue 26 item 2): the interior points solved
on trees, so that one derivation of galerkin2 holds for every n.

Oracles, all exact (rational arithmetic) except the torch comparison:

* **symbolic** -- ``to_components(free, 1)`` equals the generic component derivation (bea.stage_series on
  component series) term by term;
* **evaluation** -- on concrete polynomial Lagrangians with rational coefficients at n = 1, 2, 3 (Henon-Heiles;
  coupled oscillators with non-diagonal stiffness; a constant non-diagonal mass with v^T B q coupling and cubic
  and quartic potentials), the component derivation *of that L* at rational points equals the trees contracted
  exactly at the same points (tests/exact_trees.py);
* **closed form** -- on coupled oscillators (n = 3, non-diagonal stiffness) the modified frequencies of the trees'
  modified Lagrangian (default) and modified equation (-m slow: -sum_j a_j h^(2j) K^(j+1) q) are those of the
  scheme's exact one-step map (tests/test_stages.py);
* **torch, n = 50** -- the dimension-free torch function on L(q, v) = sum_i l((Rq)_i, (Rv)_i) with a random
  orthogonal R (so that every tree couples all coordinates) equals sum_i of the n = 1 component function at
  ((Rq)_i, (Rv)_i): the series commutes with orthogonal changes of coordinates and with sums of decoupled
  systems. Tolerance 1e-12 relative (float64 evaluations of a few thousand operations of O(1) values).
"""

from fractions import Fraction

import pytest
import sympy
import torch

import bea
from bea.derive import Derivation, derive_raw
from bea.errors import UnsupportedSchemeError
from bea.free.components import to_components
from bea.free.derive import FreeDerivation, derive_free
from exact_trees import ExactTrees
from integrators import systems
from test_stages import frequency_series

G2 = bea.galerkin_lobatto(2)
LAGRANGIANS = ("modified_lagrangian", "inverse_modified_lagrangian")
_FREE = {}


def _free(scheme):
    """One derivation per scheme for the whole module (the kinds share the interior expansion)."""
    key = repr(scheme)
    if key not in _FREE:
        _FREE[key] = FreeDerivation(scheme)
    return _FREE[key]


def _nonzero(c):
    return any(c) if isinstance(c, list) else bool(c)


def _free_equals_components_n1(scheme, order):
    """Assert, for each Lagrangian kind, that the trees to ``h^order`` contracted at n = 1 equal the generic
    component series coefficient by coefficient; the free results, one per kind."""
    comp = Derivation(scheme, 1)
    results = []
    for kind in LAGRANGIANS:
        fr = derive_free(scheme, kind, order, _free(scheme))
        cr = derive_raw(scheme, kind, order, 1, comp)
        ex = to_components(fr, 1, comp.jets)
        for k in range(order + 1):
            assert ex.coeffs[k] == cr.coeffs[k], f"{scheme!r} {kind}: h^{k} differs"
        results.append(fr)
    return results


def test_galerkin2_symbolic_n1():
    """The trees at n = 1 are the generic component series, exactly; the first correction is at h^4 = h^(2s)."""
    for fr in _free_equals_components_n1(G2, 4):
        assert all(not fr.coeffs[k] for k in (1, 2, 3)) and fr.coeffs[4]


@pytest.mark.parametrize("scheme", [bea.Composition(["1/3", "2/3"]), bea.Galerkin(2, ["1/3", 1], ["3/4", "1/4"])],
                         ids=["composition-1/3-2/3", "radau-galerkin2"])
def test_non_symmetric_stage_schemes_symbolic_n1(scheme):
    """A non-symmetric scheme keeps its odd powers: the trees to h^3 at n = 1 are the component series, exactly,
    for an unequal composition of the midpoint rule (order 2) and a Radau-type Galerkin rule (order 3)."""
    assert not scheme.symmetric
    for fr in _free_equals_components_n1(scheme, 3):
        assert fr.coeffs[scheme.method_order] and not fr.symmetric  # the first correction, odd or even, is present


def _polynomial(n):
    """L = v^T M v / 2 + v^T B q - q^T P q / 2 - cubic - quartic with constant non-diagonal M and non-symmetric B."""
    q, v = sympy.symbols(f"q1:{n + 1}"), sympy.symbols(f"v1:{n + 1}")
    M = sympy.Matrix(n, n, lambda i, j: 2 if i == j else sympy.Rational(1, 3 + i + j))
    B = sympy.Matrix(n, n, lambda i, j: sympy.Rational(i - 2 * j + 1, 4))
    P = sympy.Matrix(n, n, lambda i, j: 1 if i == j else sympy.Rational(1, 5))
    qq, vv = sympy.Matrix(q), sympy.Matrix(v)
    L = (vv.T * M * vv / 2 + vv.T * B * qq - qq.T * P * qq / 2)[0] - q[0] ** 3 / 3 + q[-1] * q[0] ** 2 / 7 - q[0] ** 4 / 5
    return sympy.expand(L), q, v


def _system(name):
    if name == "polynomial-n1":
        return _polynomial(1)
    if name == "polynomial-n3":
        return _polynomial(3)
    s = systems.henon_heiles() if name == "henon_heiles" else systems.coupled_oscillators(3, coupling=sympy.Rational(1, 3))
    return s.expr, s.q, s.v


POINTS = [("2/5", "-1/3", "1/7", "3/4", "-5/6", "1/2"), ("-3/4", "2/9", "1/5", "-1/3", "4/7", "5/8")]


@pytest.mark.parametrize("name", ["polynomial-n1", "henon_heiles", "coupled_oscillators-n3", "polynomial-n3"])
@pytest.mark.parametrize("kind", LAGRANGIANS)
def test_galerkin2_by_evaluation(name, kind):
    """The dimension-free galerkin2 series to h^4, contracted on a concrete L at n = 1, 2, 3, equals the component
    derivation of that L (bea.concrete's fast path, which shares no formula with the trees), exactly."""
    L, q, v = _system(name)
    n = len(q)
    fr = derive_free(G2, kind, 4, _free(G2))
    series = getattr(bea, kind)(G2, 4, lagrangian=L, q=q, v=v, cache=False)
    for pt in POINTS:
        q0, v0 = [Fraction(x) for x in pt[:n]], [Fraction(x) for x in pt[3:3 + n]]
        at = dict(zip((*q, *v), [sympy.Rational(x.numerator, x.denominator) for x in (*q0, *v0)]))
        got = ExactTrees(L, q, v, q0, v0).coefficients(fr)
        for k in range(5):
            want = sympy.nsimplify(series.coefficient(k).xreplace(at))
            assert want == sympy.Rational(got[k].numerator, got[k].denominator), f"{name} {kind} at {pt}: h^{k} differs"
        assert _nonzero(got[4])


def test_closed_form_modified_lagrangian_coupled_oscillators():
    """Coupled oscillators, n = 3, non-diagonal stiffness K. By scaling (h -> c h, K -> K / c^2) the dimension-free
    modified Lagrangian's h^4 term is a v^T K^2 v / 2 - b q^T K^3 q / 2; a and b are read off at (q0, 0) and (0, v0),
    and the form is confirmed at a third point. Per mode of frequency w it is (1 + a w^4 h^4)(v^2 - W^2 q^2)/2 with
    W^2 = w^2 (1 + (b - a) w^4 h^4 + ...), so b - a must be the closed form's 1/1440, exactly (the h^2 term is zero)."""
    s = systems.coupled_oscillators(3, coupling=sympy.Rational(1, 3))
    K = -sympy.hessian(s.expr, s.q)
    assert frequency_series(G2, 2) == [1, 0, sympy.Rational(1, 1440)]
    fr = derive_free(G2, "modified_lagrangian", 4, _free(G2))
    q0, v0 = [Fraction(2, 5), Fraction(-1, 3), Fraction(1, 7)], [Fraction(3, 4), Fraction(-5, 6), Fraction(1, 2)]
    z = [Fraction(0)] * 3

    def at(qa, va):
        got = ExactTrees(s.expr, s.q, s.v, qa, va).coefficients(fr)
        assert got[1] == got[2] == got[3] == 0
        return sympy.Rational(got[4].numerator, got[4].denominator)

    col = lambda x: sympy.Matrix([sympy.Rational(y.numerator, y.denominator) for y in x])  # noqa: E731
    b = -2 * at(q0, z) / (col(q0).T * K**3 * col(q0))[0]
    a = 2 * at(z, v0) / (col(v0).T * K**2 * col(v0))[0]
    assert b - a == sympy.Rational(1, 1440)
    assert at(q0, v0) == a * (col(v0).T * K**2 * col(v0))[0] / 2 - b * (col(q0).T * K**3 * col(q0))[0] / 2


@pytest.mark.slow
def test_closed_form_coupled_oscillators_through_trees():
    """Coupled oscillators, n = 3, non-diagonal stiffness K: the dimension-free modified equation of galerkin2
    contracted exactly at a rational point is -sum_j a_j h^(2j) K^(j+1) q, with (W h)^2 = sum_j a_j (w h)^(2j+2)
    from the exact one-step map (a = 1, 0, 1/1440: the first correction at h^4)."""
    s = systems.coupled_oscillators(3, coupling=sympy.Rational(1, 3))
    K = -sympy.hessian(s.expr, s.q)
    a = frequency_series(G2, 2)
    assert a == [1, 0, sympy.Rational(1, 1440)]
    fr = derive_free(G2, "modified_equation", 4, _free(G2))
    q0, v0 = [Fraction(2, 5), Fraction(-1, 3), Fraction(1, 7)], [Fraction(3, 4), Fraction(-5, 6), Fraction(1, 2)]
    got = ExactTrees(s.expr, s.q, s.v, q0, v0).coefficients(fr)
    qv = sympy.Matrix([sympy.Rational(x.numerator, x.denominator) for x in q0])
    for k in range(5):
        want = -a[k // 2] * K ** (k // 2 + 1) * qv if k % 2 == 0 else sympy.zeros(3, 1)
        assert [sympy.Rational(x.numerator, x.denominator) for x in got[k]] == list(want), f"h^{k}"


def _rotated(n, seed=0):
    """L(q, v) = sum_i l((Rq)_i, (Rv)_i) with a random orthogonal R, l non-separable with a position-dependent mass."""
    g = torch.Generator().manual_seed(seed)
    R, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))

    def ell(x, y):
        return 0.5 * (1 + 0.2 * torch.cos(x)) * y * y - (1 - torch.cos(x)) + 0.1 * x * y

    return (lambda q, v: ell(q @ R.T, v @ R.T).sum(-1)), R, ell


def _rotated_states(n, seed):
    """_rotated's L, R, l and three random states (q, v) at n, h = 0.3: the n = 50 evaluations' common set-up."""
    L, R, ell = _rotated(n)
    g = torch.Generator().manual_seed(seed)
    q = 0.5 * torch.randn(3, n, generator=g, dtype=torch.float64)
    v = 0.5 * torch.randn(3, n, generator=g, dtype=torch.float64)
    return L, R, ell, q, v, 0.3


@pytest.mark.parametrize("kind", LAGRANGIANS)
def test_torch_n50(kind):
    """The dimension-free galerkin2 series, derived once, evaluated in torch at n = 50 (module docstring)."""
    n = 50
    L, R, ell, q, v, h = _rotated_states(n, 1)
    free = bea.series_function(kind, "galerkin2", 4, n, cache=False)  # the dimension-free function at n >= 2
    one = bea.series_function(kind, "galerkin2", 4, 1, cache=False)  # the component formula at n = 1
    got = free(L, q, v, h).detach()
    x, y = q @ R.T, v @ R.T
    want = one(lambda a, b: ell(a, b).sum(-1), x.reshape(-1, 1), y.reshape(-1, 1), h).reshape(3, n).sum(-1).detach()
    assert got.shape == (3,)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12 * float(want.abs().max()))
    # the h^4 correction is resolved by this comparison: it is far above the tolerance
    plain = L(q, v).detach()
    assert float((got - plain).abs().min()) > 1e-6 * float(plain.abs().max())


def test_exact_constants_supported_floats_refused():
    """Rational and radical constants are exact, so the dimension-free engine takes them (galerkin3's sqrt 5 and the
    triple jump's 2^(1/3) go into the tree coefficients: tests/test_stages_free_radical.py); constants known only
    as floats are refused, typed, by every exact engine (n=... too, so its message points to torch)."""
    from bea.free.stages import supported

    boole = bea.Galerkin(3, [0, "1/4", "1/2", "3/4", 1], ["7/90", "32/90", "12/90", "32/90", "7/90"])
    for sch in (G2, boole, bea.get_scheme("galerkin3"), bea.get_scheme("triple_jump")):
        assert supported(sch)
    r = 0.5 / 5 ** 0.5
    floats = bea.Galerkin(3, [0, (0.5 - r, "irrational"), (0.5 + r, "irrational"), 1], ["1/12", "5/12", "5/12", "1/12"])
    assert not supported(floats)
    for n in (None, 1):
        with pytest.raises(UnsupportedSchemeError):
            bea.modified_lagrangian(floats, 4, n=n, cache=False)


@pytest.mark.slow
def test_galerkin2_to_h6_by_evaluation():
    """h^6 (2s + 2): about 35 CPU s to derive, then the same exact comparison on Henon-Heiles and n = 3."""
    for name in ("henon_heiles", "polynomial-n3"):
        L, q, v = _system(name)
        n = len(q)
        for kind in LAGRANGIANS:
            fr = derive_free(G2, kind, 6, _free(G2))
            series = getattr(bea, kind)(G2, 6, lagrangian=L, q=q, v=v, cache=False)
            pt = POINTS[0]
            q0, v0 = [Fraction(x) for x in pt[:n]], [Fraction(x) for x in pt[3:3 + n]]
            at = dict(zip((*q, *v), [sympy.Rational(x.numerator, x.denominator) for x in (*q0, *v0)]))
            got = ExactTrees(L, q, v, q0, v0).coefficients(fr)
            for k in range(7):
                assert sympy.nsimplify(series.coefficient(k).xreplace(at)) == sympy.Rational(got[k].numerator, got[k].denominator)
            assert _nonzero(got[6])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["henon_heiles", "polynomial-n3"])
def test_galerkin2_modified_equation_by_evaluation(name):
    """The dimension-free modified equation to h^4 (1,342 trees at h^4) on nonlinear L, n = 2 and 3, exactly."""
    L, q, v = _system(name)
    n = len(q)
    fr = derive_free(G2, "modified_equation", 4, _free(G2))
    series = bea.modified_equation(G2, 4, lagrangian=L, q=q, v=v, cache=False)
    pt = POINTS[1]
    q0, v0 = [Fraction(x) for x in pt[:n]], [Fraction(x) for x in pt[3:3 + n]]
    at = dict(zip((*q, *v), [sympy.Rational(x.numerator, x.denominator) for x in (*q0, *v0)]))
    got = ExactTrees(L, q, v, q0, v0).coefficients(fr)
    for k in range(5):
        want = [sympy.nsimplify(e.xreplace(at)) for e in sympy.Matrix(series.coefficient(k))]
        assert want == [sympy.Rational(x.numerator, x.denominator) for x in got[k]], f"{name}: h^{k} differs"
    assert _nonzero(got[4])


class _Started(Exception):
    """Raised by a stub engine: the request got past the cost check."""


def _started(*a, **k):
    raise _Started


def test_cost_guard_uses_the_stage_scheme_table(monkeypatch):
    """The free engine's stage-scheme cost is its own (RESULTS_derive.md tables 1b, 1c), not the midpoint rule's:
    galerkin2 to h^8 (not measured; a trial grew past 2.8 GB) is refused up front, typed, without deriving."""
    from bea import api, cost

    monkeypatch.setattr(api, "derive_free", _started)
    assert cost.estimate("modified_lagrangian", 6, None, G2) == (2.47, "measured")  # table 1c; 1.48 for the midpoint rule
    assert cost.estimate("inverse_modified_lagrangian", 6, None, "galerkin2") == (2.47, "measured")  # the CLI's name
    assert cost.estimate("modified_lagrangian", 6, None) == (1.48, "measured")  # the midpoint table is unchanged
    assert cost.estimate("modified_lagrangian", 8, None, G2)[0] is None
    for kind in ("modified_lagrangian", "inverse_modified_lagrangian", "modified_equation"):
        with pytest.raises(cost.TooSlowError):
            getattr(bea, kind)("galerkin2", 8, cache=False)
    with pytest.raises(_Started):  # allow_slow goes ahead; h^6 is within the limit
        bea.modified_lagrangian("galerkin2", 8, cache=False, allow_slow=True)
    with pytest.raises(_Started):
        bea.modified_lagrangian("galerkin2", 6, cache=False)
    with pytest.raises(_Started):  # galerkin3 to h^8: 3.27 GB since session 9 (4.83 GB and refused before; table 1c)
        bea.modified_lagrangian("galerkin3", 8, cache=False)
    with pytest.raises(cost.TooSlowError):  # its modified equation to h^8: past 4 GB, not measured
        bea.modified_equation("galerkin3", 8, cache=False)


def test_series_function_checks_n_for_stage_schemes():
    """n must be a positive integer on every route (n > MAX_DIM is served by the dimension-free function,
    test_series_function_routes)."""
    from bea.errors import BeaTypeError, BeaValueError

    for name in ("galerkin2", "galerkin3", "midpoint"):
        for n in (0, -3):
            with pytest.raises(BeaValueError):
                bea.series_function("modified_lagrangian", name, 4, n=n, cache=False)
        for n in (2.0, "2", True):
            with pytest.raises(BeaTypeError):
                bea.series_function("modified_lagrangian", name, 4, n=n, cache=False)


def test_series_function_routes(monkeypatch):
    """Which engine each scheme takes: every exact stage scheme (galerkin2, and galerkin3 and the triple jump with
    their radicals) and the midpoint rule go dimension-free at n >= 2, above MAX_DIM too; n = 1 is componentwise."""
    from bea import api

    calls = []
    monkeypatch.setattr(api, "compile_torch", lambda kind, scheme, order, n=None, **k: calls.append((scheme, n)))
    names = ("galerkin3", "triple_jump", "galerkin2", "midpoint")
    for name in names:
        for n in (1, 2, 3, api.MAX_DIM + 1):
            api.series_function("modified_lagrangian", name, 4, n=n)
    want = {(s, 1): 1 for s in names} | {(s, n): None for s in names for n in (2, 3, api.MAX_DIM + 1)}
    got = {}
    it = iter(calls)
    for name in names:
        for n in (1, 2, 3, api.MAX_DIM + 1):
            got[(name, n)] = next(it)[1]
    assert got == want
