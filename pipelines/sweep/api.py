"""``run``: a sweep end to end -- validate, skip what is done, execute, record, report.

Output folder (``out``)::

    spec.toml | spec.json   the specification as given
    sweep.json              manifest: name, kind, source, task ids in order, counts, executor, times
    records/<task_id>.json  one verified record per task (pipelines.sweep.records)
    results.csv             the tidy table, one row per task
    slopes.csv | summary.csv  observed orders (convergence) or seed statistics (other kinds)
    plots/*.png             log-log error against h with slopes, or metrics against data size
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

from bea.errors import BeaOSError
from bea.files import atomic_write_bytes

from . import report as _report
from .execute import execute
from .records import scan
from .spec import Spec, check_name, load

__all__ = ["run", "SweepResults", "OutputExists"]


class OutputExists(BeaOSError, FileExistsError):
    """The output folder holds records of an earlier run and ``resume`` was not asked for."""


@dataclass
class SweepResults:
    """The outcome of :func:`run`. ``records``: one per task, in the specification's order (the
    verified record, whether run now or kept from an earlier run); ``ran``: tasks executed by this
    call; ``reused``: finished records kept (``resume``); ``corrupt``: problems of the records found
    corrupt or partial, whose tasks ran again; ``files``: the table, summary and plot paths;
    ``slopes`` / ``summary``: the rows of ``slopes.csv`` / ``summary.csv``."""

    spec: Spec
    out: Path
    records: List[Dict[str, Any]]
    ran: int
    reused: int
    corrupt: List[str] = field(default_factory=list)
    files: Dict[str, Any] = field(default_factory=dict)
    slopes: List[Dict[str, Any]] = field(default_factory=list)
    summary: List[Dict[str, Any]] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    @property
    def ok(self) -> List[Dict[str, Any]]:
        return [r for r in self.records if r["status"] == "ok"]

    @property
    def failed(self) -> List[Dict[str, Any]]:
        return [r for r in self.records if r["status"] != "ok"]

    def metric(self, name: str) -> List[Any]:
        """The metric ``name`` of every task, in order (``None`` where a task failed or lacks it)."""
        return [r["metrics"].get(name) if r["status"] == "ok" else None for r in self.records]

    def table(self):
        """Columns and rows of ``results.csv`` (:func:`pipelines.sweep.report.table`)."""
        return _report.table(self.records, list(self.spec.kind_obj.params()))

    def __str__(self) -> str:
        s = (f"sweep {self.spec.name!r} ({self.spec.kind}): {len(self.records)} tasks, {len(self.ok)} ok, "
             f"{len(self.failed)} failed; ran {self.ran}, reused {self.reused}")
        if self.corrupt:
            s += f", {len(self.corrupt)} corrupt record(s) re-run"
        return s + f"; results in {self.out}"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def run(spec_or_path: Union[Spec, str, os.PathLike, Mapping[str, Any]], out: Union[str, os.PathLike, None] = None,
        address: Optional[str] = None, serial: bool = False, resume: bool = False, progress: Optional[bool] = None,
        plots: bool = True) -> SweepResults:
    """Run a sweep.

    ``spec_or_path``: a TOML file, a dict of the same layout, or a :class:`~pipelines.sweep.spec.Spec`.
    ``out``: the output folder (default ``sweep-results/<name>``). ``serial``: run in this process,
    without Ray; otherwise Ray -- a local instance, or the cluster at ``address`` (``"auto"``,
    ``"HOST:6379"``). ``resume``: keep the verified finished records already in ``out`` and run the
    rest (missing, failed, corrupt); without it, ``out`` must not hold records yet
    (:class:`OutputExists`). ``progress``: a bar counting finished tasks (``None``: on a terminal).
    ``plots``: also draw the figures."""
    spec = load(spec_or_path)
    # a Spec built by hand skips parse(): its name is checked here too before it becomes a folder
    out = Path(out) if out is not None else Path("sweep-results") / check_name(spec.name, spec.source)
    rec_dir = out / "records"
    rec_dir.mkdir(parents=True, exist_ok=True)
    if not resume:
        earlier = list(rec_dir.glob("*.json"))
        if earlier:
            raise OutputExists(f"{out} already holds {len(earlier)} record(s) of an earlier run: resume it (--resume, "
                               "resume=True) or choose another output folder (--out)")
    good, corrupt = scan(rec_dir, [t.task_id for t in spec.tasks])
    finished = {tid: r for tid, r in good.items() if r["status"] == "ok"}
    todo = [t for t in spec.tasks if t.task_id not in finished]
    spec_name = "spec.toml" if spec.source != "<dict>" else "spec.json"
    atomic_write_bytes(out / spec_name, spec.text.encode())
    manifest = {"name": spec.name, "kind": spec.kind, "description": spec.description, "source": spec.source,
                "tasks": [t.task_id for t in spec.tasks], "executor": "serial" if serial else "ray",
                "address": address, "started": _now(), "finished": None, "resume": resume}
    atomic_write_bytes(out / "sweep.json", json.dumps(manifest, indent=1).encode())

    new = execute(spec, todo, rec_dir, serial=serial, address=address, progress=progress)
    by_id = {**finished, **{r["task_id"]: r for r in new}}
    # re-read what was written: the results hold exactly the verified files
    written, problems = scan(rec_dir, [r["task_id"] for r in new])
    if problems:  # pragma: no cover - a file damaged between our write and our read
        raise BeaOSError(f"records written by this run do not verify: {problems[:3]}")
    by_id.update(written)
    records = [by_id[t.task_id] for t in spec.tasks]
    rep = _report.write(spec, records, out, plots=plots)
    manifest.update(finished=_now(), counts={"tasks": len(records), "ok": sum(r["status"] == "ok" for r in records),
                                             "failed": sum(r["status"] != "ok" for r in records), "ran": len(new),
                                             "reused": len(finished), "corrupt": len(corrupt)})
    atomic_write_bytes(out / "sweep.json", json.dumps(manifest, indent=1).encode())
    return SweepResults(spec, out, records, ran=len(new), reused=len(finished), corrupt=corrupt, files=rep["files"],
                        slopes=rep["slopes"], summary=rep["summary"], notes=rep["notes"])
