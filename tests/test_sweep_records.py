"""Records, resume and failures of serial sweeps; the shadow and ModLaNet kinds at tiny size."""

import json
import math
from pathlib import Path

import pytest

from bea.cli import main
from pipelines.sweep import Kind, OutputExists, Param, TaskOutput, register, run
from pipelines.sweep import tasks as T
from pipelines.sweep.records import CorruptRecord, read_record, write_record


def _counting(p, seed):
    """A cheap task: counts its executions in marker files; interrupts or raises on request."""
    marker = Path(p["marker_dir"]) / f"ran-{p['i']}"
    with open(marker, "a") as f:
        f.write("x")
    if p["i"] == p["interrupt_at"] and not (Path(p["marker_dir"]) / "interrupted").exists():
        (Path(p["marker_dir"]) / "interrupted").touch()
        raise KeyboardInterrupt  # as Ctrl-C in the middle of the sweep
    if p["i"] == p["fail_at"]:
        raise ValueError(f"deliberate failure of task {p['i']}")
    return TaskOutput({"value": math.sqrt(p["i"]) + seed / 2**31, "nan": float("nan")}, info={"i": p["i"]})


@pytest.fixture
def counting_kind():
    kind = register(Kind("counting", lambda: {"i": Param(int), "marker_dir": Param(str), "interrupt_at": Param(int, -1),
                                               "fail_at": Param(int, -1)}, _counting))
    yield kind
    T.KINDS.pop("counting")


def _spec(tmp_path, **defaults):
    (tmp_path / "markers").mkdir(exist_ok=True)
    return {"kind": "counting", "name": "count", "defaults": {"marker_dir": str(tmp_path / "markers"), **defaults},
            "grid": {"i": list(range(12))}}


def _runs(tmp_path):
    return {i: len((tmp_path / "markers" / f"ran-{i}").read_text()) for i in range(12)
            if (tmp_path / "markers" / f"ran-{i}").exists()}


def test_record_roundtrip_and_checksum(tmp_path, counting_kind):
    res = run(_spec(tmp_path), out=tmp_path / "out", serial=True, progress=False, plots=False)
    rec = res.records[3]
    assert rec["status"] == "ok" and rec["metrics"]["value"] == math.sqrt(3) + rec["seed"] / 2**31
    assert math.isnan(rec["metrics"]["nan"])  # stored as {"$float": "nan"}: the file stays standard JSON
    path = tmp_path / "out" / "records" / f"{rec['task_id']}.json"
    text = path.read_text()
    assert "NaN" not in text and json.loads(text)["metrics"]["nan"] == {"$float": "nan"}
    for key in ("params", "metrics", "timings", "versions", "host", "checksum", "seed", "started", "finished"):
        assert key in rec
    assert rec["versions"]["torch"] and rec["host"]["hostname"] and rec["resources"] == {"num_cpus": 1, "torch_threads": 1}
    # a changed number, a truncated file, a record under another task's name: all refused
    data = json.loads(text)
    data["metrics"]["value"] = 2.0
    path.write_text(json.dumps(data))
    with pytest.raises(CorruptRecord, match="checksum"):
        read_record(path)
    path.write_text(text[: len(text) // 2])
    with pytest.raises(CorruptRecord, match="not JSON"):
        read_record(path)
    other = tmp_path / "out" / "records" / f"{res.records[4]['task_id']}.json"
    other.write_text(text)
    with pytest.raises(CorruptRecord, match="task_id"):
        read_record(other)
    assert write_record(tmp_path, dict(rec)).name == f"{rec['task_id']}.json"  # re-sealing a read record verifies
    assert read_record(tmp_path / f"{rec['task_id']}.json")["metrics"]["value"] == rec["metrics"]["value"]


def test_interrupted_sweep_resumes_missing_tasks_only(tmp_path, counting_kind):
    spec = _spec(tmp_path, interrupt_at=5)
    with pytest.raises(KeyboardInterrupt):
        run(spec, out=tmp_path / "out", serial=True, progress=False)
    assert len(list((tmp_path / "out" / "records").glob("*.json"))) == 5  # tasks 0-4 finished and recorded
    with pytest.raises(OutputExists, match="--resume"):
        run(spec, out=tmp_path / "out", serial=True, progress=False)
    res = run(spec, out=tmp_path / "out", serial=True, resume=True, progress=False)
    assert (res.ran, res.reused, len(res.ok)) == (7, 5, 12)
    assert _runs(tmp_path) == {**{i: 1 for i in range(12)}, 5: 2}  # task 5 was interrupted once, then re-run
    again = run(spec, out=tmp_path / "out", serial=True, resume=True, progress=False)
    assert (again.ran, again.reused) == (0, 12) and _runs(tmp_path)[0] == 1
    rows = (tmp_path / "out" / "results.csv").read_text().splitlines()
    assert len(rows) == 13 and rows[0].startswith("task_id,status,i,marker_dir,interrupt_at,fail_at,derived_seed,nan,value,seconds,hostname,error_message")


def test_corrupt_and_partial_records_rerun(tmp_path, counting_kind):
    spec = _spec(tmp_path)
    first = run(spec, out=tmp_path / "out", serial=True, progress=False, plots=False)
    folder = tmp_path / "out" / "records"
    paths = [folder / f"{first.records[i]['task_id']}.json" for i in (2, 7, 9)]
    paths[0].write_bytes(paths[0].read_bytes()[:100])  # partial write
    data = json.loads(paths[1].read_text())
    data["metrics"]["value"] = 1e9  # changed after writing
    paths[1].write_text(json.dumps(data))
    paths[2].write_text("garbage")
    (folder / ".leftover.json.tmp").write_text("{")  # temporary file of an interrupted write
    res = run(spec, out=tmp_path / "out", serial=True, resume=True, progress=False, plots=False)
    assert (res.ran, res.reused, len(res.corrupt)) == (3, 9, 3)
    assert _runs(tmp_path) == {i: 2 if i in (2, 7, 9) else 1 for i in range(12)}
    assert res.metric("value") == first.metric("value")
    assert not (folder / ".leftover.json.tmp").exists()


def test_failed_task_recorded_others_complete(tmp_path, counting_kind, capsys):
    res = run(_spec(tmp_path, fail_at=4), out=tmp_path / "out", serial=True, progress=False, plots=False)
    assert len(res.ok) == 11 and [r["params"]["i"] for r in res.failed] == [4]
    err = res.failed[0]["error"]
    assert err["type"] == "ValueError" and err["message"] == "deliberate failure of task 4"
    assert "Traceback" in err["traceback"] and "_counting" in err["traceback"]
    assert "deliberate failure of task 4" in (tmp_path / "out" / "results.csv").read_text()
    # the CLI: failed tasks give exit status 1 and one line each; resume re-runs the failed task only
    spec_path = tmp_path / "s.toml"
    spec_path.write_text(f'kind = "counting"\n[defaults]\nmarker_dir = "{tmp_path / "markers"}"\nfail_at = 4\n'
                         "[grid]\ni = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]\n")
    assert main(["sweep", str(spec_path), "--serial", "--resume", "--out", str(tmp_path / "out"), "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "12 tasks, 11 ok, 1 failed; ran 1, reused 11" in out and "deliberate failure of task 4" in out
    assert _runs(tmp_path)[4] == 2 and _runs(tmp_path)[3] == 1


def test_shadow_kind_tiny(tmp_path):
    spec = {"kind": "shadow", "defaults": {"n_traj": 12, "steps": 20, "orders": [2], "level_points": 5, "validation_traj": 4,
                                           "lsi": {"iterations": 3}},
            "grid": {"n_traj": [8, 12], "seed": [0, 1]}}
    with pytest.raises(Exception, match="both"):
        run(spec, out=tmp_path / "bad", serial=True, progress=False)
    del spec["defaults"]["n_traj"]
    res = run(spec, out=tmp_path / "out", serial=True, progress=False)
    assert len(res.ok) == 4, [r["error"] for r in res.failed]
    traj = res.metric("traj_lsi")
    assert all(0 < t < 0.1 for t in traj) and len(set(traj)) == 4  # four data draws (seeds from the parameters)
    cfg = res.records[0]["config"]
    assert cfg["data_seed"] == res.records[0]["seed"] and cfg["n_traj"] == 8 and cfg["steps"] == 20
    rows = [s for s in res.summary if s["metric"] == "traj_lsi"]
    assert [(r["n_traj"], r["n"]) for r in rows] == [(8, 2), (12, 2)]
    r8 = [t for t, rec in zip(traj, res.records) if rec["params"]["n_traj"] == 8]
    assert rows[0]["mean"] == pytest.approx(sum(r8) / 2, rel=1e-12) and rows[0]["min"] == min(r8)
    assert (tmp_path / "out" / "summary.csv").exists() and (tmp_path / "out" / "plots" / "traj_lsi.png").stat().st_size > 1000


def test_modlanet_kind_tiny(tmp_path):
    spec = {"kind": "modlanet", "defaults": {"epochs": 2, "baselines": [], "extend_to": [], "position_only": False,
                                             "n_traj": 4, "n_states": 2, "variational_h": 0.05, "t_rollout": 0.5},
            "grid": {"seed": [0, 1]}}
    res = run(spec, out=tmp_path / "out", serial=True, progress=False, plots=False)
    assert len(res.ok) == 2, [r["error"] for r in res.failed]
    m = res.records[0]["metrics"]
    assert m["modlanet.states"] == 2 and m["modlanet.params"] > 100 and m["modlanet.val_best"] <= m["modlanet.val_initial"]
    assert "modlanet_variational.mse_E" in m and res.records[0]["config"]["seed"] == res.records[0]["seed"]
    assert res.metric("modlanet.val_initial")[0] != res.metric("modlanet.val_initial")[1]  # other seed, other network
