"""No wrong formula is derived or cached because a scheme lied about itself (issue 24, class 2).

``Scheme.check_consistent`` (run by every derivation kind on both engines, by the CLI and by the integrators,
before the cache is read or written) now verifies the declaration ``symmetric``: ``True`` must mean
``L_Delta(L, b, a, -h) == -L_Delta(L, a, b, h)`` exactly, ``False`` the opposite. Keys carry the new
fingerprint version (``ld2:``), so an entry written before declarations were checked is never served.
"""

from fractions import Fraction

import pytest
import sympy
from hypothesis import given, settings, strategies as st

import bea
from bea.errors import InconsistentSchemeError
from bea.schemes import CustomScheme, Scheme

KINDS = ["modified_equation", "modified_lagrangian", "inverse_modified_lagrangian"]


def weighted(alpha, name="w", symmetric=None):
    """The generalised midpoint rule of weight ``alpha`` as a custom scheme (symmetric iff alpha = 1/2)."""
    return CustomScheme(lambda L, a, b, h: h * L((1 - alpha) * a + alpha * b, (b - a) / h), name=name, symmetric=symmetric)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("BEA_CACHE_DIR", str(d))
    return d


def _entries(d):
    return sorted(p.name for p in d.glob("*.bea")) if d.exists() else []


@pytest.mark.parametrize("dim", [None, 1, 2])
def test_a_false_symmetry_claim_is_refused_before_anything_is_cached(cache_dir, dim):
    lie = weighted(Fraction(1, 3), "lie", symmetric=True)
    for kind in KINDS:
        with pytest.raises(InconsistentSchemeError, match="declared symmetric=True, but .*odd powers of h"):
            getattr(bea, kind)(lie, 2, n=dim)
    with pytest.raises(InconsistentSchemeError, match="declared symmetric=True"):
        bea.compile_torch("modified_equation", lie, 2, n=dim)
    with pytest.raises(InconsistentSchemeError, match="declared symmetric=True"):
        bea.series_function("modified_lagrangian", lie, 2, 1 if dim is None else dim)
    assert _entries(cache_dir) == []
    # the honest scheme with the same body gets its odd power, from a fresh derivation, cached or not
    honest = weighted(Fraction(1, 3), "honest")
    cached = bea.modified_equation(honest, 1, n=dim)
    fresh = bea.modified_equation(honest, 1, n=dim, cache=False)
    assert cached.coefficients == fresh.coefficients
    assert fresh.coefficients[1] != 0 if dim is None else any(c != 0 for c in fresh.coefficients[1])


def test_a_false_asymmetry_claim_is_refused(cache_dir):
    for symmetric_scheme in (weighted(Fraction(1, 2), "mid", symmetric=False),
                             CustomScheme(lambda L, a, b, h: h * (L(a, (b - a) / h) + L(b, (b - a) / h)) / 2, "trap",
                                          symmetric=False)):
        with pytest.raises(InconsistentSchemeError, match="declared symmetric=False, but .* it is symmetric"):
            bea.modified_lagrangian(symmetric_scheme, 2)
    assert _entries(cache_dir) == []


def test_a_declaration_changed_after_a_good_call_is_checked_again(cache_dir):
    s = weighted(Fraction(1, 4), "mutable")
    bea.modified_equation(s, 1, n=1)
    s.symmetric = True  # the verdict is keyed by the declaration, not only by the discrete Lagrangian
    with pytest.raises(InconsistentSchemeError, match="declared symmetric=True"):
        bea.modified_equation(s, 2, n=1)


def test_a_subclass_declaring_symmetry_is_checked_too(cache_dir):
    class Leaning(Scheme):
        name = "leaning"
        symmetric = True

        def discrete_lagrangian(self, L, a, b, h):
            return h * L(a, (b - a) / h)  # symplectic Euler: not symmetric

    with pytest.raises(InconsistentSchemeError, match="declared symmetric=True"):
        bea.modified_equation(Leaning(), 2)
    with pytest.raises(InconsistentSchemeError, match="declared symmetric=True"):
        Leaning().check_consistent()  # what the integrators call
    assert _entries(cache_dir) == []


def test_true_declarations_that_hold_are_accepted_and_share_entries(cache_dir):
    mine = weighted(Fraction(1, 2), "mine", symmetric=True)
    assert mine.cache_key() == bea.Midpoint().cache_key() and mine.cache_key().startswith("ld2:")
    a = bea.modified_lagrangian(mine, 4, n=1)
    assert a.coefficients == bea.modified_lagrangian("midpoint", 4, n=1, cache=False).coefficients
    assert len(_entries(cache_dir)) == 1


@settings(max_examples=30, deadline=None)
@given(st.fractions(0, 1, max_denominator=12), st.sampled_from([None, True, False]))
def test_declarations_are_accepted_exactly_when_true(alpha, declared):
    s = weighted(alpha, "w", symmetric=declared)
    truth = alpha == Fraction(1, 2)
    if declared is None or declared == truth:
        s.check_consistent()
    else:
        with pytest.raises(InconsistentSchemeError, match=f"declared symmetric={declared}"):
            s.check_consistent()
    # and the identity the check uses is the documented one
    a, b, h = sympy.symbols("a b h")
    Lf = sympy.Function("L")
    e = s.discrete_lagrangian(lambda x, y: Lf(x, y), a, b, h)
    assert (sympy.expand(e + e.subs({a: b, b: a, h: -h}, simultaneous=True)) == 0) == truth


def test_the_exemption_of_bea_s_own_schemes_is_the_identity():
    """bea's schemes skip the symbolic check when they declare their own value; that value is the identity's."""
    from bea.scheme_check import _builtin_symmetry, symmetric_identity

    for s in (bea.Midpoint(), bea.Trapezoidal(), *(bea.GeneralisedMidpoint(a) for a in ("0", "1/3", "1/2", "0.7", "1"))):
        assert _builtin_symmetry(s) == s.symmetric == symmetric_identity(s)[0], s
    forced = bea.Midpoint()
    forced.symmetric = False  # not its own value: checked like any other declaration
    with pytest.raises(InconsistentSchemeError, match="declared symmetric=False"):
        forced.check_consistent()
    assert _builtin_symmetry(weighted(Fraction(1, 2), "custom")) is None
