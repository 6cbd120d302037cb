"""Resident memory after repeated ``energy(4, return_std=True)`` calls at 200 states, n = 3 (the truncation tests' small
fit of anharmonic3: 12 trajectories, a short search, the RBF kernel), with the jet tables released after each pass
(learners/shadow/taylor_jet.py, ``SharedJetLagrangian.release``) and, in the same run, with the release switched off
(the code before the fix: each table's shared nodes hold it through their ``grad_fn``, a cycle that ``gc`` cannot
collect). Growth is resident memory after ``gc.collect()`` less that after a first call. Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/jet_table_memory.py --calls 8
"""

from __future__ import annotations

import argparse
import gc
import warnings


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2 ** 20


def _growth(m, q, v, calls: int) -> float:
    E = m.energy(4, return_std=True)
    E(q, v)
    gc.collect()
    start = _rss_mb()
    for _ in range(calls):
        E(q, v)
    gc.collect()
    return _rss_mb() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--states", type=int, default=200)
    args = parser.parse_args(argv)

    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP
    from learners.shadow.taylor_jet import SharedJetLagrangian
    from tests.test_learners_shadow_auto import anharmonic3, held_out_states

    system = anharmonic3()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the short search's warnings: not what is measured
        m = InverseModifiedLagrangianGP(0.2, iterations=6, max_train_functionals=200, progress=False).fit(
            snapshots(system, 0.2, 12, 5, seed=1))
        m._jet, m._pending_calibration = False, None  # as tests/test_learners_truncation.py's small_fit
        q, v = held_out_states(system, args.states)
        released = _growth(m, q, v, args.calls)
        release = SharedJetLagrangian.release
        SharedJetLagrangian.release = lambda self: None  # the code before the fix
        try:
            kept = _growth(m, q, v, args.calls)
        finally:
            SharedJetLagrangian.release = release
    print(f"| tables | growth over {args.calls} calls (MB) | per call (MB) |\n|---|---|---|")
    for name, g in (("released (now)", released), ("kept (before)", kept)):
        print(f"| {name} | {g:.0f} | {g / args.calls:.1f} |")
    print(f"ratio kept/released: {kept / max(released, 1.0):.1f}")


if __name__ == "__main__":
    main()
