"""The low-rank solve (learners/shadow/lowrank_solve.py) against today's dense Cholesky on the same data and
hyperparameters (issue 27 item 3): the fit's final solve at growing numbers of functionals F.

A model is fitted (hyperparameter search included) on ``--fit-traj`` trajectories of ``--system`` (benchmarks/
_element_systems.py) with ``--kernel`` (``rbf``: the plain RBF over the whole state; ``element``: the system's element
kernel). Its hyperparameters and normalisation are then kept, and its final solve -- all DEL residuals of T
trajectories plus the normalisation -- is redone for each T of ``--traj`` (same system, h, box; seed ``--seed``), once
dense (``gp.solver = None``) and once low-rank (``LowRankSolver(tol, max_rank)``), each in a forked child process
(its peak RSS above the parent's at the fork is reported). Measured per solve: CPU s of the final solve (the
``_finalise`` call: assembly/columns, factorisation, the mass-target correction), peak RSS increase, the rank, the
max over held-out states (DEL atoms of 40 unseen trajectories, seed + 1) of |mean_lowrank - mean_dense| relative to
the dense mean's range there (and of the difference less its average: L is identified up to a constant only by the
normalisation), and the level-set error of H_rec[N] (benchmarks/_element_metrics.py, 40 states).
``--no-dense-above F``: dense skipped where F is larger (memory); its row then says so. Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/lowrank_solve.py --system chain4 --kernel rbf --traj 160 320 640
    PYTHONPATH=. python3 benchmarks/lowrank_solve.py --system chain4 --kernel element --traj 100 --tol 1e-8 1e-10
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import time
import warnings

import torch

try:
    from benchmarks import _element_metrics as M
    from benchmarks._element_systems import SYSTEMS, element_kernel
except ImportError:  # pragma: no cover - run as a script
    import _element_metrics as M
    from _element_systems import SYSTEMS, element_kernel


def _arguments(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=sorted(SYSTEMS), default="chain4")
    ap.add_argument("--kernel", choices=("rbf", "element"), default="rbf")
    ap.add_argument("--fit-traj", type=int, default=40, help="trajectories of the hyperparameter fit")
    ap.add_argument("--traj", type=int, nargs="+", default=[160], help="trajectories of the final solves compared")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tol", type=float, nargs="+", default=[1e-12], help="LowRankSolver tolerances")
    ap.add_argument("--max-rank", type=int, default=4000)
    ap.add_argument("--relative-to", choices=("variance", "noise"), default="variance", help="LowRankSolver.relative_to")
    ap.add_argument("--orders", type=int, nargs="*", default=[2, 4], help="level-set orders (none: --orders)")
    ap.add_argument("--no-dense-above", type=int, default=12000, help="dense skipped above this many functionals")
    return ap.parse_args(argv)


def _fitted(args):
    """The fitted model and its final solve's (F_data, F_norm), captured as ``_finalise`` consumes them."""
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP

    make, h, kind, size = SYSTEMS[args.system]
    system = make()
    kernel = "rbf" if args.kernel == "rbf" else element_kernel(kind, size)
    model = InverseModifiedLagrangianGP(h, kernel=kernel, progress=False)
    final, finalise = {}, model._finalise

    def grab():
        final["F"] = model._final
        finalise()

    model._finalise = grab
    c = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(snapshots(system, h, args.fit_traj, args.steps, seed=args.seed))
    del model._finalise
    print(f"fit on {args.fit_traj} trajectories: {time.process_time() - c:.1f} CPU s, hyperparameters "
          f"{ {k: [round(x, 4) for x in v.detach().reshape(-1).tolist()] for k, v in model.gp.named_parameters()} }",
          flush=True)
    return system, h, model, final["F"][1]


def _standard_functionals(model, S):
    from learners.shadow.functionals import snapshot_functionals

    return snapshot_functionals(model._to_standard(S), model._h_std, model.scheme)[0]


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def _solve(model, system, F_data, F_norm, solver, held, orders, out):
    """In a forked child: the final solve with ``solver``, its cost and the mean at ``held`` and the level sets."""
    base = _rss_mib()
    split = _timed_parts() if solver is None else {}
    model._final_solver = solver  # one searched model, solved both ways (a user passes final_solver= to the constructor)
    model._final = (F_data, F_norm)
    c = time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:  # under a memory limit (prlimit --as) the dense solve may not fit: say so, do not hang the parent
            model._finalise()
        except (MemoryError, RuntimeError) as e:
            out.send({"error": f"{type(e).__name__} after {time.process_time() - c:.0f} CPU s: {str(e)[:80]}"})
            return
    cpu = time.process_time() - c
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base
    model._recovered, model._jet, model._data_level = {}, None, None
    with torch.no_grad():  # in chunks: the dense mean of 1e4 element functionals has ~1e6 atoms
        mean = torch.cat([model.gp.mean(held[a:a + 64]) for a in range(0, held.shape[0], 64)])
    ls = M.level_set_errors(model, system, orders) if orders else {}
    # plain Python values: torch tensors would travel through shared memory that the child's exit releases
    out.send({"cpu": cpu, "peak": peak, "split": dict(split), "mean": mean.tolist(), "ls": ls,
              "rank": model.gp.info.extra.get("rank"), "jitter": model.gp.info.jitter,
              "r_noise": model.gp.info.extra.get("residual_over_noise"), "warnings": [str(w.message)[:120] for w in caught]})


def _timed_parts() -> dict:
    """In the dense child only (the patches die with it): CPU s inside ``FunctionalKernel.forward`` (the assembly, and the
    mass-target correction's few small blocks) and inside ``torch.linalg.cholesky_ex``, accumulated."""
    from learners.shadow.kernels import FunctionalKernel

    parts = {"assembly": 0.0, "cholesky": 0.0}

    def timed(name, f):
        def g(*a, **k):
            c = time.process_time()
            try:
                return f(*a, **k)
            finally:
                parts[name] += time.process_time() - c
        return g

    FunctionalKernel.forward = timed("assembly", FunctionalKernel.forward)
    torch.linalg.cholesky_ex = timed("cholesky", torch.linalg.cholesky_ex)
    return parts


def _in_child(*args):
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_solve, args=(*args, send))
    p.start()
    res = recv.recv()
    p.join()
    if "mean" in res:
        res["mean"] = torch.tensor(res["mean"], dtype=torch.float64)
    return res


def main(argv=None) -> None:
    from integrators.data import snapshots
    from learners.shadow.lowrank_solve import LowRankSolver

    args = _arguments(argv)
    system, h, model, F_norm = _fitted(args)
    S_held = snapshots(system, h, 40, args.steps, seed=args.seed + 1)
    held = torch.cat([a.points for a in _standard_functionals(model, S_held).atoms.values()])
    print("| kernel | F | solver | rank | final solve CPU s | peak RSS +MiB | dense / this: CPU, RSS "
          "| mean rel. diff (held-out) | centred | " + " | ".join(f"ls{N}" for N in args.orders) + " |")
    print("| --- " * (9 + len(args.orders)) + "|", flush=True)
    for T in args.traj:
        F_data = _standard_functionals(model, snapshots(system, h, T, args.steps, seed=args.seed))
        F = F_data.count + F_norm.count
        runs = [("dense", None)] if F <= args.no_dense_above else []
        runs += [(f"lowrank tol {t:g}", LowRankSolver(tol=t, max_rank=args.max_rank,
                                                                    relative_to=args.relative_to)) for t in args.tol]
        ref = None
        for name, solver in runs:
            r = _in_child(model, system, F_data, F_norm, solver, held, args.orders)
            if "error" in r:
                print(f"| {args.kernel} | {F} | {name} | failed: {r['error']} | | | | | | |", flush=True)
                continue
            if solver is None:
                ref, ref_cost = r["mean"], (r["cpu"], r["peak"])
            ratios = "-" if ref is None else f"{ref_cost[0] / r['cpu']:.2f}, {ref_cost[1] / max(r['peak'], 1.0):.2f}"
            diff = "- | -" if ref is None else " | ".join(f"{float(e.abs().max() / (ref.max() - ref.min())):.1e}" for e in
                                                      (r["mean"] - ref, r["mean"] - ref - (r["mean"] - ref).mean()))
            rank = F if r["rank"] is None else int(r["rank"])
            if r["split"]:
                name += " (assembly {assembly:.1f} s, Cholesky {cholesky:.1f} s)".format(**r["split"])
            # the dense solve's added jitter; the low-rank residual trace sum_i r_i in units of the nugget sigma^2
            name += f" (jitter {r['jitter']:.1e})" if solver is None else f" (sum r / s^2 {r['r_noise']:.2g})"
            ls = " | ".join(f"{r['ls'][N]:.4f}" for N in args.orders)
            print(f"| {args.kernel} | {F} | {name} | {rank} | {r['cpu']:.1f} | {r['peak']:.0f} | {ratios} | {diff} | {ls} |",
                  flush=True)
            for w in r["warnings"]:
                print(f"  warning: {w}", flush=True)
        if not any(s is None for _, s in runs):
            print(f"| {args.kernel} | {F} | dense | skipped: F > --no-dense-above {args.no_dense_above} | | | | | | |",
                  flush=True)


if __name__ == "__main__":
    main()
