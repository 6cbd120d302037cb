"""Calibration folds that re-choose their hyperparameters (issue 23 item 2, Session 17, branch cal7; a measurement,
the library is unchanged).

The distant-difference calibration (learners/shadow/difference_calibration.py) re-conditions the final GP on the data
without a fold of trajectories at the *final* hyperparameters theta*: its innovations ``(m - m_k) / sqrt(v_k - v)``
cannot contain the error of choosing theta from the data. Here each fold also re-chooses theta: a warm start at
theta*, the positions objective built as the fit's (held-out one-step position errors of the fit's validation
trajectories, conditioned on the training trajectories: the fit's split rule applied to the fold's trajectories) on
the fold's data only (fold ``k``: trajectories
``t % K == k`` left out, as the library's folds), the element search's untied coordinate search
(``element_search.untied_search``: steps of a factor 1.5, halved when none improves) for ``--evals`` solves over the
free coordinates (element kernels: all but the first group's scale, as the search; other kernels: every
lengthscale). The fold's GP is then conditioned at its theta_k on all its data. Positions only, per fold:

* ``innov fixed``: the library's innovations (theta* in every fold), pairs of data states, its guard and share;
* ``innov refit``: ``(m - m_k') / sqrt(v_k - v)``: the refitted fold's mean, the fixed-theta variances (same pairs,
  same guard);
* ``innov refit v'``: ``(m - m_k') / sqrt(v_k' - v)``, ``v_k'`` the refitted fold's own raw variance (kept where
  ``v_k' - v`` exceeds both solve bounds and the share of both factorisation terms);
* ``DEL fixed / refit``: the DEL residuals of the left-out trajectories under the fold posterior (theta* / theta_k),
  the DEL calibration's rule ``(q_95.4(|z|) / 2)^2``; ``x DEL``: the library's innovations times their ratio.

Each scale is matched by ``scale_for`` (90% of |z| below 1.645) as the library's, relative to the raw posterior
variance. Against them ``truth``: the scale the 40 held-out energy differences (N = 2, true energies, best energy
unit, the model's truncation term in quadrature) ask of the final model, and (diagnostic, true energies) the same
for each fold's posterior, fixed and refitted (``fold truth``). Under each candidate the RMS z and fraction within
2 sigma of the 40 held-out differences (N = 2).

    PYTHONPATH=. OMP_NUM_THREADS=1 nice -n 5 python3 benchmarks/refit_folds_calibration.py --system two_body_morse4
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path


def _theta(gp):
    """theta (log-parameters, log relative nugget) of ``gp`` as ``hyperparameter_search._set_theta`` reads it."""
    import torch

    base = gp.kernel.base_kernel
    ls = base.lengthscale.detach().reshape(-1).cpu().log()
    nug = math.log(float(gp.likelihood.noise.detach().reshape(-1)[0]) / float(gp.kernel.outputscale.detach()))
    return torch.cat([ls, torch.tensor([nug], dtype=torch.float64)])


def _free(gp, theta):
    """The coordinates the refinement moves (module docstring)."""
    from learners.shadow.element_kernel import ElementKernel

    base = gp.kernel.base_kernel
    if isinstance(base, ElementKernel):
        names = base.parameter_names()
        overall = next(j for j, name in enumerate(names) if name.endswith(":scale"))
        return [i for i in range(len(names)) if i != overall]
    return list(range(theta.numel() - 1))


def _refit(m, F_all, groups, k, K, theta0, evals):
    """Fold ``k``'s GP at its re-chosen theta_k, conditioned on all its data: (gp, theta_k, f(theta*), f(theta_k), cpu)."""
    import torch

    from learners.shadow.element_gram import reusing_parts
    from learners.shadow.element_kernel import ElementKernel
    from learners.shadow.element_search import untied_search
    from learners.shadow.functionals import triples_from_snapshots
    from learners.shadow.hyperparameter_search import _set_theta, objective, split_functionals, training_subsets
    from learners.shadow.position_objective import position_objective

    c0 = time.process_time()
    rest = torch.arange(groups.numel(), F_all.count)
    left = groups % K == k
    # the fit's own split on the fold's trajectories (every fifth validates, at most max_train // 2 of them):
    # the validation trajectories of the full fit are one fifth, which a fold can hold whole (K = 5)
    kept = torch.nonzero(~left).flatten()
    tr_all, _ = split_functionals(groups[kept], kept.numel())
    _, va = training_subsets(groups[kept], kept.numel(), m.max_train_functionals, m.seed)
    train, vals = torch.cat([kept[tr_all], rest]), torch.unique(groups[kept][va])
    Sd = m._to_standard(m.snapshots)
    positions = position_objective(triples_from_snapshots(Sd[vals]), m._h_std, m.scheme)
    gp = m._make_gp(2 * m.n)  # a copy at theta*, not conditioned yet
    gp.load_state_dict(m.gp.state_dict())
    for p in gp.parameters():
        p.requires_grad_(False)
    evaluate = objective(gp, "positions", F_all.subset(train), None, None, positions)
    free = _free(gp, theta0)
    with torch.no_grad():
        if isinstance(gp.kernel.base_kernel, ElementKernel):
            with reusing_parts(gp.kernel.base_kernel) as grams:
                f0 = evaluate(theta0)
                theta, best, _ = untied_search(grams.keeping(evaluate, f0), theta0.clone(), f0, free, evals)
        else:
            f0 = evaluate(theta0)
            theta, best, _ = untied_search(evaluate, theta0.clone(), f0, free, evals)
        _set_theta(gp, theta)
        gp.condition(F_all.subset(torch.cat([torch.nonzero(~left).flatten(), rest])))
    return gp, theta, f0, best, time.process_time() - c0


def _del_scale(gp, F_left):
    """The DEL calibration's rule on the left-out residuals under ``gp`` (raw variances) and the z's."""
    import torch

    with torch.no_grad():
        saved, gp.variance_scale = gp.variance_scale, 1.0
        try:
            mean, var = gp.functional_posterior(F_left)
        finally:
            gp.variance_scale = saved
    ok = var > 0
    return (mean[ok].abs() / var[ok].sqrt())


def _scale(num, den, keep):
    import torch

    from learners.shadow.calibration import scale_for

    num, den = num[keep], den[keep]
    return scale_for(num, den, torch.zeros_like(num)), int(keep.sum())


def _arguments(rows, argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=sorted(rows), required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--evals", type=int, default=10, help="solves of each fold's untied refinement")
    ap.add_argument("--traj", type=int, default=None, help="trajectories (default: the acceptance's; a smoke test)")
    return ap.parse_args(argv)


def _held(m, system, A):
    """The 40 held-out differences at N = 2: (x, xr, G, raw variance, err, trunc, c, true)."""
    import innovations_diagnosis as I
    import learners.shadow.difference_calibration as D
    from learners.shadow.uncertainty import LinearisedQuantity

    q, v = A.held_out_states(system, 40)
    x = m._standard_state(q[1:], v[1:]).detach()
    xr = m._standard_state(q[:1], v[:1]).detach().expand_as(x).contiguous()
    G = LinearisedQuantity(m._quantity("energy", 2), x, 1, m._jet_order("energy", 2))
    mean, true = D._mean_differences(m, m.gp, x, xr, 2), I._true_differences(m, system, x, xr)
    v0 = D._raw_variances([m.gp], [__import__("torch").arange(m.gp.train_functionals.count)], G, xr)[0][0]
    c = float((mean * true).sum() / true.pow(2).sum())
    return x, xr, G, v0, mean - c * true, I._truncation(m, 2, x, xr), c, true


def _z_line(err, var, trunc, s) -> str:
    z = err.abs() / (s * var + trunc ** 2).sqrt()
    return f"RMS z {float(z.pow(2).mean().sqrt()):.2f}, 2σ {float((z <= 2).double().mean()):.3f}"


def _run(m, system, A, args):
    """Every fold: the scales of the module docstring; prints the table's row."""
    import torch

    import learners.shadow.difference_calibration as D
    from learners.shadow.calibration import scale_for
    from learners.shadow.hyperparameter_search import training_subsets
    from learners.shadow.uncertainty import LinearisedQuantity

    cal = m.calibration
    s_use = (cal.get("energy_differences") or cal.get("energy") or cal["del"]).scale
    share = (m.history.get("innovation_factorisation_share") or (1.0,))[0]
    x, xr, Gh, v0, err, trunc, c, true = _held(m, system, A)
    truth = scale_for(err, v0, trunc)
    F_all = m.gp.train_functionals
    groups = D.fold_groups(m, F_all.count)
    T = int(groups.max()) + 1
    K = max(2, min(D.CALIBRATION_FOLDS, T, D.FOLD_BUDGET // max(F_all.count, 1)))
    _, va = training_subsets(groups, groups.numel(), m.max_train_functionals, m.seed)
    val_traj = torch.unique(groups[va])
    theta0 = _theta(m.gp)
    xp, xrp = D.data_pairs(m)
    Gp = LinearisedQuantity(m._quantity("energy", 2), xp, 1, m._jet_order("energy", 2))
    rest = torch.arange(groups.numel(), F_all.count)
    subsets = [torch.arange(F_all.count)] + [torch.cat([torch.nonzero(groups % K != k).flatten(), rest]) for k in range(K)]
    fixed = [m.gp] + [D._conditioned(m, F_all.subset(s)) for s in subsets[1:]]
    (v, b, f), *rows = D._raw_variances(fixed, subsets, Gp, xrp)
    mp = D._mean_differences(m, m.gp, xp, xrp, 2)
    print(f"{args.system}: K {K}, theta* {[round(a, 3) for a in theta0.tolist()]}, in use {s_use:.4g}, truth {truth:.4g}, "
          f"library share {share:.3g}; val traj {val_traj.numel()}", flush=True)
    acc = {key: [] for key in ("fix_n", "fix_d", "fix_k", "ref_n", "ref_d", "ref_k", "del_f", "del_r")}
    fold_truth = []
    for k in range(K):
        gp_r, th, f0, best, cpu = _refit(m, F_all, groups, k, K, theta0, args.evals)
        m_f, m_r = D._mean_differences(m, fixed[k + 1], xp, xrp, 2), D._mean_differences(m, gp_r, xp, xrp, 2)
        vk, bk, fk = rows[k]
        vr, br, fr = D._raw_variances([gp_r], [torch.arange(gp_r.train_functionals.count)], Gp, xrp)[0]
        keep = vk - v > (b + share * f) + (bk + share * fk)
        keep_r = vr - v > (b + share * f) + (br + share * fr)
        for key, val in (("fix_n", mp - m_f), ("fix_d", vk - v), ("fix_k", keep), ("ref_n", mp - m_r), ("ref_d", vr - v),
                         ("ref_k", keep_r)):
            acc[key].append(val)
        left = torch.nonzero(groups % K == k).flatten()
        acc["del_f"].append(_del_scale(fixed[k + 1], F_all.subset(left)))
        acc["del_r"].append(_del_scale(gp_r, F_all.subset(left)))
        # diagnostic (true energies): the fold posteriors' own error scale on the 40 held-out differences
        row = []
        for gp in (fixed[k + 1], gp_r):
            mk = D._mean_differences(m, gp, x, xr, 2)
            vk_h = D._raw_variances([gp], [torch.arange(gp.train_functionals.count)], Gh, xr)[0][0]
            row.append(scale_for(mk - c * true, vk_h, trunc))
        fold_truth.append(row)
        print(f"  fold {k}: refit {cpu:.0f} s cpu, f(theta*) {f0:.4f} -> {best:.4f}, max |dtheta| "
              f"{float((th - theta0).abs().max()):.3f}; innov fixed {_scale(mp - m_f, vk - v, keep)[0]:.4g}, refit "
              f"{_scale(mp - m_r, vk - v, keep)[0]:.4g}, refit v' {_scale(mp - m_r, vr - v, keep_r)[0]:.4g}; "
              f"fold truth fixed {row[0]:.4g}, refit {row[1]:.4g}", flush=True)
    _summary(acc, fold_truth, truth, s_use, cal, err, v0, trunc)


def _summary(acc, fold_truth, truth, s_use, cal, err, v0, trunc):
    """The pooled scales of every candidate and the 40 held-out differences' RMS z under each."""
    import torch

    cat = {key: torch.cat(val) for key, val in acc.items()}
    s_fix, n_fix = _scale(cat["fix_n"], cat["fix_d"], cat["fix_k"])
    s_ref, _ = _scale(cat["ref_n"], cat["fix_d"], cat["fix_k"])
    s_refv, n_refv = _scale(cat["ref_n"], cat["ref_d"], cat["ref_k"])
    q = lambda z: float((torch.quantile(z, 0.954) / 2) ** 2)  # noqa: E731
    d_f, d_r = q(cat["del_f"]), q(cat["del_r"])
    print(f"scales (raw units): truth {truth:.4g}; in use {s_use:.4g}; library DEL {cal['del'].scale:.4g}; innov fixed "
          f"{s_fix:.4g} ({n_fix} kept); innov refit {s_ref:.4g}; innov refit v' {s_refv:.4g} ({n_refv} kept); DEL fixed "
          f"folds {d_f:.4g}, refit folds {d_r:.4g} (x{d_r / d_f:.2f}); x DEL {s_fix * d_r / d_f:.4g}")
    print(f"fold truth (true energies): fixed {[round(a[0], 4) for a in fold_truth]}, refit "
          f"{[round(a[1], 4) for a in fold_truth]}")
    for name, s in (("truth", truth), ("in use", s_use), ("innov fixed", s_fix), ("innov refit", s_ref),
                    ("innov refit v'", s_refv), ("x DEL", s_fix * d_r / d_f)):
        print(f"  {name} {s:.4g} (truth/scale {truth / s:.2f}): {_z_line(err, v0, trunc, s)}")


def main(argv=None) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import identification_acceptance as B
    import tests.test_learners_shadow_auto as A
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP
    from learners.shadow.hyperparameters import IdentifiabilityWarning

    rows = {make.__name__: (make, h, T) for make, h, T in A.SYSTEMS + A.UNTUNED + B.UNTUNED}
    args = _arguments(rows, argv)
    make, h, T = rows[args.system]
    system = make()
    warnings.simplefilter("ignore", IdentifiabilityWarning)
    c0 = time.process_time()
    m = InverseModifiedLagrangianGP(h, progress=False).fit(snapshots(system, h, args.traj or T, 5, seed=args.seed))
    print(f"{args.system} seed {args.seed}: kept {m.history.get('structure_kept')}, fit {time.process_time() - c0:.0f} s cpu",
          flush=True)
    if m.objective_used != "positions":  # _refit builds the positions objective and sets the outputscale to 1
        raise SystemExit(f"{args.system}: the fit used objective {m.objective_used!r}; this script assumes 'positions'")
    _run(m, system, A, args)
    print(f"total {time.process_time() - c0:.0f} s cpu")


if __name__ == "__main__":
    main()
