"""Peak memory of mod_N energies through the element kernel's closed-form mean (issue 27; learners/shadow/element_energy.py):
chain(6) (86 instance pairs), random scales and atoms (orders 0-2, A in all), B random states, three ways --
``plain``: all states in one pass; ``call``: the states split inside ElementExpansion.__call__ (``chunk`` at a time);
``states``: whole energies ``chunk`` states at a time, detached (what ``model.energy`` now does). Prints the peak RSS
of the process (it only grows: run one mode per process), CPU seconds and the sum of the energies (the ways agree to
rounding). Mind the size: plain, B = 8, A = 3000 peaked at 6.5 GiB.

Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/element_memory.py MODE B A CHUNK [N]
"""

from __future__ import annotations

import resource
import sys
import time

import torch


def main(mode: str, B: int, A: int, chunk: int, N: int = 2) -> None:
    import bea
    from learners.shadow import ElementKernel, FunctionalKernel
    from learners.shadow.element_kernel import ElementExpansion
    from learners.shadow.functionals import AtomSet
    from learners.shadow.kernels import AtomExpansion

    gen = torch.Generator().manual_seed(0)
    kern = ElementKernel.chain(6).to(torch.float64)
    kern.lengthscale = torch.rand(kern.raw_lengthscale.shape[-1], generator=gen, dtype=torch.float64) + 0.5
    kern.requires_grad_(False)
    fk = FunctionalKernel(kern)
    fk.outputscale = 1.0
    fk.requires_grad_(False)
    atoms = {m: AtomSet(torch.randn(A // 3, 12, generator=gen, dtype=torch.float64),
                        torch.randn(A // 3, m, 12, generator=gen, dtype=torch.float64),
                        torch.randn(A // 3, generator=gen, dtype=torch.float64), torch.arange(A // 3)) for m in (0, 1, 2)}
    ex = AtomExpansion(fk, atoms)
    assert isinstance(ex._custom, ElementExpansion)
    if mode == "call":
        plain = ElementExpansion.__call__
        ElementExpansion.__call__ = lambda self, X: torch.cat([plain(self, X[a:a + chunk]) for a in range(0, X.shape[0], chunk)])
    f = bea.series_function("modified_lagrangian", bea.get_scheme("midpoint"), N, 6)
    H = bea.energy(lambda q, v: f(lambda q_, v_: ex(torch.cat([q_, v_], -1)), q, v, 0.3))
    q, v = torch.randn(B, 6, generator=gen, dtype=torch.float64), torch.randn(B, 6, generator=gen, dtype=torch.float64)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.process_time()
    if mode == "states":
        out = torch.cat([H(q[a:a + chunk], v[a:a + chunk]).detach() for a in range(0, B, chunk)])
    else:
        out = H(q, v).detach()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"{mode} N={N} B={B} A={A} chunk={chunk}: peak RSS {peak / 1024:.0f} MiB (before {before / 1024:.0f}), "
          f"cpu {time.process_time() - t0:.1f} s, sum {float(out.sum()):.15e}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), *(int(x) for x in sys.argv[5:6]))
