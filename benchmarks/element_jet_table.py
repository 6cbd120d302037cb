"""The first energy std of a per-body element fit (issue 23, cost; Session 23, branch trunc13): the element mean's jet
table (learners.shadow.element_jet) against its Taylor polynomial (element_uncertainty.on_taylor_mean, main's on_mean).

  fit PKL [--trajectories 150]   magnetic4 (h 0.2, 5 steps, seed 0), default kernel, pickled before the lazy calibration
  hot PKL [--states 10]          H_rec[4], H_rec[6] at random standardised states (order-7 jet): table, polynomial at
                                 main's pass size and at twice it (the rounding yardstick); CPU s and differences
  std PKL OUT                    calibration + energy(2) std + energy(4) std at 40 states and a reference, CPU s each,
                                 saved to OUT (run it with each tree on PYTHONPATH, alternating)
  compare A B                    the saved runs' energies, stds and calibration scales: largest relative difference

CPU s by time.process_time; run with OMP_NUM_THREADS=1. Results: benchmarks/RESULTS_calibration.md, Session 23.
"""

import argparse
import pickle
import time
import warnings

import torch


def _fit(args):
    from benchmarks._systems12 import magnetic4
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP

    data = snapshots(magnetic4(), 0.2, args.trajectories, 5, seed=0)
    t = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = InverseModifiedLagrangianGP(0.2, progress=False).fit(data)
    print("fit cpu", round(time.process_time() - t, 1), model.kernel_structure, flush=True)
    with open(args.a, "wb") as f:
        pickle.dump(model, f)


def _load(path):
    with open(path, "rb") as f:
        return pickle.load(f)


def _hot(args):
    from learners.shadow import uncertainty
    from learners.shadow.element_uncertainty import on_mean, on_taylor_mean

    model = _load(args.a)
    x = 0.6 * torch.randn(args.states, 2 * model.n, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    p, Q = model._jet_order("energy", 4) + 2, [model._quantity("energy", k) for k in (4, 6)]
    main_pass, res = uncertainty.MEAN_JET_ENTRIES, {}
    for name, fn, entries in [("table", on_mean, None), ("polynomial", on_taylor_mean, main_pass),
                              ("polynomial, pass x2", on_taylor_mean, 2 * main_pass)]:
        uncertainty.MEAN_JET_ENTRIES = entries or main_pass
        t = time.process_time()
        res[name] = [v[:, 0] for v in fn(model.gp, Q, x, p)]
        print(f"{name:20s} cpu {time.process_time() - t:7.2f}", flush=True)
    uncertainty.MEAN_JET_ENTRIES = main_pass
    (h4, h6) = res["polynomial"]
    for name, (a4, a6) in res.items():
        print(f"{name:20s} H[4] {float((a4 - h4).abs().max() / h4.abs().max()):.1e}  H[6] "
              f"{float((a6 - h6).abs().max() / h6.abs().max()):.1e}  H[6]-H[4] "
              f"{float(((a6 - a4) - (h6 - h4)).abs().max() / (h6 - h4).abs().max()):.1e}  (of the largest)")


def _std(args):
    from learners.shadow import calibration

    model = _load(args.a)
    g = torch.Generator().manual_seed(3)
    q = (torch.rand(41, 4, generator=g, dtype=torch.float64) - 0.5) * 1.0
    v = (torch.rand(41, 4, generator=g, dtype=torch.float64) - 0.5) * 0.5
    out, t = {}, time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        calibration.ensure_energy_calibration(model)
        print("calibration cpu", round(time.process_time() - t, 1), flush=True)
        for N in (2, 4):
            t2 = time.process_time()
            out[N] = model.energy(N, return_std=True, reference=(q[0], v[0]))(q[1:], v[1:])
            print(f"std N={N} cpu", round(time.process_time() - t2, 1), flush=True)
    print("total cpu", round(time.process_time() - t, 1))
    out["factors"] = {k: model._variance_factor(k) for k in ("energy", "energy_differences")}
    torch.save(out, args.b)


def _compare(args):
    a, b = torch.load(args.a, weights_only=False), torch.load(args.b, weights_only=False)
    for N in (2, 4):
        (ma, sa), (mb, sb) = a[N], b[N]
        print(f"N={N}: energies {float((ma - mb).abs().max() / mb.abs().max()):.1e} (of the largest), "
              f"stds {float(((sa - sb) / sb).abs().max()):.1e} (relative)")
    for k in a["factors"]:
        print(f"scale {k}: {a['factors'][k]!r} / {b['factors'][k]!r}, {abs(a['factors'][k] / b['factors'][k] - 1):.1e}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["fit", "hot", "std", "compare"])
    parser.add_argument("a")
    parser.add_argument("b", nargs="?")
    parser.add_argument("--trajectories", type=int, default=150)
    parser.add_argument("--states", type=int, default=10)
    args = parser.parse_args()
    {"fit": _fit, "hot": _hot, "std": _std, "compare": _compare}[args.mode](args)
