"""The main job, ``python -m bea demo``, at its reduced size, through the ``bea`` command line."""

import json
import subprocess
import sys

from bea import cli
from pipelines import demo


def test_demo_small_writes_table_figures_and_numbers(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    assert cli.main(["demo", "--small", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "level-set error, H_rec[2]" in out and "paper" in out
    for name in ("pendulum_trajectories.png", "pendulum_energies.png", "pendulum_level_sets.png", "results.json"):
        assert (tmp_path / name).stat().st_size > 0
    res = json.loads((tmp_path / "results.json").read_text())
    m = res["metrics"]
    # the small configuration (100 trajectories, 1,000 steps): LSI beats both baselines
    assert m["traj_lsi"] < 1e-3 < m["traj_lgp"]
    assert m["ls_rec2"] < m["ls_lgp"]


def test_demo_bad_option(capsys):
    import pytest

    with pytest.raises(SystemExit):
        demo.main(["--no-such-option"])


def test_bea_help_lists_demo_and_bea_does_not_import_learners():
    # bea is the bottom of the dependency chain: the CLI lists demo but must not import learners to do so
    code = ("import sys, contextlib, io; from bea import cli\n"
            "buf = io.StringIO()\n"
            "with contextlib.redirect_stdout(buf):\n"
            "    try: cli.main(['--help'])\n"
            "    except SystemExit: pass\n"
            "assert 'demo' in buf.getvalue(), buf.getvalue()\n"
            "assert 'learners' not in sys.modules and 'integrators' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)
