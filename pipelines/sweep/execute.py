r"""Running tasks: serially in this process, or as Ray core tasks on a local instance or a cluster.

Every task runs through :func:`run_task`, in both modes, so that a grid point gives the same
numbers wherever it runs: torch on ``num_cpus`` intra-op threads, float64 as the default dtype, and
the global random generators (torch, NumPy, ``random``) seeded with the task's derived seed; the
previous settings are restored afterwards (in serial mode this is the caller's process). A task that
raises is returned as a ``failed`` record with its traceback; the sweep goes on.

Ray. One task per grid point, ``@ray.remote(num_cpus=..., max_retries=...)``; ``max_retries`` re-runs a
task whose worker process died (killed, out of memory, node lost), not one that raised. If the
retries are used up, the driver records the task as failed with Ray's message. Records are written
by the driver as tasks finish, so workers on other machines need no shared file system. Without
``address``, a local instance is started (``local_cpus`` CPUs, an object store of
``object_store_mb``, no dashboard) and shut down at the end; with ``address`` the sweep joins that
cluster and leaves it running. A Ray connection already open in this process is used as it is.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
import random
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from bea.errors import BeaValueError, MissingDependencyError

from .records import write_record
from .spec import Execution, Spec, Task
from .tasks import Kind

__all__ = ["run_task", "execute", "versions", "host"]

_VERSIONS: Optional[Dict[str, Optional[str]]] = None


def versions() -> Dict[str, Optional[str]]:
    """Versions of Python and of the libraries a task's numbers depend on (this process)."""
    global _VERSIONS
    if _VERSIONS is None:
        from importlib import metadata

        import bea

        v: Dict[str, Optional[str]] = {"python": platform.python_version(), "bea": bea.__version__}
        for dist in ("torch", "numpy", "scipy", "sympy", "gpytorch", "ray"):
            try:
                v[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                v[dist] = None
        _VERSIONS = v
    return dict(_VERSIONS)


def host() -> Dict[str, Any]:
    """Where this process runs (hostname, pid, platform, CPUs; Ray node id inside a Ray worker)."""
    out: Dict[str, Any] = {"hostname": socket.gethostname(), "pid": os.getpid(), "platform": platform.platform(),
                           "cpu_count": os.cpu_count()}
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        try:
            out["ray_node_id"] = ray.get_runtime_context().get_node_id()
        except Exception:  # pragma: no cover - a driver without a runtime context
            pass
    return out


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


@contextlib.contextmanager
def _task_environment(num_cpus: int, seed: int) -> Iterator[None]:
    """torch threads = ``num_cpus``, float64 default dtype, global generators seeded with ``seed``;
    all restored on exit."""
    import numpy as np
    import torch

    threads, dtype = torch.get_num_threads(), torch.get_default_dtype()
    np_state, py_state = np.random.get_state(), random.getstate()
    with torch.random.fork_rng(devices=[]):
        torch.set_num_threads(num_cpus)
        torch.set_default_dtype(torch.float64)
        torch.manual_seed(seed)
        np.random.seed(seed)
        random.seed(seed)
        try:
            yield
        finally:
            torch.set_num_threads(threads)
            torch.set_default_dtype(dtype)
            np.random.set_state(np_state)
            random.setstate(py_state)


def _base(task: Task, executor: str, num_cpus: int) -> Dict[str, Any]:
    return {"task_id": task.task_id, "kind": task.kind, "params": task.params, "seed": task.seed, "origin": task.origin,
            "executor": executor, "resources": {"num_cpus": num_cpus}}


def run_task(kind: Kind, task: Task, num_cpus: int = 1, executor: str = "serial") -> Dict[str, Any]:
    """Run one task and return its record (unsealed: :func:`~pipelines.sweep.records.write_record`
    adds the checksum). Exceptions become a ``failed`` record; ``BaseException`` (interrupts) propagates."""
    rec = _base(task, executor, num_cpus)
    rec.update(started=_now(), host=host(), versions=versions())
    t0 = time.perf_counter()
    with _task_environment(num_cpus, task.seed):
        import torch

        rec["resources"]["torch_threads"] = torch.get_num_threads()
        try:
            out = kind.run(dict(task.params), task.seed)
        except Exception as err:  # recorded, never re-raised: the sweep goes on
            rec.update(status="failed", metrics={}, config={}, info={}, timings={},
                       error={"type": type(err).__name__, "message": str(err), "traceback": traceback.format_exc()})
        else:
            rec.update(status="ok", metrics=out.metrics, config=out.config, info=out.info, timings=dict(out.timings),
                       error=None)
    rec["timings"]["total"] = time.perf_counter() - t0
    rec["finished"] = _now()
    return rec


def _crashed(task: Task, err: BaseException, num_cpus: int) -> Dict[str, Any]:
    """The record of a task that Ray could not complete (worker died and retries used up, ...)."""
    rec = _base(task, "ray", num_cpus)
    rec.update(status="failed", metrics={}, config={}, info={}, timings={}, started=None, finished=_now(),
               host={"note": "no result from the worker; recorded by the driver", **host()}, versions=versions(),
               error={"type": type(err).__name__, "message": str(err), "traceback": ""})
    return rec


def _ray_entry(kind: Kind, task: Task, num_cpus: int) -> Dict[str, Any]:
    # the worker process is ours: run_task sets its torch threads to the task's CPUs
    return run_task(kind, task, num_cpus, executor="ray")


def _progress(spec: Spec, done: int, progress: Optional[bool]):
    from tqdm import tqdm

    return tqdm(total=len(spec.tasks), initial=done, desc=spec.name, unit="task", file=sys.stderr,
                disable=(None if progress is None else not progress), dynamic_ncols=True)


def execute(spec: Spec, todo: Sequence[Task], folder: Path, serial: bool = False, address: Optional[str] = None,
            progress: Optional[bool] = None, on_record: Optional[Callable[[Dict[str, Any]], None]] = None) -> List[Dict[str, Any]]:
    """Run ``todo`` and write each record to ``folder`` as it finishes; returns the records (finish order).
    ``progress``: a bar over all the sweep's tasks (``None``: only on a terminal)."""
    kind = spec.kind_obj
    done = len(spec.tasks) - len(todo)
    out: List[Dict[str, Any]] = []
    with _progress(spec, done, progress) as bar:
        def finish(rec: Dict[str, Any]) -> None:
            write_record(folder, rec)
            out.append(rec)
            bar.update(1)
            failed = sum(r["status"] == "failed" for r in out)
            if failed:
                bar.set_postfix(failed=failed)
            if on_record is not None:
                on_record(rec)

        if serial:
            for task in todo:
                finish(run_task(kind, task, spec.execution.num_cpus, executor="serial"))
        elif todo:
            _execute_ray(kind, todo, spec.execution, address, finish)
    return out


def _execute_ray(kind: Kind, todo: Sequence[Task], ex: Execution, address: Optional[str],
                 finish: Callable[[Dict[str, Any]], None]) -> None:
    try:
        import ray
    except ImportError:
        raise MissingDependencyError("running a sweep on Ray needs the ray package: pip install 'bea[sweep]' "
                          "(or run serially with --serial / serial=True)") from None
    import logging

    started_here = False
    if ray.is_initialized():
        if address is not None:
            raise BeaValueError("Ray is already initialised in this process; omit address to use that connection, "
                             "or call ray.shutdown() first")
    else:
        common = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
        if address is not None:
            ray.init(address=address, **common)
        else:
            ray.init(num_cpus=ex.local_cpus or os.cpu_count() or 1, object_store_memory=ex.object_store_mb * 2**20,
                     **common)
        started_here = True
    pending: Dict[Any, Task] = {}
    try:
        cpus = ray.cluster_resources().get("CPU", 0)
        if cpus < ex.num_cpus:
            raise BeaValueError(f"each task needs num_cpus = {ex.num_cpus}, but the Ray cluster has {cpus:g} CPUs: "
                             "no task could start (lower execution.num_cpus or add nodes)")
        remote = ray.remote(_ray_entry).options(num_cpus=ex.num_cpus, max_retries=ex.max_retries, retry_exceptions=False)
        kind_ref = ray.put(kind)
        pending = {remote.remote(kind_ref, task, ex.num_cpus): task for task in todo}
        refs = list(pending)
        while refs:
            ready, refs = ray.wait(refs, num_returns=1)
            for ref in ready:
                task = pending.pop(ref)
                try:
                    rec = ray.get(ref)
                except ray.exceptions.RayError as err:
                    rec = _crashed(task, err, ex.num_cpus)
                finish(rec)
    finally:
        if pending and not started_here:  # interrupted on a shared cluster: do not leave our tasks behind
            for ref in pending:
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # pragma: no cover - already finished or gone
                    pass
        if started_here:
            ray.shutdown()
