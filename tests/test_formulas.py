"""Closed forms: the h^2 formulas of docs/theory/modified.md and the harmonic-oscillator frequencies of
docs/theory/modified.md and docs/theory/inverse.md."""

import pytest
import sympy

import bea
from bea.series import H as h


def test_midpoint_h2_one_dimension_symbolic():
    s = bea.modified_lagrangian("midpoint", 2, n=1)
    q, v = s.q[0], s.v[0]
    L = s.lagrangian

    def d(i, j):
        return L.diff(*([q] * i + [v] * j)) if i + j else L

    expected = ((d(1, 0) - d(1, 1) * v) ** 2 / d(0, 2) - d(2, 0) * v**2) / 24
    assert sympy.simplify(s.coefficients[2] - expected) == 0
    assert set(s.coefficients) == {0, 2}


@pytest.mark.parametrize("n", [2, 3])
def test_midpoint_h2_n_dimensions(n):
    s = bea.modified_lagrangian("midpoint", 2, n=n)
    q, v, L = s.q, s.v, s.lagrangian
    M = sympy.Matrix(n, n, lambda i, j: L.diff(v[i], v[j]))
    Lqq = sympy.Matrix(n, n, lambda i, j: L.diff(q[i], q[j]))
    Lvq = sympy.Matrix(n, n, lambda i, j: L.diff(v[i], q[j]))
    Lq = sympy.Matrix([L.diff(x) for x in q])
    V = sympy.Matrix(v)
    A = M.adjugate() * (Lq - Lvq * V) / M.det()
    expected = ((A.T * M * A)[0] - (V.T * Lqq * V)[0]) / 24
    # replace the derivatives by plain symbols so that cancel() works on a rational function
    derivs = sorted((s.coefficients[2] - expected).atoms(sympy.Derivative), key=str)
    plain = {dd: sympy.Symbol(f"d{k}") for k, dd in enumerate(derivs)}
    diff = (s.coefficients[2] - expected).xreplace(plain)
    assert sympy.cancel(sympy.together(diff)) == 0


HO_CLOSED_FORMS = {
    ("modified_lagrangian", "midpoint"): lambda w: (2 / h * sympy.atan(w * h / 2)) ** 2,
    ("modified_lagrangian", "trapezoidal"): lambda w: (2 / h * sympy.asin(w * h / 2)) ** 2,
    ("inverse_modified_lagrangian", "midpoint"): lambda w: (2 / h * sympy.tan(w * h / 2)) ** 2,
    ("inverse_modified_lagrangian", "trapezoidal"): lambda w: (2 / h * sympy.sin(w * h / 2)) ** 2,
}


def _series(expr, order):
    return sympy.expand(sympy.series(expr, h, 0, order + 1).removeO())


def _frequency_ratio(series, q, v):
    """Ratio of the q^2 and v^2 coefficients of a quadratic Lagrangian, as a series in h."""
    P = sympy.Poly(sympy.expand(series.expr), q, v)
    assert P.total_degree() == 2 and P.coeff_monomial(q * v) == 0
    return -P.coeff_monomial(q**2) / P.coeff_monomial(v**2)


@pytest.mark.parametrize("fast", [True, False], ids=["polynomial-path", "generic-formula"])
@pytest.mark.parametrize("kind,scheme", list(HO_CLOSED_FORMS))
def test_harmonic_oscillator_to_h8(kind, scheme, fast):
    q, v, w = sympy.symbols("q v omega", real=True)
    s = getattr(bea, kind)(scheme, 8, lagrangian=v**2 / 2 - w**2 * q**2 / 2, q=[q], v=[v], params=[w], fast=fast)
    ratio = _frequency_ratio(s, q, v)
    got = _series(ratio, 8)
    want = _series(HO_CLOSED_FORMS[(kind, scheme)](w), 8)
    assert sympy.expand(got - want) == 0
    assert sympy.Poly(got, h).degree() == 8  # the h^8 term is really there


def _coupled(n):
    # K = R diag(ev) R^T with a rational orthogonal R: eigenvalues known exactly
    if n == 2:
        R = sympy.Matrix([[3, -4], [4, 3]]) / 5
        ev = [1, 4]
    else:
        R = sympy.Matrix([[1, 2, 2], [2, 1, -2], [2, -2, 1]]) / 3
        ev = [1, 4, 9]
    K = R * sympy.diag(*ev) * R.T
    return K, R, ev


@pytest.mark.parametrize("kind,scheme", list(HO_CLOSED_FORMS))
@pytest.mark.parametrize("n", [2, 3])
def test_coupled_oscillators_to_h4(n, kind, scheme):
    K, R, ev = _coupled(n)
    assert any(K[i, j] != 0 for i in range(n) for j in range(n) if i != j)
    q = sympy.symbols(f"x1:{n + 1}", real=True)
    v = sympy.symbols(f"u1:{n + 1}", real=True)
    Q, V = sympy.Matrix(q), sympy.Matrix(v)
    L = (V.T * V)[0] / 2 - (Q.T * K * Q)[0] / 2
    s = getattr(bea, kind)(scheme, 4, lagrangian=L, q=q, v=v)
    e = sympy.expand(s.expr)
    A = sympy.Matrix(n, n, lambda i, j: e.diff(v[i], v[j]))  # L_mod = 1/2 v^T A v - 1/2 q^T B q
    B = -sympy.Matrix(n, n, lambda i, j: e.diff(q[i], q[j]))
    assert sympy.expand(e - ((V.T * A * V)[0] - (Q.T * B * Q)[0]) / 2) == 0
    for k, lam in enumerate(ev):
        u = R[:, k]
        omega2 = _series(HO_CLOSED_FORMS[(kind, scheme)](sympy.sqrt(lam)), 4)
        residual = (B * u - omega2 * A * u).applyfunc(lambda x: _series(x, 4))
        assert residual == sympy.zeros(n, 1), (k, residual)


def test_symmetric_schemes_have_even_powers_and_generalised_midpoint_odd():
    assert set(bea.modified_lagrangian("trapezoidal", 4).coefficients) <= {0, 2, 4}
    gm = bea.modified_lagrangian(bea.GeneralisedMidpoint("0.3"), 2)
    assert 1 in gm.coefficients
    assert set(bea.modified_lagrangian(bea.GeneralisedMidpoint(0.5), 4).coefficients) <= {0, 2, 4}


def test_generalised_midpoint_h1_term_is_total_derivative_for_separable_L():
    q, v = sympy.symbols("q v", real=True)
    s = bea.modified_lagrangian(bea.GeneralisedMidpoint("0.3"), 2, lagrangian=v**2 / 2 + sympy.cos(q), q=[q], v=[v])
    c1 = s.coefficient(1)
    # a total derivative d/dt f(q) = f'(q) v has zero Euler-Lagrange expression
    el = sympy.diff(c1.diff(v), q) * v - c1.diff(q)  # d/dt dL/dv (with qddot-free part) - dL/dq
    assert sympy.simplify(el.subs(v, 0)) == 0 and sympy.simplify(c1.diff(v, 2)) == 0
