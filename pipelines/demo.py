"""``python -m bea demo``: Lagrangian Shadow Integration of the pendulum, end to end, on built-in data.

Generates the paper's reference data (400 pendulum trajectories x 5 steps at h = 0.5, positions only),
learns the inverse modified Lagrangian (GP, hyperparameters by marginal likelihood), predicts 10,000
steps from q0 = 0.3, identifies L, H and the velocities with mod_2 and mod_4, fits the LGP and
LGPExact baselines, prints the table next to the paper's numbers and writes the figures (and the
numbers as JSON) to an output directory. About 2 minutes on 2 cores.

    python -m pipelines.demo [--out DIR] [--small] [--no-baselines] [--no-figures]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import List, Optional

from bea.cli import OneLineParser
from bea.files import atomic_write_text

__all__ = ["main", "parser"]


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="bea demo", description="Lagrangian Shadow Integration of the pendulum, end to end "
                                "(data, fit, prediction, identification, baselines), with the paper's numbers alongside.")
    p.add_argument("--out", default="bea-demo", help="directory for the figures and results.json (default: ./bea-demo)")
    p.add_argument("--small", action="store_true", help="a reduced size (100 trajectories, 1,000 steps) for a quick check: "
                   "about 30 s on an idle machine (24 s of CPU measured), a minute on a busy one")
    p.add_argument("--no-baselines", action="store_true", help="skip LGP and LGPExact")
    p.add_argument("--no-figures", action="store_true", help="print the table only")
    p.add_argument("--quiet", action="store_true", help="print only the table")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if not args.out.strip():  # Path('') would be the current folder
        p.error("--out is empty: give a directory for the figures and results.json (e.g. --out bea-demo)")
    import matplotlib

    matplotlib.use("Agg")
    from . import shadow_experiments as experiments

    cfg = experiments.PENDULUM_SMALL if args.small else experiments.PENDULUM_DEMO
    cfg = replace(cfg, progress=False)
    log = (lambda *a, **k: None) if args.quiet else (lambda *a, **k: print(*a, **k, flush=True))
    t0, load_before = time.perf_counter(), _load()
    try:
        res = experiments.run(cfg, baselines=not args.no_baselines, log=log)
    except (ValueError, RuntimeError) as err:
        print(f"bea demo: error: {err}", file=sys.stderr)
        return 2
    log("")
    print(experiments.table(res))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    if not args.no_figures:
        from . import plots

        t = time.perf_counter()
        written = [str(p) for p in plots.save_all(res, out).values()]
        res.timings["figures"] = time.perf_counter() - t
    res.timings["total"] = time.perf_counter() - t0
    summary = {"config": {k: v for k, v in asdict(cfg).items()}, "metrics": res.metrics, "timings": res.timings,
               "info": {k: v for k, v in res.info.items() if k not in ("levels", "level_states")},
               "machine": _machine(load_before)}
    atomic_write_text(out / "results.json", json.dumps(summary, indent=2, default=str))
    written.append(str(out / "results.json"))
    log(f"\nwrote {', '.join(written)}")
    log(f"total {res.timings['total']:.0f} s")
    return 0


def _load() -> Optional[float]:
    """The 1-minute load average (None where the system has none): timings mean little without it."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _machine(load_before: Optional[float]) -> dict:
    """Where and how the numbers were measured: cores, load before and after, CPU time, peak memory (the docs'
    statements of cost are generated from these, ``pipelines.report_tables``)."""
    info = {"cpus": os.cpu_count(), "load_before": load_before, "load_after": _load(), "platform": platform.platform(),
            "torch_threads": None, "cpu_s": None, "peak_rss_gb": None}
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
    except ImportError:  # pragma: no cover - the demo needs torch anyway
        pass
    try:
        import resource

        usage = resource.getrusage(resource.RUSAGE_SELF)
        info["cpu_s"] = round(usage.ru_utime + usage.ru_stime, 1)
        # ru_maxrss is in KiB on Linux, in bytes on macOS
        info["peak_rss_gb"] = round(usage.ru_maxrss / (2**30 if sys.platform == "darwin" else 2**20), 2)
    except ImportError:  # Windows
        pass
    return info


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
