"""Benchmark of sweeps (pipelines.sweep): the same grid serially and on a local Ray instance, in one run.

    python benchmarks/sweep.py [--spec sweeps/lsi.toml] [--cpus 2] [--set steps=2000]

Default grid: ``sweeps/lsi.toml``, 24 LSI tasks (2 step sizes x 4 data sizes x 3 seeds, one CPU each).
Both runs start from the same warm derivation cache (a warm-up task outside the grid fills it), so
that neither pays for the SymPy derivations; the serial run's process is then warm, so each Ray worker
runs the same warm-up task first, counted as Ray's start-up. Prints the machine's load, the serial wall time, Ray's
start-up and the wall time of the tasks on Ray with ``--cpus`` CPUs, the speed-up as a ratio
(serial / Ray, with and without start-up; ideal: the number of CPUs), and whether the two runs gave
the same metrics to the last bit.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _with_defaults(path: str, settings: list):
    """The spec file, or its table with ``[defaults]`` entries overridden (``KEY=VALUE``, VALUE in TOML)."""
    if not settings:
        return path
    import tomllib

    data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: expected KEY=VALUE, e.g. --set steps=2000")
        data.setdefault("defaults", {})[key.strip()] = tomllib.loads(f"v = {value}")["v"]
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", default=str(ROOT / "sweeps" / "lsi.toml"))
    ap.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray instance (default 2)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a [defaults] entry of the spec (a TOML value), e.g. --set steps=2000 for longer tasks")
    args = ap.parse_args()
    os.environ.setdefault("BEA_CACHE_DIR", tempfile.mkdtemp(prefix="bea-bench-sweep-"))  # inherited by Ray's workers

    from pipelines.sweep import load, run
    from pipelines.sweep.spec import Task
    from pipelines.sweep.execute import run_task
    from pipelines.sweep.records import derived_seed, task_id

    spec = load(_with_defaults(args.spec, args.set))
    t = spec.tasks[0]
    warm = dict(t.params, seed=10**6)  # outside the grid: fills the derivation cache for both runs
    t0 = time.perf_counter()
    run_task(spec.kind_obj, Task(spec.kind, warm, task_id(spec.kind, warm), derived_seed(spec.kind, warm), "warm-up"))
    t_warm = time.perf_counter() - t0
    print(f"{spec.name}: {len(spec.tasks)} tasks of kind {spec.kind!r}, {spec.execution.num_cpus} CPU each; "
          f"warm-up task {t_warm:.1f} s; load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"({os.cpu_count()} CPUs)", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        serial = run(spec, out=Path(tmp) / "serial", serial=True, progress=False, plots=False)
        t_serial = time.perf_counter() - t0
        print(f"serial: {t_serial:.1f} s ({t_serial / len(spec.tasks):.2f} s per task)", flush=True)

        import ray

        t0 = time.perf_counter()
        ray.init(num_cpus=args.cpus, include_dashboard=False, object_store_memory=200 * 2**20, log_to_driver=False,
                 logging_level=logging.ERROR)
        t_init = time.perf_counter() - t0
        # the serial run's process is warm (imports, compiled series functions) after the warm-up task;
        # give each Ray worker the same warm-up, concurrently, and count it as start-up
        from pipelines.sweep.execute import _ray_entry

        t0 = time.perf_counter()
        warm_task = Task(spec.kind, warm, task_id(spec.kind, warm), derived_seed(spec.kind, warm), "warm-up")
        entry = ray.remote(_ray_entry).options(num_cpus=spec.execution.num_cpus)
        ray.get([entry.remote(spec.kind_obj, warm_task, spec.execution.num_cpus) for _ in range(args.cpus // spec.execution.num_cpus)])
        t_workers = time.perf_counter() - t0
        t_init += t_workers
        try:
            t0 = time.perf_counter()
            on_ray = run(spec, out=Path(tmp) / "ray", progress=False, plots=False)
            t_ray = time.perf_counter() - t0
        finally:
            ray.shutdown()
        same = all(a["metrics"] == b["metrics"] for a, b in zip(serial.records, on_ray.records))
        print(f"Ray ({args.cpus} CPUs): start-up {t_init:.1f} s (of which {t_workers:.1f} s warming the workers), tasks {t_ray:.1f} s")
        print(f"speed-up serial / Ray: {t_serial / (t_init + t_ray):.2f}x with start-up, {t_serial / t_ray:.2f}x without "
              f"(ideal {args.cpus}x); metrics identical: {same}; failed: {len(serial.failed)} serial, {len(on_ray.failed)} Ray")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
