r"""Tables and plots from a sweep's records.

* ``results.csv`` -- the tidy table: one row per task (an observation), one column per variable:
  ``task_id, status``, the parameters (lists as JSON text), ``derived_seed``, every metric, ``seconds`` (the
  task's wall time), ``hostname`` and ``error`` (the message of a failed task).
* ``slopes.csv`` (kinds with ``slopes``, i.e. ``convergence``) -- the observed order per group of
  tasks that differ only in the step size: the least-squares slope of :math:`\log \text{error}`
  against :math:`\log h` (:func:`integrators.convergence.observed_order`), next to the expected order.
  ``plots/convergence*.png``: log-log error against ``h`` per (scheme, order, system), slopes in the legend
  and the expected slope dotted.
* ``summary.csv`` (other kinds) -- per group of tasks that differ only in ``seed``, and per metric:
  ``n, mean, std`` (sample, ``n - 1``), ``min, max``. ``plots/<metric>.png``: the metric against the
  data size (the kind's ``x``, e.g. ``n_traj``) -- every seed a dot, the mean a line, the min-max
  spread a band -- one line per combination of the other varying parameters.

Plots use matplotlib's object API (no pyplot state, no backend change) and are written atomically.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import OrderedDict
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bea.files import atomic_write_bytes

from .records import canonical
from .spec import Spec

__all__ = ["table", "slopes", "seed_summary", "write"]


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return str(v)


def _param_keys(records: Sequence[Dict[str, Any]], order: Sequence[str] = ()) -> List[str]:
    """Parameter names of ``records``, those in ``order`` (the kind's schema) first, in that order."""
    keys: "OrderedDict[str, None]" = OrderedDict()
    present = {k for r in records for k in r["params"]}
    for k in order:
        if k in present:
            keys[k] = None
    for r in records:
        for k in r["params"]:
            keys[k] = None
    return list(keys)


def _metric_keys(records: Sequence[Dict[str, Any]]) -> List[str]:
    keys: "OrderedDict[str, None]" = OrderedDict()
    for r in records:
        for k in r.get("metrics", {}):
            keys[k] = None
    return list(keys)


def table(records: Sequence[Dict[str, Any]], order: Sequence[str] = ()) -> Tuple[List[str], List[Dict[str, Any]]]:
    """Columns and rows of the tidy table (one row per task); parameters in ``order`` first."""
    pk, mk = _param_keys(records, order), _metric_keys(records)
    clash = (set(pk) | set(_FIXED)) & set(mk)
    mcols = [f"metric.{k}" if k in clash else k for k in mk]
    cols = ["task_id", "status", *pk, "derived_seed", *mcols, "seconds", "hostname", "error_message"]
    rows = []
    for r in records:
        row = {"task_id": r["task_id"], "status": r["status"], "derived_seed": r["seed"],
               "seconds": r.get("timings", {}).get("total"), "hostname": (r.get("host") or {}).get("hostname"),
               "error_message": (r.get("error") or {}).get("message")}
        row.update({k: r["params"].get(k) for k in pk})
        row.update({c: r.get("metrics", {}).get(k) for c, k in zip(mcols, mk)})
        rows.append(row)
    return cols, rows


_FIXED = ("task_id", "status", "derived_seed", "seconds", "hostname", "error_message")


def _csv(path: Path, cols: Sequence[str], rows: Sequence[Dict[str, Any]]) -> Path:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for row in rows:
        w.writerow([_cell(row.get(c)) for c in cols])
    atomic_write_bytes(path, buf.getvalue().encode())
    return path


def _varying(records: Sequence[Dict[str, Any]], keys: Sequence[str]) -> List[str]:
    return [k for k in keys if len({canonical(r["params"].get(k)) for r in records}) > 1]


def _groups(records: Sequence[Dict[str, Any]], without: Sequence[str]) -> "OrderedDict[str, List[Dict[str, Any]]]":
    out: "OrderedDict[str, List[Dict[str, Any]]]" = OrderedDict()
    for r in records:
        key = canonical({k: v for k, v in r["params"].items() if k not in without})
        out.setdefault(key, []).append(r)
    return out


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# ------------------------------------------------------------------------------------------- slopes
def slopes(records: Sequence[Dict[str, Any]], x: str = "h", metric: str = "error",
           order: Sequence[str] = ()) -> List[Dict[str, Any]]:
    """Observed orders: per group of tasks differing only in ``x``, the least-squares slope of
    :math:`\\log` ``metric`` against :math:`\\log x` over the finished tasks with a positive metric
    (``None`` with fewer than two such points)."""
    from integrators.convergence import observed_order

    out = []
    for _, group in _groups(records, (x,)).items():
        pts = sorted((r["params"][x], r["metrics"][metric]) for r in group
                     if r["status"] == "ok" and _finite(r["metrics"].get(metric)) and r["metrics"][metric] > 0)
        slope = observed_order([p[0] for p in pts], [p[1] for p in pts]) if len({p[0] for p in pts}) >= 2 else None
        first = group[0]
        row = {k: first["params"][k] for k in _param_keys([first], order) if k != x}
        row.update(points=len(pts), failed=sum(r["status"] != "ok" for r in group),
                   x_min=pts[0][0] if pts else None, x_max=pts[-1][0] if pts else None, slope=slope,
                   expected=(first.get("info") or {}).get("expected_order"))
        row["deviation"] = None if slope is None or row["expected"] is None else slope - row["expected"]
        out.append(row)
    return out


def _plot_slopes(records, slope_rows, x: str, metric: str, folder: Path, prefix: str = "convergence",
                 order: Sequence[str] = ()) -> List[Path]:
    from matplotlib.figure import Figure

    ok = [r for r in records if r["status"] == "ok"]
    if not ok:
        return []
    keys = _param_keys(ok, order)
    vary = _varying(ok, [k for k in keys if k != x])
    row_key = "system" if "system" in vary else None
    col_key = "scheme" if "scheme" in vary else None
    line_key = next((k for k in ("order", "N") if k in vary), None)  # "N": records written before the rename
    fig_keys = [k for k in vary if k not in (row_key, col_key, line_key)]
    paths = []
    by_fig = _groups(ok, [k for k in keys if k not in fig_keys])
    slope_of = {canonical({k: v for k, v in s.items() if k in keys}): s for s in slope_rows}
    for i, (_, frecs) in enumerate(by_fig.items()):
        rows = sorted({canonical(r["params"].get(row_key)) for r in frecs}) if row_key else ["null"]
        cols = sorted({canonical(r["params"].get(col_key)) for r in frecs}) if col_key else ["null"]
        fig = Figure(figsize=(3.6 * len(cols), 2.9 * len(rows)), layout="constrained")
        axes = fig.subplots(len(rows), len(cols), squeeze=False)
        for g in _groups(frecs, (x,)).values():
            p = g[0]["params"]
            ax = axes[rows.index(canonical(p.get(row_key))) if row_key else 0][cols.index(canonical(p.get(col_key))) if col_key else 0]
            pts = sorted((r["params"][x], r["metrics"].get(metric)) for r in g if _finite(r["metrics"].get(metric))
                         and r["metrics"][metric] > 0)
            if not pts:
                continue
            s = slope_of.get(canonical({k: v for k, v in p.items() if k != x}), {})
            label = (f"{line_key} = {p[line_key]}: " if line_key else "") + (
                f"slope {s['slope']:.2f}" if s.get("slope") is not None else "one point")
            if s.get("expected") is not None:
                label += f" (expected {s['expected']})"
            hs, es = [q[0] for q in pts], [q[1] for q in pts]
            line, = ax.loglog(hs, es, "o-", ms=3, label=label)
            if s.get("expected") is not None and len(hs) >= 2:
                ax.loglog(hs, [es[-1] * (h / hs[-1]) ** s["expected"] for h in hs], ":", color=line.get_color(), lw=1)
        for a, rv in enumerate(rows):
            for b, cv in enumerate(cols):
                ax = axes[a][b]
                title = ", ".join(str(json.loads(v)) for v in (rv, cv) if v != "null")
                ax.set_title(title, fontsize=9)
                ax.set_xlabel(x)
                ax.set_ylabel(metric)
                if ax.lines:
                    ax.legend(fontsize=6)
        fixed = frecs[0]["params"]
        sup = ", ".join(f"{k} = {fixed[k]}" for k in fig_keys)
        fig.suptitle((sup + "; " if sup else "") + "dotted: expected slope", fontsize=10)
        name = prefix + (f"_{i + 1}" if len(by_fig) > 1 else "") + ".png"
        paths.append(_save(fig, folder / name))
    return paths


# ------------------------------------------------------------------------------------------- seeds
def _xval(r: Dict[str, Any], x: Optional[str]) -> Any:
    if x is None:
        return None
    v = r["params"].get(x)
    return v if v is not None else (r.get("config") or {}).get(x)


def seed_summary(records: Sequence[Dict[str, Any]], metrics: Optional[Sequence[str]] = None,
                 order: Sequence[str] = ()) -> List[Dict[str, Any]]:
    """Per group of tasks differing only in ``seed`` and per metric: ``n`` (finite values), ``mean``,
    ``std`` (sample), ``min``, ``max``, and ``failed`` (tasks of the group that failed)."""
    metrics = list(metrics) if metrics is not None else _metric_keys(records)
    out = []
    for g in _groups(records, ("seed",)).values():
        base = {k: g[0]["params"][k] for k in _param_keys([g[0]], order) if k != "seed"}
        failed = sum(r["status"] != "ok" for r in g)
        for m in metrics:
            vals = [r["metrics"][m] for r in g if r["status"] == "ok" and _finite(r["metrics"].get(m))]
            n = len(vals)
            mean = sum(vals) / n if n else None
            std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1)) if n > 1 else (0.0 if n else None)
            out.append({**base, "metric": m, "n": n, "failed": failed, "mean": mean, "std": std,
                        "min": min(vals) if vals else None, "max": max(vals) if vals else None})
    return out


def _plot_seeds(records, metrics: Sequence[str], x: Optional[str], folder: Path, order: Sequence[str] = ()) -> List[Path]:
    from matplotlib.figure import Figure

    ok = [r for r in records if r["status"] == "ok"]
    if not ok:
        return []
    keys = _param_keys(ok, order)
    lines_by = [k for k in _varying(ok, keys) if k not in ("seed", x)]
    paths = []
    for m in metrics:
        have = [r for r in ok if _finite(r["metrics"].get(m)) and _finite(_xval(r, x))]
        if not have:
            continue
        fig = Figure(figsize=(5.5, 3.6), layout="constrained")
        ax = fig.subplots()
        for g in _groups(have, ["seed", x] + [k for k in keys if k not in lines_by and k not in ("seed", x)]).values():
            p = g[0]["params"]
            label = ", ".join(f"{k} = {p.get(k)}" for k in lines_by) or m
            xs = sorted({_xval(r, x) for r in g})
            per = [[r["metrics"][m] for r in g if _xval(r, x) == xv] for xv in xs]
            means = [sum(v) / len(v) for v in per]
            line, = ax.plot(xs, means, "-", label=label)
            c = line.get_color()
            ax.fill_between(xs, [min(v) for v in per], [max(v) for v in per], color=c, alpha=0.2, lw=0)
            ax.plot([_xval(r, x) for r in g], [r["metrics"][m] for r in g], "o", color=c, ms=3, alpha=0.7)
        if all(r["metrics"][m] > 0 for r in have):
            ax.set_yscale("log")
        ax.set_xlabel(x or "")
        ax.set_ylabel(m)
        ax.set_title(f"{m}: seeds as dots, mean line, min-max band", fontsize=9)
        if lines_by:
            ax.legend(fontsize=7)
        paths.append(_save(fig, folder / f"{_safe(m)}.png"))
    return paths


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in name)


def _save(fig, path: Path) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    atomic_write_bytes(path, buf.getvalue())
    return path


# ------------------------------------------------------------------------------------------- all
def write(spec: Spec, records: Sequence[Dict[str, Any]], out: Path, plots: bool = True) -> Dict[str, Any]:
    """Write the table, the slopes or seed summary, and the plots under ``out``; returns
    ``{"files": {name: path}, "slopes": [...], "summary": [...], "notes": [...]}``."""
    out = Path(out)
    kind = spec.kind_obj
    x = spec.report.get("x", kind.x)
    metrics = spec.report.get("metrics", list(kind.metrics))
    files: Dict[str, Any] = {}
    notes: List[str] = []
    order = list(kind.params())
    cols, rows = table(records, order)
    files["table"] = _csv(out / "results.csv", cols, rows)
    present = set(_metric_keys(records))
    missing = [m for m in metrics if m not in present]
    if missing and any(r["status"] == "ok" for r in records):
        notes.append(f"metric(s) not in any record, not plotted: {', '.join(missing)}")
    metrics = [m for m in metrics if m in present]
    empty = [m for m in metrics if not any(r["status"] == "ok" and _finite(r["metrics"].get(m)) for r in records)]
    if empty:
        notes.append(f"metric(s) without a finite value in any record, not plotted: {', '.join(empty)}")
    result: Dict[str, Any] = {"files": files, "slopes": [], "summary": [], "notes": notes}
    plot_dir = out / "plots"
    if plots:
        plot_dir.mkdir(exist_ok=True)
    if kind.slopes:
        srows = []
        for m in metrics:
            for s in slopes(records, x, m, order):
                srows.append({**s, "metric": m})
        result["slopes"] = srows
        if srows:
            scols = [k for k in srows[0] if k not in ("metric", "points", "failed", "x_min", "x_max", "slope", "expected",
                                                      "deviation")]
            files["slopes"] = _csv(out / "slopes.csv", scols + ["metric", "points", "failed", "x_min", "x_max", "slope",
                                                               "expected", "deviation"], srows)
        if plots:
            files["plots"] = [p for m in metrics for p in _plot_slopes(
                records, [s for s in srows if s["metric"] == m], x, m, plot_dir,
                "convergence" if len(metrics) == 1 else f"convergence_{_safe(m)}", order)]
    else:
        summ = seed_summary(records, order=order)
        result["summary"] = summ
        if summ:
            skeys = [k for k in summ[0] if k not in ("metric", "n", "failed", "mean", "std", "min", "max")]
            files["summary"] = _csv(out / "summary.csv", skeys + ["metric", "n", "failed", "mean", "std", "min", "max"], summ)
        if plots:
            files["plots"] = _plot_seeds(records, metrics, x, plot_dir, order)
    return result
