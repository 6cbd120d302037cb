"""Benchmark of Lagrangian Shadow Integration (learners): fit, prediction, identification, scaling.

    python benchmarks/shadow.py [--quick] [--objectives] [--scaling-max 6400] [--modlanet-only]

Reference size: the pendulum experiment of docs/theory/lsi.md (400 trajectories x 5 steps at h = 0.5,
1,600 DEL triples). Prints

* fit time (hyperparameter search + final exact solve) -- target <= 20 s;
* a 10,000-step prediction from q0 = 0.3 on the compiled integrator path (target <= 3 s, trajectory
  error 1.3e-5 +- 10%) and, in the same run, on the eager path; batched throughput;
* identification: generating mod_2 / mod_4 (cold cache), level sets on the 30 x 30 grid, and
  velocities at orders 2 and 4 on the 10^4 predicted states (target <= 5 s at order 2), through the
  closed-form jets of the GP mean (learners/shadow/rbf_jet.py); the autograd path on the first 200 of them in
  the same run (speed ratio, max |v_jets - v_autograd|); the peak RSS of the 10^4-state velocities
  call measured in isolation: a fresh subprocess conditions the same GP (fixed learned
  hyperparameters), resets its high-water mark (``/proc/self/clear_refs``) and reads ``VmHWM`` after the
  call (target < 2 GB; ``--skip-velocities-1e4`` leaves all of it out);
* the scaling of the fit with the number of triples (400 ... 6400): fixed hyperparameters (kernel
  assembly + Cholesky) and with the default hyperparameter search;
* ModLaNet rollouts, compiled against eager in the same run (benchmarks/_modlanet_bench.py;
  ``--modlanet-only`` runs just that section);
* ``--objectives``: marginal likelihood against held-out DEL residuals (the choice documented in
  learners/shadow/hyperparameters.py): lengthscales, fit time, trajectory error, level-set errors.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import torch

torch.set_default_dtype(torch.float64)

H = 0.5


def _t(fn, *a, **k):
    t = time.perf_counter()
    out = fn(*a, **k)
    return out, time.perf_counter() - t


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return float(line.split()[1]) / 1024
    return float("nan")


#: run in a fresh interpreter by _isolated_velocities: condition the GP with the given hyperparameters, predict
#: the states, then measure the velocities call alone (the high-water mark is reset just before it)
_ISOLATED = r"""
import json, sys, time, torch
torch.set_default_dtype(torch.float64)
import integrators
from integrators.data import snapshots
from learners import InverseModifiedLagrangianGP
a = json.loads(sys.argv[1])
S = snapshots(integrators.systems.pendulum(), a["h"], 400, 5, seed=0)
m = InverseModifiedLagrangianGP(a["h"], lengthscale=a["lengthscale"], noise=a["noise"]).fit(S)
qs = m.predict(torch.tensor([[0.3]]), torch.zeros(1, 1), a["steps"]).q[: a["states"]]
m.velocities(qs[:4], a["order"])  # builds the C library of the jet (once per process)
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return float(line.split()[1]) / 1024
rss0 = status("VmRSS")
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
    reset = True
except OSError:
    reset = False
t = time.perf_counter()
v = m.velocities(qs, a["order"])
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "rss_before_mb": rss0, "peak_mb": status("VmHWM"), "reset": reset}))
"""


def _isolated_velocities(hyper, steps: int, states: int, order: int) -> dict:
    arg = json.dumps({"h": H, "lengthscale": hyper["lengthscale"], "noise": hyper["noise"], "steps": steps,
                      "states": states, "order": order})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", _ISOLATED, arg], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1,000 prediction steps, scaling up to 1600 triples")
    ap.add_argument("--objectives", action="store_true", help="compare the two hyperparameter objectives")
    ap.add_argument("--scaling-max", type=int, default=6400, help="largest number of triples in the scaling table")
    ap.add_argument("--skip-velocities-1e4", action="store_true", help="leave out velocities on 10^4 states")
    ap.add_argument("--skip-eager", action="store_true", help="do not time the eager prediction path")
    ap.add_argument("--modlanet-only", action="store_true", help="only the ModLaNet compiled/eager rollout section")
    args = ap.parse_args()
    if args.modlanet_only:
        _print_modlanet(args.quick)
        return
    os.environ.setdefault("BEA_CACHE_DIR", tempfile.mkdtemp(prefix="bea-bench-"))  # cold derivations

    import bea
    import integrators
    from integrators import reference_flow
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP
    from learners.metrics import grid_states, level_set_error, max_trajectory_error

    pend = integrators.systems.pendulum()
    S = snapshots(pend, H, 400, 5, seed=0)
    steps = 1000 if args.quick else 10000
    q0, v0 = torch.tensor([[0.3]]), torch.zeros(1, 1)
    flow = reference_flow(pend, q0, v0, H * torch.arange(steps + 1, dtype=torch.float64))
    q_ref, v_ref = flow.q, flow.v
    rows = []

    # ------------------------------------------------------------------ fit
    model = InverseModifiedLagrangianGP(H, progress=False)
    _, t_fit = _t(model.fit, S)
    fixed = InverseModifiedLagrangianGP(H, lengthscale=model.hyperparameters["lengthscale"], noise=model.hyperparameters["noise"])
    _, t_solve = _t(fixed.fit, S)
    rows.append(("fit, 1600 triples (search + solve), target <= 20 s", f"{t_fit:.2f} s"))
    rows.append(("  of which the final exact solve (fixed hyperparameters)", f"{t_solve:.2f} s"))
    rows.append(("  hyperparameters", str(model.hyperparameters)))
    rows.append(("  solve", str(model.conditioning)))

    # ------------------------------------------------------------------ prediction
    t0 = time.perf_counter()
    bea.compile_torch("modified_lagrangian", "midpoint", 2, n=1)
    t_gen2 = time.perf_counter() - t0
    import integrators.variational as V

    warm = model._integrator_std(execution="compiled")  # the path predict takes (standardised coordinates)
    warm.solve(q0, v0, 2, legendre=model._recovered_std(2))  # builds the C library (once per process and model)
    t_build = warm.compile_seconds
    pred, t_pred = _t(model.predict, q0, v0, steps)
    qs = pred.q
    rows.append((f"prediction, {steps} steps, compiled path (target <= 3 s for 10,000)",
                 f"{t_pred:.2f} s = {steps / t_pred:.0f} steps/s; max |q - q_ref| = {max_trajectory_error(qs, q_ref):.2e}"))
    if not args.skip_eager:
        default = V.DEFAULT_EXECUTION
        V.DEFAULT_EXECUTION = "eager"
        try:
            eager, t_eager = _t(model.predict, q0, v0, steps)
            qe = eager.q
        finally:
            V.DEFAULT_EXECUTION = default
        rows.append((f"prediction, {steps} steps, eager path (same run)",
                     f"{t_eager:.2f} s = {steps / t_eager:.0f} steps/s; max |q - q_ref| = {max_trajectory_error(qe, q_ref):.2e}; "
                     f"compiled {t_eager / t_pred:.1f}x faster; max |q_compiled - q_eager| = {float((qs - qe).abs().max()):.1e}"))
    rows.append(("  C compile of the GP mean's stepper (once per process)", f"{t_build:.2f} s"))
    qb0 = torch.linspace(-1.0, 1.0, 100)[:, None]
    _, t_batch = _t(model.predict, qb0, torch.zeros(100, 1), 200)
    rows.append(("batched prediction, 100 initial conditions x 200 steps", f"{t_batch:.2f} s = {100 * 200 / t_batch:.0f} "
                 "trajectory-steps/s"))

    # ------------------------------------------------------------------ identification
    t0 = time.perf_counter()
    bea.compile_torch("modified_lagrangian", "midpoint", 4, n=1)
    t_gen4 = time.perf_counter() - t0
    rows.append(("generate mod_2 / mod_4 (cold cache)", f"{t_gen2:.2f} s / {t_gen4:.2f} s"))
    st = grid_states(points=30)
    for N in (0, 2, 4):
        e, t_ls = _t(level_set_error, model.energy(N), pend.energy, states=st)
        rows.append((f"level sets on 30 x 30 grid, N = {N}", f"{t_ls:.2f} s (error {e:.2e})"))
    if not args.skip_velocities_1e4 and qs.shape[0] >= 10_000:
        q4 = qs[:10_000]
        for N in (2, 4):
            model.velocities(q4[:4], N)  # builds the jet's C library (once per process and order)
            v, t_v = _t(model.velocities, q4, N)
            err = float((v - v_ref[:10_000]).abs().max())
            sub = q4[:200]
            v_fast, t_fast = _t(model.velocities, sub, N)
            q_std = model._to_standard(sub)
            v_slow, t_slow = _t(model._velocities_std, q_std, N, None, jets=False)
            v_slow = model._speed * v_slow
            dv = float((v_fast - v_slow).abs().max()) / float(v_slow.abs().max())
            rows.append((f"velocities at 10^4 states, N = {N}" + (" (target <= 5 s)" if N == 2 else ""),
                         f"{t_v:.2f} s (max error {err:.2e}); first 200 states: jets {t_fast:.2f} s, autograd "
                         f"{t_slow:.2f} s ({t_slow / t_fast:.0f}x), max |v_jets - v_autograd| / max |v| = {dv:.1e}"))
        iso = _isolated_velocities(model.hyperparameters, steps, 10_000, 2)
        rows.append(("  isolated 10^4-state velocities call, N = 2 (fresh process; target < 2 GB)",
                     f"{iso['seconds']:.2f} s; peak RSS during the call {iso['peak_mb']:.0f} MB, "
                     f"{iso['peak_mb'] - iso['rss_before_mb']:+.0f} MB over the RSS before it"
                     + ("" if iso["reset"] else " (high-water mark not reset: the process peak)")))
        rows.append(("  peak RSS of this whole benchmark process so far", f"{_peak_rss_mb():.0f} MB"))

    # ------------------------------------------------------------------ scaling
    scaling = []
    n = 100
    while n * 4 <= args.scaling_max and (not args.quick or n * 4 <= 1600):
        Sn = snapshots(pend, H, n, 5, seed=0)
        m = InverseModifiedLagrangianGP(H, lengthscale=model.hyperparameters["lengthscale"], noise=model.hyperparameters["noise"])
        _, t_fixed = _t(m.fit, Sn)
        m2 = InverseModifiedLagrangianGP(H, progress=False)
        _, t_learn = _t(m2.fit, Sn)
        scaling.append((4 * n, t_fixed, t_learn, m.conditioning.cond_estimate))
        n *= 2

    w = max(len(r[0]) for r in rows)
    print("Lagrangian Shadow Integration, pendulum reference size (400 trajectories x 5 steps, h = 0.5)\n")
    for label, val in rows:
        print(f"{label:<{w}}  {val}")
    print("\nfit time against the number of DEL triples")
    print(f"{'triples':>8}  {'fixed hyperparameters':>22}  {'with search':>12}  {'condition >=':>12}")
    for tri, tf, tl, c in scaling:
        print(f"{tri:>8}  {tf:>20.2f} s  {tl:>10.2f} s  {c:>12.2e}")

    # ------------------------------------------------------------------ objectives
    if args.objectives:
        print("\nhyperparameter objective (full data; prediction over 2,000 steps)")
        q2 = q_ref[:2001]
        for obj in ("mll", "heldout"):
            m = InverseModifiedLagrangianGP(H, objective=obj, progress=False)
            _, tf = _t(m.fit, S)
            e = max_trajectory_error(m.predict(q0, v0, 2000).q, q2) if steps >= 2000 else float("nan")
            ls = [level_set_error(m.energy(N), pend.energy, states=st) for N in (2, 4)]
            hp = m.hyperparameters
            print(f"{obj:>8}: fit {tf:5.2f} s, lengthscales {hp['lengthscale']}, nugget {hp['noise']:.1e}; "
                  f"max |q - q_ref| {e:.2e}; level sets H_rec[2] {ls[0]:.2e}, H_rec[4] {ls[1]:.2e}")
    _print_modlanet(args.quick)


def _print_modlanet(quick: bool) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _modlanet_bench import modlanet_rows

    rows = modlanet_rows(quick)
    w = max(len(r[0]) for r in rows)
    print("\nModLaNet rollouts, compiled and eager integrator paths (same run)")
    for label, val in rows:
        print(f"{label:<{w}}  {val}")


if __name__ == "__main__":
    main()
