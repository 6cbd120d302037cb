"""LSI with the midpoint rule against LSI with Galerkin s = 2 (Lobatto IIIA-IIIB, order 4), at equal cost.

    PYTHONPATH=. python3 benchmarks/lsi_stages.py [--systems pendulum henon_heiles] [--traj 60] [--periods 4]

The README's table is this command's output at its defaults (60 trajectories x 5 steps). With 200 pendulum
trajectories the Galerkin fit stops with a typed error (learners/shadow/stage_lsi.py, *Limits*).

*Equal cost* means equal numbers of evaluations of ``L`` per unit of time: the midpoint rule evaluates ``L`` once per
step, Galerkin s = 2 three times (Simpson's nodes 0, 1/2, 1; the end-point evaluations of neighbouring steps are not
shared, their velocities differ), both in the fit (the DEL functionals have one kernel atom per evaluation of ``L``)
and in prediction. So Galerkin at step ``h`` costs what the midpoint rule costs at ``h / 3``. Three rows per system:
the midpoint rule at ``h`` (a step where its level sets need H_rec[4]), Galerkin at ``h`` (same step, three times
the cost) and the midpoint rule at ``h / 3`` (same cost as Galerkin at ``h``). Every fit gets the same number of
trajectories (same initial conditions) and of snapshots per trajectory, each sampled at its own step.

Why not Galerkin at ``3 h`` against the midpoint rule at ``h``: the stage fit starts from the midpoint rule's LSI fit
at Galerkin's step (learners/shadow/stage_lsi.py), and on the pendulum at steps 0.75, 0.9 and 1.5 (200 trajectories)
that fit's mass d^2L/dv^2 at the data's midpoints falls to -0.23, 0.06 and -0.48 (true value 1), and Newton's method
for the interior points fails there (a typed error).

Printed per system and scheme: fit time, the Gauss-Newton iterations of the stage fit (their number and the largest
DEL residual on the data, first and last, standardised units), level-set errors of H_rec[0], H_rec[2], H_rec[4]
(:func:`learners.metrics.level_set_error`: pendulum on the 15 x 15 grid of its box, Henon-Heiles at 300 seeded
uniform states of its box) and the largest position error over the prediction from one initial state, against the
exact flow at the same times (``--periods`` periods of the linearised motion), predicted with the initial momentum of
the highest order computed, H_rec[4] for every row: Galerkin's series for n = 2 comes from the dimension-free
engine (bea.free.stages, about a second cold; the component series for n = 2 took over 15 minutes, so earlier
versions left H_rec[4] of the Henon-Heiles Galerkin row to a flag, ``--stage-order4-n2``, still accepted).
"""

from __future__ import annotations

import argparse
import math
import time

import torch

import integrators
from integrators import reference_flow
from integrators.data import snapshots
from learners import InverseModifiedLagrangianGP
from learners.metrics import grid_states, level_set_error, max_trajectory_error

SYSTEMS = {
    # h: the midpoint rule's step, where its level sets need H_rec[4] (docs/theory/lsi.md for the pendulum)
    "pendulum": dict(h=0.5, q0=(0.3,), qdot0=(0.0,), box=((-1.2, 1.2), (-0.6, 0.6))),
    "henon_heiles": dict(h=0.3, q0=(0.1, -0.1), qdot0=(0.1, 0.15), box=((-0.3, 0.3),) * 4),
}
FAST = dict(iterations=16, max_train_functionals=400, progress=False)


def level_states(box, n: int, seed: int = 0):
    """The level-set states: the 15 x 15 grid for n = 1, else 300 seeded uniform states of ``box``."""
    if n == 1:
        return grid_states(box, 15)
    g = torch.Generator().manual_seed(seed)
    lo = torch.tensor([b[0] for b in box], dtype=torch.float64)
    hi = torch.tensor([b[1] for b in box], dtype=torch.float64)
    x = lo + (hi - lo) * torch.rand(300, 2 * n, generator=g, dtype=torch.float64)
    return x[:, :n], x[:, n:]


def run(system_name: str, scheme: str, h: float, n_traj: int, n_steps: int, t_end: float, orders=(0, 2, 4)) -> dict:
    """Fit LSI with ``scheme`` at step ``h`` on ``n_traj`` trajectories of ``n_steps`` steps; level sets and trajectory."""
    cfg = SYSTEMS[system_name]
    system = getattr(integrators.systems, system_name)()
    n = len(cfg["q0"])
    data = snapshots(system, h, n_traj, n_steps, seed=0)
    t = time.perf_counter()
    model = InverseModifiedLagrangianGP(h, scheme, **FAST).fit(data)
    row = {"system": system_name, "scheme": scheme, "h": h, "fit_s": time.perf_counter() - t}
    its = model.history.get("stage_iterations")
    if its:
        row.update(iterations=len(its) - 1, del_first=its[0]["max_del"], del_last=its[-1]["max_del"])
    states = level_states(cfg["box"], n)
    for N in orders:
        row[f"ls{N}"] = level_set_error(model.energy(N), system.energy, states=states)
    steps = int(round(t_end / h))
    q0 = torch.tensor([cfg["q0"]], dtype=torch.float64)
    v0 = torch.tensor([cfg["qdot0"]], dtype=torch.float64)
    ref = reference_flow(system, q0, v0, h * torch.arange(steps + 1, dtype=torch.float64)).q
    t = time.perf_counter()
    pred = model.predict(q0, v0, steps, order=max(orders), on_extrapolation="ignore")
    row.update(predict_s=time.perf_counter() - t, steps=steps, traj_err=max_trajectory_error(pred, ref))
    return row


def table(rows) -> str:
    head = ("| system | scheme | h | L evals per unit time | fit (s) | GN its | DEL first -> last | H_rec[0] | H_rec[2] "
            "| H_rec[4] | steps | max traj. error |")
    out = [head, "|" + "---|" * 12]
    for r in rows:
        per_step = 3 if r["scheme"] == "galerkin2" else 1
        gn = f"{r['iterations']}" if "iterations" in r else "-"
        dl = f"{r['del_first']:.1e} -> {r['del_last']:.1e}" if "iterations" in r else "-"
        out.append(f"| {r['system']} | {r['scheme']} | {r['h']:g} | {per_step / r['h']:.3g} | {r['fit_s']:.1f} | {gn} | {dl} "
                   f"| {r['ls0']:.2e} | {r['ls2']:.2e} | {r.get('ls4', math.nan):.2e} | {r['steps']} | {r['traj_err']:.2e} |")
    return "\n".join(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    ap.add_argument("--traj", type=int, default=60, help="trajectories per fit (default 60)")
    ap.add_argument("--steps", type=int, default=5, help="steps per trajectory (default 5)")
    ap.add_argument("--periods", type=float, default=4.0, help="prediction length in periods 2 pi (default 4)")
    ap.add_argument("--stage-order4-n2", action="store_true",
                    help="no effect, kept so that older commands run: H_rec[4] of Galerkin for n = 2 is now computed by "
                         "default (its dimension-free series takes about a second cold)")
    args = ap.parse_args(argv)
    rows = []
    for name in args.systems:
        h = SYSTEMS[name]["h"]
        t_end = h * math.ceil(args.periods * 2 * math.pi / h)  # a multiple of every step
        cases = [("midpoint", h), ("galerkin2", h), ("midpoint", h / 3)]
        for scheme, step in cases:
            rows.append(run(name, scheme, step, args.traj, args.steps, t_end, (0, 2, 4)))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(table(rows))


if __name__ == "__main__":
    main()
