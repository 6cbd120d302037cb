"""Cost of the element kernel's covariance (issue 27): CPU seconds of one assembly of Theta(F, F) (no gradients, as the
positions search assembles it at every evaluation) for the DEL functionals of a few trajectories at n = 6, with the
default kernels' bases (RBF, mechanical degree 2 on R^12) and the element structures of three bodies in the plane and
a chain of six sites; with ``--large`` also the acceptance structures bodies(4, 2) (n = 8) and chain(10) (n = 10) on
their own functionals. A group of m instances is m^2 base blocks per atom pair in the plain sum (the column); since
session 13 only the instances an atom's direction reaches are computed (learners/shadow/element_blocks.py).

``--ab R``: for the element kernels only, R rounds alternating with and without the column cache
(``ColumnCache``; "without": a fresh cache per block, as with gradients) in this process, so both see the same load.

Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/element_cost.py [--traj 20] [--large] [--ab 3]
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


def _kernels(large: bool):
    """(name, n, kernel) rows."""
    from learners.shadow import ElementKernel, FunctionalKernel, MechanicalKernel, RBFKernel

    out = [("rbf (R^12)", 6, RBFKernel(ard_num_dims=12)), ("mechanical 2 (R^12)", 6, MechanicalKernel(2, ard_num_dims=12)),
           ("bodies(3, 2)", 6, ElementKernel.bodies(3, 2)),
           ("bodies(3, 2), no correction", 6, ElementKernel.bodies(3, 2, correction=False)),
           ("chain(6)", 6, ElementKernel.chain(6)), ("chain(6), no correction", 6, ElementKernel.chain(6, correction=False))]
    if large:
        out += [("rbf (R^16)", 8, RBFKernel(ard_num_dims=16)), ("bodies(4, 2)", 8, ElementKernel.bodies(4, 2)),
                ("rbf (R^20)", 10, RBFKernel(ard_num_dims=20)), ("chain(10)", 10, ElementKernel.chain(10))]
    return [(name, n, FunctionalKernel(k.to(torch.float64)).requires_grad_(False)) for name, n, k in out]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traj", type=int, default=20)
    ap.add_argument("--large", action="store_true", help="also bodies(4, 2) at n = 8 and chain(10) at n = 10")
    ap.add_argument("--ab", type=int, default=0, help="rounds of the element kernels with / without the column cache")
    args = ap.parse_args(argv)
    if args.ab:
        return _ab(args)
    print("| kernel | n | DEL functionals | base blocks per atom pair (plain sum) | CPU s per covariance |")
    print("| --- | --- | --- | --- | --- |")
    for name, n, K in _kernels(args.large):
        F = _functionals(n, args.traj)
        base = K.base_kernel
        blocks = sum(g["maps"].shape[0] ** 2 for g in base.groups) + base.correction if hasattr(base, "groups") else 1
        print(f"| {name} | {n} | {F.count} | {blocks} | {_assembly_cpu(K, F):.2f} |", flush=True)


def _assembly_cpu(K, F) -> float:
    with torch.no_grad():
        c = time.process_time()
        K.forward(F, F, symmetric=True)
        return time.process_time() - c


def _ab(args) -> None:
    """Same-process A/B of the column cache: CPU s ranges over ``args.ab`` alternating rounds."""
    from learners.shadow.element_blocks import ColumnCache
    from learners.shadow.element_kernel import ElementKernel

    cached = ElementKernel._column_cache
    print("| kernel | DEL functionals | with the column cache, CPU s | without |")
    print("| --- | --- | --- | --- |")
    for name, n, K in _kernels(args.large):
        if not isinstance(K.base_kernel, ElementKernel):
            continue
        F = _functionals(n, args.traj)
        times = {True: [], False: []}
        for _ in range(args.ab):
            for on in (True, False):
                ElementKernel._column_cache = cached if on else (lambda self, i: ColumnCache())
                try:
                    times[on].append(_assembly_cpu(K, F))
                finally:
                    ElementKernel._column_cache = cached
        print(f"| {name} | {F.count} | " + " | ".join(f"{min(times[on]):.2f}-{max(times[on]):.2f}" for on in (True, False))
              + " |", flush=True)


if __name__ == "__main__":
    main()
