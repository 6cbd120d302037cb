"""The element std's sections (element_uncertainty._Group.sections) over the mean's active (instance, atom) pairs
against every instance pair (the pruning replaced by all pairs): CPU seconds (time.process_time) and the largest
relative difference, on DEL-like coordinate atoms (each direction along one coordinate, as the DEL functionals').

    OMP_NUM_THREADS=1 python3 benchmarks/element_std_sections.py [--kernel chain4|bodies3] [--atoms 2000] [--rows 40]
"""

import argparse
import time

import torch

from learners.shadow import ElementKernel
from learners.shadow import element_uncertainty as E
from learners.shadow.element_blocks import active_atoms
from learners.shadow.functionals import AtomSet, Functionals
from tests.test_learners_element_kernel import _coordinate_atoms

KERNELS = {"chain4": lambda: ElementKernel.chain(4), "bodies3": lambda: ElementKernel.bodies(3, 2)}


def _every_pair(atoms, Mt, b):
    """element_kernel._projected_atoms without the pruning: every (instance, atom) pair."""
    out = {}
    for order, A in atoms.items():
        P, Q = A.points @ Mt + b[:, None], A.dirs @ Mt[:, None]
        e, a = active_atoms(P, torch.ones_like(Q))
        out[order] = AtomSet(P[e, a], Q[e, a], A.coef[a], A.owner[a])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernel", default="chain4", choices=sorted(KERNELS))
    ap.add_argument("--atoms", type=int, default=2000)
    ap.add_argument("--rows", type=int, default=40)
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    kern = KERNELS[args.kernel]().to(torch.float64)
    kern.requires_grad_(False)
    D = kern.dim
    atoms = {}
    for m in (1, 2):
        X, U = _coordinate_atoms(gen, args.atoms, m, D)
        atoms[m] = AtomSet(X, U, torch.randn(args.atoms, generator=gen, dtype=torch.float64),
                           torch.randint(0, 50, (args.atoms,), generator=gen))
    F = Functionals(D, 50, atoms)
    layout = E.ElementLayout(kern, D, 3)
    x = torch.randn(args.rows, D, generator=gen, dtype=torch.float64)
    J = torch.randn(args.rows, 1, layout.size, generator=gen, dtype=torch.float64)
    out = {}
    for name, proj in (("active pairs", E._projected_atoms), ("every pair", _every_pair)):
        E._projected_atoms = proj
        t = time.process_time()
        out[name] = layout.sections(J, x, F)
        print(f"{args.kernel} {name}: {time.process_time() - t:.2f} CPU s")
    a, b = out["active pairs"], out["every pair"]
    print(f"largest relative difference {float((a - b).abs().max() / b.abs().max()):.1e}")


if __name__ == "__main__":
    main()
