"""Sweep specifications: the examples validate, bad ones fail naming the key and the file, task
identities and seeds depend on the parameters only."""

from pathlib import Path

import pytest

from bea.cli import main
from pipelines.sweep import SpecError, load
from pipelines.sweep.records import derived_seed, task_id

ROOT = Path(__file__).resolve().parent.parent
SWEEPS = ROOT / "sweeps"


def test_examples_validate():
    conv = load(SWEEPS / "convergence.toml")
    assert conv.kind == "convergence" and len(conv.tasks) == 3 * 3 * 3 * 6
    assert {t.params["scheme"] for t in conv.tasks} == {"midpoint", "trapezoidal", "generalised_midpoint:0.3"}
    assert sorted({t.params["order"] for t in conv.tasks}) == [0, 2, 4] and len({t.params["system"] for t in conv.tasks}) == 3
    lsi = load(SWEEPS / "lsi.toml")
    assert lsi.kind == "shadow" and len(lsi.tasks) == 24 and sorted({t.params["seed"] for t in lsi.tasks}) == [0, 1, 2]
    ml = load(SWEEPS / "modlanet_seeds.toml")
    assert ml.kind == "modlanet" and len({t.params["seed"] for t in ml.tasks}) >= 3


def _write(tmp_path, text, name="s.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


GRID = '[grid]\nscheme = ["midpoint"]\nsystem = ["pendulum"]\nh = [0.5, 0.25]\n'


@pytest.mark.parametrize("text, key, words", [
    ('kind = "convergense"\n' + GRID, "kind", "unknown kind 'convergense'"),
    ('kind = "convergence"\nsteps = 3\n' + GRID, "steps", "unknown key 'steps'"),
    ('kind = "convergence"\n' + GRID + "ordr = [0]\n", "grid.ordr", "unknown parameter 'ordr' of kind 'convergence'; did you mean 'order'?"),
    ('kind = "convergence"\n[defaults]\nscheme = "midpoint"\nsystem = "pendulum"\n[grid]\nh = [0.5, "0.25"]\n', "grid.h[1]",
     "expected a number, got '0.25' (a string)"),
    ('kind = "convergence"\n[defaults]\norder = 2.0\n' + GRID, "defaults.order", "expected an integer, got 2.0"),
    ('kind = "convergence"\n[defaults]\nscheme = "midpoint"\nsystem = "pendulum"\n[grid]\nh = []\n', "grid.h", "empty list"),
    ('kind = "convergence"\n[grid]\n', "grid", "no tasks"),
    ('kind = "convergence"\n' + GRID + "order = [0, 1]\n", "grid.order", "order must be even"),
    ('kind = "convergence"\n[defaults]\nT = 1.0\n' + GRID.replace("0.25", "0.3"), "grid.h", "multiple"),
    ('kind = "convergence"\n' + GRID + "[execution]\nnum_cpus = 0\n", "execution.num_cpus", "must be >= 1"),
    ('kind = "convergence"\n[grid]\nscheme = ["midpoint"]\nsystem = ["pendulum"]\n', "h", "missing parameter"),
    ('kind = "shadow"\n[grid]\nseed = [0, 1, 0]\n', "grid.seed[2]", "appears twice"),
    ('kind = "shadow"\n[grid]\nn_traj = [10, 2.5]\n', "grid.n_traj[1]", "expected an integer"),
    ('kind = "modlanet"\n[grid]\nseed = [0]\n[report]\nx = "size"\n', "report.x", "not a parameter"),
])
def test_bad_specs_name_key_and_file(tmp_path, text, key, words):
    path = _write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: {key}: "), msg
    assert words in msg, msg
    assert info.value.key == key and info.value.source == str(path)


def test_not_toml_and_missing_file(tmp_path):
    with pytest.raises(SpecError, match=r"s\.toml: file: not valid TOML"):
        load(_write(tmp_path, "kind = \n"))
    with pytest.raises(SpecError, match="file: cannot read"):
        load(tmp_path / "missing.toml")


def test_cli_bad_spec_one_line(tmp_path, capsys):
    path = _write(tmp_path, 'kind = "nope"\n' + GRID)
    assert main(["sweep", str(path), "--serial"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("bea sweep: error: ") and "kind" in err and str(path) in err


def test_identity_depends_on_parameters_only():
    a = load({"kind": "convergence", "grid": {"scheme": ["midpoint", "trapezoidal"], "system": ["pendulum"],
                                              "h": [0.5, 0.25]}})
    # the same points in another order, given as [[points]] with ints where floats are meant
    pts = [{"scheme": t.params["scheme"], "system": "pendulum", "h": t.params["h"]} for t in reversed(a.tasks)]
    pts[0]["T"] = 2  # == the default 2.0
    b = load({"kind": "convergence", "points": pts})
    assert sorted((t.task_id, t.seed) for t in a.tasks) == sorted((t.task_id, t.seed) for t in b.tasks)
    assert len({t.task_id for t in a.tasks}) == len({t.seed for t in a.tasks}) == 4
    p = dict(a.tasks[0].params)
    assert task_id("convergence", p) == a.tasks[0].task_id and derived_seed("convergence", p) == a.tasks[0].seed
    assert task_id("convergence", dict(p, h=0.125)) != a.tasks[0].task_id
    assert 0 <= a.tasks[0].seed < 2**31


def test_the_old_name_of_the_order_still_works_with_a_warning():
    """The convergence kind's truncation order is ``order`` (issue 29); ``N`` is accepted for one release in every
    place a parameter can be given, with a DeprecationWarning naming the replacement, and gives the same tasks."""
    base = {"kind": "convergence", "defaults": {"scheme": "midpoint", "system": "pendulum"}}
    new = load(dict(base, grid={"order": [0, 2], "h": [0.5, 0.25]}, points=[{"order": 4, "h": 0.1}]))
    with pytest.warns(DeprecationWarning, match=r"grid\.N: the parameter 'N' of kind 'convergence' is deprecated.*use 'order'"):
        old = load(dict(base, grid={"N": [0, 2], "h": [0.5, 0.25]}, points=[{"order": 4, "h": 0.1}]))
    with pytest.warns(DeprecationWarning, match=r"points\[0\]\.N"):
        old_points = load(dict(base, grid={"order": [0, 2], "h": [0.5, 0.25]}, points=[{"N": 4, "h": 0.1}]))
    assert [t.params for t in old.tasks] == [t.params for t in old_points.tasks] == [t.params for t in new.tasks]
    assert [t.task_id for t in old.tasks] == [t.task_id for t in new.tasks] and len(new.tasks) == 5
    with pytest.raises(SpecError, match="'N' is the deprecated name of 'order'; give 'order' only"):
        load(dict(base, defaults={"scheme": "midpoint", "system": "pendulum", "N": 2, "order": 2}, grid={"h": [0.5]}))
