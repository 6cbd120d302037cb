"""Tables and the figure of :mod:`pipelines.identification` (re-exported there)."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Tuple

import torch

from .shadow_experiments import _fmt

if TYPE_CHECKING:  # pragma: no cover
    from .identification import IdentificationResults

__all__ = ["table", "figure"]


def table(res: "IdentificationResults") -> str:
    """The numbers as plain-text tables: the chain, then the double pendulum (GP and ModLaNet)."""
    m, t, cfg = res.chain, res.chain_timings, res.config
    rows: List[Tuple[str, Optional[float]]] = [
        (f"max |q - q_ref|, LSI (order 2), {cfg.steps} steps of h = {cfg.h}", m.get("traj")),
    ]
    rows += [(f"level-set error, H_rec[{N}]", m.get(f"ls{N}")) for N in (0, *cfg.orders)]
    rows += [(f"max |v - v_ref|, order {N}", m.get(f"vel{N}")) for N in cfg.orders]
    rows += [("band of H_rec[2] along the prediction (max - min)", m.get("band2")),
             ("mean posterior std of H_rec[2] - H_rec[2](0) there", m.get("band2_std_mean")),
             ("spread (std) of the true energy over the box", m.get("true_energy_spread"))]
    rows += [(f"held-out energy differences within 2 sigma, N = {N}", m.get(f"calib{N}")) for N in cfg.heldout_orders]
    rows += [("fit time (s)", t.get("fit")), (f"prediction time, {cfg.steps} steps (s)", t.get("predict"))]
    rows += [(f"level-set time H_rec[{N}], {cfg.level_points} states (s)", t.get(f"level_sets{N}")) for N in (0, *cfg.orders)]
    w = max(len(r[0]) for r in rows)
    lines = [f"FPU-beta chain, n = {cfg.chain_n}, {cfg.n_traj} x {cfg.n_steps} position snapshots at h = {cfg.h}",
             f"{'quantity':<{w}}  {'value':>10}", "-" * (w + 12)]
    lines += [f"{label:<{w}}  {_fmt(val):>10}" for label, val in rows]
    if res.double_pendulum:
        lines += ["", "double pendulum, positions only, same snapshots and h",
                  f"{'model':<28}{'MSE_q':>10}{'MSE_E':>10}{'ls H_rec[0]':>12}{'ls H_rec[2]':>12}{'ls H_rec[4]':>12}"
                  f"{'train s':>9}{'pred s':>8}"]
        for r in res.double_pendulum:
            lines.append(f"{r['model']:<28}{_fmt(r['mse_q']):>10}{_fmt(r['mse_E']):>10}{_fmt(r.get('ls0')):>12}"
                         f"{_fmt(r.get('ls2')):>12}{_fmt(r.get('ls4')):>12}{_fmt(r.get('train_s')):>9}"
                         f"{_fmt(r.get('predict_s')):>8}")
    return "\n".join(lines)


def figure(res: "IdentificationResults"):
    """Left: :math:`H_{rec}[2] - H_{rec}[2](0)` along the chain's prediction with its :math:`\\pm2\\sigma` band and the
    true energy difference (scaled to the identified one's units). Right: z-scores of held-out energy differences."""
    import matplotlib.pyplot as plt

    s = res.chain_series
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8))
    t, rows = s["times"], s["band_rows"]
    E, std, true = s["E2"], s["E2_std"], s["true_E"]
    scale = float((E * true).sum() / (true * true).sum()) if float((true * true).sum()) > 0 else 1.0
    a1.plot(t, E, label=r"$H_{rec}[2] - H_{rec}[2](0)$")
    a1.fill_between(t[rows], (E - 2 * std)[rows], (E + 2 * std)[rows], alpha=0.3, label=r"$\pm 2\sigma$")
    a1.plot(t, scale * true, "k--", lw=0.8, label="true (scaled)")
    a1.set_xlabel("t")
    a1.set_title("energy along the LSI prediction (FPU chain, n = 4)")
    a1.legend(fontsize=8)
    bins = torch.linspace(-4, 4, 17)
    for N in res.config.heldout_orders:
        z = s.get(f"z{N}")
        if z is not None:
            a2.hist(z.clamp(-4, 4).numpy(), bins=bins.numpy(), alpha=0.5, label=f"N = {N}")
    a2.axvline(-2, color="k", lw=0.6)
    a2.axvline(2, color="k", lw=0.6)
    a2.set_xlabel("z of held-out energy differences")
    a2.set_title("calibration")
    a2.legend(fontsize=8)
    fig.tight_layout()
    return fig
