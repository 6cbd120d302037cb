"""Issue 27, sessions 14-15: the element GP on an FPU chain (positions only) with and without the window group
(``ElementKernel.chain(n, window=w)``), on bodies with and without the triple group (``--triples``:
``ElementKernel.bodies(c, 2, triples=True)``), and the truncation floor of either (``--floor N``; ``--h``: another step).

Prints the level-set errors of H_rec[0/2/4] against H (benchmarks/_element_metrics.py: 40 Halton states of the 70%
box), the gain ls2 / ls4, and the level-set error of the learned energy(0) against the *exact* L_inv's energy (the bea
series of order 4 applied to the true L): small where the learned L_inv holds L_inv's h^2 terms. ``--floor N``: the
same level sets for the exact L_inv series of order N instead of a fit (benchmarks/identification_default.py's
floor, on benchmarks/_element_systems.py's systems and states). Fit CPU seconds (one thread); peak RSS of the
process. Usage::

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python3 benchmarks/element_windows.py --system chain10 --floor 6
    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python3 benchmarks/element_windows.py --system chain10 --window 2
    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python3 benchmarks/element_windows.py --system bodies3 --triples
    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python3 benchmarks/element_windows.py --system bodies3 --floor 4 --h 0.05
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _element_metrics as M  # noqa: E402
from _element_systems import SYSTEMS, element_kernel  # noqa: E402
from identification_default import _ExactInverse  # noqa: E402


def _floor(name: str, order: int, step=None) -> None:
    make, h, _, _ = SYSTEMS[name]
    h = h if step is None else step
    s, c = make(), time.process_time()
    ls = M.level_set_errors(_ExactInverse(s, h, order, s.n), s, (0, 2, 4), 40)
    print(f"{name} h {h} exact L_inv order {order}: ls0 {ls[0]:.3e} ls2 {ls[2]:.3e} ls4 {ls[4]:.3e} "
          f"gain {ls[2] / ls[4]:.2f}; {time.process_time() - c:.0f} s CPU")


def _fit(name: str, trajectories: int, window, seed: int, triples: bool = False) -> None:
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP
    from pipelines.identification import _Box
    from pipelines.shadow_experiments import _level_sets, _level_states

    make, h, kind, size = SYSTEMS[name]
    s = make()
    data = snapshots(s, h, trajectories, 5, seed=seed)
    c = time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = InverseModifiedLagrangianGP(h, progress=False, kernel=element_kernel(kind, size, window, triples)).fit(data)
    fit = time.process_time() - c
    ls = M.level_set_errors(model, s, (0, 2, 4), 40)
    states = _level_states(_Box(M.shrunk_box(s.domain), 40), s.n)
    vs_inv = _level_sets({}, "", model.energy(0), _ExactInverse(s, h, 4, s.n).energy(0), states, chunk=64)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{name} traj {trajectories} seed {seed} window {window} triples {triples}: fit {fit:.0f} s CPU, peak {peak:.0f} MiB; "
          f"ls0 {ls[0]:.5f} ls2 {ls[2]:.5f} ls4 {ls[4]:.5f} gain {ls[2] / ls[4]:.2f}; E0 vs exact E_inv {vs_inv:.5f}")
    print("   scales", {k: f"{v:.3g}" for k, v in model.hyperparameters["lengthscale"].items()},
          "correction scan", model.history.get("correction_scan"), flush=True)
    for w in caught:
        print("   warning:", str(w.message)[:150])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=sorted(SYSTEMS), default="chain6")
    ap.add_argument("--trajectories", type=int, default=100)
    ap.add_argument("--window", type=int, default=None, help="windows of this many bonds (default: none)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--triples", action="store_true", help="bodies: also the triple group (default off)")
    ap.add_argument("--h", type=float, default=None, help="--floor: this step instead of the system's")
    ap.add_argument("--floor", type=int, default=None, help="the exact L_inv series of this order instead of a fit")
    a = ap.parse_args(argv)
    kind = SYSTEMS[a.system][2]
    if a.triples and kind != "bodies":
        ap.error("--triples: only for bodies (triples of bodies)")
    if a.window is not None and kind != "chain":
        ap.error("--window: only for chains (windows of consecutive bonds)")
    if a.h is not None and a.floor is None:
        ap.error("--h: only with --floor (a fit uses the system's step)")
    if a.floor is not None:
        _floor(a.system, a.floor, a.h)
    else:
        _fit(a.system, a.trajectories, a.window, a.seed, a.triples)


if __name__ == "__main__":
    main()
