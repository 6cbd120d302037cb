"""identifiability.check_energy's states on long trajectories (session 10, branch idbody2): the ratio it records
(states spread across the held-back trajectories, the reference's own left out) against the selection before (the
first 41 midpoints in order, so one or two trajectories where they are long), and the true energy error.

    PYTHONPATH=. OMP_NUM_THREADS=1 nice -n 5 python3 benchmarks/energy_resolution_states.py anharmonic3 0.2 40x5 8x30 25x30

Each ``TxM``: T trajectories of M steps (seed 0); the default's fit; prints the held-back trajectories, the ratio
recorded (or why none), the ratio of the selection before, and dE2 (tests/test_learners_shadow_auto.py's metric).
"""

from __future__ import annotations

import sys
import time
import warnings


def _before(model, S_std) -> float:
    """The ratio as computed before this branch: the first 41 midpoints of the held-back trajectories in order."""
    from learners.shadow.held_states import midpoint_states

    S = model._from_standard(S_std)
    q, v = (x.reshape(-1, model.n)[:41] for x in midpoint_states(S, model.h))
    mean, std = model.energy(2, return_std=True, reference=(q[0], v[0]))(q[1:], v[1:])
    return float(std.pow(2).mean().sqrt() / mean.pow(2).mean().sqrt())


def main(name: str, h: float, sizes) -> None:
    import tests.test_learners_shadow_auto as A
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP

    system = {m.__name__: m for m, _, _ in A.SYSTEMS + A.UNTUNED}[name]()
    for size in sizes:
        T, M = (int(x) for x in size.split("x"))
        c = time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = InverseModifiedLagrangianGP(h, progress=False).fit(snapshots(system, h, T, M, seed=0))
            held = m._pending_calibration[1]
            m.calibration
            before = _before(m, held)
            rel, _ = A.energy_differences(m, system, 2, return_std=False)
        print(f"| {name} | {T} x {M} | {held.shape[0]} | {m.history.get('energy_resolution')} | "
              f"{m.history.get('energy_resolution_error')} | {before:.2g} | {rel:.2g} | {time.process_time() - c:.0f} |",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), sys.argv[3:])
