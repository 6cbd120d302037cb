"""Two ratios of the element extension's energy std (benchmarks/RESULTS_element.md, Session 14, branch extend, fix
pass), on a cheap chain(3) fit (8 trajectories of 5 steps, h = 0.3, a 2-iteration search: the fit of
tests/test_element_extension.py) extended to chain(4):

1. the std of N = 2 energy differences (20 states to a 21st, ``0.4 randn`` from generator seeds 1 and 2) with the
   extension's independent correction over the one with ``correction=False``: the correction's prior share;
2. the std of energies without ``reference=`` over that of differences to a reference state, on chain(4) (the
   extension) and chain(3) (the source): the group constants' share.

Usage: ``PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/extension_std_ratios.py`` (about 10 CPU s)."""

import torch

from integrators import systems
from integrators.data import snapshots
from learners import InverseModifiedLagrangianGP
from learners.shadow import ElementKernel

H = 0.3


def _fit(n: int):
    s = systems.fpu_chain(n)
    s.domain = [(-0.6, 0.6)] * (2 * n)
    return InverseModifiedLagrangianGP(H, kernel=ElementKernel.chain(n), progress=False, iterations=2,
                                       max_train_functionals=120).fit(snapshots(s, H, 8, 5, seed=0))


def _states(n: int, seed: int, count: int = 21):
    g = torch.Generator().manual_seed(seed)
    return tuple(0.4 * torch.randn(count, n, generator=g, dtype=torch.float64) for _ in range(2))


def _std(model, q, v, reference=None):
    return model.energy(2, return_std=True, reference=reference)(q, v)[1]


def main() -> None:
    model = _fit(3)
    for seed in (1, 2):
        q, v = _states(4, seed)
        ref = (q[0], v[0])
        r = _std(model.extend(ElementKernel.chain(4)), q[1:], v[1:], ref) / \
            _std(model.extend(ElementKernel.chain(4, correction=False)), q[1:], v[1:], ref)
        print(f"seed {seed}: std with / without the correction, median {float(r.median()):.2f}, "
              f"range {float(r.min()):.2f}-{float(r.max()):.2f}")
    for name, m, n in (("chain4 (extension)", model.extend(ElementKernel.chain(4)), 4), ("chain3 (source)", model, 3)):
        q, v = _states(n, 1)
        r = _std(m, q[1:], v[1:]) / _std(m, q[1:], v[1:], (q[0], v[0]))
        print(f"{name}: std without / with a reference, median {float(r.median()):.0f}")


if __name__ == "__main__":
    main()
