"""Figures of the experiments (as in the paper): trajectories and their errors, energies along the
prediction, level sets of the identified energies against the true ones. Each function takes a
:class:`pipelines.shadow_experiments.Results` and returns a matplotlib figure."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import numpy as np
import torch

from bea.files import atomic_savefig
from bea.errors import BeaValueError

from .shadow_experiments import Results

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


def level_sets(res: Results):
    """Level sets of the true energy (thick grey) and of the identified ones (colour; affinely mapped onto the
    true energy, which keeps their level sets, and drawn at the same levels) on the experiment's grid,
    with the level-set error density :math:`\\mu` in the background (n = 1 only; the values were kept by
    :func:`pipelines.shadow_experiments.run`)."""
    plt = _plt()
    cfg = res.config
    levels = res.info["levels"]
    q, v = res.info["level_states"]
    if q.shape[-1] != 1:
        raise BeaValueError("level-set figures are drawn for n = 1 only")
    from .shadow_experiments import _system

    points = cfg.level_points
    shape = (points, points)
    Q, V = _np(q.reshape(shape)), _np(v.reshape(shape))
    ref = _np(_system(cfg.system).energy(q, v).detach().reshape(shape))
    ncol = 3
    nrow = (len(levels) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.4 * nrow), squeeze=False)
    for ax, (name, (val, mu)) in zip(axes.flat, levels.items()):
        ax.pcolormesh(Q, V, _np(mu.clamp_min(1e-12).log10().reshape(shape)), cmap="Greys", vmin=-8, vmax=0, shading="auto")
        # An energy is fixed by the dynamics only up to H -> aH + b: map it onto H_ref by least squares,
        # which keeps its level sets, so that matching level sets are drawn on top of each other.
        # The offset is fixed at the minimum of H_ref: small contours there are the most sensitive to it.
        Hv = _np(val.reshape(shape))
        i = np.unravel_index(np.argmin(ref), shape)
        dH, dref = (Hv - Hv[i]).ravel(), (ref - ref[i]).ravel()
        a = float(dH @ dref / (dH @ dH))
        cs = ax.contour(Q, V, ref, levels=12, colors="0.6", linewidths=1.6, linestyles="solid")
        ax.contour(Q, V, a * (Hv - Hv[i]) + ref[i], levels=cs.levels, cmap="viridis", linewidths=0.8)
        ax.set_title(f"{name}\nlevel-set error {float(mu.mean()):.2e}", fontsize=9)
        ax.set_xlabel("q")
        ax.set_ylabel("v")
    for ax in list(axes.flat)[len(levels):]:
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
        atomic_savefig(fig, p, dpi=dpi)  # a reader never sees a half-written PNG
        plt.close(fig)
        paths[name] = p
    return paths
