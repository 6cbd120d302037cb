"""Why the energy std of an element-structure fit is too narrow (two_body_morse4) or too wide (two_body4): a
decomposition of the 40 held-out energy differences' errors (issue 23, session 15, branch morsecal; a diagnostic).

One fit with the library defaults on the acceptance data (seed 0, 5 steps), then at N = 2 and 4 on the held-out
differences of tests/test_learners_shadow_auto.py (after the best scale, as the acceptance):

* ``err``: RMS error; ``gp``: RMS calibrated GP std (``truncation=False``); ``trunc``: RMS truncation term as
  ``energy`` adds it; ``exact``: RMS error of the *exact* inverse modified Lagrangian's differences (bea series of
  order ``--floor``, no learning; its own best scale): the truncation floor (b); ``err - exact``: what is left for
  the GP (a), with its z under the calibrated GP std alone;
* the scales (c): ``model.calibration``'s (relative to the raw posterior variance), ``held``: the one the held-out
  differences ask for (``scale_for`` with the model's truncation term, as the calibration's own rule), ``rms1``: the
  one that puts their RMS z at 1; the RMS z and fraction within 2 sigma under the calibrated std and under the raw
  (scale 1) and DEL ones;
* ``--innovations``: the innovations' scale on the calibration's pairs and on the held-out differences themselves
  (benchmarks/innovations_states.py's rows: ``innov``, ``truth``, ``v/v_k``).

* ``--hyper`` (Session 16): the hyperparameters' share of the held-out error at N = 2 (benchmarks/_hyper_spread.py):
  the Laplace and weighted-spread variances of the differences' means over the element search's objective, in scale
  units, and the RMS z / 2 sigma with the Laplace variance added (element structures only).

    PYTHONPATH=. OMP_NUM_THREADS=1 nice -n 5 python3 benchmarks/element_calibration_diagnosis.py --system two_body_morse4
    PYTHONPATH=. OMP_NUM_THREADS=1 nice -n 5 python3 benchmarks/element_calibration_diagnosis.py --system two_body4 \
        --hyper --orders 2
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path


def _rms(t) -> float:
    return float(t.pow(2).mean().sqrt())


def _z_line(err, var, trunc, s) -> str:
    z = err.abs() / (s * var + trunc ** 2).sqrt()
    return f"RMS z {_rms(z):.2f}, 2σ {float((z <= 2).double().mean()):.3f}, max {float(z.max()):.2f}"


def _order(m, system, A, N, exact, cal) -> None:
    """One order's decomposition (module docstring)."""
    import torch

    from learners.shadow.calibration import scale_for

    q, v = A.held_out_states(system, 40)
    true = (system.energy(q[1:], v[1:]) - system.energy(q[:1], v[:1])).detach()
    ref = (q[0], v[0])
    mean, std = m.energy(N, return_std=True, reference=ref)(q[1:], v[1:])
    _, gp = m.energy(N, return_std=True, reference=ref, truncation=False)(q[1:], v[1:])
    mean, std, gp = mean.detach(), std.detach(), gp.detach()
    c = float((mean * true).sum() / true.pow(2).sum())
    err, trunc = mean - c * true, (std ** 2 - gp ** 2).clamp_min(0).sqrt()
    s_cal = (cal.get("energy_differences") or cal.get("energy") or cal["del"]).scale  # as _variance_factor takes it
    raw = gp ** 2 / s_cal  # the raw posterior variance (scale 1), data units
    held = scale_for(err, raw, trunc)
    rms1 = float(((err ** 2 - trunc ** 2).mean() / raw.mean()))
    print(f"N = {N}: dE {float(err.norm() / (c * true).norm()):.3g}; RMS err {_rms(err):.3g}, gp {_rms(gp):.3g}, "
          f"trunc {_rms(trunc):.3g}")
    print(f"  scales: in use {s_cal:.4g}, held {held:.4g} (x{held / s_cal:.2f}), rms1 {rms1:.4g} (x{rms1 / s_cal:.2f})")
    for name, s in [("in use", s_cal), ("raw (1)", 1.0)] + [(k, c.scale) for k, c in cal.items()]:
        print(f"  under {name} scale {s:.4g}: {_z_line(err, raw, trunc, s)}")
    print(f"  GP part alone (no truncation): {_z_line(err, raw, torch.zeros_like(err), s_cal)}")
    if exact is not None:
        H = exact.energy(N)
        d = (H(q[1:], v[1:]) - H(q[:1], v[:1])).detach()
        ce = float((d * true).sum() / true.pow(2).sum())
        e_ex = d - ce * true
        rest = err - e_ex * c / ce  # the exact floor in the model's unit
        print(f"  exact floor: dE {float(e_ex.norm() / (ce * true).norm()):.3g}, RMS {_rms(e_ex * c / ce):.3g}; "
              f"corr(model trunc term, |floor|) {float(torch.corrcoef(torch.stack([trunc, e_ex.abs()]))[0, 1]):.2f}; "
              f"err - floor RMS {_rms(rest):.3g}: {_z_line(rest, raw, torch.zeros_like(err), s_cal)}")


def _hyper(m, system, A, HS, rec, cal) -> None:
    """The ``--hyper`` lines (module docstring), N = 2, standardised units."""
    import torch

    import innovations_diagnosis as I
    import learners.shadow.difference_calibration as D
    from learners.shadow.calibration import scale_for
    from learners.shadow.uncertainty import LinearisedQuantity

    q, v = A.held_out_states(system, 40)
    x = m._standard_state(q[1:], v[1:]).detach()
    xr = m._standard_state(q[:1], v[:1]).detach().expand_as(x).contiguous()
    out = HS.spread(m, rec, x, xr)
    if out is None:
        print("--hyper: no untied element search recorded (no element structure kept)")
        return
    var_hyp, var_w, info = out
    G = LinearisedQuantity(m._quantity("energy", 2), x, 1, m._jet_order("energy", 2))
    v0 = D._raw_variances([m.gp], [torch.arange(m.gp.train_functionals.count)], G, xr)[0][0]
    mean, true = D._mean_differences(m, m.gp, x, xr, 2), I._true_differences(m, system, x, xr)
    c = float((mean * true).sum() / true.pow(2).sum())
    err, trunc = mean - c * true, I._truncation(m, 2, x, xr)
    s_use = (cal.get("energy_differences") or cal.get("energy") or cal["del"]).scale
    Q = lambda t: " / ".join(f"{float(a):.3g}" for a in torch.quantile(t, torch.tensor([0.1, 0.5, 0.9], dtype=t.dtype)))
    print(f"--hyper N = 2: {info}")
    print(f"  var_hyp / v (Laplace) 10/50/90%: {Q(var_hyp / v0)}; weighted spread / v: {Q(var_w / v0)}; "
          f"mean ratio {float(var_hyp.mean() / v0.mean()):.4g} / {float(var_w.mean() / v0.mean()):.4g}")
    print(f"  truth scale {scale_for(err, v0, trunc):.4g}; with var_hyp as a fixed term "
          f"{scale_for(err, v0, (trunc ** 2 + var_hyp).sqrt()):.4g}; in use {s_use:.4g}")
    for name, extra in (("in use", 0 * v0), ("in use + Laplace", var_hyp), ("in use + weighted", var_w)):
        print(f"  {name}: {_z_line(err, v0, (trunc ** 2 + extra).sqrt(), s_use)}")


def _guard_lines(seen, share) -> None:
    """The innovations' rounding guard under three rules, from the calibration's :func:`_raw_variances` calls
    (``seen[0]``: final, folds; ``seen[1]``, where the share was measured: the first fold and its permuted copy; each
    (variance, solve bound, worst-case factorisation term)): kept innovations with the worst case (before Session
    16), with Session 15's tried rule (solve bound + 10 max_i |v'_i - v_i| / v_i times the variance, the moves of the
    permuted fold) and with the library's share (``share``, from history). The moves are shown over the pairs
    resolved as v > 2b and v' > 2b' (not the library's measuring mask, which also asks f + f' > 2(b + b')), and
    the largest fold move |v_1' - v_1| over share (f_1 + f_1') (at most 1 where the share covers it)."""
    (v, b, f), *folded = seen[0]
    kept = lambda g: sum(int((vk - v > g(vk, bk, fk)).sum()) for vk, bk, fk in folded)
    line = f"guard: kept of {sum(vk.numel() for vk, _, _ in folded)}: worst case {kept(lambda vk, bk, fk: b + bk + f + fk)}"
    line += f", share {share:.3g} {kept(lambda vk, bk, fk: (b + share * f) + (bk + share * fk))}"
    if len(seen) > 1:
        (v1, b1, f1), (vp, bp, fp) = seen[1]
        rel = (vp - v1).abs() / v1.abs().clamp_min(1e-300)
        ok = (v1 > 2 * b1) & (vp > 2 * bp)
        s15 = kept(lambda vk, bk, fk: b + bk + 10 * float(rel.max()) * (v.abs() + vk.abs()))
        cover = float(((vp - v1).abs() / (share * (f1 + fp))).max())
        line += (f", Session 15 (10 max rel move) {s15}; fold 1 permuted: max |v'-v|/v {float(rel.max()):.3g}, over "
                 f"resolved pairs ({int(ok.sum())}) max {float(rel[ok].max()):.3g}; max |v'-v| / (share (f + f')) {cover:.3g}")
    print(line + f"; b/v median {float((b / v).median()):.3g}, f/v median {float((f / v).median()):.3g}", flush=True)


def _arguments(rows, argv):
    """The command line (module docstring); ``rows``: the systems by name."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=sorted(rows), required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--floor", type=int, default=0, help="series order of the exact L_inv (0: not computed)")
    ap.add_argument("--innovations", action="store_true")
    ap.add_argument("--no-calibration", action="store_true", help="skip the energy calibrations: the DEL scale")
    ap.add_argument("--hyper", action="store_true", help="the hyperparameters' share of the error (module docstring)")
    ap.add_argument("--orders", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--traj", type=int, default=None, help="trajectories (default: the acceptance's; a smoke test)")
    return ap.parse_args(argv)


def _calibration(m, no_calibration: bool) -> dict:
    """``model.calibration`` (with the guard lines), or the DEL scale alone with ``--no-calibration``."""
    if no_calibration:  # energy's std on the DEL scale (what an element fit uses when no innovation is kept)
        from learners.shadow.calibration import Calibration

        m._pending_calibration = None
        return {"del": Calibration(m.gp.variance_scale, float("nan"), float("nan"), 0)}
    import learners.shadow.difference_calibration as D

    raw, share_of, seen, cpu = D._raw_variances, D._factorisation_share, [], []

    def timed(*a):  # the share's CPU seconds (its extra factorisation and pass, where it runs)
        c0 = time.process_time()
        try:
            return share_of(*a)
        finally:
            cpu.append(time.process_time() - c0)

    D._raw_variances, D._factorisation_share = (lambda *a, **k: seen.append(raw(*a, **k)) or seen[-1]), timed
    try:
        cal = m.calibration
    finally:
        D._raw_variances, D._factorisation_share = raw, share_of
    print(f"factorisation share: {m.history.get('innovation_factorisation_share')}, {sum(cpu):.1f} s cpu", flush=True)
    first = next((i for i, r in enumerate(seen) if len(r) > 2), None)  # the innovations' call: final + folds
    if first is not None:
        measured = [r for r in seen[first + 1:first + 2] if len(r) == 2]  # the share's call, where it ran
        _guard_lines([seen[first]] + measured, m.history["innovation_factorisation_share"][0])
    return cal


def main(argv=None) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import identification_acceptance as B
    import innovations_states as S
    import tests.test_learners_shadow_auto as A
    from identification_default import _ExactInverse
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP
    from learners.shadow.hyperparameters import IdentifiabilityWarning

    rows = {make.__name__: (make, h, T) for make, h, T in A.SYSTEMS + A.UNTUNED + B.UNTUNED}
    args = _arguments(rows, argv)
    make, h, T = rows[args.system]
    T = args.traj or T
    system = make()
    warnings.simplefilter("ignore", IdentifiabilityWarning)
    c0 = time.process_time()
    import _hyper_spread as HS

    with HS.recording() as rec:
        m = InverseModifiedLagrangianGP(h, progress=False).fit(snapshots(system, h, T, 5, seed=args.seed))
    print(f"{args.system} seed {args.seed}: kept {m.history.get('structure_kept')}, fit {time.process_time() - c0:.0f} s cpu",
          flush=True)
    cal = _calibration(m, args.no_calibration)
    print("calibration: " + "; ".join(f"{k} {c.scale:.4g} (RMS z {c.rms_z:.2f}, 2σ {c.coverage:.2f}, n {c.count})"
                                      for k, c in cal.items()), flush=True)
    exact = _ExactInverse(system, h, args.floor, system.n) if args.floor else None
    share = m.history.get("innovation_factorisation_share")
    print(f"innovation factorisation share {share}; skipped: {m.history.get('energy_differences_calibration_skipped')}")
    for N in args.orders:
        _order(m, system, A, N, exact, cal)
        print(f"  ({time.process_time() - c0:.0f} s cpu)", flush=True)
    if args.hyper:
        _hyper(m, system, A, HS, rec, cal)
        print(f"  ({time.process_time() - c0:.0f} s cpu)", flush=True)
    if args.innovations:
        import torch

        import learners.shadow.difference_calibration as D
        import benchmarks.innovations_diagnosis as I

        x, xr = D._pairs(m, torch.Generator().manual_seed(m.seed))
        q, v = A.held_out_states(system, 40)
        xh = m._standard_state(q[1:], v[1:]).detach()
        sets = {"pairs": (x, xr), "held": (xh, m._standard_state(q[:1], v[:1]).detach().expand_as(xh).contiguous())}
        gps, subsets = I._folds(m)
        for N in (2, 4):
            s_use = None
            for name, (a, b) in sets.items():
                text, innov = S._row(m, system, gps, subsets, N, a, b, s_use)
                s_use = s_use or innov
                print(f"N = {N} {name}: {text}", flush=True)
    print(f"total {time.process_time() - c0:.0f} s cpu")


if __name__ == "__main__":
    main()
