"""Writes notebooks/02_convergence_orders.ipynb (kept as a script so the notebook diff stays reviewable)."""

import nbformat as nbf

cells = []
md = lambda s: cells.append(nbf.v4.new_markdown_cell(s))  # noqa: E731
code = lambda s: cells.append(nbf.v4.new_code_cell(s))  # noqa: E731

md("""# 02 — Orders of convergence of modified and inverse modified Lagrangians

The experiments of docs/theory/orders.md with the batched variational integrators of `integrators`, for the midpoint and
trapezoidal rules, on the pendulum $L = v^2/2 + \\cos q$ and on the Hénon–Heiles system ($n = 2$):

1. the discrete solution of $L$ against the exact flow of $L$: order 2;
2. the discrete solution of $L$ against the exact flow of $EL(L_{mod}[N])$, started on it: order $N + 2$;
3. the scheme applied to $L_{inv}[N]$ against the exact flow of $L$: order $N + 2$;
4. the modified energy $H_{mod}[N]$ along the discrete solution: oscillation amplitude $O(h^{N+2})$;
5. the generalised midpoint rule ($\\alpha = 0.3$, not symmetric) on a position-dependent mass: orders $N + 1$.

Every slope is a least-squares fit of $\\log(\\text{error})$ against $\\log h$. Exact flows come from SciPy's DOP853
at tolerances $10^{-13}$; $L_{mod}$ and $L_{inv}$ from `bea` (the inverse ones through the generic formula with
derivatives by autograd, as for a learned Lagrangian).""")
code("""import time
import numpy as np
import matplotlib.pyplot as plt
import torch
import bea
import integrators
from integrators import VariationalIntegrator, systems
from integrators import convergence as C

torch.set_default_dtype(torch.float64)
t_start = time.perf_counter()
pendulum, henon_heiles = systems.pendulum(), systems.henon_heiles()
print(pendulum, henon_heiles, sep="\\n")""")
md("""## Many trajectories at once

One `VariationalIntegrator` advances a whole batch: one vectorised Newton solve per step, each trajectory with its
own convergence test.""")
code("""q0 = torch.linspace(-3.0, 3.0, 25)[:, None].repeat(1, 8).reshape(-1, 1)
v0 = torch.linspace(-1.2, 1.2, 8).repeat(25)[:, None]
vi = VariationalIntegrator(pendulum, h=0.2, scheme="midpoint")
t0 = time.perf_counter()
qs = vi.solve(q0, v0, 150).q                 # (151, 200, 1)
vs = vi.velocities(qs)                     # solves dL/dv(q_j, v_j) = p_j
print(f"{qs.shape[1]} trajectories x {qs.shape[0] - 1} steps in {time.perf_counter() - t0:.2f} s")
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(qs[..., 0].numpy(), vs[..., 0].numpy(), lw=0.5, color="C0")
ax.set_xlabel("q"); ax.set_ylabel("velocity"); ax.set_title("pendulum, midpoint rule, h = 0.2")
plt.tight_layout(); plt.show()""")
md("""## Experiments

Two initial conditions per system; the error is the maximum over both trajectories and all grid times in
$[0, T]$, $T = 2$, for $h = 0.2, 0.1, 0.05$ (and for the generalised midpoint rule below, $T = 1$ and
$h = 0.05, 0.025, 0.0125$).

The whole grid -- one task per experiment, system, scheme, $N$ and $h$ -- runs as a sweep (`pipelines.sweep`),
here serially in this process. The same grid as a TOML file runs with `python -m bea sweep SPEC.toml`, on a local
Ray instance or a cluster, resumably, with one checksummed record per task (see `sweeps/README.md`).""")
code("""import tempfile
from pipelines.sweep import run as run_sweep

hs = [0.2, 0.1, 0.05]
T = 2.0
ics = {
    "pendulum": (pendulum, [[1.0], [2.0]], [[0.5], [0.0]]),
    "henon_heiles": (henon_heiles, [[0.3, -0.2], [0.0, 0.4]], [[0.2, 0.3], [-0.3, 0.0]]),
}
orders = {"pendulum": [0, 2, 4], "henon_heiles": [0, 2]}   # keep N <= 2 in 2-D (derivation cost)
hs_gm = [0.05, 0.025, 0.0125]
# (experiment, system, scheme, N, expected order, sweep parameters but h, step sizes)
rows = []
for name, (system, q0, v0) in ics.items():
    ic = dict(system=name, T=T, q0=q0, qdot0=v0)
    for scheme in ("midpoint", "trapezoidal"):
        rows.append(("L vs exact", name, scheme, None, 2, dict(ic, experiment="exact", scheme=scheme), hs))
        for N in orders[name]:
            rows.append(("L vs L_mod flow", name, scheme, N, N + 2, dict(ic, experiment="modified_flow", scheme=scheme, order=N), hs))
            rows.append(("L_inv vs exact", name, scheme, N, N + 2,
                         dict(ic, experiment="inverse_modified", scheme=scheme, order=N, formula="generic"), hs))
for scheme in ("midpoint", "trapezoidal"):
    _, q0, v0 = ics["pendulum"]
    for N in (0, 2, 4):
        rows.append(("H_mod oscillation", "pendulum", scheme, N, N + 2,
                     dict(system="pendulum", T=T, q0=q0, qdot0=v0, experiment="energy_oscillation", scheme=scheme, order=N), hs))
for N in (0, 1, 2):   # the generalised midpoint rule, below
    vm_task = dict(system="variable_mass_pendulum", T=1.0, q0=[[1.0]], qdot0=[[0.5]], scheme="generalised_midpoint:0.3", order=N)
    rows.append(("L vs L_mod flow", "variable mass", "gen. midpoint 0.3", N, N + 1, dict(vm_task, experiment="modified_flow"), hs_gm))
    rows.append(("L_inv vs exact", "variable mass", "gen. midpoint 0.3", N, N + 1, dict(vm_task, experiment="inverse_modified"), hs_gm))

spec = {"kind": "convergence", "name": "notebook-02", "points": [dict(p, h=h) for *_, p, hh in rows for h in hh]}
sweep = run_sweep(spec, out=tempfile.mkdtemp(prefix="bea-02-"), serial=True, progress=False, plots=False)
assert not sweep.failed, [r["error"]["message"] for r in sweep.failed]
task = iter(sweep.records)   # in the order of the points
results = [(exp, sysname, sch, N, p, [next(task)["metrics"]["error"] for _ in hh]) for exp, sysname, sch, N, p, _, hh in rows]
print(f"{sweep}\\n{len(results)} experiments, {time.perf_counter() - t_start:.1f} s so far")""")
code("""def plot(experiment, ax_row):
    for ax, (name, scheme) in zip(ax_row, [(s, k) for s in ics for k in ("midpoint", "trapezoidal")]):
        for (exp, sysname, sch, N, p, errors) in results:
            if exp != experiment or sysname != name or sch != scheme:
                continue
            slope = C.observed_order(hs, errors)
            label = (f"N = {N}: " if N is not None else "") + f"slope {slope:.2f}"
            line, = ax.loglog(hs, errors, "o-", label=label)
            ax.loglog(hs, errors[-1] * (np.array(hs) / hs[-1]) ** p, ":", color=line.get_color(), lw=1)
        ax.set_title(f"{name}, {scheme}", fontsize=9); ax.set_xlabel("h"); ax.legend(fontsize=7)
    ax_row[0].set_ylabel(experiment)

experiments = ["L vs exact", "L vs L_mod flow", "L_inv vs exact"]
fig, axes = plt.subplots(len(experiments), 4, figsize=(13, 9))
for exp, row in zip(experiments, axes):
    plot(exp, row)
fig.suptitle("max error over [0, 2]; dotted: theoretical slope"); plt.tight_layout(); plt.show()""")
md("""The modified energy $H_{mod}[N] = p\\cdot v - L_{mod}[N]$, evaluated along the discrete solution of $L$ with
velocities from the momenta of $L_{mod}[N]$, oscillates with amplitude $O(h^{N+2})$:""")
code("""fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
for ax, scheme in zip(axes, ("midpoint", "trapezoidal")):
    for (exp, sysname, sch, N, p, errors) in results:
        if exp == "H_mod oscillation" and sch == scheme:
            ax.loglog(hs, errors, "o-", label=f"N = {N}: slope {C.observed_order(hs, errors):.2f}")
    ax.set_title(f"pendulum, {scheme}", fontsize=9); ax.set_xlabel("h"); ax.legend(fontsize=7)
axes[0].set_ylabel("max H_mod - min H_mod")
plt.tight_layout(); plt.show()""")
md("""## Generalised midpoint rule, α = 0.3

Not symmetric: the series contain odd powers of $h$, and the orders are $N + 1$. On
$L = \\tfrac12(1 + q^2/4)v^2 + \\cos q$ the mass depends on the position, so the $h^1$ term is not a total derivative
and the rule really is of order 1. Smaller steps, to be in the asymptotic regime (these tasks ran in the sweep above).""")
code("""fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
for (exp, sysname, sch, N, p, errors) in results:
    if sysname == "variable mass":
        ax = axes[0] if exp == "L vs L_mod flow" else axes[1]
        ax.loglog(hs_gm, errors, "o-", label=f"N = {N}: slope {C.observed_order(hs_gm, errors):.2f}")
axes[0].set_title("L vs exact flow of L_mod[N]", fontsize=9); axes[1].set_title("L_inv[N] vs exact flow of L", fontsize=9)
for ax in axes:
    ax.set_xlabel("h"); ax.legend(fontsize=7)
plt.tight_layout(); plt.show()""")
md("## All fitted slopes")
code("""print(f"{'experiment':20s} {'system':14s} {'scheme':18s} {'N':>2s} {'expected':>8s} {'observed':>8s}")
worst = 0.0
for (exp, sysname, sch, N, p, errors) in results:
    hh = hs_gm if sysname == "variable mass" else hs
    slope = C.observed_order(hh, errors)
    worst = max(worst, abs(slope - p))
    print(f"{exp:20s} {sysname:14s} {sch:18s} {'' if N is None else N:>2} {p:8d} {slope:8.2f}")
print(f"largest deviation from the theoretical order: {worst:.2f}")
assert worst <= 0.3
print(f"notebook ran in {time.perf_counter() - t_start:.1f} s")""")

nb = nbf.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
nbf.write(nb, __file__.replace("make_02.py", "02_convergence_orders.ipynb"))
