"""The shortcuts that make the dimension-free stage derivations fast (issue 26, benchmarks/RESULTS_derive.md table 1c),
each against the long way on the same derivation, exactly (tree polynomials with rational or field coefficients):

* **half the interior precision** -- the stationary value to h^T from interior points known to h^p,
  p = interior_precision(T) (second-order envelope bound), equals the one from points known to h^T; with one power
  less it differs, at h^(2p - 1) (so the test sees a bound set too low);
* **the operator in the jets** -- the total derivative along an arbitrary curve (bea.free.curve) followed by the jet
  substitution q^(k) = D_F^(k-2) F equals D_F after the substitution;
* **one stationary value for the residual of a symmetric scheme** -- L_D(q(t-h), q(t) + h e) is
  L_D(q(t) + h e, q(t+h)) with h -> -h;
* **field arithmetic fast paths** -- FieldElement against bea.radicals.mul_coords and the canonical form.
"""

import random
from fractions import Fraction

import pytest

import bea
from bea.errors import BeaValueError
from bea.field_element import FieldElement, coefficient
from bea.free.curve import CurveDerivative
from bea.free.derive import FreeDerivation
from bea.free.euler_lagrange import equation_from_lagrangian
from bea.free.stages import interior_precision
from bea.free.trees import A
from bea.free.vectors import VecSeries
from bea.hseries import HSeries
from bea.poly import Q
from bea.radicals import mul_coords, radical

G2 = bea.get_scheme("galerkin2")
TJ = bea.get_scheme("triple_jump")


def _coeffs(S: HSeries, top: int):
    return [S.c[k] if k < len(S.c) else {} for k in range(top + 1)]


def _value_with(solver, scheme, a, b, p: int, T: int) -> HSeries:
    """The stage action at the interior points solved to h^p only, claimed to h^T (what the shortcut does)."""
    P = solver.interior(a, b, p)
    Qs = solver._points(a, b, P, T)
    return solver._fill(scheme.stage_action(solver._L, a, Qs, b, solver.h), T)


@pytest.mark.parametrize("scheme,T", [(G2, 6), (TJ, 4)], ids=["galerkin2-h6", "triple_jump-h4"])
def test_stationary_value_from_half_the_interior_precision(scheme, T):
    """Phi(Q* + d) - Phi(Q*) = O(h^(2p+1)) for d = O(h^(p+1)): the value to h^T needs the points to h^p,
    p = interior_precision(T) (3 for h^6, 2 for h^4). The bound is tight: points known only to h^1 (their h^2
    correction left out) make the value wrong from h^3 on."""
    p = interior_precision(T)
    assert (interior_precision(4), interior_precision(6), interior_precision(7), interior_precision(8)) == (2, 3, 4, 4)
    solver = FreeDerivation(scheme)._stages
    a, b = VecSeries.taylor(-Fraction(1, 2), T), VecSeries.taylor(Fraction(1, 2), T)
    got = solver.stationary_value(a, b)
    full = _value_with(solver, scheme, a, b, T, T)
    assert got.order == full.order == T and _coeffs(got, T) == _coeffs(full, T)
    assert any(full.c[k] for k in range(1, T + 1))  # corrections beyond L itself are compared
    assert _coeffs(_value_with(solver, scheme, a, b, p, T), T) == _coeffs(full, T)
    short = _value_with(solver, scheme, a, b, 1, T)
    assert next(k for k in range(T + 1) if _coeffs(short, T)[k] != _coeffs(full, T)[k]) == 3


def test_curve_derivative_then_jets_is_the_flow_derivative():
    """D on the jets of an arbitrary curve, then q^(k) = D_F^(k-2) F, equals D_F on the substituted series: galerkin2's
    meshed Lagrangian to h^4 (its interior corrections hold M^-1 and the acceleration A)."""
    d = FreeDerivation(G2)
    alg, f = d.alg, d.forest
    lam = d._mesh(4).truncate(4)
    assert any(A in f.leaves[x] for p in lam.c for m in p for x in m)
    F = d.modified_equation(4)
    D = CurveDerivative(alg)
    first = D.series(lam, 4)
    lhs = alg.normalize(alg.substitute_jets(first, d._jet_values(F, 4, [first]), 4))
    on_shell = alg.normalize(alg.substitute_jets(lam, d._jet_values(F, 4, [lam]), 4))
    rhs = alg.derivative(on_shell, F, 4)
    top = min(lhs.order, rhs.order)
    assert top >= 3 and _coeffs(lhs, top) == _coeffs(rhs, top)
    assert all(lhs.c[k] for k in (0, 2))  # D L and the h^2 term: not an empty comparison


@pytest.mark.parametrize("scheme", [G2, TJ, bea.Galerkin(2, ["1/3", 1], ["3/4", "1/4"])],
                         ids=["galerkin2", "triple_jump", "radau-galerkin2"])
def test_residual_behind_is_ahead_reflected(scheme):
    """For a symmetric scheme the first variation of L_D(q(t-h), q(t) + h e) is that of L_D(q(t) + h e, q(t+h)) with
    h -> -h, exactly; a non-symmetric one (Radau-type Galerkin) is not, so both are solved there."""
    K = 4
    solver = FreeDerivation(scheme)._stages
    q0 = VecSeries.taylor(0, K, eps_power=1)
    ahead = solver.stationary_value(q0, VecSeries.taylor(1, K))
    behind = solver.stationary_value(VecSeries.taylor(-1, K), q0)
    reflected = [{m: (-c if k % 2 else c) for m, c in p.items()} for k, p in enumerate(_coeffs(ahead, K))]
    assert (_coeffs(behind, K) == reflected) == bool(scheme.symmetric)
    assert any(ahead.c[k] for k in range(1, K + 1, 2))  # odd powers present: the reflection is tested


def test_field_element_fast_paths_agree_with_the_general_arithmetic():
    """Sums and products with ints, rationals and elements of the same field (the unrolled degrees 2 and 3) equal
    bea.radicals.mul_coords; results whose irrational coordinates cancel are rationals of the engine's type; a second
    field is refused."""
    rng = random.Random(3)
    for c, d in ((5, 2), (2, 3), (3, 4)):
        theta = coefficient(radical(c, d))
        for _ in range(20):
            x = sum((Q(rng.randint(-9, 9), rng.randint(1, 9)) * theta**k for k in range(d)), Q(rng.randint(1, 5)))
            y = sum((Q(rng.randint(-9, 9), rng.randint(1, 9)) * theta**k for k in range(d)), Q(1, 7))
            if not (isinstance(x, FieldElement) and isinstance(y, FieldElement)):
                continue
            want = mul_coords(x.field, x.coeffs, y.coeffs)
            got = x * y
            assert (list(got.coeffs) if isinstance(got, FieldElement) else [got] + [0] * (d - 1)) == want
            assert (x + 3) - x == 3 and (x * Q(2, 3)) / Q(2, 3) == x and x * 0 == 0
            s = x + y - y
            assert s == x and isinstance(s, FieldElement)
            assert type(x - x) is type(Q(0)) and x - x == 0 and type((x * y) / y - x) is type(Q(0))
    s5 = coefficient(radical(5))
    assert type(s5 * s5) is type(Q(5)) and s5 * s5 == 5
    with pytest.raises(BeaValueError):
        s5 * coefficient(radical(2, 3))
    with pytest.raises(BeaValueError):
        s5 + coefficient(radical(3))


def test_equation_from_the_modified_lagrangian():
    """F to h^4 from the Euler-Lagrange equations of galerkin2's modified Lagrangian to h^4 (first correction h^4,
    so the products of corrections start at h^8) equals the modified equation from the discrete Euler-Lagrange
    residual, term by term (1342 trees at h^4); at or above twice the first correction the shortcut declines."""
    d = FreeDerivation(G2)
    lmod = d.modified_lagrangian(4)
    F0 = d.modified_equation(0)
    got = equation_from_lagrangian(d.alg, lmod, F0, 4)
    ref = FreeDerivation(G2)
    want = ref.modified_equation(4)
    canon = lambda S, T: [sorted((sorted(repr(T[x]) for x in m), repr(c)) for m, c in p.items()) for p in _coeffs(S, 4)]  # noqa: E731
    assert canon(got, d.forest.trees) == canon(want, ref.forest.trees) and len(want.c[4]) == 1342
    assert equation_from_lagrangian(d.alg, HSeries(lmod.c[:1] + [lmod.c[0], {}], 2), F0, 2) is None  # c = 1, r = 2
