"""The library's default identification (``InverseModifiedLagrangianGP(h).fit(q)``, nothing chosen) in higher
dimension (issue 23, items 1, 2, 5): fit time, level-set errors of H_rec[0/2/4] and the order-4 gain.

FPU-beta chain of ``n`` masses (the README's chain: ``h = 0.45``, initial states in [-0.6, 0.6]^{2n}, 5 steps per
trajectory), level sets at 40 Halton states of [-0.42, 0.42]^{2n} (pipelines.identification). Prints one row per
size with the fit's wall and CPU time measured in this run (one thread: on a busy machine the CPU time is what
the fit costs on a quiet one). Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/identification_default.py            # n = 6, 200 trajectories
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/identification_default.py --n 4 --traj 100 200
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/identification_default.py --kernel mechanical
"""

from __future__ import annotations

import argparse
import time
import warnings
from dataclasses import replace


def main(argv=None) -> None:
    from learners import InverseModifiedLagrangianGP
    from pipelines import identification as I
    from integrators.data import snapshots

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=6, help="masses in the chain")
    ap.add_argument("--traj", type=int, nargs="+", default=[200], help="numbers of trajectories")
    ap.add_argument("--points", type=int, default=40, help="level-set states")
    ap.add_argument("--kernel", default=None, help="kernel= of the model (default: the library's)")
    args = ap.parse_args(argv)
    print(f"{'n':>3} {'traj':>5} {'fit s':>7} {'cpu s':>7} {'objective':>10} {'H_rec[0]':>9} {'H_rec[2]':>9} {'H_rec[4]':>9} {'gain':>6} "
          f"{'energy cal (rms z, 2σ)':>24}")
    for T in args.traj:
        cfg = replace(I.CI, chain_n=args.n, n_traj=T, lengthscale=None, q0=(0.0,) * args.n, qdot0=(0.0,) * args.n)
        system = I.chain_system(cfg)
        dom = [(-cfg.amplitude, cfg.amplitude)] * (2 * args.n)
        S = snapshots(system, cfg.h, T, cfg.n_steps, domain=dom, seed=cfg.data_seed)
        t, c = time.perf_counter(), time.process_time()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            kw = {} if args.kernel is None else {"kernel": args.kernel}
            model = InverseModifiedLagrangianGP(cfg.h, progress=False, **kw).fit(S)
        fit_s, cpu_s = time.perf_counter() - t, time.process_time() - c
        ls = I.level_set_errors(cfg, model, system, (0, 2, 4), args.points)
        cal = model.calibration.get("energy")
        cal_s = f"{cal.rms_z:.2f}, {cal.coverage:.2f}" if cal is not None else "-"
        print(f"{args.n:>3} {T:>5} {fit_s:>7.1f} {cpu_s:>7.1f} {model.objective_used:>10} {ls['ls0']:>9.4f} {ls['ls2']:>9.4f} "
              f"{ls['ls4']:>9.4f} {ls['ls2'] / ls['ls4']:>6.2f} {cal_s:>24}")
        print(f"    normalisation conditions {model._norm_count}, held-out (trace, matrix) "
              f"{model.history.get('normalisation_values')}")
        for w in caught:
            print(f"    warning: {w.message}")


if __name__ == "__main__":
    main()
