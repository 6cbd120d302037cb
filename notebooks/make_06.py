"""Writes notebooks/06_identification.ipynb (kept as a script so the notebook diff stays reviewable).

The notebook runs at CI size by default (``pipelines.identification.CI``, a few minutes on 2 cores);
``BEA_FULL=1`` runs the full size (``pipelines.identification.FULL``)."""

import nbformat as nbf

cells = []
md = lambda s: cells.append(nbf.v4.new_markdown_cell(s))  # noqa: E731
code = lambda s: cells.append(nbf.v4.new_code_cell(s))  # noqa: E731

md("""# 06 — Identification from positions in higher dimension

From position snapshots alone, the LSI GP learns the inverse modified Lagrangian $L_{inv}$ of the midpoint rule and
recovers the energy $H_{rec}[N] = H(\\mathrm{mod}_N L_{inv})$ (docs/theory/lsi.md), now with its **posterior
uncertainty**: the GP posterior pushed through $\\mathrm{mod}_N$ by linearisation (`learners/shadow/uncertainty.py`),
plus the first omitted term of the series.

Two experiments (`pipelines/identification.py`):

* a chain with $n = 4$ degrees of freedom — the FPU-$\\beta$ chain of 4 masses with fixed ends, $h = 0.45$ — with
  $H_{rec}[0]$, $H_{rec}[2]$ and $H_{rec}[4]$ (the order-4 correction at $n = 4$ comes from the dimension-free
  engine `bea.free`). The GP's lengthscales (one for the positions, one for the velocities) are those the
  `"positions"` hyperparameter objective selects on these data (held-out one-step position errors,
  `learners/shadow/position_objective.py`), fixed to save the minutes of that search; the likelihood, at $n \\ge 3$,
  runs to a near-zero Lagrangian instead;
* the double pendulum ($n = 2$, position-dependent mass) on the data of the ModLaNet experiment: the GP and the
  position-only ModLaNet side by side, same snapshots, same $h$.

Set `BEA_FULL=1` for the full size.""")
code("""import os, time
import torch
import matplotlib.pyplot as plt

from pipelines import identification as ident

cfg = ident.default_config()
print("full size" if cfg is ident.FULL else "CI size (BEA_FULL=1 for the full size)")
print(cfg)""")
md("""## Run

Data, fits, predictions against the exact flow, level sets at Halton states inside the data's box, the energy along
the prediction with its band, held-out energy differences, and the double pendulum.""")
code("""t0 = time.perf_counter()
res = ident.run(cfg, log=print)
print(f"total {time.perf_counter() - t0:.1f} s")""")
md("## Tables")
code("""print(ident.table(res))""")
md("""Reading the tables:

* **Level sets** (mean $\\sin\\angle(\\nabla H_{rec}[N], \\nabla H_{true})$, invariant under the scale and constant
  the energy is identified up to): each order of correction lowers the error until the GP's own error is reached;
  at $n = 4$, $H_{rec}[4]$ is below $H_{rec}[2]$.
* **Band**: the variation of $H_{rec}[2]$ along the prediction against the posterior std of the GP part. At
  $h = 0.45$ the variation is mostly the $h^4$ truncation of $\\mathrm{mod}_2$, which this band leaves out (it would
  need $H_{rec}[4]$ at every step); the held-out z-scores include it.
* **Calibration**: the fraction of held-out energy differences (to one reference state) within $2\\sigma$, compared
  with the true differences in the identified energy's units (one scale fitted by least squares).
* **Double pendulum**: the GP has no notion of angles being periodic and sees few trajectories over a large region;
  at this size ModLaNet, whose structure (element positions, kinetic energy) is built in, identifies far better.""")
md("## Energy with its ±2σ band, and z-scores of held-out energies")
code("""fig = ident.figure(res)
plt.show()""")
md("## Wall time per stage (seconds), chain")
code("""print({k: round(v, 1) for k, v in res.chain_timings.items()})""")

kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
nb = nbf.v4.new_notebook(cells=cells, metadata={"kernelspec": kernelspec})
nbf.write(nb, __file__.replace("make_06.py", "06_identification.ipynb"))
