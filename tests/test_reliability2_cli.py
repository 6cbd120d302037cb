"""Issue 24, class 8: the command line and the scheme parameter.

``bea demo --out ''`` is refused (``Path('')`` is the current folder); every usage error, of ``bea`` and of
``bea demo`` alike, is exactly one line on stderr with exit status 2; ``generalised_midpoint:ALPHA`` keeps ALPHA as
typed (``1e-1``, ``-0.1``: the name is normalised, the number is not); ``GeneralisedMidpoint`` takes NumPy, SymPy,
torch 0-d and ``Fraction`` values exactly and refuses NaN, infinities and non-scalars with a typed error."""

import os
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import sympy
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import bea
from bea.cli import main
from bea.schemes import GeneralisedMidpoint

ROOT = Path(__file__).resolve().parent.parent


def _one_line(capsys, argv, match):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("bea: error: ") and match in err, err
    return err


@pytest.mark.parametrize("argv", [["demo", "--out", ""], ["demo", "--out="], ["demo", "--small", "--out", "   "]])
def test_empty_demo_out_is_refused_before_anything_is_written(capsys, tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    _one_line(capsys, argv, "--out is empty")
    assert list(tmp_path.iterdir()) == []


def test_demo_module_refuses_an_empty_out_too(capsys, tmp_path, monkeypatch):
    """``python -m pipelines.demo`` parses its own arguments: the same check, the same one line."""
    from pipelines.demo import main as demo_main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        demo_main(["--out", ""])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "--out is empty" in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, match", [
    (["demo", "--bogus"], "unrecognized arguments: --bogus"),     # the case (bea demo's own parser)
    (["demo", "--no"], "ambiguous option"),                       # an abbreviation of two options
    (["demo", "--out"], "expected one argument"),
    (["derive", "--bogus"], "unrecognized arguments: --bogus"),
    (["sweep", "x.toml", "--bogus"], "unrecognized arguments: --bogus"),
    (["--bogus"], "required: command"),
])
def test_usage_errors_are_exactly_one_line(capsys, argv, match):
    _one_line(capsys, argv, match)


def test_unknown_flag_in_a_real_process_prints_one_line():
    proc = subprocess.run([sys.executable, "-m", "bea", "demo", "--frobnicate"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("bea: error: unrecognized arguments"), proc.stderr


@pytest.mark.parametrize("name, alpha", [
    ("generalised_midpoint:1e-1", Fraction(1, 10)),               # the case: '-' was rewritten to '_'
    ("generalised_midpoint:2.5E-1", Fraction(1, 4)),
    ("Generalized-Midpoint(alpha = 3e-1)", Fraction(3, 10)),
    ("generalised_midpoint: 1/3 ", Fraction(1, 3)),
    ("generalised_midpoint:+.5", Fraction(1, 2)),
])
def test_alpha_is_parsed_as_typed(name, alpha):
    assert bea.get_scheme(name).alpha.exact == alpha


@pytest.mark.parametrize("alpha, match", [
    ("-0.1", "must lie in [0, 1]"), ("1.5", "must lie in [0, 1]"), ("-1e-1", "must lie in [0, 1]"),
    ("1_0", "must be a number"), ("0x1", "must be a number"), ("nan", "must be a number"),
])
def test_bad_alpha_on_the_command_line_is_one_line(capsys, alpha, match):
    _one_line(capsys, ["derive", "--scheme", f"generalised_midpoint:{alpha}", "--order", "1"], match)


@pytest.mark.parametrize("value, exact", [
    (np.float64(0.3), Fraction(3, 10)), (np.float32(0.3), Fraction(3, 10)), (np.float16(0.25), Fraction(1, 4)),
    (np.int64(1), Fraction(1)), (np.array(0.7), Fraction(7, 10)),
    (sympy.Float("0.3"), Fraction(3, 10)), (sympy.Rational(1, 3), Fraction(1, 3)), (sympy.Integer(0), Fraction(0)),
    (torch.tensor(0.3, dtype=torch.float64), Fraction(3, 10)), (torch.tensor(0.3), Fraction(3, 10)),
    (torch.tensor(0.25, dtype=torch.bfloat16), Fraction(1, 4)), (torch.tensor(1), Fraction(1)),
    (torch.tensor(0.3, dtype=torch.float64, requires_grad=True), Fraction(3, 10)),
    (Fraction(2, 7), Fraction(2, 7)), (0.3, Fraction(3, 10)), ("1/3", Fraction(1, 3)),
    (bea.schemes.exact("1/3"), Fraction(1, 3)),  # an Exact is a float that knows its rational: kept, not rounded
    (Decimal("0.35"), Fraction(7, 20)),
])
def test_generalised_midpoint_takes_scalars_of_every_library_exactly(value, exact):
    assert GeneralisedMidpoint(value).alpha.exact == exact


@pytest.mark.parametrize("value, error, match", [
    (float("nan"), bea.BeaValueError, "finite"), (np.float64("inf"), bea.BeaValueError, "finite"),
    (torch.tensor(float("nan")), bea.BeaValueError, "finite"), (sympy.nan, bea.BeaTypeError, "real number"),
    (sympy.oo, bea.BeaTypeError, "real number"), (torch.tensor([0.3, 0.4]), bea.BeaTypeError, "scalar"),
    (torch.tensor([0.3]), bea.BeaTypeError, "scalar"), (np.array([0.3]), bea.BeaTypeError, "scalar"),
    (0.3 + 0j, bea.BeaTypeError, "real number"), (torch.tensor(0.3 + 0j), bea.BeaTypeError, "real number"),
    (sympy.Symbol("a"), bea.BeaTypeError, "real number"), (True, bea.BeaTypeError, "boolean"),
    (np.bool_(True), bea.BeaTypeError, "boolean"), ([0.3], bea.BeaTypeError, "real number"),
    ("1e999999999", bea.BeaValueError, "must be a number"), (Decimal("NaN"), bea.BeaValueError, "finite"),
    ("0./0", bea.BeaValueError, "must be a number"), ("1/0", bea.BeaValueError, "divides by zero"),
    ("1E310", bea.BeaValueError, "out of range"),
])
def test_generalised_midpoint_refuses_non_scalars_and_non_finite_values(value, error, match):
    with pytest.raises(error, match=match):
        GeneralisedMidpoint(value)


@settings(max_examples=200, deadline=None)
@given(x=st.floats(0, 1))
def test_any_float_alpha_is_the_decimal_it_prints_as(x):
    """Python and NumPy floats: the shortest decimal of the value in its own width (what the user typed)."""
    assert GeneralisedMidpoint(x).alpha.exact == Fraction(repr(x))
    assert GeneralisedMidpoint(np.float64(x)).alpha.exact == Fraction(repr(x))
    x32 = np.float32(x)
    assert GeneralisedMidpoint(x32).alpha.exact == Fraction(str(x32))
    assert GeneralisedMidpoint(torch.tensor(x32)).alpha.exact == Fraction(str(x32))
    assert np.float32(float(Fraction(str(x32)))) == x32  # the decimal rounds back to the same float32


@settings(max_examples=500, deadline=None)
@given(text=st.text(alphabet="0123456789.eE+-/_ x\uff11\u0661", max_size=12))
def test_any_alpha_string_is_exact_or_a_typed_error(text):
    try:
        g = GeneralisedMidpoint(text)
    except bea.BeaError:
        return
    assert 0 <= g.alpha.exact <= 1 and g.alpha.exact == Fraction(text.strip())
    assert all(c in "0123456789.eE+-/ " for c in text)  # no '_', no other scripts' digits
