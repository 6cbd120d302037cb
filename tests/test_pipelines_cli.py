"""The ``python -m pipelines.*`` entry points report bad input as ``bea`` does: one line on stderr, exit status 2,
no traceback (bea.cli.run_guarded)."""

import subprocess
import sys

import pytest

from bea.cli import run_guarded
from bea.errors import BeaValueError


@pytest.mark.parametrize("module, args", [("pipelines.identification", ["--bogus"]),
                                          ("pipelines.modlanet_experiments", ["--system", "nope"])])
def test_pipeline_usage_error_is_one_line(module, args):
    r = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{module}: error:") and "--help" in lines[0], r.stderr


def _raise(exc):
    def command():
        raise exc
    return command


def test_run_guarded_bad_input_and_bug(capsys, monkeypatch):
    monkeypatch.delenv("BEA_DEBUG", raising=False)
    assert run_guarded(_raise(BeaValueError("h must be positive; pass h > 0")), "pipelines.x") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["pipelines.x: error: h must be positive; pass h > 0"]
    assert run_guarded(_raise(RuntimeError("boom")), "pipelines.x") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "internal error (RuntimeError: boom)" in err[0] and "BEA_DEBUG=1" in err[0]
    assert run_guarded(lambda: {"a": 1}) == 0 and run_guarded(lambda: 3) == 3


def test_run_guarded_debug_reraises(monkeypatch):
    monkeypatch.setenv("BEA_DEBUG", "1")
    with pytest.raises(BeaValueError):
        run_guarded(_raise(BeaValueError("x")))
