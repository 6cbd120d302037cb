"""The CLI (issue 12, item 12): one line on stderr, non-zero exit, no traceback, and a bad
``bea demo --out`` refused before any work."""

import subprocess
import sys
import types

import pytest

import bea
from bea.cli import main


def _one_line_error(capsys, argv, match):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("bea: error: ") and match in err, err
    return err


@pytest.fixture
def no_demo(monkeypatch):
    """A stand-in for pipelines.demo that fails if it is ever started."""
    fake = types.ModuleType("pipelines.demo")

    def main(argv):
        raise AssertionError("the demo started before its --out was checked")

    fake.main = main
    monkeypatch.setitem(sys.modules, "pipelines.demo", fake)


def test_demo_out_checked_before_the_work(capsys, tmp_path, no_demo):
    existing = tmp_path / "results.txt"
    existing.write_text("keep me")
    _one_line_error(capsys, ["demo", "--out", str(existing)], "is an existing file")
    _one_line_error(capsys, ["demo", f"--out={existing / 'sub'}"], "is a file, so the directory cannot be created")
    if sys.platform.startswith("linux"):  # /proc is read-only even for root
        _one_line_error(capsys, ["demo", "--small", "--out", "/proc/bea-demo-test"], "is not writable")
    assert existing.read_text() == "keep me"


def test_derive_errors_are_one_line(capsys):
    _one_line_error(capsys, ["derive", "--order", "100000"], "above the supported maximum 12")
    _one_line_error(capsys, ["derive", "--n", "50"], "above the supported maximum 6")
    _one_line_error(capsys, ["derive", "--scheme", "generalised_midpoint:2"], "alpha must lie in [0, 1]")
    _one_line_error(capsys, ["derive", "--order", "two"], "invalid int value")  # argparse, also one line
    _one_line_error(capsys, ["nonsense"], "invalid choice")


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"bea {bea.__version__}"


def test_cli_process_has_no_traceback():
    r = subprocess.run([sys.executable, "-m", "bea", "derive", "--order", "100000"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "order=100000 is above the supported maximum 12" in r.stderr
