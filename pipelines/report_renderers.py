"""Markdown for the generated regions of the docs (:mod:`pipelines.report_tables`), one function per region,
each from the parsed JSON that the code wrote. Numbers keep three significant digits: the runs they come from
agree to about that (the demo is deterministic up to the order of floating-point sums)."""

from __future__ import annotations

from typing import List, Optional

#: the original paper's numbers (Ober-Blöbaum & Offen), for the same experiment
PAPER = {"traj_lsi": "4.9e-4", "ls_inv": "0.102", "ls_rec2": "0.0104", "ls_lgp": "0.0261 / 3.4e-5"}


def num(x: Optional[float]) -> str:
    """Three significant digits: ``0.0112``, ``2.61e-6``, ``0.995``; ``–`` for a missing value."""
    if x is None:
        return "–"
    if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e4):
        mantissa, exponent = f"{x:.2e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    return f"{x:.3g}"


def _steps(n: int) -> str:
    return f"{n:,}"


def demo_table(d: dict) -> str:
    """The README's table of the pendulum experiment (``bea demo`` at full size) beside the paper's numbers."""
    m, cfg = d["metrics"], d["config"]
    steps, bsteps = cfg["steps"], d["info"].get("baseline_steps") or cfg.get("baseline_steps")
    rows: List[tuple] = [
        (f"max \\|q − q_ref\\|, LSI, {_steps(steps)} steps", f"**{num(m['traj_lsi'])}**", PAPER["traj_lsi"])]
    if "traj_lgp" in m:
        rows += [(f"max \\|q − q_ref\\|, LSI / LGP / LGPExact, first {_steps(bsteps)} steps",
                  f"{num(m.get(f'traj_lsi_{bsteps}'))} / {num(m['traj_lgp'])} / {num(m['traj_lgpe'])}", "–")]
    rows += [("level-set error, `H` of `L_inv` (uncorrected)", num(m["ls_inv"]), PAPER["ls_inv"]),
             ("level-set error, `H_rec[2]` = `H(mod_2(L_inv))`", f"**{num(m['ls_rec2'])}**", PAPER["ls_rec2"]),
             ("level-set error, `H_rec[4]`", f"**{num(m['ls_rec4'])}**", "–")]
    if "ls_lgp" in m:
        rows += [("level-set error, LGP (finite differences) / LGPExact", f"{num(m['ls_lgp'])} / {num(m['ls_lgpe'])}",
                  PAPER["ls_lgp"])]
    rows += [("band of `H_rec[2]` along the prediction, true units (`∂²L/∂v² = 1`)", num(m["band_rec2"]), "–")]
    if "floor_band_rec2" in m:
        rows += [("band of `H_rec[2]`, exact `L_inv` (truncation floor of `mod_2`)", num(m["floor_band_rec2"]), "–")]
    rows += [("band of `H_rec[4]`, true units", num(m["band_rec4"]), "–"),
             ("velocity error, `mod_2` / `mod_4`", f"{num(m['vel_rec2'])} / {num(m['vel_rec4'])}", "–"),
             ("held-out DEL residuals within 2σ (calibration)", num(m["calibration_2sigma"]), "–")]
    lines = ["| quantity | this project | paper |", "| --- | --- | --- |"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def machine(d: dict) -> str:
    """``2 cores, load 5.9–6.4`` from the ``machine`` record of a run."""
    mc = d.get("machine") or {}
    lo, hi = sorted(x for x in (mc.get("load_before"), mc.get("load_after")) if x is not None) or [None, None]
    load = "load not recorded" if lo is None else f"load {lo:.1f}–{hi:.1f}" if hi - lo >= 0.05 else f"load {lo:.1f}"
    return f"{mc.get('cpus', '?')} cores, {load}"


def demo_cost(d: dict) -> str:
    """One sentence: what the recorded demo run cost, and where."""
    mc, t = d.get("machine") or {}, d["timings"]
    cpu = f", {mc['cpu_s']:.0f} s of CPU" if mc.get("cpu_s") is not None else ""
    mem = f", peak memory {mc['peak_rss_gb']:.2f} GB" if mc.get("peak_rss_gb") is not None else ""
    n = mc.get("torch_threads")
    threads = f", {n} torch thread{'s' if n != 1 else ''}" if n else ""
    return (f"The recorded run (`docs/data/demo.json`) took {t['total']:.0f} s wall{cpu}{mem}, on {machine(d)}{threads}; "
            f"of that, the GP fit {t.get('fit_lsi', 0):.0f} s and the prediction {t.get('predict_lsi', 0):.0f} s.")


def cost_rows(d: dict) -> List[dict]:
    """The rows of ``benchmarks/derive_cost.py``'s JSON with ``predicted`` from today's :func:`bea.cost.estimate`
    (so that a refit of the model shows in the table, and the table's check fails until it is regenerated)."""
    from bea.cost import estimate

    return [dict(r, predicted=estimate(f"{r['kind']}_lagrangian", r["order"], r["dim"])[0]) for r in d["rows"]]


def derive_cost_table(d: dict) -> str:
    """Predicted against measured cold derivation times (``benchmarks/derive_cost.py``)."""
    lines = [f"Measured (CPU time of a fresh process, empty cache) on {machine(d)}; predicted by `bea.cost`, the model "
             "behind the CLI's estimates.", "",
             "| kind | n | order | predicted [s] | measured [s] | measured / predicted |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in cost_rows(d):
        n = "any" if r["dim"] is None else r["dim"]
        pred = "over 10 min" if r["predicted"] is None else num(r["predicted"])
        if r.get("measured") is None:
            lines.append(f"| {r['kind']} | {n} | {r['order']} | {pred} | {r['note']} | – |")
        else:
            ratio = r["measured"] / r["predicted"]
            lines.append(f"| {r['kind']} | {n} | {r['order']} | {pred} | {num(r['measured'])} | {ratio:.2f}× |")
    return "\n".join(lines)
