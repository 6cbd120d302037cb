"""Where an element-kernel fit spends its time (issue 27): one fit of a system of benchmarks/identification_acceptance.py
with ``--kernel element``, counting the covariance assemblies (``FunctionalKernel.forward``: full and symmetric, their
sizes and CPU seconds) and the Cholesky factorisations, then the fitted scales and the energy-difference errors at N = 2
and 4 to 12 digits (so two versions of the code can be compared to rounding), the fit's CPU seconds and peak RSS.
The counters wrap the two functions in this process only; nothing else changes.

Usage (the harness's options)::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/element_fit_cost.py --system two_body4 --kernel element --no-std
"""

from __future__ import annotations

import collections
import resource
import time

import torch

try:
    from benchmarks import identification_acceptance as IA
except ImportError:  # pragma: no cover - run from benchmarks/
    import identification_acceptance as IA


def _fingerprint(F) -> tuple:
    """The functionals' count and a checksum of their atoms (an id() can be reused by another set once one is freed,
    and equal functionals built anew have another)."""
    return (F.count,) + tuple((order, len(A), float(A.points.sum()), float(A.dirs.sum()), float(A.coef.sum()))
                              for order, A in sorted(F.atoms.items()))


def _counting():
    """Wrap FunctionalKernel.forward and the Cholesky factorisation; returns the tallies."""
    from learners.shadow.kernels import FunctionalKernel

    tally = collections.defaultdict(lambda: [0, 0.0, 0])  # key -> [calls, CPU s, functionals^2]
    forward, chol = FunctionalKernel.forward, torch.linalg.cholesky_ex
    seen = set()

    def counted_forward(self, F1, F2, diag=False, symmetric=False, **params):
        c = time.process_time()
        out = forward(self, F1, F2, diag=diag, symmetric=symmetric, **params)
        grad = torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters())
        key = "diag" if diag else ("symmetric" if symmetric else ("full+grad" if grad else "full"))
        t = tally[f"assembly {key}"]
        t[0], t[1], t[2] = t[0] + 1, t[1] + time.process_time() - c, t[2] + F1.count * F2.count
        # the same functionals at the same hyperparameters again: what a cache per hyperparameter vector would save
        point = (key, _fingerprint(F1), _fingerprint(F2), float(self.outputscale),
                 tuple(float(x) for x in self.base_kernel.lengthscale.reshape(-1)))
        if point in seen:
            r = tally[f"repeated {key}"]
            r[0], r[1] = r[0] + 1, r[1] + time.process_time() - c
        seen.add(point)
        return out

    def counted_chol(A, *args, **kw):
        c = time.process_time()
        out = chol(A, *args, **kw)
        t = tally[f"cholesky {A.shape[-1]}"]
        t[0], t[1] = t[0] + 1, t[1] + time.process_time() - c
        return out

    FunctionalKernel.forward, torch.linalg.cholesky_ex = counted_forward, counted_chol
    return tally


def main(argv=None) -> None:
    import tests.test_learners_shadow_auto as A
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP

    systems = {make.__name__: (make, h, T) for make, h, T in A.SYSTEMS}
    systems.update({make.__name__: (make, h, T) for make, h, T in A.UNTUNED + IA.UNTUNED})
    args = IA._arguments(argv, systems)
    make, h, T = systems[args.system]
    h = args.h or h
    system = make()
    data = snapshots(system, h, args.traj or T, args.steps, seed=args.seed)
    kw = IA._model_options(args)
    tally = _counting()
    c = time.process_time()
    m = InverseModifiedLagrangianGP(h, progress=False, **kw).fit(data)
    fit_cpu = time.process_time() - c
    print(f"{args.system} {args.kernel}: fit {fit_cpu:.1f} CPU s, peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB, {m.gp.train_functionals.count} functionals")
    for key in sorted(tally):
        calls, cpu, size = tally[key]
        print(f"  {key}: {calls} calls, {cpu:.1f} CPU s" + (f", {size / max(1, calls):.3g} entries each" if size else ""))
    print("  lengthscale " + " ".join(f"{float(x):.12e}" for x in m.gp.kernel.base_kernel.lengthscale.reshape(-1)))
    print(f"  outputscale {float(m.gp.kernel.outputscale):.12e}")
    c = time.process_time()
    for N in args.orders:
        rel = A.energy_differences(m, system, N, return_std=False)[0]
        print(f"  dE{N} {float(rel):.12e}")
    print(f"  energy differences: {time.process_time() - c:.1f} CPU s, peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB", flush=True)


if __name__ == "__main__":
    main()
