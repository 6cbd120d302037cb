"""Issue 27, session 15: what the bodies' triple group (``ElementKernel.bodies(c, 2, triples=True)``) costs, without a
fit: the closed-form mean's kernel entries per state (``ElementKernel.state_entries``, which ``energy()`` bounds by
``MAX_STATE_ENTRIES``) on the DEL atoms of ``--trajectories`` trajectories (the fit's training atoms are these or a
subset, plus a few normalisation atoms), and the CPU seconds of one symmetric functional block (the fit's assemblies)
on the DEL atoms of ``--block-trajectories`` trajectories, with and without the triples. Usage::

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python3 benchmarks/element_triples_cost.py --system bodies4 --trajectories 100
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _element_systems import SYSTEMS  # noqa: E402


def _kernel(count: int, triples: bool):
    from learners.shadow import ElementKernel

    k = ElementKernel.bodies(count, 2, triples=triples).to(torch.float64)
    k.bind(None, 1.0, 1.0, None)  # unit coordinates: the counts do not depend on them, the block's cost barely
    k.lengthscale = torch.ones_like(k.lengthscale)
    return k.requires_grad_(False)


def main(argv=None) -> None:
    from integrators.data import snapshots
    from learners.shadow.functionals import del_residual_functionals, triples_from_snapshots
    from learners.shadow.element_energy import MAX_STATE_ENTRIES

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=sorted(k for k in SYSTEMS if k.startswith("bodies")), default="bodies4")
    ap.add_argument("--trajectories", type=int, default=100)
    ap.add_argument("--block-trajectories", type=int, default=8)
    a = ap.parse_args(argv)
    make, h, _, count = SYSTEMS[a.system]
    S = snapshots(make(), h, a.trajectories, 5, seed=0)  # the fits' data (element_acceptance.py: 5 steps, seed 0)
    F = del_residual_functionals(triples_from_snapshots(S), h)
    Fb = del_residual_functionals(triples_from_snapshots(S[:a.block_trajectories]), h)
    atoms = sum(len(A) for A in F.atoms.values())
    print(f"{a.system}: {a.trajectories} trajectories, {F.count} DEL functionals, {atoms} atoms "
          f"(orders {sorted(F.atoms)}); block on {sum(len(A) for A in Fb.atoms.values())} atoms")
    for triples in (False, True):
        k = _kernel(count, triples)
        entries = k.state_entries(F.atoms)
        c = time.process_time()
        for A in Fb.atoms.values():
            k.derivative_block(A.points, A.dirs, A.points, A.dirs)
        cpu = time.process_time() - c
        print(f"  triples {triples}: instance pairs {k.instance_pairs()}, state entries {entries:,} "
              f"({'refused' if entries > MAX_STATE_ENTRIES else 'allowed'}: bound {MAX_STATE_ENTRIES:,}), "
              f"symmetric block {cpu:.2f} s CPU", flush=True)


if __name__ == "__main__":
    main()
