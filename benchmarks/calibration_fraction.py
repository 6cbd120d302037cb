"""The distant-difference scale against the amount of data (issue 23, session 12, branch cal): a diagnostic, not a test.

The ``"energy_differences"`` scale (learners/shadow/difference_calibration.py) comes from fold posteriors trained on a
fraction ``f = (K - 1) / K`` of the trajectories; the scale their innovations ask for is carried to ``f = 1``
unchanged. Here, on one fit (library defaults, the acceptance's data and 40 held-out differences to a reference), the
innovations' scale ``s_K`` is measured at several fold counts ``K`` (``--folds``; the library's rule gives the scale
in use), ``log s`` is fitted linearly in ``log f`` and extrapolated to ``f = 1`` (``ext``), and each scale is set
against the *ideal* one -- the scale that puts the held-out RMS z at 1 (``ideal``; the truncation term in quadrature
as ``energy`` forms it, on the same batch) -- at ``N = 2`` and ``N = 4``, with the RMS z and fraction within 2 sigma
each scale gives. The raw values (innovations per ``K``, held-out errors, GP variances and truncation terms) are saved
with ``--save`` so that other rules can be scored on the same fit without refitting. Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 nice -n 5 python3 benchmarks/calibration_fraction.py --system duffing3 --save /tmp/x.pt
"""

from __future__ import annotations

import argparse
import math
import time
import warnings


def held_values(m, system, N):
    """At order ``N`` on the acceptance's 40 differences: the error after the best scale, the GP variance at scale 1 of
    the scale in use (``sd_gp**2 / s_use``) and the truncation term (data units)."""
    import tests.test_learners_shadow_auto as A

    q, v = A.held_out_states(system, 40)
    true = (system.energy(q[1:], v[1:]) - system.energy(q[:1], v[:1])).detach()
    mean, sd = m.energy(N, return_std=True, reference=(q[0], v[0]))(q[1:], v[1:])
    _, sd_gp = m.energy(N, return_std=True, reference=(q[0], v[0]), truncation=False)(q[1:], v[1:])
    c = float((mean * true).sum() / (true * true).sum())
    s_use = scale_in_use(m)
    t2 = (sd.pow(2) - sd_gp.pow(2)).clamp_min(0)
    return (mean - c * true).detach(), (sd_gp.pow(2) / s_use).detach(), t2.detach()


def scale_in_use(m):
    """The scale ``energy`` uses: the distant differences', the conservation one where those failed (history says why)."""
    cal = m.calibration
    return (cal["energy_differences"] if "energy_differences" in cal else cal["energy"]).scale


def rms_and_coverage(err, v, t2, s):
    z = err.abs() / (s * v + t2).sqrt()
    return float(z.pow(2).mean().sqrt()), float((z <= 2).double().mean())


def ideal_scale(err, v, t2):
    """The scale with held-out RMS z = 1 (bisection in log s); 0 where the truncation term alone gives RMS z <= 1."""
    ref = float((err.pow(2) / v).mean())
    lo, hi = math.log(ref * 1e-12), math.log(ref * 1e6)
    if rms_and_coverage(err, v, t2, math.exp(lo))[0] <= 1:
        return 0.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if rms_and_coverage(err, v, t2, math.exp(mid))[0] > 1 else (lo, mid)
    return math.exp(hi)


def innovation_scale(m, folds, order=2):
    """The innovations' scale with ``folds`` folds (FOLD_BUDGET lifted in this process), median v/v_k of the kept
    innovations, and the raw innovation values."""
    import torch

    import learners.shadow.difference_calibration as D
    from learners.shadow.calibration import scale_for

    D.CALIBRATION_FOLDS, D.FOLD_BUDGET = folds, 10**12
    dz, vk, v, pair = D.innovation_variances(m, order)
    w = vk - v
    ok = torch.isfinite(dz) & torch.isfinite(w) & (w > 0)
    s = scale_for(dz[ok], w[ok], torch.zeros_like(w[ok]))
    return s, float((v[ok] / vk[ok]).median()), int(ok.sum()), (dz, vk, v, pair)


def loglog_extrapolation(fs, ss):
    """``exp(a)`` of the least-squares line ``log s = a + b log f`` (the scale at f = 1) and the slope ``b``."""
    import numpy as np

    b, a = np.polyfit(np.log(fs), np.log(ss), 1)
    return float(math.exp(a)), float(b)


def power_law_scales(innov, beta):
    """Per fold count ``K``: the scale the innovations ask for if the error scale at the fraction ``f`` of the data is
    ``a f**-beta`` (``a`` at ``f = 1``): ``Var(m - m_k) = a (f**-beta v_k - v)``, matched by ``scale_for``."""
    import torch

    from learners.shadow.calibration import scale_for

    out = {}
    for K, (dz, vk, v, _) in innov.items():
        w = ((K - 1) / K) ** -beta * vk - v
        ok = torch.isfinite(dz) & torch.isfinite(w) & (w > 0)
        if int(ok.sum()) >= 10:
            out[K] = scale_for(dz[ok], w[ok], torch.zeros_like(w[ok]))
    return out


def power_law_fit(innov, betas=None):
    """The exponent ``beta`` (grid) at which the scales of :func:`power_law_scales` agree across the fold counts (least
    variance of their logarithms) and their geometric mean there: the scale at ``f = 1`` under that law."""
    import numpy as np

    betas = np.linspace(-1.0, 4.0, 101) if betas is None else betas
    best = None
    for b in betas:
        sc = power_law_scales(innov, float(b))
        if len(sc) < len(innov):
            continue
        logs = np.log(list(sc.values()))
        if best is None or logs.var() < best[0]:
            best = (logs.var(), float(b), float(np.exp(logs.mean())))
    return best


def score(path):
    """Score the rules on a saved fit (``--load``): ideal, in use, log-log extrapolation (all K; K >= 3), power law."""
    import torch

    out = torch.load(path, weights_only=False)
    innov = out["innov"]
    scales = {K: power_law_scales({K: raw}, 0.0)[K] for K, raw in innov.items()}
    Ks = sorted(scales)
    cands = {"use": out["s_use"], "ext": loglog_extrapolation([(K - 1) / K for K in Ks], [scales[K] for K in Ks])[0],
             "ext3": loglog_extrapolation([(K - 1) / K for K in Ks if K >= 3], [scales[K] for K in Ks if K >= 3])[0]}
    fit = power_law_fit(innov)
    cands["pow"] = fit[2] if fit else float("nan")
    line = [f"{out['system']} s{out['seed']} (beta {fit[1] if fit else float('nan'):.2f})"]
    for N, (err, v, t2) in out["held"].items():
        ideal = ideal_scale(err, v, t2)
        cells = [f"N{N} ideal {ideal:.4g}"]
        for name, s in cands.items():
            r, cov = rms_and_coverage(err, v, t2, s)
            cells.append(f"{name} x{s / ideal if ideal else float('inf'):.2f} {r:.2f}/{100 * cov:.0f}%")
        line.append(" ".join(cells))
    print(" | ".join(line))


def report(held, rules, scales, s4, k_lib):
    """One line per order: the ideal scale, and each rule's scale, its factor over the ideal, RMS z and 2 sigma share."""
    for N, (err, v, t2) in held.items():
        ideal = ideal_scale(err, v, t2)
        cells = [f"ideal {ideal:.4g}"]
        own = [("own order", s4 if N == 4 else scales[k_lib])]
        for name, s in list(rules.items()) + own + [(f"K{K}", scales[K]) for K in sorted(scales)]:
            r, cov = rms_and_coverage(err, v, t2, s)
            cells.append(f"{name} {s:.4g} (x{s / ideal if ideal else float('inf'):.2f}): {r:.2f}, {100 * cov:.1f}%")
        print(f"  N = {N}: " + " | ".join(cells), flush=True)


def main(argv=None) -> None:
    import torch

    import benchmarks.identification_acceptance as B
    import learners.shadow.difference_calibration as D
    import tests.test_learners_shadow_auto as A
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP
    from learners.shadow.hyperparameters import IdentifiabilityWarning

    rows = {make.__name__: (make, h, T) for make, h, T in A.SYSTEMS + A.UNTUNED + B.UNTUNED}
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--folds", type=int, nargs="+", default=[2, 3, 5])
    ap.add_argument("--order4", action="store_true",
                    help="also the innovations of H_rec[4] at the library's fold count (174 s CPU at n = 6)")
    ap.add_argument("--save", default=None, help="a .pt file for the raw values")
    ap.add_argument("--load", nargs="+", default=None, help="score saved fits instead of fitting (:func:`score`)")
    ap.add_argument("--system", choices=sorted(rows), required=False)
    args = ap.parse_args(argv)
    if args.load:
        for path in args.load:
            score(path)
        return
    make, h, T = rows[args.system]
    system = make()
    warnings.simplefilter("ignore", IdentifiabilityWarning)
    c0 = time.process_time()
    m = InverseModifiedLagrangianGP(h, progress=False).fit(snapshots(system, h, T, 5, seed=args.seed))
    fit_cpu = time.process_time() - c0
    F = m.gp.train_functionals.count
    k_lib = max(2, min(D.CALIBRATION_FOLDS, m.snapshots.shape[0], D.FOLD_BUDGET // max(F, 1)))
    held = {N: held_values(m, system, N) for N in (2, 4)}  # the library's calibration runs here (first std)
    s_use = scale_in_use(m)
    print(f"{m.history.get('energy_differences_calibration_error')}")
    print(f"{args.system} seed {args.seed}: n {m.n}, T {m.snapshots.shape[0]}, F {F}, library folds {k_lib}, "
          f"scale in use {s_use:.4g}, fit {fit_cpu:.0f} s cpu", flush=True)
    out = {"system": args.system, "seed": args.seed, "n": m.n, "F": F, "k_lib": k_lib, "s_use": s_use, "held": held,
           "innov": {}}
    scales = {}
    for K in sorted(set(args.folds) | {k_lib}):  # the library's count always (its scale is the one in use)
        c1 = time.process_time()
        s, ratio, kept, raw = innovation_scale(m, K)
        scales[K] = s
        out["innov"][K] = raw
        print(f"  K {K} (f {(K - 1) / K:.3f}): s {s:.4g}, median v/v_k {ratio:.3f}, kept {kept}, "
              f"{time.process_time() - c1:.0f} s cpu", flush=True)
    s4 = scales[k_lib]
    if args.order4:
        c1 = time.process_time()
        s4, ratio4, kept4, out["innov4"] = innovation_scale(m, k_lib, 4)
        print(f"  order 4, K {k_lib}: s {s4:.4g}, median v/v_k {ratio4:.3f}, kept {kept4}, "
              f"{time.process_time() - c1:.0f} s cpu", flush=True)
    Ks = sorted(scales)
    s_ext, slope = loglog_extrapolation([(K - 1) / K for K in Ks], [scales[K] for K in Ks])
    print(f"  extrapolated to f = 1: {s_ext:.4g} (slope {slope:.2f} in log f)")
    report(held, {"use": s_use, "ext": s_ext}, scales, s4, k_lib)
    print(f"total {time.process_time() - c0:.0f} s cpu")
    if args.save:
        torch.save(out, args.save)


if __name__ == "__main__":
    main()
