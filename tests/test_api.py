"""Schemes, user-defined schemes, bad input, the cache and the CLI."""

import json
import subprocess
import sys
import time
import warnings
from fractions import Fraction

import pytest
import sympy
import torch

import bea
from bea import cache as bea_cache
from bea.schemes import CustomScheme, Scheme


# ------------------------------------------------------------------ schemes on torch and SymPy


def test_one_definition_runs_on_torch_and_sympy():
    L_t = lambda q, v: 0.5 * (v**2).sum(-1) + torch.cos(q).sum(-1)  # noqa: E731
    a, b = torch.tensor([[0.1]]), torch.tensor([[0.3]])
    h = 0.2
    got = bea.Midpoint()(L_t, a, b, h)
    want = h * (0.5 * ((0.3 - 0.1) / h) ** 2 + torch.cos(torch.tensor(0.2)))
    torch.testing.assert_close(got, want.reshape(1))
    qa, qb, hs = sympy.symbols("a b h")
    L_s = lambda q, v: v[0] ** 2 / 2 + sympy.cos(q[0])  # noqa: E731
    expr = bea.GeneralisedMidpoint("0.3")(L_s, sympy.Matrix([qa]), sympy.Matrix([qb]), hs)
    assert sympy.simplify(expr - hs * ((qb - qa) ** 2 / (2 * hs**2) + sympy.cos(sympy.Rational(7, 10) * qa + sympy.Rational(3, 10) * qb))) == 0
    gm = bea.GeneralisedMidpoint(0.3)(L_t, a, b, h)
    torch.testing.assert_close(gm, h * (0.5 * (0.2 / h) ** 2 + torch.cos(torch.tensor([0.7 * 0.1 + 0.3 * 0.3]))))


def test_get_scheme_and_errors():
    assert bea.get_scheme("midpoint") == bea.Midpoint()
    assert bea.get_scheme("generalised_midpoint:0.3").alpha.exact == Fraction(3, 10)
    assert bea.get_scheme("generalized-midpoint(alpha=1/4)").alpha.exact == Fraction(1, 4)
    with pytest.raises(ValueError, match="unknown scheme 'rk4'"):
        bea.get_scheme("rk4")
    with pytest.raises(ValueError, match="unknown scheme"):
        bea.modified_lagrangian("leapfrogg", 2)
    with pytest.raises(TypeError, match="Scheme"):
        bea.get_scheme(3)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        bea.GeneralisedMidpoint(1.5)


def _dho_frequency(scheme: Scheme, order: int):
    """Exact discrete frequency of the harmonic oscillator under any linear scheme:
    the DEL is c0 (q_{j-1} + q_{j+1}) + c1 q_j = 0, so cos(Omega h) = -c1 / (2 c0)."""
    w, h = sympy.symbols("omega h", positive=True)
    x0, x1, x2 = sympy.symbols("x0 x1 x2")
    L = lambda q, v: v[0] ** 2 / 2 - w**2 * q[0] ** 2 / 2  # noqa: E731
    S = scheme(L, sympy.Matrix([x0]), sympy.Matrix([x1]), h) + scheme(L, sympy.Matrix([x1]), sympy.Matrix([x2]), h)
    dS = sympy.expand(sympy.diff(S, x1))
    c0, c1 = dS.coeff(x0), dS.coeff(x1)
    assert sympy.simplify(c0 - dS.coeff(x2)) == 0
    omega = sympy.acos(sympy.simplify(-c1 / (2 * c0))) / h
    return sympy.expand(sympy.series(omega**2, h, 0, order + 1).removeO()), w


def test_user_defined_scheme_needs_only_its_discrete_lagrangian():
    """A scheme nobody hard-coded: the average of midpoint and trapezoidal."""

    def mixed(L, a, b, h):
        v = (b - a) / h
        return h / 2 * L((a + b) / 2, v) + h / 4 * (L(a, v) + L(b, v))

    scheme = CustomScheme(mixed, name="midpoint-trapezoid-average")
    want, w = _dho_frequency(scheme, 6)
    q, v = sympy.symbols("q v", real=True)
    for fast in (True, False):
        s = bea.modified_lagrangian(scheme, 6, lagrangian=v**2 / 2 - w**2 * q**2 / 2, q=[q], v=[v], params=[w], fast=fast)
        P = sympy.Poly(sympy.expand(s.expr), q, v)
        ratio = sympy.series(-P.coeff_monomial(q**2) / P.coeff_monomial(v**2), s.h, 0, 7).removeO()
        assert sympy.expand(ratio.subs(s.h, sympy.Symbol("h", positive=True)) - want) == 0
    # the derived symmetry is detected and odd orders are refused
    assert bea.modified_lagrangian(scheme, 4).symmetric


def test_user_subclass_scheme_matches_builtin():
    class MyMidpoint(Scheme):
        name = "my_midpoint"

        def discrete_lagrangian(self, L, a, b, h):
            return h * L(0.5 * a + 0.5 * b, (b - a) / h)

    mine = bea.modified_lagrangian(MyMidpoint(), 4, n=1).coefficients
    ref = bea.modified_lagrangian("midpoint", 4, n=1).coefficients
    assert all(sympy.simplify(mine[k] - ref[k]) == 0 for k in ref)


def test_generalised_midpoint_half_is_midpoint():
    a = bea.modified_lagrangian(bea.GeneralisedMidpoint(0.5), 4, n=1).coefficients
    b = bea.modified_lagrangian("midpoint", 4, n=1).coefficients
    assert all(sympy.simplify(a[k] - b[k]) == 0 for k in b)


def test_inconsistent_scheme_is_rejected():
    bad = CustomScheme(lambda L, a, b, h: h * L(a + b, (b - a) / h), name="bad")
    with pytest.raises(ValueError, match="inconsistent scheme"):
        bea.modified_lagrangian(bad, 2)


# ------------------------------------------------------------------ bad input


def test_bad_orders_and_dims():
    with pytest.raises(ValueError, match="order must be >= 0"):
        bea.modified_lagrangian("midpoint", -2)
    with pytest.raises(ValueError, match="symmetric"):
        bea.modified_lagrangian("midpoint", 3)
    with pytest.raises(TypeError, match="order must be an integer"):
        bea.modified_lagrangian("midpoint", 2.0)
    with pytest.raises(ValueError, match="n must be >= 1"):
        bea.modified_lagrangian("midpoint", 2, n=0)
    with pytest.raises(TypeError, match=r"n \(the number of degrees of freedom\) must be a positive integer"):
        bea.inverse_modified_lagrangian("midpoint", 2, n="2")


def test_bad_concrete_lagrangians():
    q, v, k, z = sympy.symbols("q v k z")
    with pytest.raises(ValueError, match="not declared as q or v: k"):
        bea.modified_lagrangian("midpoint", 2, lagrangian=v**2 / 2 - k * q**2, q=[q], v=[v])
    ok = bea.modified_lagrangian("midpoint", 2, lagrangian=v**2 / 2 - k * q**2, q=[q], v=[v], params=[k])
    assert ok.coefficients[2] != 0
    with pytest.raises(ValueError, match="same length"):
        bea.modified_lagrangian("midpoint", 2, lagrangian=v**2 / 2 + z, q=[q, z], v=[v])
    with pytest.raises(ValueError, match="not regular"):
        bea.modified_lagrangian("midpoint", 2, lagrangian=q * v, q=[q], v=[v])
    with pytest.raises(ValueError, match="does not match"):
        bea.modified_lagrangian("midpoint", 2, n=2, lagrangian=v**2, q=[q], v=[v])
    with pytest.raises(ValueError, match="needs its coordinate symbols"):
        bea.modified_lagrangian("midpoint", 2, lagrangian=v**2)
    with pytest.raises(TypeError, match="explicit SymPy expression"):
        bea.modified_lagrangian("midpoint", 2, lagrangian=sympy.Function("f")(q) + v**2, q=[q], v=[v])


# ------------------------------------------------------------------ series object


def test_series_api():
    s = bea.modified_lagrangian("midpoint", 4, n=1)
    assert s.order == 4 and s.n == 1 and s.symmetric
    t = s.truncate(2)
    assert set(t.coefficients) == {0, 2}
    with pytest.raises(ValueError, match="only known to h\\^4"):
        s.truncate(6)
    tex = s.latex()
    assert "L^{(1,1)}" in tex and "Derivative" not in tex and "\\partial" not in tex
    tex2 = bea.modified_lagrangian("midpoint", 2, n=2).latex()
    assert "L_{q_{1} v_{2}}" in tex2 or "L_{q_{2} v_{1}}" in tex2
    eq = bea.modified_equation("midpoint", 2, n=1)
    assert eq.coefficient(0).shape == (1, 1)
    assert "generated" in s.source and "lagrangian_jet" in s.source


# ------------------------------------------------------------------ cache


def test_cache_roundtrip_and_corruption(tmp_path, monkeypatch):
    monkeypatch.setenv("BEA_CACHE_DIR", str(tmp_path))
    L = lambda q, v: 0.5 * (v**2).sum(-1) + torch.cos(q).sum(-1)  # noqa: E731
    q, v = torch.randn(5, 1), torch.randn(5, 1)
    f = bea.compile_torch("modified_lagrangian", "trapezoidal", 4, 1)
    ref = f(L, q, v, 0.1)
    files = sorted(tmp_path.glob("*.bea"))
    assert len(files) == 2  # coefficients and generated source, one file each
    src_file = next(p for p in files if p.name.endswith(".source.bea"))
    head, payload = src_file.read_bytes().split(b"\n", 1)
    record = json.loads(payload)
    assert record["key"]["engine"] == bea.__version__ and "source" in record["body"]
    t0 = time.perf_counter()
    g = bea.compile_torch("modified_lagrangian", "trapezoidal", 4, 1)
    assert time.perf_counter() - t0 < 5.0  # loaded, not derived (the benchmark measures it properly)
    torch.testing.assert_close(g(L, q, v, 0.1), ref)

    # tamper with the source (keeping the header): authentication fails, so it must not be executed
    record["body"]["source"] = record["body"]["source"].replace("lagrangian_jet(L", "__import__('os')._exit(3) or lagrangian_jet(L")
    src_file.write_bytes(head + b"\n" + json.dumps(record).encode())
    with pytest.warns(bea_cache.CacheWarning, match="corrupt or stale"):
        h = bea.compile_torch("modified_lagrangian", "trapezoidal", 4, 1)
    torch.testing.assert_close(h(L, q, v, 0.1), ref)
    assert b"_exit" not in src_file.read_bytes()

    # truncated file
    src_file.write_bytes(src_file.read_bytes()[:100])
    with pytest.warns(bea_cache.CacheWarning):
        bea.compile_torch("modified_lagrangian", "trapezoidal", 4, 1)

    # a stale engine version is a different key: a new entry is written, the old one ignored
    monkeypatch.setattr(bea.api, "__version__", "0.0.0-old")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bea.compile_torch("modified_lagrangian", "trapezoidal", 4, 1)
    assert len(list(tmp_path.glob("*.bea"))) == 4


def test_symbolic_series_from_cache_equals_fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("BEA_CACHE_DIR", str(tmp_path))
    a = bea.inverse_modified_lagrangian("trapezoidal", 2, n=3)
    b = bea.inverse_modified_lagrangian("trapezoidal", 2, n=3)  # from the cache
    c = bea.inverse_modified_lagrangian("trapezoidal", 2, n=3, cache=False)
    for k in c.coefficients:
        assert sympy.expand(a.coefficients[k] - c.coefficients[k]) == 0
        assert sympy.expand(b.coefficients[k] - c.coefficients[k]) == 0


# ------------------------------------------------------------------ CLI


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "bea", *args], capture_output=True, text=True, timeout=300)


def test_cli_derive_formats(capsys):
    """``python -m bea derive`` in its formats: the first through the interpreter's entry point (a subprocess), the
    others through the same ``bea.cli.main`` in this process (each subprocess costs ~4.5 CPU s of imports, not the
    derivation's; the exit status and stdout are those main returns and prints)."""
    from bea.cli import main

    def cli(*args):
        code = main(list(args))
        return code, capsys.readouterr().out

    r = _cli("derive", "--scheme", "midpoint", "--order", "4", "--n", "1")
    assert r.returncode == 0 and "h^2" in r.stdout and "h^4" in r.stdout
    code, out = cli("derive", "--scheme", "trapezoidal", "--order", "2", "--inverse", "--format", "latex")
    assert code == 0 and out.startswith("L_{\\mathrm{inv}}")
    code, out = cli("derive", "--order", "2", "--n", "2", "--format", "torch")
    assert code == 0 and "def generated(L, q, v, h):" in out
    compile(out, "<cli>", "exec")
    code, out = cli("derive", "--scheme", "generalised_midpoint:0.3", "--order", "1", "--equation")
    assert code == 0 and "h^1" in out


def test_cli_errors(capsys):
    """Bad input: exit status 2 and one line naming the problem on stderr. The first through a subprocess (the status
    the shell sees), the others through ``bea.cli.main`` in this process (as in test_cli_derive_formats)."""
    from bea.cli import main

    r = _cli("derive", "--scheme", "nope")
    assert r.returncode == 2 and "unknown scheme 'nope'" in r.stderr
    assert main(["derive", "--order", "-1"]) == 2 and "order must be >= 0" in capsys.readouterr().err
    assert main(["derive", "--n", "0"]) == 2 and "n must be >= 1" in capsys.readouterr().err
