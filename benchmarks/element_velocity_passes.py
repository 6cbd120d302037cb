"""The calibration's windowed velocities of an element model (element_uncertainty.velocities_at): passes by the
VELOCITY_ENTRIES (1,000,000 kernel entries a pass since session 13, elstd2) against the former 4,000,000 and, with
``--with-autograd-chunk``, the energies' budget (``_autograd_chunk()`` states); CPU seconds (time.process_time), passes,
and the largest difference of the velocities.

    OMP_NUM_THREADS=1 python3 benchmarks/element_velocity_passes.py [--trajectories 30] [--pairs 60] [--with-autograd-chunk]
"""

import argparse
import time

import torch

from integrators.data import snapshots
from learners import InverseModifiedLagrangianGP
from learners.shadow import ElementKernel
from learners.shadow import element_uncertainty as E
from tests.test_learners_shadow_auto import two_body4


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=30)
    ap.add_argument("--pairs", type=int, default=60)
    ap.add_argument("--with-autograd-chunk", action="store_true")
    args = ap.parse_args()
    data = snapshots(two_body4(), 0.2, args.trajectories, 5, seed=0)
    model = InverseModifiedLagrangianGP(0.2, kernel=ElementKernel.bodies(2, 2), progress=False).fit(data)
    S = model._to_standard(model.snapshots).transpose(0, 1)
    W, T = min(S.shape[0], 5), S.shape[1]
    gen = torch.Generator().manual_seed(0)
    t = torch.randint(0, T, (2 * args.pairs,), generator=gen)
    window = S[torch.arange(W)[:, None], t[None]]  # (W, B, n): the calibration's windows
    entries = model._element_entries()
    rules = {"VELOCITY_ENTRIES": max(1, E.VELOCITY_ENTRIES // (entries * W)), "4,000,000": max(1, 4_000_000 // (entries * W))}
    if args.with_autograd_chunk:  # the energies' budget (measured 6x slower: not the default)
        rules["autograd_chunk"] = max(1, model._autograd_chunk() // W)
    out = {}
    for name, b in rules.items():
        start = time.process_time()
        out[name] = torch.cat([model._velocities_std(window[:, a:a + b], 2, None) for a in range(0, window.shape[1], b)], 1)
        print(f"{name}: {b} columns a pass, {-(-window.shape[1] // b)} passes, {time.process_time() - start:.2f} CPU s "
              f"({entries:,} entries a state)")
    assert torch.equal(E.velocities_at(model, window), out["VELOCITY_ENTRIES"])
    print(f"largest difference {max(float((v - out['VELOCITY_ENTRIES']).abs().max()) for v in out.values()):.1e}")


if __name__ == "__main__":
    main()
