r"""Issue 27 item 1, session 17 (branch picard): learn the element-additive :math:`L` itself through the DEL equations
of :math:`\mathrm{inv}_N(L)`, by a fixed-point (Picard) iteration on the element GP's targets.

The element GP conditioned on the DEL functionals :math:`\Lambda_k` with targets 0 models :math:`L_{inv}` directly,
whose terms from :math:`h^2` on are not element-additive. Write :math:`\mathrm{inv}_N(L) = L + R_N[L]`,
:math:`R_N[L] = O(h^2)` (bea's dimension-free series, ``bea.compile_torch("inverse_modified_lagrangian", scheme, N)``).
The data say :math:`\Lambda_k[\mathrm{inv}_N(L)] = 0`, so :math:`\Lambda_k[L] = -\Lambda_k[R_N[L]]`: starting from
today's fit :math:`L^{(0)}`, :math:`L^{(i+1)}` is the same GP (same hyperparameters and Cholesky factor,
``FunctionalGP.retarget``) conditioned on :math:`y_k = y^{(0)}_k - \Lambda_k[R_N[\bar L^{(i)}]]` for every functional,
the normalisation's too: its conditions (:math:`\partial_v^2 - \tfrac{h^2}{12}\partial_q^2` at a state, targets moved
by :mod:`learners.shadow.mass_target`) are written for :math:`L_{inv}`, and kept as they are they contradict the true
:math:`L` at :math:`O(h^2)` (measured: the iteration then made the energy worse). The energy is then
:math:`E[\bar L] = v\cdot\partial_v \bar L - \bar L` itself, at every N.

Prints, per system: the plain element model's level-set errors (H_rec[0/2/4], benchmarks/_element_metrics.py: 40
Halton states of the 70% box), then for N = 2 and 4 the iteration's target change per step (max and RMS of
:math:`|y^{(i+1)} - y^{(i)}|` over the DEL targets) and the RMS error of the targets against those of the true
:math:`L` (:math:`-c\,\Lambda_k[R_N[L]]`, :math:`c` the learned model's scale), both relative to the RMS true target,
its CPU seconds and the level-set error of :math:`E[\bar L^{(i)}]` after each step; the order-4 gain is ls(N=2) /
ls(N=4) of the last step. First the *oracle*: one retarget with the true L's targets, the best the retargeted GP can
do. Usage::

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python3 benchmarks/element_picard.py --system bodies4 --trajectories 30
    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python3 benchmarks/element_picard.py --system bodies2 --trajectories 30
    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python3 benchmarks/element_picard.py --system chain4 --trajectories 30
    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python3 benchmarks/element_picard.py --system bodies2 --trajectories 20 --check

``--check``: the RMS over the DEL functionals of the true L's :math:`\Lambda[L]`, :math:`\Lambda[\mathrm{inv}_N L]`
(small: the set-up is right), :math:`\Lambda[R_N L]`, and of the plain fit's :math:`\Lambda[R_N \bar L^{(0)}]` and
its difference from the true one at the best scale.
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
    r"""``F.apply(f)`` (values of the functionals on ``f(x)``) in chunks of atoms, orders 0-2."""
    out = torch.zeros(F.count, dtype=torch.float64)
    for m, a in F.atoms.items():
        for s in range(0, len(a), chunk):
            x = a.points[s:s + chunk].detach().clone().requires_grad_(m >= 1)
            val = f(x)
            for k in range(m):  # one directional derivative per direction of the atom
                (g,) = torch.autograd.grad(val.sum(), x, create_graph=k + 1 < m)
                val = (g * a.dirs[s:s + chunk, k]).sum(-1)
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


def true_standardised(model, system):
    r"""The true :math:`L` in the GP's coordinates, :math:`L'(q', v') = L(q(q'), v(v'))/s^2`."""
    s2 = model._speed ** 2
    return lambda q, v: system(model._from_standard(q), model._vector_from_standard(v)) / s2


def picard(model, order: int, iterations: int, system, oracle: bool = False):
    """Run the iteration at ``order``; one row per step (change, target error, CPU, level-set error); restores the
    base targets. ``oracle``: one step with the targets of the true L (scaled), the best this retargeting can do."""
    import bea

    gp, n = model.gp, model.n
    F = gp.train_functionals
    y0 = F.targets.clone()
    nd = F.count - model._norm_count
    series = bea.compile_torch("inverse_modified_lagrangian", model._linear_scheme(), order)
    L_true = true_standardised(model, system)
    # the true L's scale c: the mass conditions (the normalisation's functionals with second-derivative atoms; the
    # others fix the gauge, a constant and b.v, which any L meets after adding them) on c inv_N(L), least squares
    mass = torch.unique(F.atoms[2].owner) if 2 in F.atoms else torch.arange(nd, F.count)
    a = apply_chunked(F.subset(mass), lambda x: series(L_true, x[..., :n], x[..., n:], model._h_std))
    c = float(a @ y0[mass] / (a @ a))
    y_true = y0 - c * apply_chunked(F, remainder(L_true, series, model._h_std, n))
    scale = float(y_true[:nd].pow(2).mean().sqrt())
    y_prev, rows = y0, []
    ls = M.level_set_errors(EnergyOf(energy_in_data_units(model, Frozen(gp))), system, (0,), 40)[0]
    rows.append((0, float("nan"), 1.0, 0.0, ls))
    for it in range(1, (1 if oracle else iterations) + 1):
        cpu = time.process_time()
        y = y_true if oracle else y0 - apply_chunked(F, remainder(Frozen(gp), series, model._h_std, n))
        gp.retarget(y)
        cpu = time.process_time() - cpu
        d = (y - y_prev)[:nd]
        y_prev = y
        ls = M.level_set_errors(EnergyOf(energy_in_data_units(model, Frozen(gp))), system, (0,), 40)[0]
        err = float((y[:nd] - y_true[:nd]).pow(2).mean().sqrt()) / scale
        rows.append((it, float(d.pow(2).mean().sqrt()) / scale, err, cpu, ls))
    gp.retarget(y0)
    return rows


def check(model, system, orders) -> None:
    r"""RMS over the DEL functionals of :math:`\Lambda[L]`, :math:`\Lambda[\mathrm{inv}_N L]`, :math:`\Lambda[R_N L]` for
    the true L, and of :math:`\Lambda[R_N \bar L^{(0)}]` and its difference from :math:`c\Lambda[R_N L]` at the best
    scale c: the set-up's check and how well the plain fit's mean gives the targets."""
    import bea

    gp, n, h = model.gp, model.n, model._h_std
    F = gp.train_functionals
    F_del = F.subset(torch.arange(F.count - model._norm_count))
    L_true = true_standardised(model, system)

    def rms(t):
        return float(t.pow(2).mean().sqrt())

    for N in orders:
        series = bea.compile_torch("inverse_modified_lagrangian", model._linear_scheme(), N)
        lam = apply_chunked(F_del, lambda x: L_true(x[..., :n], x[..., n:]))
        inv = apply_chunked(F_del, lambda x: series(L_true, x[..., :n], x[..., n:], h))
        rt = apply_chunked(F_del, remainder(L_true, series, h, n))
        rb = apply_chunked(F_del, remainder(Frozen(gp), series, h, n))
        c = float(rb @ rt / (rt @ rt))
        print(f"check inv_{N}: RMS Lambda[L] {rms(lam):.3e}, Lambda[inv_N L] {rms(inv):.3e}, Lambda[R_N L] {rms(rt):.3e}; "
              f"Lambda[R_N mean] {rms(rb):.3e}, best scale {c:.3f}, difference {rms(rb - c * rt):.3e}", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=sorted(SYSTEMS), required=True)
    ap.add_argument("--trajectories", type=int, default=30)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--orders", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--oracle-only", action="store_true", help="the oracle rows only (no Picard iteration)")
    ap.add_argument("--check", action="store_true", help="the set-up's check only (module docstring)")
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
    if args.check:
        return check(model, system, args.orders)
    ls = M.level_set_errors(model, system, (0, 2, 4), 40)
    print(f"plain element model (L_inv): ls0 {ls[0]:.3e} ls2 {ls[2]:.3e} ls4 {ls[4]:.3e} gain {ls[2] / ls[4]:.2f}")
    for oracle in (True,) if args.oracle_only else (True, False):
        last = {}
        for N in args.orders:
            what = "oracle (true L's targets)" if oracle else "Picard"
            print(f"{what}, inv_{N}: | step | rms change | rms target error | cpu s | ls of E[L] |")
            for it, rms, err, cpu, lsi in picard(model, N, args.iterations, system, oracle):
                print(f"| {it} | {rms:.2e} | {err:.2e} | {cpu:.1f} | {lsi:.3e} |", flush=True)
                last[N] = lsi
        if 2 in last and 4 in last:
            print(f"order-4 gain ({what}): {last[2] / last[4]:.2f}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
