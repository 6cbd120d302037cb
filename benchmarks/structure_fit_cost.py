"""Where the default fit's CPU goes at n >= 3 (issue 23 item 5): every held-out objective evaluation of one acceptance
system's default fit (seed 0, 5 steps) logged with its kernel, functional count, value and CPU seconds, then summed by
stage -- each candidate's subset grid and full solves of the default kernels' search, each structure's screen, and the
refined structure's basins (3), tied refinement, correction scan and untied search. Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/structure_fit_cost.py --system fpu6

Runs of consecutive evaluations with the same kernel class and functional count are one line; the last line splits
the structure kept's full solves into the untied search, the correction scan and those before (every structure's
screen solve, the other basins, the tied refinement: their CPU seconds one by one). Also prints energy differences N = 2, 4.
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch


def _logged(log: list):
    """The objective factory of hyperparameter_search, each evaluation appended to ``log``."""
    import learners.shadow.hyperparameter_search as HS

    real = HS.objective

    def objective(gp, kind, F_tr, F_va, G_va, positions=None):
        evaluate, name = real(gp, kind, F_tr, F_va, G_va, positions), type(gp.kernel.base_kernel).__name__

        def timed(theta):
            started = time.process_time()
            value = evaluate(theta)
            log.append((name, F_tr.count, value, time.process_time() - started))
            return value
        return timed
    return objective


def main(argv=None) -> None:
    import learners.shadow.hyperparameter_search as HS
    import tests.test_learners_shadow_auto as A
    from benchmarks._acceptance_fit import structure_report
    from benchmarks.identification_acceptance import UNTUNED
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP

    systems = {make.__name__: (make, h, T) for make, h, T in A.SYSTEMS + A.UNTUNED + UNTUNED}
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=sorted(systems), required=True)
    args = ap.parse_args(argv)
    make, h, T = systems[args.system]
    system, log = make(), []
    HS.objective = _logged(log)
    data = snapshots(system, h, T, 5, seed=0)
    started, wall = time.process_time(), time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = InverseModifiedLagrangianGP(h, progress=False).fit(data)
    print(f"fit CPU s {time.process_time() - started:.1f}, wall s {time.perf_counter() - wall:.1f} "
          f"(torch threads {torch.get_num_threads()}); kept {model.history.get('structure_kept')}; "
          f"structures {structure_report(model.history)}")
    runs = []
    for name, count, value, cpu in log:
        if runs and runs[-1][:2] == [name, count]:
            runs[-1][2].append((value, cpu))
        else:
            runs.append([name, count, [(value, cpu)]])
    for name, count, xs in runs:
        print(f"{name:>16} {count:>5} functionals: {len(xs):>3} solves, CPU s {sum(c for _, c in xs):7.1f}")
    if model.history.get("structure_kept"):  # the structure's refinement: its last full solves, untied last
        record = model.history["structures"][model.history["structure_kept"]]["history"]
        untied, scan = len(record.get("search_untied", [])), len(record.get("correction_scan", [1])) - 1
        full = [c for name, count, _, c in log if name == "ElementKernel" and count == log[-1][1]]
        print("refinement: untied %d solves %.1f CPU s, correction scan %d solves %.1f, before them (every structure's "
              "screen solve, the other basins, the tied refinement) %s" % (untied, sum(full[-untied:]), scan,
                                                              sum(full[-untied - scan:-untied]),
                                                              [round(c, 1) for c in full[:-untied - scan]]))
    print("dE2, dE4", [A.energy_differences(model, system, N, return_std=False)[0] for N in (2, 4)])


if __name__ == "__main__":
    main()
