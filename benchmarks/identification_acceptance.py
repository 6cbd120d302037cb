"""Issue 23's acceptance systems (tests/test_learners_shadow_auto.py) under the library defaults, one kernel per
run: energy differences to a reference state after the best scale (N = 2, 4), their calibration (RMS z, fraction
within 2 sigma of 40 held-out differences), velocities within 2 sigma along a held-out trajectory, fit time.

Reuses the slow acceptance tests' systems, data (seed 0, 5 steps) and metrics, so a row here is what those tests
see. Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/identification_acceptance.py --system anharmonic3 --kernel mechanical
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/identification_acceptance.py --system toda3 --orders 2 --without-differences
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/identification_acceptance.py --system toda4 --no-std   # dE2, dE4 only

(``--orders``: the header keeps the N = 2, 4 columns; with one order the row has the first three.)
"""

from __future__ import annotations

import argparse
import time
import warnings


def main(argv=None) -> None:
    import tests.test_learners_shadow_auto as A
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP
    from learners.shadow.hyperparameters import IdentifiabilityWarning

    systems = {make.__name__: (make, h, T) for make, h, T in A.SYSTEMS}
    systems.update({make.__name__: (make, h, T) for make, h, T in A.UNTUNED})
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=sorted(systems), required=True)
    ap.add_argument("--kernel", default=None, help="kernel= of the model (default: the library's)")
    ap.add_argument("--traj", type=int, default=None, help="trajectories (default: the acceptance test's)")
    ap.add_argument("--orders", type=int, nargs="+", default=[2, 4], help="orders N of the energy differences")
    ap.add_argument("--without-differences", action="store_true",
                    help="calibrate the energy std without the distant differences (the method before them)")
    ap.add_argument("--no-std", action="store_true", help="energy differences only (no std, no calibration: fast)")
    args = ap.parse_args(argv)
    if args.without_differences:
        import learners.shadow.calibration as C

        C.difference_calibration = lambda model, floor: None  # this process only: the conservation and DEL scales
    make, h, T = systems[args.system]
    system = make()
    data = snapshots(system, h, args.traj or T, 5, seed=0)
    kw = {} if args.kernel is None else {"kernel": args.kernel}
    t, c = time.perf_counter(), time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", IdentifiabilityWarning)
        m = InverseModifiedLagrangianGP(h, progress=False, **kw).fit(data)
        fit_s, cpu_s = time.perf_counter() - t, time.process_time() - c
        print(f"fitted: {fit_s:.0f} s wall, {cpu_s:.0f} s cpu, objective {m.objective_used}, normalisation conditions "
              f"{m._norm_count}, kernel degree {m.kernel_degree}, held-out (trace, matrix, mechanical) "
              f"{m.history.get('normalisation_values')}", flush=True)
        principal = m.history.get("principal")
        if principal is not None:  # the principal-direction candidate (learners.shadow.principal)
            print(f"principal directions: kept {principal['kept']}, held-out tied {principal['objective']:.3f}, "
                  f"principal {principal['candidate_objective']}, factors {[round(f, 3) for f in principal['factors']]}",
                  flush=True)
        if args.no_std:
            rel = [A.energy_differences(m, system, N, return_std=False)[0] for N in (2, 4)]
            print(f"| {args.system} | {args.kernel or 'default'} | {cpu_s:.0f} | {rel[0]:.3g} | {rel[1]:.3g} |")
            return
        row = [args.system, args.kernel or "default", m.objective_used, f"{fit_s:.0f}", f"{cpu_s:.0f}"]
        for N in args.orders:
            rel, z = A.energy_differences(m, system, N)
            row += [f"{rel:.2e}", f"{float(z.pow(2).mean().sqrt()):.2f}", f"{float((z.abs() <= 2).double().mean()):.2f}"]
        zv = A.velocity_z(m, system, h)
        row += [f"{float((zv.abs() <= 2).double().mean()):.2f}"]
    print("| system | kernel | objective | fit s | cpu s | dE2 | rms z2 | 2σ2 | dE4 | rms z4 | 2σ4 | v 2σ |")
    print("| " + " | ".join(row) + " |")
    for w in caught:
        print(f"    warning: {w.message}")


if __name__ == "__main__":
    main()
