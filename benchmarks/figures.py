"""Figures for the README: ``python benchmarks/figures.py`` writes docs/*.png."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import sympy  # noqa: E402

import bea  # noqa: E402
from bea.files import atomic_savefig  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "docs"


def ho_series() -> Path:
    q, v = sympy.symbols("q v", real=True)
    xs = np.linspace(0.02, 1.6, 300)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    for ax, kind, closed, title in [
        (axes[0], "modified_lagrangian", lambda x: 2 * np.arctan(x / 2) / x, "modified: Ω/ω = (2/ωh) arctan(ωh/2)"),
        (axes[1], "inverse_modified_lagrangian", lambda x: 2 * np.tan(x / 2) / x, "inverse: ω̃/ω = (2/ωh) tan(ωh/2)"),
    ]:
        for N in (2, 4, 6, 8):
            s = getattr(bea, kind)("midpoint", N, lagrangian=v**2 / 2 - q**2 / 2, q=[q], v=[v])
            P = sympy.Poly(sympy.expand(s.expr), q, v)
            ratio = sympy.sqrt(-P.coeff_monomial(q**2) / P.coeff_monomial(v**2))
            f = sympy.lambdify(s.h, ratio, "numpy")
            ax.semilogy(xs, np.abs(f(xs) - closed(xs)) + 1e-17, label=f"series to h^{N}")
        ax.set_xlabel("ω h")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("error of the truncated frequency")
    axes[0].legend(fontsize=8)
    fig.suptitle("Midpoint rule, harmonic oscillator: bea's series vs. the closed forms", fontsize=10)
    fig.tight_layout()
    OUT.mkdir(exist_ok=True)
    path = OUT / "ho_series.png"
    atomic_savefig(fig, path, dpi=120)
    return path


if __name__ == "__main__":
    print(ho_series())
