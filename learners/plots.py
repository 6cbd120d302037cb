"""Figures of the experiments (as in the seed): trajectories and their errors, energies along the
prediction, level sets of the identified energies against the true ones. Each function takes a
:class:`learners.experiments.Results` and returns a matplotlib figure."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import torch

from .experiments import Results
from .metrics import grid_states, level_set_field

__all__ = ["trajectories", "energies", "level_sets", "save_all"]

COLORS = {"ref": "k", "lsi": "C0", "lgp": "C3", "lgpe": "C2"}
LABELS = {"lsi": "LSI (ours)", "lgp": "LGP (finite differences)", "lgpe": "LGPExact"}


def _plt():
    import matplotlib.pyplot as plt  # the backend comes from the environment (Agg when headless)

    return plt


def _np(x):
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x


def trajectories(res: Results, window: int = 80):
    """Left: the first ``window`` predicted snapshots of the first coordinate. Right: ``|q - q_ref|``
    over the whole prediction (log scale)."""
    plt = _plt()
    s = {k: _np(v) for k, v in res.series.items()}
    t = s["times"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.6))
    w = min(window, t.shape[0])
    a.plot(t[:w], s["q_ref"][:w, 0], "-", color=COLORS["ref"], lw=1, label="exact")
    for key in ("lsi", "lgp", "lgpe"):
        if f"q_{key}" in s:
            q = s[f"q_{key}"]
            k = min(w, q.shape[0])
            a.plot(t[:k], q[:k, 0], "o", ms=3, color=COLORS[key], label=LABELS[key])
    a.set_xlabel("t")
    a.set_ylabel("q" if s["q_ref"].shape[-1] == 1 else "q_1")
    a.legend(fontsize=8)
    a.set_title(f"snapshots at h = {res.config.h}")
    for key in ("lsi", "lgp", "lgpe"):
        if f"q_{key}" in s:
            q = s[f"q_{key}"]
            err = abs(q - s["q_ref"][: q.shape[0]]).max(-1)
            b.semilogy(t[: q.shape[0]], err + 1e-17, color=COLORS[key], lw=0.8, label=LABELS[key])
    b.set_xlabel("t")
    b.set_ylabel("max |q - q_ref|")
    b.legend(fontsize=8)
    b.set_title("trajectory error")
    fig.tight_layout()
    return fig


def energies(res: Results):
    """The identified energies :math:`H_{rec}[N]` along the LSI prediction, minus their mean: their
    band is the conservation of the recovered energy by the learned discrete flow."""
    plt = _plt()
    s = {k: _np(v) for k, v in res.series.items()}
    fig, ax = plt.subplots(figsize=(7, 3.4))
    for N in res.config.orders:
        H = s[f"H_rec{N}"]
        idx = s[f"H_rec{N}_index"]
        ax.plot(s["times"][idx], H - H.mean(), lw=0.6, label=f"H_rec[{N}] (band {float(H.max() - H.min()):.2e})")
    ax.set_xlabel("t")
    ax.set_ylabel("H - mean")
    ax.legend(fontsize=8)
    ax.set_title("recovered energies along the LSI prediction")
    fig.tight_layout()
    return fig


def level_sets(res: Results, points: int = 40):
    """Level sets of the true energy (grey) and of the identified ones (colour), with the level-set
    error density :math:`\\mu` in the background (n = 1 only)."""
    plt = _plt()
    cfg = res.config
    system = res.models["lsi"]
    from .experiments import _system

    H_ref = _system(cfg.system).energy
    candidates: Dict[str, object] = {"H of L_inv (uncorrected)": system.energy(0)}
    for N in cfg.orders:
        candidates[f"H_rec[{N}] (LSI)"] = system.energy(N)
    if "lgp" in res.models:
        candidates["LGP"] = res.models["lgp"].energy()
        candidates["LGPExact"] = res.models["lgpe"].energy()
    q, v = grid_states(cfg.level_box, points)
    shape = (points, points)
    Q, V = _np(q.reshape(shape)), _np(v.reshape(shape))
    ref = _np(H_ref(q, v).detach().reshape(shape))
    ncol = 3
    nrow = (len(candidates) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.4 * nrow), squeeze=False)
    for ax, (name, H) in zip(axes.flat, candidates.items()):
        val = torch.cat([H(q[i:i + 900], v[i:i + 900]).detach() for i in range(0, q.shape[0], 900)]).reshape(shape)
        mu = level_set_field(H, H_ref, q, v).reshape(shape)
        ax.pcolormesh(Q, V, _np(mu.clamp_min(1e-12).log10()), cmap="Greys", vmin=-8, vmax=0, shading="auto")
        ax.contour(Q, V, ref, levels=12, colors="0.6", linewidths=0.8)
        ax.contour(Q, V, _np(val), levels=12, cmap="viridis", linewidths=0.8)
        ax.set_title(f"{name}\nlevel-set error {float(mu.mean()):.2e}", fontsize=9)
        ax.set_xlabel("q")
        ax.set_ylabel("v")
    for ax in list(axes.flat)[len(candidates):]:
        ax.axis("off")
    fig.tight_layout()
    return fig


def save_all(res: Results, outdir, dpi: int = 120) -> Dict[str, Path]:
    """Write the figures as PNG files into ``outdir``; returns their paths."""
    plt = _plt()
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    figs = {"trajectories": trajectories(res), "energies": energies(res)}
    if res.series["q_ref"].shape[-1] == 1:
        figs["level_sets"] = level_sets(res)
    paths = {}
    for name, fig in figs.items():
        p = out / f"{res.config.system}_{name}.png"
        fig.savefig(p, dpi=dpi)
        plt.close(fig)
        paths[name] = p
    return paths
