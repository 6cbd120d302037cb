"""The public modified equation of a stage scheme, dimension-free (issue 26): from the Euler-Lagrange equations of its
modified Lagrangian (bea.free.euler_lagrange) to h^(2s) and h^(2s+2), below twice the first correction h^(2s).

* it equals the modified equation from the discrete Euler-Lagrange residual term by term where both run (h^4 for
  galerkin2 and the triple jump);
* on coupled oscillators (n = 3, non-diagonal K) its h^(2j) coefficient is -f_j K^(j+1) q, exactly in the field, with
  f_j the coefficient of (w h)^(2j) in W^2 / w^2 from the scheme's exact one-step map (tests/test_stages.py): the
  modified equation of a linear scheme on q'' = -K q is q'' = -W(K)^2 q, whatever v is. The odd powers and the
  powers below h^(2s) but above h^0 are zero.
"""

from fractions import Fraction

import pytest
import sympy

import bea
from bea.field_element import coefficient
from bea.free.derive import FreeDerivation, derive_free
from bea.free.euler_lagrange import equation_from_lagrangian
from bea.radicals import from_sympy
from exact_trees import ExactTrees
from integrators import systems
from test_stages import LEADING, frequency_series, triple_jump_frequency_series


def _canon(S, trees, top):
    """Each power's monomials with their trees spelled out (two derivations number their trees differently)."""
    return [sorted((sorted(repr(trees[x]) for x in m), repr(c)) for m, c in (S.c[k] if k < len(S.c) else {}).items())
            for k in range(top + 1)]


@pytest.mark.parametrize("name,order", [("galerkin2", 4), ("triple_jump", 4),
                                        pytest.param("galerkin2", 6, marks=pytest.mark.slow)])
def test_equation_equals_the_discrete_euler_lagrange_route(name, order, monkeypatch):
    """bea's public route (derive_free, kind modified_equation) against the discrete Euler-Lagrange residual, h^4; and
    galerkin2 to h^6 under -m slow (87,944 trees at h^6; the discrete route alone 55 CPU s and 2.2 GB). The public
    route must really take the modified Lagrangian's equations at the top order (else this compares a route with
    itself)."""
    import bea.free.derive as D
    import bea.free.release as R

    taken = []

    def spy(alg, L, F0, r):
        F = equation_from_lagrangian(alg, L, F0, r)
        taken.append((r, F is not None))
        return F

    monkeypatch.setattr(D, "equation_from_lagrangian", spy)
    monkeypatch.setattr(R, "equation_from_lagrangian", spy)  # the top order: the derivation released first
    scheme = bea.get_scheme(name)
    raw = derive_free(scheme, "modified_equation", order)
    assert (order, True) in taken, taken
    monkeypatch.undo()
    ref = FreeDerivation(scheme)
    want = ref.modified_equation(order)
    got = type(want)([raw.coeffs[k] for k in range(order + 1)], order)
    assert _canon(got, raw.forest.trees, order) == _canon(want, ref.forest.trees, order)
    assert len(want.c[order]) > 1000  # the top correction is there (galerkin2: 1342 trees at h^4)


def _exact(x):
    return coefficient(from_sympy(sympy.nsimplify(x)) if not isinstance(x, (int, Fraction)) else x)


def _closed_form_equation(scheme, s, order, freq):
    sysm = systems.coupled_oscillators(3, coupling=sympy.Rational(1, 3))
    K = -sympy.hessian(sysm.expr, sysm.q)
    raw = derive_free(scheme, "modified_equation", order)
    q0, v0 = [Fraction(2, 5), Fraction(-1, 3), Fraction(1, 7)], [Fraction(3, 4), Fraction(-5, 6), Fraction(1, 2)]
    got = ExactTrees(sysm.expr, sysm.q, sysm.v, q0, v0).coefficients(raw)
    col = sympy.Matrix([sympy.Rational(x.numerator, x.denominator) for x in q0])
    for k in range(order + 1):
        if k % 2 or 0 < k < 2 * s:
            assert all(x == 0 for x in got[k]), f"h^{k}"
            continue
        j = k // 2
        want = -(K ** (j + 1) * col)
        f = 1 if j == 0 else freq[j]
        assert [coefficient(x) for x in got[k]] == [_exact(f) * Fraction(str(w)) for w in want], f"h^{k}"


def test_closed_form_galerkin2_h4():
    """galerkin2 to h^4: the modified frequency's 1/1440 (its exact one-step map) in the modified equation."""
    _closed_form_equation(bea.get_scheme("galerkin2"), 2, 4, LEADING["galerkin2"])


@pytest.mark.slow
def test_closed_form_galerkin2_h6():
    """galerkin2 to h^6 = h^(2s+2), newly reachable by the public modified equation (about 25 CPU s, table 1c)."""
    _closed_form_equation(bea.get_scheme("galerkin2"), 2, 6, frequency_series(bea.get_scheme("galerkin2"), 3))


@pytest.mark.slow
def test_closed_form_triple_jump_h6():
    """The triple jump to h^6 = h^(2s+2), exactly in Q(2^(1/3))."""
    _closed_form_equation(bea.get_scheme("triple_jump"), 2, 6, triple_jump_frequency_series(3))


@pytest.mark.slow
def test_closed_form_galerkin3_h6():
    """galerkin3 to h^6 = h^(2s): its first correction 1/302400 (h^4 showed none), from trees with sqrt 5 inside."""
    _closed_form_equation(bea.get_scheme("galerkin3"), 3, 6, LEADING["galerkin3"])


@pytest.mark.parametrize("kind", ["modified_lagrangian", "inverse_modified_lagrangian", "modified_equation"])
def test_a_public_result_keeps_only_its_own_trees(kind):
    """derive_free without a shared derivation (the public route) returns its series over a forest of its own trees
    (bea.free.release.compact; the modified equation also releases the derivation before its Euler-Lagrange step),
    the same series term by term as the derivation's own forest gives. galerkin2 to h^4: the derivation registers
    more than twice the trees the result uses; at galerkin3 h^8 keeping them held 1.7 GB more while the next
    derivation ran (benchmarks/RESULTS_derive.md, session 9)."""
    scheme, order = bea.get_scheme("galerkin2"), 4
    d = FreeDerivation(scheme)
    full, lean = derive_free(scheme, kind, order, d), derive_free(scheme, kind, order)
    series = lambda r: type(d.modified_lagrangian(0))([r.coeffs[k] for k in range(order + 1)], order)  # noqa: E731
    assert _canon(series(lean), lean.forest.trees, order) == _canon(series(full), full.forest.trees, order)
    used = {x for p in lean.coeffs.values() for m in p for x in m}
    assert used == set(range(len(lean.forest.trees))) and len(used) > 30
    assert len(full.forest.trees) > 2 * len(used), (len(full.forest.trees), len(used))  # equation: 3412 against 1343
    assert lean.symmetric is full.symmetric is True


def test_shared_helpers_of_the_two_equation_routes():
    """bea.free.euler_lagrange's helpers, used by FreeDerivation and by the lean route (bea.free.release): galerkin2's
    modified Lagrangian has its first correction at h^4 (= 2s; none to h^3), so the Euler-Lagrange route holds to h^7;
    acceleration(forest) is the one vector tree A, FreeDerivation's F_0; release() leaves the derivation empty."""
    from bea.free.euler_lagrange import acceleration, first_correction

    d = FreeDerivation(bea.get_scheme("galerkin2"))
    lmod = d.modified_lagrangian(4)
    assert first_correction(lmod, 4) == 4 and first_correction(lmod, 3) is None
    F0 = acceleration(d.forest)
    assert F0.c[0] == d._acceleration().c[0] and len(F0.c[0]) == 1 and d.is_stage_scheme
    d.release()
    assert not vars(d)
