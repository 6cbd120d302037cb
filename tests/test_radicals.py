"""Exact numbers in Q(c^(1/d)) (bea.radicals) and their path through the series engine: the constants of
galerkin3 (Q(sqrt 5)) and the triple jump (Q(2^(1/3))) are exact, printed as radicals, cached and compiled."""

import math
from fractions import Fraction

import pytest
import sympy
import torch

import bea
from bea.errors import BeaTypeError, BeaValueError
from bea.radicals import RadicalNumber, from_sympy, radical
from bea.schemes import Exact


def test_field_arithmetic_is_exact():
    r = radical(5)
    node = (5 - r) / 10
    assert isinstance(node, RadicalNumber) and node.coeffs == (Fraction(1, 2), Fraction(-1, 10))
    assert float(node) == (5 - math.sqrt(5)) / 10  # the float is correctly rounded (50 digits)
    zero = node * node - node + Fraction(1, 5)  # the Lobatto node is a root of x^2 - x + 1/5
    assert isinstance(zero, Exact) and zero.exact == 0
    c = radical(2, 3)
    g1 = 1 / (2 - c)
    assert g1.coeffs == (Fraction(2, 3), Fraction(1, 3), Fraction(1, 6))  # (4 + 2c + c^2)/6
    assert ((2 - c) * g1).exact == 1 and (c * c * c).exact == 2
    assert abs(float(g1) - 1 / (2 - 2 ** (1 / 3))) < 3e-16


def test_from_sympy_and_back():
    node = from_sympy((5 - sympy.sqrt(5)) / 10)
    assert node == (5 - radical(5)) / 10
    assert sympy.simplify(node._sympy_() - (5 - sympy.sqrt(5)) / 10) == 0
    assert from_sympy(1 / (2 - sympy.root(2, 3))) == 1 / (2 - radical(2, 3))
    assert isinstance(from_sympy(sympy.Rational(1, 3)), Exact)


def test_bad_radicals_are_refused():
    with pytest.raises(BeaValueError):
        radical(4)  # sqrt(4) = 2: not a field of degree 2
    with pytest.raises(BeaValueError):
        radical(-2, 3)
    with pytest.raises(BeaTypeError):
        radical(2, 1)
    with pytest.raises(BeaValueError):
        radical(2) + radical(3)  # two different radicals
    with pytest.raises(BeaValueError):
        from_sympy(sympy.sqrt(2) + sympy.sqrt(3))
    with pytest.raises(BeaTypeError):
        bea.poly.to_rational(radical(5))  # never silently its binary float


def test_user_galerkin_with_sympy_nodes_matches_builtin():
    r5 = sympy.sqrt(5)
    mine = bea.Galerkin(3, [0, (5 - r5) / 10, (5 + r5) / 10, 1], ["1/12", "5/12", "5/12", "1/12"])
    assert mine.radical_field == (Fraction(5), 2) and mine.method_order == 6 and mine.symmetric
    assert mine.nodes == bea.galerkin_lobatto(3).nodes


def test_triple_jump_series_prints_radicals_and_compiles():
    """h^4 coefficient of the triple jump's modified equation for L = v^2/2 - q^2/2 (n = 1, about 2 s): exactly
    (2/45 + 2^(2/3)/36 + 5 2^(1/3)/144) q, shown with radicals, and the compiled torch function agrees to 1e-15."""
    q, v = sympy.symbols("q v")
    me = bea.modified_equation("triple_jump", 4, lagrangian=v**2 / 2 - q**2 / 2, q=[q], v=[v], cache=False)
    c4 = me.coefficient(4)[0]
    want = (sympy.Rational(2, 45) + sympy.root(2, 3) ** 2 / 36 + 5 * sympy.root(2, 3) / 144) * q
    assert sympy.expand(c4 - want) == 0
    assert "2^{\\frac{1}{3}}" in sympy.latex(c4) or "\\sqrt[3]{2}" in sympy.latex(c4)
    from bea.coeff_storage import decode_coeffs, encode_coeffs

    raw = me._raw  # the cache's JSON form carries the radical as a variable of the table
    jets, coeffs = decode_coeffs(1, encode_coeffs(raw.jets, raw.coeffs), vector=True, order=4)
    assert coeffs == raw.coeffs and jets.kind == raw.jets.kind
    f = me.to_torch()
    h = 0.1
    got = f(torch.tensor([[0.3]], dtype=torch.float64), torch.tensor([[0.2]], dtype=torch.float64), h)
    assert float(got.reshape(-1)[0]) == pytest.approx(-0.3 + h**4 * float(want.subs(q, 0.3)), abs=1e-15)


@pytest.mark.slow
def test_radical_results_round_trip_through_the_cache():
    """The generic n = 1 modified equation of the triple jump to h^2 (about 13 s), stored and read back: the
    cache entry carries the radical as a variable of its table (bea.coeff_storage) and decodes without a warning."""
    first = bea.modified_equation("triple_jump", 2, n=1, cache=True)
    again = bea.modified_equation("triple_jump", 2, n=1, cache=True)
    assert sympy.simplify(first.coefficient(0)[0] - again.coefficient(0)[0]) == 0
    assert first.coefficient(2)[0] == 0 == again.coefficient(2)[0]  # order 4: nothing at h^2


def test_torch_sees_the_float_values():
    """The exact constants act as their floats in torch: galerkin3 and the same rule with float nodes give the same
    discrete Lagrangian to rounding."""
    r = math.sqrt(5) / 10
    floats = bea.Galerkin(3, [0, (0.5 - r, "irrational"), (0.5 + r, "irrational"), 1], ["1/12", "5/12", "5/12", "1/12"])
    L = lambda x, y: (y**2 / 2 + torch.cos(x)).sum(-1)  # noqa: E731
    a = torch.tensor([[0.3, -0.2]], dtype=torch.float64)
    b = torch.tensor([[0.45, -0.1]], dtype=torch.float64)
    exact_ld, float_ld = bea.galerkin_lobatto(3)(L, a, b, 0.2), floats(L, a, b, 0.2)
    assert abs(float(exact_ld) - float(float_ld)) <= 1e-15 * abs(float(float_ld))
    tj = bea.triple_jump()
    assert tj.gammas[0] == 1 / (2 - radical(2, 3)) and abs(float(tj(L, a, b, 0.2))) > 0


def test_equality_with_field_elements_is_symmetric():
    """A RadicalNumber and the FieldElement of the same value are equal both ways, with equal hashes (a dict or set
    sees one key); different values or fields are unequal both ways."""
    from bea.field_element import coefficient

    x = radical(5) / 10 + Fraction(1, 2)
    e = coefficient(x)
    assert x == e and e == x and hash(x) == hash(e) and len({x, e}) == 1
    y = coefficient(radical(5))
    assert x != y and y != x
    z = coefficient(radical(2))
    assert x != z and z != x


def test_component_series_times_radical_without_its_field_is_refused():
    """A component series whose rules have no variable for theta cannot hold a radical constant: typed error, not a
    FieldElement slipped into a component polynomial; the dimension-free engine's plain series takes it exactly."""
    from bea.errors import UnsupportedSchemeError
    from bea.field_element import FieldElement
    from bea.hseries import EXACT, HSeries
    from bea.jets import Jets

    s = HSeries.h_power(1, 1, EXACT, Jets(2).nil)
    for c in (radical(5), radical(5) * 0 + radical(5) / 3):
        with pytest.raises(UnsupportedSchemeError):
            s * c
        with pytest.raises(UnsupportedSchemeError):
            c * s
    free = HSeries.h_power(1) * radical(5)  # PLAIN rules: theta goes into the coefficient
    (coef,) = free.c[1].values()
    assert isinstance(coef, FieldElement) and coef == radical(5)


def test_perfect_powers_are_found_exactly():
    """c^(1/d) with c a perfect power beyond a float's precision is rational: refused as such, not taken as a
    degree-d field (a float root is off by thousands at 10^30 and overflows past 10^308)."""
    for c, d in (((10**30 + 12345) ** 2, 2), ((10**40 + 3) ** 3, 3), (Fraction(7**300, 11**200), 100)):
        with pytest.raises(BeaValueError):
            radical(c, d)
    assert float(radical(10**400 + 1)) == pytest.approx(1e200, rel=1e-15)


def test_format_rational_is_the_canonical_form_both_stores_write():
    """bea.poly.format_rational writes what parse_rational reads back (lowest terms, sign on p, 0 as 0/1), for
    Fraction, int and the engine's Q alike; the component and the tree stores both use it."""
    from bea.poly import Q, format_rational, parse_rational

    for x, text in ((Fraction(-2, 4), "-1/2"), (0, "0/1"), (Q(6, 3), "2/1"), (Fraction(10**30, 7), f"{10**30}/7")):
        assert format_rational(x) == text and parse_rational(text) == x
