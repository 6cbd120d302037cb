"""The demo (``python -m bea demo`` once wired; ``python -m learners.demo`` now) at its reduced size."""

import json

from learners import demo


def test_demo_small_writes_table_figures_and_numbers(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    assert demo.main(["--small", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "level-set error, H_rec[2]" in out and "seed" in out
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
