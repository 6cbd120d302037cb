"""Speed for any torch Lagrangian (issue 28): eager (today's path for torch code) against the traced C path.

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/integrate_any.py [--quick] [--repeats N] [--only MLP | --only System]

For a plain callable pendulum, an MLP Lagrangian (2 hidden layers of 64, tanh), and
``compile_torch("inverse_modified_lagrangian", "midpoint", 4)`` applied to a plain callable at n = 1 and
n = 4, it prints the steps per second on one trajectory and the trajectory-steps per second at batch
1000 of ``VariationalIntegrator`` with ``execution="eager"`` and with ``execution="compiled"`` (the
tracing front-end, :mod:`integrators.traced`), their ratio measured in this run, the first build time
(trace + verification + C compile) and the largest deviation between the two trajectories.

Then the SymPy ``System`` pendulum on the compiled path against a hand-written C loop of the same
midpoint Newton step (same extrapolated guess and convergence test), both on one trajectory: the ratio
is the share of the limit that the generic march reaches (and the ratio of the two sides' CPU times, which a
shared machine perturbs less; ``--only System`` runs only this row). With JAX installed (the ``bench`` extra), the plain
callables on the compiled path against the JAX peer (benchmarks/_jax_peer.py), skipped when JAX is absent.

Every rate is the median of ``--repeats`` timed runs (default 3), the two sides of each ratio timed alternately
in this run (the machine may be shared: ratios, not absolute rates, are what compare across runs). The last
lines print each target of issue 28 with its ratio and whether this run met it.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time

import numpy as np
import torch

import bea
from integrators import VariationalIntegrator, systems
from integrators.ccompile import load_library
from integrators.compiled_func import FUNC_MIN_WORK
from integrators.variational import AUTO_MIN_WORK

from integrate import _jax, initial_conditions  # noqa: E402 - the sibling benchmark (run from the repository root)

H = 0.05

HAND_LOOP = r"""
#include <math.h>
/* midpoint rule on L = v^2/2 + cos q: r(x) = -h/2 sin m - (x - a)/h + p, m = (a + x)/2; J = -h/4 cos m - 1/h;
   p' = -h/2 sin m + (x - a)/h. Newton from the order-6 extrapolation, |d| <= xtol (1 + |x|) or the stall test. */
int hand_march(int steps, double h, double *q, double p) {
    const double xtol = 1e-16, stall = 1e6;
    for (int j = 0; j < steps; j++) {
        const double a = q[j];
        double x;
        if (j >= 5) x = 6 * (q[j] + q[j - 4]) - 15 * (q[j - 1] + q[j - 3]) + 20 * q[j - 2] - q[j - 5];
        else if (j >= 1) x = 2 * q[j] - q[j - 1];
        else x = a + h * 0.1;
        double prev = INFINITY;
        int it = 0;
        for (; it < 20; it++) {
            const double m = 0.5 * (a + x);
            const double r = -0.5 * h * sin(m) - (x - a) / h + p;
            const double J = -0.25 * h * cos(m) - 1.0 / h;
            const double d = r / J;
            x -= d;
            const double err = fabs(d) / (1.0 + fabs(x));
            if (err <= xtol || (it >= 1 && err <= stall * xtol && err > 0.1 * prev)) break;
            prev = err;
        }
        q[j + 1] = x;
        p = -0.5 * h * sin(0.5 * (a + x)) + (x - a) / h;
    }
    return 0;
}
"""


def plain_pendulum(q, v):
    return v[..., 0] ** 2 / 2 + torch.cos(q[..., 0])


def mlp_lagrangian(n: int):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(2 * n, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                              torch.nn.Linear(64, 1)).double()
    with torch.no_grad():
        for layer in (net[0], net[2], net[4]):
            layer.weight.mul_(0.2)

    def L(q, v):  # a regular LNN-style Lagrangian: kinetic term plus the network
        return (v ** 2).sum(-1) / 2 - (q ** 2).sum(-1) / 2 + 0.1 * net(torch.cat([q, v], -1))[..., 0]
    return L


def series_lagrangian(n: int):
    inv = bea.compile_torch("inverse_modified_lagrangian", "midpoint", 4)

    def base(q, v):
        return (v ** 2).sum(-1) / 2 + torch.cos(q).sum(-1) + 0.05 * (q[..., :1] * q).sum(-1)

    return lambda q, v: inv(base, q, v, H)


def initial(n: int, batch: int):
    g = torch.Generator().manual_seed(1)
    return 0.3 + 0.4 * torch.rand(batch, n, generator=g, dtype=torch.float64), \
        0.2 * (torch.rand(batch, n, generator=g, dtype=torch.float64) - 0.5)


REPEATS = 3  # timed runs per rate (--repeats); the median is reported


def rate(vi, q0, v0, steps, repeats=None):
    """(positions, median trajectory-steps per second over ``repeats`` runs)."""
    rates = []
    for _ in range(repeats or REPEATS):
        t = time.perf_counter()
        q = vi.solve(q0, v0, steps, progress=False).q
        rates.append(q0.shape[0] * steps / (time.perf_counter() - t))
    return q, statistics.median(rates)


def row(name, L, n, steps):
    """(name, build s, single: eager/s, auto/s, path, batch 1000: eager/s, auto/s, path, max |dq|). ``execution="auto"``
    is warmed up at both batch sizes first (its warm-up column: the warm-up runs' time, and in parentheses the builds of
    every path it built, C and torch.compile: ``VariationalIntegrator.compile_seconds``)."""
    eager = VariationalIntegrator(L, H, execution="eager")
    fast = VariationalIntegrator(L, H, execution="auto")
    q0, v0 = initial(n, 1000)
    t = time.perf_counter()
    fast.solve(q0[:1], v0[:1], AUTO_MIN_WORK, progress=False)
    fast.solve(q0, v0, FUNC_MIN_WORK // 1000, progress=False)  # long enough for auto to build its batch path
    build = time.perf_counter() - t
    out = [name, f"{build:.1f} ({fast.compile_seconds:.1f})"]
    dev = 0.0
    for batch, (se, sc) in ((1, steps[0]), (1000, steps[1])):
        re, rc = [], []
        for _ in range(REPEATS):  # alternately, so that both sides see the same machine load
            qe, r = rate(eager, q0[:batch], v0[:batch], se, repeats=1)
            re.append(r)
            qc, r = rate(fast, q0[:batch], v0[:batch], sc, repeats=1)
            rc.append(r)
        m = min(se, sc) + 1  # --quick runs fewer eager steps than compiled ones (or the reverse)
        dev = max(dev, float((qe[:m] - qc[:m]).abs().max()))
        out += [statistics.median(re), statistics.median(rc), fast.last_execution]
    return out + [dev, fast.compile_seconds]


def plain_kepler(q, v):
    return (v ** 2).sum(-1) / 2 + 1 / torch.sqrt((q ** 2).sum(-1))


def versus_jax(jx, name, L, steps):
    """Plain callable ``L`` on the compiled path against the JAX peer of the same system (benchmarks/_jax_peer.py:
    jit, lax.scan over steps, vmap over trajectories), same initial data: [ours/s, jax/s, max |dq|] at batch 1 and 1000."""
    out = []
    for batch, n_steps in ((1, steps[0]), (1000, steps[1])):
        q0, v0 = (t.double() for t in initial_conditions(name, batch))
        vi = VariationalIntegrator(L, H, execution="compiled")
        vi.solve(q0, v0, 2, progress=False)  # build (or take from the caches)
        ours, theirs = [], []
        for _ in range(REPEATS):  # alternately, so that both sides see the same machine load
            q, r = rate(vi, q0, v0, n_steps, repeats=1)
            qj, _, tj = jx.timed(name, "midpoint", H, q0.numpy(), v0.numpy(), n_steps)
            ours.append(r)
            theirs.append(batch * n_steps / tj)
        out += [statistics.median(ours), statistics.median(theirs), float(np.abs(np.asarray(qj) - q.numpy()).max())]
    return out


def system_vs_hand(steps: int):
    vi = VariationalIntegrator(systems.pendulum(), H, execution="compiled")
    q0, v0 = torch.tensor([[0.5]], dtype=torch.float64), torch.tensor([[0.1]], dtype=torch.float64)
    vi.solve(q0, v0, 10)
    lib = load_library(HAND_LOOP).lib
    lib.hand_march.argtypes = [ctypes.c_int, ctypes.c_double, ctypes.POINTER(ctypes.c_double), ctypes.c_double]
    buf = np.zeros(steps + 1)
    buf[0] = 0.5
    p0 = 0.1  # dL/dv at (q0, v0)
    # cpu: hand / compiled CPU time of this thread (a shared machine perturbs it less than wall time; both are serial)
    ours, hand, cpu = [], [], []
    for _ in range(max(5, REPEATS)):  # alternately; each run is short, so more of them
        c = time.thread_time()
        qs, r = rate(vi, q0, v0, steps, repeats=1)
        c = time.thread_time() - c
        ours.append(r)
        t, c_hand = time.perf_counter(), time.thread_time()
        lib.hand_march(steps, H, buf.ctypes.data_as(ctypes.POINTER(ctypes.c_double)), p0)
        hand.append(steps / (time.perf_counter() - t))
        cpu.append((time.thread_time() - c_hand) / c)
    return (statistics.median(ours), statistics.median(hand), float(np.abs(buf[1:] - qs[1:, 0, 0].numpy()).max()),
            statistics.median(cpu))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer steps (a rough check)")
    ap.add_argument("--repeats", type=int, default=REPEATS, help="timed runs per rate, median reported (default 3)")
    ap.add_argument("--only", default=None, help="only the Lagrangians whose name contains this text (e.g. MLP); "
                    "no JAX or System comparison then; 'System': only the System row")
    args = ap.parse_args()
    globals()["REPEATS"] = max(1, args.repeats)
    k = 4 if args.quick else 1
    got = {}  # issue 28's ratios measured in this run, for the targets below
    if args.only == "System":
        system_row(k, got)
        return targets(got)
    cases = [("plain pendulum, n=1", plain_pendulum, 1, ((200 // k, 20000 // k), (20 // k, 200 // k))),
             ("MLP 2x64, n=1", mlp_lagrangian(1), 1, ((100 // k, 4000 // k), (100 // k, 400 // k))),
             ("inv_4 of a callable, n=1", series_lagrangian(1), 1, ((40 // k, 4000 // k), (5 // k, 100 // k))),
             ("inv_4 of a callable, n=4", series_lagrangian(4), 4, ((10 // k, 400 // k), (3, 10 // k)))]
    print("| Lagrangian | warm-up (build) s | 1 traj: eager/s | auto/s | ratio | path | batch 1000: eager/s | auto/s | ratio | path "
          "| max \\|q_a - q_e\\| |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|---|---:|")
    cases = [c for c in cases if args.only is None or args.only in c[0]]
    for name, L, n, steps in cases:
        nm, build, e1, c1, p1, eb, cb, pb, dev, built = row(name, L, n, steps)
        print(f"| {nm} | {build} | {e1:,.0f} | {c1:,.0f} | {c1 / e1:.0f}x | {p1} | {eb:,.0f} | {cb:,.0f} | {cb / eb:.1f}x "
              f"| {pb} | {dev:.1e} |", flush=True)
        got[name] = (c1 / e1, cb / eb, built)
    if args.only is not None:
        return targets(got)
    jx = _jax()
    if jx is None:
        print("\njax not installed (pip install '.[bench]'): no JAX ratios")
    else:
        print(f"\nPlain callables on the compiled path against the JAX peer (jax {jx.jax.__version__}, midpoint, h = {H}):\n")
        print("| plain callable | 1 traj: ours/s | JAX scan/s | ratio | batch 1000: ours/s | JAX vmap/s | ratio "
              "| max \\|q - q_jax\\| |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, L, steps in (("pendulum", plain_pendulum, (20000 // k, 2000 // k)),
                               ("kepler", plain_kepler, (20000 // k, 2000 // k))):
            o1, j1, d1, ob, jb, db = versus_jax(jx, name, L, steps)
            print(f"| {name} (n = {1 if name == 'pendulum' else 2}) | {o1:,.0f} | {j1:,.0f} | {o1 / j1:.2f}x | {ob:,.0f} "
                  f"| {jb:,.0f} | {ob / jb:.2f}x | {max(d1, db):.1e} |", flush=True)
            got[name] = (o1 / j1, ob / jb)
    system_row(k, got)
    targets(got)


def system_row(k: int, got: dict) -> None:
    ours, hand, dev, cpu = system_vs_hand(200000 // k)
    print(f"\nSystem pendulum, one trajectory: compiled {ours:,.0f} steps/s, hand-written C loop {hand:,.0f} steps/s, "
          f"ratio {ours / hand:.2f}x (max |q - q_hand| = {dev:.1e}; ratio of CPU times {cpu:.2f}x)")
    got["system"] = ours / hand
    got["system cpu"] = cpu


def targets(got: dict) -> None:
    """Issue 28's acceptance ratios from this run's measurements, each with met / NOT met."""
    rows = []
    if "pendulum" in got:
        rows += [("plain pendulum, 1 traj / JAX scan", got["pendulum"][0], 0.05, "x"),
                 ("plain pendulum, batch 1000 / JAX vmap", got["pendulum"][1], 1.0, "x"),
                 ("plain Kepler, 1 traj / JAX scan", got["kepler"][0], 0.05, "x"),
                 ("plain Kepler, batch 1000 / JAX vmap", got["kepler"][1], 1.0, "x")]
    if "MLP 2x64, n=1" in got:
        mlp = got["MLP 2x64, n=1"]
        rows += [("MLP 2x64, 1 traj / eager", mlp[0], 20.0, "x"), ("MLP 2x64, batch 1000 / eager", mlp[1], 3.0, "x"),
                 ("MLP compilers (C and torch.compile; 0 from the on-disk cache)", -mlp[2], -30.0, " s")]
    for n in (1, 4):
        if f"inv_4 of a callable, n={n}" in got:
            rows.append((f"inv_4 n={n}, 1 traj / eager", got[f"inv_4 of a callable, n={n}"][0], 20.0, "x"))
    if "system" in got:
        rows.append(("System pendulum / hand-written C", got["system"], 0.3, "x"))
        rows.append(("System pendulum / hand-written C, ratio of CPU times", got["system cpu"], 0.3, "x"))
    print("\nTargets of issue 28 (this run):\n")
    for what, value, bound, unit in rows:
        shown, limit = (f"{-value:.1f}", f"<= {-bound:.0f}") if bound < 0 else (f"{value:.2f}", f">= {bound:g}")
        print(f"* {what}: {shown}{unit} (target {limit}{unit}): {'met' if value >= bound else 'NOT met'}")


if __name__ == "__main__":
    main()
