"""The library's default identification (``InverseModifiedLagrangianGP(h).fit(q)``, nothing chosen) in higher
dimension (issue 23, items 1, 2, 5): fit time, level-set errors of H_rec[0/2/4] and the order-4 gain.

FPU-beta chain of ``n`` masses (the README's chain: ``h = 0.45``, initial states in [-0.6, 0.6]^{2n}, 5 steps per
trajectory), level sets at 40 Halton states of [-0.42, 0.42]^{2n} (pipelines.identification). Prints one row per
size with the fit's wall and CPU time measured in this run (one thread: on a busy machine the CPU time is what
the fit costs on a quiet one). Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/identification_default.py            # n = 6, 200 trajectories
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/identification_default.py --n 4 --traj 100 200
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/identification_default.py --kernel mechanical
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/identification_default.py --no-calibration --floor 6

``--no-calibration`` skips the energy calibration (run on first demand after the fit; at n = 6 it costs several
times the fit). ``--floor N`` first prints the truncation floor: the level-set errors of H_rec[0/2/4] computed from
the *exact* inverse modified Lagrangian (the bea series of order N applied to the true L), what a GP without error
would give; the order-4 gain cannot exceed its ratio.
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
    ap.add_argument("--traj", type=int, nargs="*", default=[200], help="numbers of trajectories (none: the floor only)")
    ap.add_argument("--points", type=int, default=40, help="level-set states")
    ap.add_argument("--kernel", default=None, help="kernel= of the model (default: the library's)")
    ap.add_argument("--no-calibration", action="store_true", help="skip the energy calibration")
    ap.add_argument("--floor", type=int, default=None, help="order of the exact L_inv series for the truncation floor")
    args = ap.parse_args(argv)
    if args.floor is not None:
        cfg = replace(I.CI, chain_n=args.n, lengthscale=None, q0=(0.0,) * args.n, qdot0=(0.0,) * args.n)
        ls = I.level_set_errors(cfg, _ExactInverse(I.chain_system(cfg), cfg.h, args.floor, args.n), I.chain_system(cfg),
                                (0, 2, 4), args.points)
        print(f"truncation floor (exact L_inv, series order {args.floor}): H_rec[0] {ls['ls0']:.4f}  H_rec[2] "
              f"{ls['ls2']:.4f}  H_rec[4] {ls['ls4']:.4f}  gain {ls['ls2'] / ls['ls4']:.2f}")
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
        cal = None if args.no_calibration else model.calibration.get("energy")
        cal_s = f"{cal.rms_z:.2f}, {cal.coverage:.2f}" if cal is not None else "-"
        print(f"{args.n:>3} {T:>5} {fit_s:>7.1f} {cpu_s:>7.1f} {model.objective_used:>10} {ls['ls0']:>9.4f} {ls['ls2']:>9.4f} "
              f"{ls['ls4']:>9.4f} {ls['ls2'] / ls['ls4']:>6.2f} {cal_s:>24}")
        print(f"    normalisation conditions {model._norm_count}, held-out (trace, matrix) "
              f"{model.history.get('normalisation_values')}, lengthscales {model.hyperparameters['lengthscale']}")
        for w in caught:
            print(f"    warning: {w.message}")


class _ExactInverse:
    """What :func:`pipelines.identification.level_set_errors` asks of a model (``energy(N)``), for the exact inverse
    modified Lagrangian of ``system`` (the bea series of order ``order`` at the step ``h``) instead of a learned one."""

    def __init__(self, system, h: float, order: int, n: int):
        import bea

        f = bea.series_function("inverse_modified_lagrangian", "midpoint", order, n)
        self.L_inv = lambda q, v: f(system, q, v, h)
        self.h, self.n = h, n

    def energy(self, N: int):
        import bea

        if N == 0:
            return bea.energy(self.L_inv)
        f = bea.series_function("modified_lagrangian", "midpoint", N, self.n)
        return bea.energy(lambda q, v: f(self.L_inv, q, v, self.h))


if __name__ == "__main__":
    main()
