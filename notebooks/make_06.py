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
md("""## Library defaults at $n = 3$: what they pick, and whether the error bars hold

A system no pipeline configures: three anharmonic oscillators with cubic couplings, positions only (40 trajectories
of 5 steps, $h = 0.2$), `InverseModifiedLagrangianGP(h).fit(q)` with nothing else set. The defaults choose the
hyperparameter objective (`objective="auto"`: the marginal likelihood up to $n = 2$, held-out one-step position
errors from $n = 3$, where every DEL target is zero and the likelihood runs to a flat Lagrangian) and the kernel
(`kernel="auto"`: from $n = 3$ the positions search scores the RBF and the mechanical kernel of degrees 2 and 4 with
the whole mass matrix, and of degree 2 with only the matrix's trace and off-diagonal entries fixed (unequal masses), and
keeps the one that predicts held-out positions better, a higher degree or the weaker condition only by a margin;
`benchmarks/RESULTS_identification.md`, Sessions 8-10). `model.calibration` reports the variance scales and their
held-back diagnostics.""")
code("""import sympy
import integrators
from integrators.data import snapshots
from learners import InverseModifiedLagrangianGP

qs_, vs_ = sympy.symbols("q0:3", real=True), sympy.symbols("v0:3", real=True)
V = ((qs_[0]**2 + 1.5 * qs_[1]**2 + 2 * qs_[2]**2) / 2 + 0.4 * qs_[0] * qs_[1] * qs_[2] + 0.3 * qs_[0]**2 * qs_[1]
     - 0.2 * qs_[1] * qs_[2]**2)
osc = integrators.systems.from_sympy(sum(x**2 for x in vs_) / 2 - V, qs_, vs_, "anharmonic3", domain=[(-0.6, 0.6)] * 6)
t0 = time.perf_counter()
model3 = InverseModifiedLagrangianGP(0.2, progress=False).fit(snapshots(osc, 0.2, 40, 5, seed=0))
print(f"fit {time.perf_counter() - t0:.1f} s; objective {model3.objective_used!r}, kernel "
      f"{type(model3.gp.kernel.base_kernel).__name__} (degree {model3.kernel_degree})")
print(model3.calibration)""")
md("""Held-out energy differences to one reference state (40 states in the middle 70% of the box): the model's error,
with its $2\\sigma$ bars, against the true difference in the identified energy's units (the energy is identified up to a constant
and a scale: one scale fitted by least squares); and the z-scores against $N(0, 1)$.""")
code("""g = torch.Generator().manual_seed(11)
x = (0.15 + 0.7 * torch.rand(41, 6, generator=g, dtype=torch.float64)) * 1.2 - 0.6
q, v = x[:, :3].contiguous(), x[:, 3:].contiguous()
true = (osc.energy(q[1:], v[1:]) - osc.energy(q[:1], v[:1])).detach()
mean, std = model3.energy(2, return_std=True, reference=(q[0], v[0]))(q[1:], v[1:])
scale = float((mean * true).sum() / (true * true).sum())
z = (mean - scale * true) / std
print(f"relative error {float((mean - scale * true).norm() / (scale * true).norm()):.2e}; "
      f"RMS z {float(z.pow(2).mean().sqrt()):.2f}; within 2 sigma {float((z.abs() <= 2).double().mean()):.0%}")
fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
a1.errorbar(scale * true, mean - scale * true, yerr=2 * std, fmt="o", ms=3, capsize=2)
a1.axhline(0, color="k", lw=1)
a1.set(xlabel="true difference (identified units)", ylabel="model − true, ±2σ", title="H_rec[2] − H_rec[2](ref): error")
zz = torch.linspace(-4, 4, 200)
a2.hist(z.numpy(), bins=12, density=True, alpha=0.6, label="z-scores")
a2.plot(zz, torch.exp(-zz ** 2 / 2) / (2 * torch.pi) ** 0.5, "k", label="N(0, 1)")
a2.set(xlabel="z", title="calibration"); a2.legend()
plt.show()""")
md("## Wall time per stage (seconds), chain")
code("""print({k: round(v, 1) for k, v in res.chain_timings.items()})""")

kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
nb = nbf.v4.new_notebook(cells=cells, metadata={"kernelspec": kernelspec})
nbf.write(nb, __file__.replace("make_06.py", "06_identification.ipynb"))
