"""The table of the ModLaNet experiments (:mod:`pipelines.modlanet_experiments`): the rows of a run next to the
paper's Table 2, then the position-only variant, the extension and the wall times."""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

from .modlanet_config import PAPER_TABLE, ModLaNetConfig

__all__ = ["table"]


def _cells(r: Dict[str, Any]) -> str:
    return "".join(f"{_fmt(r.get(k, float('nan'))):>11}" for k in ("mse_q", "mse_E", "paper_q", "paper_E"))


def _fmt(x: Optional[float]) -> str:
    if x is None:
        return "failed"
    if isinstance(x, float) and math.isnan(x):
        return "failed"
    return f"{x:.3g}" if 1e-2 <= abs(x) < 1e4 else f"{x:.2e}"


def table(results: Dict[str, Any]) -> str:
    """The rows of :func:`run` next to the paper's Table 2, then the position-only variant and the extension.

    Columns: ``MSE_q``, ``MSE_E`` -- mean squared errors; ``stat q``, ``stat E`` -- the same rollouts in
    the statistic the paper's code prints as "MSE" (:func:`~learners.neural.rollout.paper_statistic`), the one to
    hold against the paper's columns (``paper params``, ``paper q``, ``paper E``, its Table 2)."""
    cfg: ModLaNetConfig = results["config"]
    paper = PAPER_TABLE[cfg.system]
    head = (f"{'model':<27}{'params':>8}{'MSE_q':>11}{'MSE_E':>11}{'stat q':>11}{'stat E':>11}{'failed':>8} |"
            f"{'paper params':>12}{'paper q':>12}{'paper E':>12}")
    lines = [f"{cfg.system}: {cfg.n_states} states x {cfg.t_rollout:g} s (MSE_q on "
             f"{'angles mod 2 pi' if cfg.system == 'double_pendulum' else 'positions'}, MSE_E with the true energy; "
             f"stat: ||error||_F / T over {int(round(cfg.t_rollout / cfg.dt_out)) + 1} time points as the paper's code, "
             f"{'unwrapped angles' if cfg.system == 'double_pendulum' else 'positions'})", head, "-" * len(head)]
    for r in results["rows"]:
        key = r["model"].split(" (")[0]
        sp, sq, se = paper.get(key, ("", None, None)) if key in paper else ("-", float("nan"), float("nan"))
        failed = f"{r['failed']}/{r['states']}"
        paper_cells = (f"{sp:>12}{_fmt(sq):>12}{_fmt(se):>12}" if key in paper else f"{'-':>12}{'-':>12}{'-':>12}")
        lines.append(f"{r['model']:<27}{r['params']:>8}{_cells(r)}{failed:>8} |{paper_cells}")
    for key, (sp, sq, se) in paper.items():  # paper rows not run here
        if not any(r["model"].split(" (")[0] == key for r in results["rows"]):
            lines.append(f"{key + ' (not run)':<27}{'':>8}{'':>44}{'':>8} |{sp:>12}{_fmt(sq):>12}{_fmt(se):>12}")
    po = results.get("position_only")
    if po:
        failed = f"{po['failed']}/{po['states']}"
        io = po.get("inverse_order", 0)
        how = "midpoint on inv_2(model), p0 from the model" if io else "midpoint, p0 from mod_2"
        lines.append(f"{po['model']:<27}{po['params']:>8}{_cells(po)}{failed:>8} |"
                     f"{'(new)':>12}   (h = {po['h']:g}, {how})")
        for key, how in (("rk4", "the identified L, RK4 as above"),
                         ("variational", f"the identified L, midpoint at h = {cfg.variational_h:g}")):
            rk = po.get(key)
            if rk:
                lines.append(f"{rk['model']:<27}{rk['params']:>8}{_cells(rk)}{str(rk['failed']) + '/' + str(rk['states']):>8} |"
                             f"{'(new)':>12}   ({how})")
        lines.append(f"  identified energy, level-set error vs the true energy: H(L_inv) [N=0] {po['level_set'][0]:.3e}, "
                     f"H(mod_2 L_inv) [N=2] {po['level_set'][2]:.3e}; relative band along the prediction: N=0 "
                     f"{po['energy_band'][0]:.3e}, N=2 {po['energy_band'][2]:.3e}")
    for e in results.get("extension", []):
        d, f = e["direct"], e.get("finetuned")
        s = (f"extension to {e['elements']} elements ({cfg.extension_states} states x {cfg.extension_t:g} s): direct MSE_q "
             f"{_fmt(d['mse_q'])}, MSE_E {_fmt(d['mse_E'])} (stat {_fmt(d['paper_E'])}), max|dE| {_fmt(d['max_energy_deviation'])}")
        if f:
            s += (f"; fine-tuned ({e['finetune']['samples']} samples, {e['finetune']['epochs']} epochs) MSE_q {_fmt(f['mse_q'])}, "
                  f"MSE_E {_fmt(f['mse_E'])} (stat {_fmt(f['paper_E'])}), max|dE| {_fmt(f['max_energy_deviation'])}")
        lines.append(s)
    t = results.get("timings", {})
    if t:
        lines.append("wall time (s): " + ", ".join(f"{k} {v:.1f}" for k, v in t.items()))
    return "\n".join(lines)
