"""The mechanical kernel (RBF in q times a polynomial in v, learners/shadow/mechanical.py) against the RBF default.

    python benchmarks/mechanical_kernel.py [--systems pendulum,henon_heiles,anharmonic3] [--steps 1000] [--states 100] [--objective mll] [--degree 6]

Same data for both kernels, positions only, library defaults otherwise (hyperparameter search by the default
objective; ``--objective positions`` for another). Per system and kernel: fit time, the max trajectory error
over ``--steps`` steps of ``predict`` against the exact flow, the level-set errors of H_rec[2] and H_rec[4] (mean
sine of the angle between the gradients of the recovered and the true energy at ``--states`` random states in
the level box), and the relative error of the energy differences to a reference state after the best fit of scale
(H_rec[4]). The last column of the table is the ratio RBF / mechanical of each number, measured in the same run.

Systems: the README pendulum (h = 0.5, 400 x 5 snapshots), Hénon--Heiles (h = 0.1, 200 x 5), and a 3-degree-of-
freedom anharmonic oscillator with cubic couplings (h = 0.2, 120 x 5; the setting of issue 23); ``fpu4``: the
FPU-beta chain of 4 masses (h = 0.3, 200 x 5), on request.
"""

from __future__ import annotations

import argparse
import time

import sympy
import torch

import integrators as I
from learners import InverseModifiedLagrangianGP, MechanicalKernel
from learners.metrics import level_set_field, max_trajectory_error


def anharmonic3() -> I.systems.System:
    """n = 3: unit masses, frequencies 1, 1.3, 0.8, cubic couplings 0.3 q1 q2 q3 + 0.2 q1^2 q3 - 0.1 q2^3."""
    q = sympy.symbols("q1 q2 q3", real=True)
    v = sympy.symbols("v1 v2 v3", real=True)
    V = (q[0] ** 2 + sympy.Rational(169, 100) * q[1] ** 2 + sympy.Rational(16, 25) * q[2] ** 2) / 2 \
        + sympy.Rational(3, 10) * q[0] * q[1] * q[2] + sympy.Rational(1, 5) * q[0] ** 2 * q[2] - sympy.Rational(1, 10) * q[1] ** 3
    L = sum(vi ** 2 for vi in v) / 2 - V
    return I.systems.from_sympy(L, q, v, "anharmonic3", domain=[(-0.5, 0.5)] * 6)


#: name -> (system, h, n_traj, q0, qdot0, level box)
SYSTEMS = {
    "pendulum": (I.systems.pendulum, 0.5, 400, (0.3,), (0.0,), ((-1.2, 1.2), (-0.6, 0.6))),
    "henon_heiles": (I.systems.henon_heiles, 0.1, 200, (0.1, -0.1), (0.1, 0.15), ((-0.3, 0.3),) * 4),
    "anharmonic3": (anharmonic3, 0.2, 120, (0.2, -0.1, 0.15), (0.1, 0.0, -0.1), ((-0.35, 0.35),) * 6),
    "fpu4": (lambda: I.systems.fpu_chain(4), 0.3, 200, (0.3, -0.2, 0.1, 0.25), (0.0, 0.2, -0.1, 0.0), ((-0.35, 0.35),) * 8),
}


def _states(box, count: int, seed: int = 7):
    gen = torch.Generator().manual_seed(seed)
    lo = torch.tensor([b[0] for b in box], dtype=torch.float64)
    hi = torch.tensor([b[1] for b in box], dtype=torch.float64)
    x = lo + (hi - lo) * torch.rand(count, len(box), generator=gen, dtype=torch.float64)
    n = len(box) // 2
    return x[:, :n].contiguous(), x[:, n:].contiguous()


def _energy_differences(H, H_ref, q, v) -> float:
    """Relative error of H(x) - H(x_0) against the truth after the best scale (least squares)."""
    with torch.no_grad():
        d = (H(q, v) - H(q[:1], v[:1])).detach()
        t = (H_ref(q, v) - H_ref(q[:1], v[:1])).detach()
    s = float((d * t).sum() / (d * d).sum())
    return float((s * d - t).norm() / t.norm())


def run(name: str, kernel, steps: int, states: int, objective: str) -> dict:
    make, h, n_traj, q0, qdot0, box = SYSTEMS[name]
    system = make()
    S = I.data.snapshots(system, h, n_traj=n_traj, n_steps=5, seed=0)
    t = time.perf_counter()
    model = InverseModifiedLagrangianGP(h, kernel=kernel, objective=objective, progress=False).fit(S)
    fit = time.perf_counter() - t
    q0t = torch.tensor([q0], dtype=torch.float64)
    v0t = torch.tensor([qdot0], dtype=torch.float64)
    t = time.perf_counter()
    qs = model.predict(q0t, v0t, steps, on_extrapolation="ignore")
    pred = time.perf_counter() - t
    q_ref, _ = I.reference_flow(system, q0t, v0t, h * torch.arange(steps + 1, dtype=torch.float64))
    q, v = _states(box, states)
    row = {"system": name, "fit_s": fit, "predict_s": pred, "traj": max_trajectory_error(qs, q_ref)}
    for N in (2, 4):
        # small chunks: mod_4 of the mechanical mean goes through nested autograd (about 100 MB per state)
        row[f"ls{N}"] = float(level_set_field(model.energy(N), system.energy, q, v, chunk=8).mean())
    row["dE4"] = _energy_differences(model.energy(4), system.energy, q, v)
    return row


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", default="pendulum,henon_heiles,anharmonic3")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--states", type=int, default=100)
    ap.add_argument("--objective", default="mll")
    ap.add_argument("--degree", type=int, default=None, help="degree of the mechanical kernel (default: its own)")
    args = ap.parse_args(argv)
    mechanical = "mechanical" if args.degree is None else MechanicalKernel(args.degree)
    cols = ("fit_s", "predict_s", "traj", "ls2", "ls4", "dE4")
    print(f"| system | kernel | {' | '.join(cols)} |")
    print("| --- | --- |" + " --- |" * len(cols))
    for name in args.systems.split(","):
        rows = {k: run(name, kern, args.steps, args.states, args.objective) for k, kern in (("rbf", "rbf"), ("mechanical", mechanical))}
        for k, r in rows.items():
            print(f"| {name} | {k} | " + " | ".join(f"{r[c]:.3g}" for c in cols) + " |", flush=True)
        ratio = {c: rows["rbf"][c] / rows["mechanical"][c] if rows["mechanical"][c] else float("inf") for c in cols}
        print(f"| {name} | ratio rbf/mech | " + " | ".join(f"{ratio[c]:.3g}" for c in cols) + " |", flush=True)


if __name__ == "__main__":
    main()
