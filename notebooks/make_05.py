"""Writes notebooks/05_modlanet.ipynb (kept as a script so the notebook diff stays reviewable).

The notebook runs at a reduced size by default (tests execute it, about a minute on 2 cores);
``BEA_FULL=1`` runs the seed's settings (``pipelines.modlanet_experiments.FULL``; hours on 2 cores --
the same as ``python -m pipelines.modlanet_experiments --system double_pendulum``)."""

import nbformat as nbf

cells = []
md = lambda s: cells.append(nbf.v4.new_markdown_cell(s))  # noqa: E731
code = lambda s: cells.append(nbf.v4.new_code_cell(s))  # noqa: E731

md("""# 05 — ModLaNet: modular Lagrangian networks

A **ModLaNet** (docs/theory/modlanet.md) writes the Lagrangian of a system of elements (pendulum bobs, bodies) as

$$L(q, \\dot q) = \\sum_i \\tfrac12 m_i |\\dot x_i|^2 - c_1 \\sum_i m_i U_1(x_i) - c_2 \\sum_{i<j} m_i m_j U_2(x_i, x_j),$$

with global positions $x_i = T(q_i) + x_{\\mathrm{parent}(i)}$ built along a computation tree, and **one** small
network per element type ($U_1$, $U_2$, the local→global map $T$). The same trained networks therefore describe a
system with *more* elements (`.extend`).

This notebook reproduces the seed's Table 2 protocol — train on accelerations, roll out 100 random initial states
over 30 s with an ODE solver, report $\\mathrm{MSE}_q$ and $\\mathrm{MSE}_E$ (true energy) — next to the LNN, HNN
and MLP baselines trained in the same loop, and adds what the seed does not have:

* the acceleration-trained ModLaNet rolled out with a **variational integrator** (midpoint rule);
* a **position-only** ModLaNet: trained as the inverse modified Lagrangian $L_{inv}$ of the midpoint rule with the
  DEL loss on snapshots at $h = 0.1$ (no velocities, no accelerations), predicted with the midpoint rule on
  $L_{inv}$ with $p_0 = \\partial_v \\mathrm{mod}_2(L_{inv})$, and identified as $H_{rec}[N] = H(\\mathrm{mod}_N L_{inv})$.
  At full size the model $M_\\theta$ is instead a model of the true $L$ and the DEL loss sees
  $L_{inv} = \\mathrm{inv}_2(M_\\theta)$ (`del_inverse_order=2`), on the triples that move at most 0.5 rad per step
  (`del_max_step`); the identified $M_\\theta$ is then also rolled out with RK4 like the acceleration-trained model;
* the **extension** of the double-pendulum networks to 3 (and 4) pendula, directly and after fine-tuning on 1/10 of the
  data for 1/5 of the epochs (seed §5.3).

Set `BEA_FULL=1` for the seed's sizes (10,100 samples, 100 states × 30 s; hours on 2 cores).""")
code("""import os, time
import torch
import matplotlib.pyplot as plt

from pipelines import modlanet_experiments as mx

torch.set_default_dtype(torch.float64)
FULL = os.environ.get("BEA_FULL", "0") == "1"
cfg = (mx.FULL if FULL else mx.SMALL)["double_pendulum"]
print("full size" if FULL else "reduced size (set BEA_FULL=1 for the seed's settings)")
print(cfg.describe())""")
md("""## The pipeline

`modlanet_experiments.run` generates the data with the exact flow (DOP853 at 1e-13), trains ModLaNet on
$\\operatorname{mean}|\\hat{\\ddot q} - \\ddot q|^2$ and the baselines in the same loop (Adam, cosine schedule,
validation split), rolls everything out with RK4 against the exact flow, then runs the position-only variant and the
extension. Every stage's wall time is recorded.""")
code("""t0 = time.perf_counter()
res = mx.run(cfg, log=lambda s: None)
print(f"total {time.perf_counter() - t0:.1f} s")""")
md("## Results next to the seed's Table 2")
code("""print(mx.table(res))""")
md("""Reading the table:

* $\\mathrm{MSE}_q$ compares angles mod $2\\pi$ (the form in which the seed feeds angles to its networks; see
  `learners.neural.rollout.mse_q`). The double pendulum at the seed's energies is chaotic: over 30 s two *reference*
  solvers already disagree, so $\\mathrm{MSE}_E$ — the true energy is conserved — is the informative column.
* A light LNN (one MLP Lagrangian) often meets a singular $\\partial^2 L/\\partial v^2$ along a rollout: those states
  count as *failed* (the seed writes "failed" for whole rows).
* At the reduced size (a few hundred samples, a few dozen epochs) every number is far from converged; the ordering —
  ModLaNet's energy error well below the baselines' — is what the tests check.""")
md("## Rollouts")
code("""ref = res["reference"]
ts, q_ref = ref["times"], ref["q"]
rows = {r["model"]: r for r in res["rows"]}
show = [m for m in ("ModLaNet", "ModLaNet (variational)", "HNN", "Baseline") if m in rows]
b = 0  # first initial state
fig, axes = plt.subplots(1, 2, figsize=(11, 3.5), sharex=True)
for i, ax in enumerate(axes):
    ax.plot(ts, q_ref[:, b, i], "k", lw=2, label="exact")
    for m in show:
        ax.plot(ts, rows[m]["q"][:, b, i], "--", label=m)
    ax.set_xlabel("t"); ax.set_ylabel(f"theta_{i + 1} (unwrapped)")
axes[0].legend(fontsize=8)
plt.tight_layout(); plt.show()""")
md("## Energy error over time")
code("""fig, ax = plt.subplots(figsize=(6, 3.5))
for m, r in rows.items():
    ax.semilogy(ts[1:], r["energy_curve"][1:], label=m)
po = res.get("position_only")
if po:
    ax.semilogy(po["times"][1:], po["energy_curve"][1:], "k:", label=po["model"])
ax.set_xlabel("t"); ax.set_ylabel("mean (E_pred - E_true)^2"); ax.legend(fontsize=7)
plt.tight_layout(); plt.show()""")
md("""## Position-only training and identification

The DEL-trained model is $L_{inv}$, the Lagrangian whose midpoint rule reproduces the sampled motions. Its own
energy $H(L_{inv})$ differs from the true one at $O(h^2)$; variational backward error analysis gives
$\\mathrm{mod}_2(L_{inv}) = L + O(h^4)$. The level-set error $\\mu = \\sin\\angle(\\nabla H_{true}, \\nabla H_{rec}[N])$
(mean over states of the exact flow) measures how well the identified energy's level sets match, independent of
scale and constants. Its improvement from $N = 0$ to $N = 2$ shows once the model's own error is below the
$O(h^2)$ term — at the reduced size it is not.

Along the prediction, by contrast, $\\mathrm{mod}_2$ helps whatever the model's error: the midpoint rule applied to
$L_{inv}$ conserves $H(\\mathrm{mod}_2 L_{inv})$ to $O(h^4)$ but $H(L_{inv})$ only to $O(h^2)$. The *relative band*
(variation in time divided by the spread over the initial states, invariant under $H \to aH + b$) shows it.""")
code("""if po:
    print(f"position-only rollout (h = {po['h']}): MSE_q {po['mse_q']:.3e}, MSE_E {po['mse_E']:.3e}, failed {po['failed']}")
    if po.get("rk4"):
        rk = po["rk4"]
        print(f"identified L rolled out with RK4: MSE_q {rk['mse_q']:.3e}, MSE_E {rk['mse_E']:.3e} "
              f"(median {rk['mse_E_median']:.3e}), failed {rk['failed']}")
    print(f"DEL loss {po['train'].initial_val:.3e} -> {po['train'].best_val:.3e}")
    for N, v in po["level_set"].items():
        print(f"H_rec[{N}]: level-set error {v:.3e}, relative band along the prediction {po['energy_band'][N]:.3e}")""")
md("""## Extension to more pendula

`model.extend(k)` reuses the trained $U_1$, $U_2$ and $T$ for a chain of $k$ pendula; new masses start at the mean of
the trained ones. The energy error stays bounded over the rollout; fine-tuning on 1/10 of the data for 1/5 of the
epochs lowers it (the seed: $\\mathrm{MSE}_E$ −96%).""")
code("""ext = res.get("extension", [])
fig, axes = plt.subplots(1, max(1, len(ext)), figsize=(5.5 * max(1, len(ext)), 3.5), squeeze=False)
for ax, e in zip(axes[0], ext):
    for stage, style in (("direct", "-"), ("finetuned", "--")):
        if stage in e:
            ax.semilogy(e["times"][1:], e[stage]["energy_curve"][1:], style, label=stage)
    ax.set_title(f"{e['elements']} pendula"); ax.set_xlabel("t"); ax.set_ylabel("mean (E_pred - E_true)^2"); ax.legend()
plt.tight_layout(); plt.show()
for e in ext:
    d, f = e["direct"], e.get("finetuned", {})
    print(f"{e['elements']} pendula: MSE_E direct {d['mse_E']:.3e} -> fine-tuned {f.get('mse_E', float('nan')):.3e}; "
          f"max |E(t) - E(0)| {d['max_energy_deviation']:.3e} (mean |E| {d['true_energy_scale']:.3e})")""")
md("## Wall time per stage (seconds)")
code("""print({k: round(v, 1) for k, v in res["timings"].items()})""")

kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
nb = nbf.v4.new_notebook(cells=cells, metadata={"kernelspec": kernelspec})
nbf.write(nb, __file__.replace("make_05.py", "05_modlanet.ipynb"))
