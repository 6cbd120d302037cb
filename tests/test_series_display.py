"""Display of series: a one-line summary repr, shortened str/latex, and the full output on request."""

import pytest
import sympy

import bea
from bea.series import MAX_TERMS


def _count(text: str, marker: str) -> int:
    return text.count(marker)


@pytest.mark.parametrize("dim", [None, 1])
def test_repr_is_one_line_summary_with_term_counts(dim):
    s = bea.modified_lagrangian("midpoint", 4, n=dim)
    r = repr(s)
    assert "\n" not in r and len(r) < 200
    assert "to h^4" in r and "h^4: " in r
    # the counts are those of the stored polynomials: 30 trees (any n) and 52 monomials (n = 1) at h^4
    assert s.n_terms[4] == (30 if dim is None else 52)


@pytest.mark.parametrize("dim", [None, 1])
def test_str_and_latex_are_shortened_and_full_output_is_opt_in(dim):
    s = bea.modified_lagrangian("midpoint", 4, n=dim)
    c4 = s.coefficients[4]
    terms = len(c4.as_ordered_terms())
    assert terms > MAX_TERMS
    left = terms - MAX_TERMS
    assert f"({left} more terms; max_terms=None shows all)" in str(s)
    assert f"\\text{{({left} more terms)}}" in s.latex()
    full_tex, full_text = s.latex(max_terms=None), s.text(max_terms=None)
    assert "more terms" not in full_tex and "more terms" not in full_text
    assert len(full_tex) > len(s.latex()) and full_tex.count("frac") >= terms
    # the h^2 coefficient is short: shown whole either way
    h2 = [line for line in str(s).splitlines() if line.startswith("  h^2:")]
    assert len(h2) == 1 and "more term" not in h2[0]
    assert s.latex(max_terms=1).count("more term") == len([k for k, c in s.coefficients.items()
                                                          if len(sympy.Add.make_args(c)) > 1])


def test_modified_equation_matrix_entries_are_shortened():
    e = bea.modified_equation("midpoint", 2, n=2)
    text = str(e)
    assert len(text) < 20_000 < len(e.text(max_terms=None))
    assert "more terms" in text


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "all"])
def test_bad_max_terms_is_a_clear_error(bad):
    s = bea.modified_lagrangian("midpoint", 2)
    with pytest.raises(bea.BeaValueError, match="max_terms must be a positive integer or None"):
        s.latex(max_terms=bad)
