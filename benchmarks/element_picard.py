r"""Issue 27 item 1, session 17 (branch picard): learn the element-additive :math:`L` itself through the DEL equations
of :math:`\mathrm{inv}_N(L)`, by a fixed-point (Picard) iteration on the element GP's targets.

The element GP conditioned on the DEL functionals :math:`\Lambda_k` with targets 0 models :math:`L_{inv}` directly,
whose terms from :math:`h^2` on are not element-additive. Write :math:`\mathrm{inv}_N(L) = L + R_N[L]`,
:math:`R_N[L] = O(h^2)` (bea's dimension-free series, ``bea.compile_torch("inverse_modified_lagrangian", scheme, N)``).
The data say :math:`\Lambda_k[\mathrm{inv}_N(L)] = 0`, so :math:`\Lambda_k[L] = -\Lambda_k[R_N[L]]`: starting from
today's fit :math:`L^{(0)}`, :math:`L^{(i+1)}` is the same GP (same hyperparameters and Cholesky factor,
``FunctionalGP.retarget``) conditioned on :math:`y_k = -\Lambda_k[R_N[\bar L^{(i)}]]` (the normalisation keeps its
targets). The energy is then :math:`E[\bar L] = v\cdot\partial_v \bar L - \bar L` itself, at every N.

Prints, per system: the plain element model's level-set errors (H_rec[0/2/4], benchmarks/_element_metrics.py: 40
Halton states of the 70% box), then for N = 2 and 4 the iteration's target change per step (max and RMS of
:math:`|y^{(i+1)} - y^{(i)}|` over the DEL targets, relative to the RMS DEL target), its CPU seconds and the level-set
error of :math:`E[\bar L^{(i)}]` after each step; the order-4 gain is ls(N=2) / ls(N=4) of the last step. Usage::

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python3 benchmarks/element_picard.py --system bodies4 --trajectories 30
    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python3 benchmarks/element_picard.py --system bodies2 --trajectories 30
    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python3 benchmarks/element_picard.py --system chain4 --trajectories 30
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _element_metrics as M  # noqa: E402
from _element_systems import SYSTEMS, element_kernel  # noqa: E402

#: atoms per chunk when R_N is evaluated on the data's atom points (bounds the nested autograd's memory)
CHUNK = 256


def apply_chunked(F, f, chunk: int = CHUNK) -> torch.Tensor:
    r"""``F.apply(f)`` (values of the functionals on ``f(x)``) in chunks of atoms; orders 0 and 1 only (the DEL
    functionals of a scheme with constant weights)."""
    out = torch.zeros(F.count, dtype=torch.float64)
    for m, a in F.atoms.items():
        if len(a) == 0:
            continue
        if m > 1:
            raise ValueError("order-2 atoms: not needed for DEL functionals")
        for s in range(0, len(a), chunk):
            x = a.points[s:s + chunk].detach().clone().requires_grad_(m == 1)
            val = f(x)
            if m == 1:
                (g,) = torch.autograd.grad(val.sum(), x)
                val = (g * a.dirs[s:s + chunk, 0]).sum(-1)
            out.index_add_(0, a.owner[s:s + chunk], (a.coef[s:s + chunk] * val).detach())
    return out


class Frozen:
    """The GP's current posterior mean as a function L'(q, v) of the standardised coordinates (the expansion object is
    kept, so a later retarget does not change it)."""

    def __init__(self, gp):
        self.fn = gp._mean_fn

    def __call__(self, q, v):
        return self.fn(torch.cat([q, v], -1))


def remainder(L, series, h: float, n: int):
    r""":math:`R_N[L](x) = \mathrm{inv}_N(L)(x) - L(x)` as a function of ``x = (q, v)``."""
    return lambda x: series(L, x[..., :n], x[..., n:], h) - L(x[..., :n], x[..., n:])


def energy_in_data_units(model, L):
    r""":math:`E(q, v) = s^2 E'[L](q', v')`, :math:`E'[L] = v'\cdot\partial_{v'}L - L` (the data's units)."""
    s2 = model._speed ** 2

    def E(q, v):
        qs = model._to_standard(q)
        vs = model._vector_to_standard(v)
        with torch.enable_grad():
            vs = vs if vs.requires_grad else vs.detach().requires_grad_(True)
            val = L(qs, vs)
            (g,) = torch.autograd.grad(val.sum(), vs, create_graph=True)
        return s2 * ((g * vs).sum(-1) - val)

    return E


class EnergyOf:
    """``energy(N)`` for the metrics: one energy at every N."""

    def __init__(self, E):
        self.E = E

    def energy(self, N):
        return self.E


def picard(model, order: int, iterations: int, system):
    """Run the iteration at ``order``; one row per step (change, CPU, level-set error); restores the base targets."""
    import bea

    gp, n = model.gp, model.n
    F = gp.train_functionals
    y0 = F.targets.clone()
    nd = F.count - model._norm_count
    F_del = F.subset(torch.arange(nd))
    series = bea.compile_torch("inverse_modified_lagrangian", model._linear_scheme(), order)
    y_prev, rows = y0, []
    ls = M.level_set_errors(EnergyOf(energy_in_data_units(model, Frozen(gp))), system, (0,), 40)[0]
    rows.append((0, float("nan"), float("nan"), 0.0, ls))
    for it in range(1, iterations + 1):
        c = time.process_time()
        r = apply_chunked(F_del, remainder(Frozen(gp), series, model._h_std, n))
        y = y0.clone()
        y[:nd] = -r
        gp.retarget(y)
        cpu = time.process_time() - c
        d = (y - y_prev)[:nd]
        scale = float(y[:nd].pow(2).mean().sqrt())
        y_prev = y
        ls = M.level_set_errors(EnergyOf(energy_in_data_units(model, Frozen(gp))), system, (0,), 40)[0]
        rows.append((it, float(d.abs().max()) / scale, float(d.pow(2).mean().sqrt()) / scale, cpu, ls))
    gp.retarget(y0)
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=sorted(SYSTEMS), required=True)
    ap.add_argument("--trajectories", type=int, default=30)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--orders", type=int, nargs="+", default=[2, 4])
    args = ap.parse_args(argv)
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP

    make, h, kind, size = SYSTEMS[args.system]
    system = make()
    data = snapshots(system, h, args.trajectories, args.steps, seed=args.seed)
    c = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = InverseModifiedLagrangianGP(h, progress=False, kernel=element_kernel(kind, size)).fit(data)
    fit = time.process_time() - c
    F = model.gp.train_functionals
    print(f"{args.system} h {h} traj {args.trajectories} seed {args.seed}: {F.count} functionals "
          f"({model._norm_count} normalisation), fit {fit:.0f} s CPU, h' {model._h_std:.4g}")
    ls = M.level_set_errors(model, system, (0, 2, 4), 40)
    print(f"plain element model (L_inv): ls0 {ls[0]:.3e} ls2 {ls[2]:.3e} ls4 {ls[4]:.3e} gain {ls[2] / ls[4]:.2f}")
    last = {}
    for N in args.orders:
        print(f"Picard, inv_{N}: | step | max change / rms target | rms change / rms target | cpu s | ls of E[L] |")
        for it, mx, rms, cpu, lsi in picard(model, N, args.iterations, system):
            print(f"| {it} | {mx:.2e} | {rms:.2e} | {cpu:.1f} | {lsi:.3e} |", flush=True)
            last[N] = lsi
    if 2 in last and 4 in last:
        print(f"order-4 gain of the iterated model: {last[2] / last[4]:.2f}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
