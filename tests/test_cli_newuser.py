"""What a new user meets on the command line: --version, announced long derivations with the cache folder,
shortened output with --all-terms for everything, and the generalised midpoint rule's required parameter."""

import ast

import pytest

import bea
from bea import cli
from bea.cost import describe, estimate


def _run(capsys, argv):
    status = cli.main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def test_version(capsys):
    status, out, _ = _run(capsys, ["--version"])
    assert status == 0 and out.strip() == f"bea {bea.__version__}"


def test_a_long_cold_derivation_is_announced_with_time_and_cache_folder(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("BEA_CACHE_DIR", str(tmp_path))
    cli._announce("inverse_modified_lagrangian", "midpoint", 8, None, True)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "to h^8 for every n" in err
    seconds, basis = estimate("inverse_modified_lagrangian", 8, None)
    assert basis == "measured" and 10 < seconds < 600                 # tens of seconds of CPU (docs/data/derive_cost.json)
    assert f"expect {describe(seconds)} of CPU time (measured; longer on a busy machine)" in err
    assert f"cached in {tmp_path}" in err
    cli._announce("modified_lagrangian", "midpoint", 4, 3, False, allow_slow=True)  # refused without it (issue 24)
    err = capsys.readouterr().err
    assert "more than 10 minutes" in err and "not stored" in err


def test_quick_or_cached_derivations_are_silent(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("BEA_CACHE_DIR", str(tmp_path))
    status, out, err = _run(capsys, ["derive", "--order", "4"])     # about 1.3 s cold: below the 2 s threshold
    assert status == 0 and err == ""
    assert "more terms; --all-terms shows all" in out                  # 30 terms at h^4, 20 shown: in CLI terms
    assert "max_terms" not in out
    cli._announce("modified_lagrangian", "midpoint", 4, None, True)  # cached now
    assert capsys.readouterr().err == ""
    status, out_all, _ = _run(capsys, ["derive", "--order", "4", "--all-terms"])
    assert status == 0 and "more terms" not in out_all and len(out_all) > len(out)


def test_estimates_follow_the_benchmarks():
    assert estimate("modified_lagrangian", 4, 2) == (2.54, "measured")     # bea/cost.py, the fitted run
    assert estimate("inverse_modified_lagrangian", 8, 1) == (4.96, "measured")
    assert estimate("modified_equation", 8, 1) == estimate("modified_lagrangian", 8, 1)   # its upper bound
    seconds, basis = estimate("modified_lagrangian", 5, 1)                  # log-linear between orders 4 and 6
    assert basis == "interpolated" and seconds == pytest.approx((0.045 * 0.140) ** 0.5)
    seconds, basis = estimate("modified_lagrangian", 5, 2)                  # the growth from order 2 to 4, again
    assert basis == "extrapolated" and seconds == pytest.approx(2.54 * (2.54 / 0.043) ** 0.5)
    seconds, basis = estimate("modified_lagrangian", 12, 1)                 # beyond the table: the last growth, said so
    assert basis == "extrapolated" and seconds == pytest.approx(60.2 * (60.2 / 2.46) ** 1)
    assert estimate("modified_lagrangian", 6, 2)[0] is None and estimate("modified_lagrangian", 2, 6)[0] is None
    assert estimate("modified_lagrangian", 2, 4) == (2.1, "measured")     # n = 4, 5 at h^2: measured for issue 24
    # the trapezoidal rule's dimension-free inverse costs more (benchmarks/derive_free.py)
    assert estimate("inverse_modified_lagrangian", 8, None, "trapezoidal")[0] == pytest.approx(
        7.2 * estimate("inverse_modified_lagrangian", 8, None)[0])
    assert describe(0.3) == "under a second" and describe(370) == "about 6 minutes" and describe(7200) == "about 2 hours"


@pytest.mark.parametrize("name", ["generalised_midpoint", "generalised_midpoint:", "generalized-midpoint()"])
def test_generalised_midpoint_needs_alpha(capsys, name):
    status, _, err = _run(capsys, ["derive", "--scheme", name])
    assert status == 2 and err.count("\n") == 1
    assert "lacks its parameter" in err and "generalised_midpoint:0.3" in err
    with pytest.raises(bea.BeaTypeError, match="needs its parameter alpha"):
        bea.GeneralisedMidpoint()
    assert bea.get_scheme("generalised_midpoint:0.5") == bea.GeneralisedMidpoint("1/2")


def test_cli_messages_speak_of_flags_not_python(capsys):
    status, _, err = _run(capsys, ["derive", "--scheme", "leapfrog"])
    assert status == 2 and "unknown scheme 'leapfrog'" in err and "midpoint" in err
    assert "Scheme object" not in err and "bea.CustomScheme" in err


def test_torch_format_without_dim_prints_source_that_builds_the_function(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("BEA_CACHE_DIR", str(tmp_path))
    status, out, _ = _run(capsys, ["derive", "--order", "2", "--format", "torch"])
    assert status == 0 and "no generated torch code" in out and "--n N" in out
    ast.parse(out)                                           # the printed source is a Python program ...
    assert "f = bea.modified_lagrangian('midpoint', 2).to_torch()" in out   # ... that builds the function
    assert "#   h^2: -L_qq[v, v]/24 + L_vv[A, A]/24" in out       # with the series' terms as comments
