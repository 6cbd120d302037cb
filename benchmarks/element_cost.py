"""Cost of the element kernel's covariance (issue 27): CPU seconds of one assembly of Theta(F, F) (no gradients, as the
positions search assembles it at every evaluation) for the DEL functionals of a few trajectories at n = 6, with the
default kernels' bases (RBF, mechanical degree 2 on R^12) and the element structures of three bodies in the plane and
a chain of six sites. A group of m instances costs m^2 base blocks on its own (low-dimensional) input.

Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/element_cost.py [--traj 20]
"""

from __future__ import annotations

import argparse
import time

import torch


def _functionals(n: int, traj: int):
    from learners.shadow.functionals import snapshot_functionals

    gen = torch.Generator().manual_seed(0)
    S = 0.3 * torch.randn(traj, 6, n, generator=gen, dtype=torch.float64).cumsum(1)  # random walks: only the cost counts
    return snapshot_functionals(S, 0.2, "midpoint")[0]


def _kernels():
    from learners.shadow import ElementKernel, FunctionalKernel, MechanicalKernel, RBFKernel

    out = {"rbf (R^12)": RBFKernel(ard_num_dims=12), "mechanical 2 (R^12)": MechanicalKernel(2, ard_num_dims=12)}
    for name, k in [("bodies(3, 2)", ElementKernel.bodies(3, 2)), ("bodies(3, 2), no correction",
                                                                   ElementKernel.bodies(3, 2, correction=False)),
                    ("chain(6)", ElementKernel.chain(6)), ("chain(6), no correction", ElementKernel.chain(6, correction=False))]:
        out[name] = k
    return {name: FunctionalKernel(k.to(torch.float64)).requires_grad_(False) for name, k in out.items()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traj", type=int, default=20)
    args = ap.parse_args(argv)
    F = _functionals(6, args.traj)
    print(f"{F.count} DEL functionals, n = 6")
    print("| kernel | base blocks per atom pair | CPU s per covariance |")
    print("| --- | --- | --- |")
    for name, K in _kernels().items():
        base = K.base_kernel
        blocks = sum(g["maps"].shape[0] ** 2 for g in base.groups) + base.correction if hasattr(base, "groups") else 1
        with torch.no_grad():
            c = time.process_time()
            K.forward(F, F, symmetric=True)
            print(f"| {name} | {blocks} | {time.process_time() - c:.2f} |", flush=True)


if __name__ == "__main__":
    main()
