"""Time and peak memory of the energy std (GP part and truncation term) at 40 held-out states, one acceptance system
of tests/test_learners_shadow_auto.py fitted with the library defaults (issue 23: the mechanical kernel's std at
n = 4, N = 4 used to run out of memory). Peak memory is the process's (fit included), from getrusage. Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/uncertainty_memory.py --system mass_chain4 --kernel mechanical --order 4
"""

from __future__ import annotations

import resource
import time


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv=None) -> None:
    from learners.shadow import uncertainty as U
    from _acceptance_fit import fitted_system

    args, A, system, m = fitted_system(argv, __doc__.split("\n")[0], system="mass_chain4", kernel="rbf", order=4)
    print(f"fit: peak {_peak_mb():.0f} MB, {m.gp.train_functionals.count} training functionals", flush=True)
    q, v = A.held_out_states(system, 40)
    x = m._standard_state(q[1:], v[1:])
    t = time.perf_counter()
    G = U.LinearisedQuantity(m._quantity("energy", args.order), x, 1, m._jet_order("energy", args.order))
    U.posterior_variance(m.gp, G, U.Reference(m._standard_state(q[:1], v[:1]).expand_as(x)))
    t1 = time.perf_counter()
    m._next_energy(args.order, q[1:], v[1:], (q[0], v[0]))
    print(f"| {args.system} | {args.kernel} | N = {args.order} | GP part {t1 - t:.1f} s | truncation term "
          f"{time.perf_counter() - t1:.1f} s | peak {_peak_mb():.0f} MB |")


if __name__ == "__main__":
    main()
