"""Where the distant-difference (innovations) scale over-states the energy std (issue 23, session 10, branch idcal):
a diagnostic, not a test.

The ``"energy_differences"`` scale (learners/shadow/difference_calibration.py) is what the innovations
``(m - m_k) / sqrt(v_k - v)`` of ``H_rec[2]`` differences between pairs of data states ask for. Here, on one fit
(library defaults, the acceptance data), three sets of differences are compared:

* ``pairs``: the calibration's own 60 pairs of data states (velocities of the model at order 2);
* ``mixed``: 60 pairs of states between the data -- each coordinate's ``(q_i, v_i)`` taken from a random state of
  the pairs (positions only: no velocity solve beyond the pairs');
* ``held``: the acceptance's 40 held-out differences to a reference (tests/test_learners_shadow_auto.py).

On each set, at ``N = 4`` and ``N = 2``: ``innov``, the scale the innovations ask for there (``scale_for``, the rounding
guard as the estimator applies it); ``cv``, the cross-validation form ``(m - m_k) / sqrt(v_k)`` (the final mean taken
for the truth; all pairs, and ``kept``: the guard's pairs only); ``truth``, what the final posterior's true errors
ask for, ``(m - c dH) / sqrt(v)`` with the truncation term in quadrature as ``energy`` forms it and ``c`` the best
scale fitted on that set itself (the acceptance's metric); ``v/v_k``, the median ratio of the final to the fold
variances; ``trunc/gp``, the RMS of the truncation term over the GP std at the innovations' scale of the pairs (the
scale in use). Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 nice -n 5 python3 benchmarks/innovations_states.py --system duffing3
    PYTHONPATH=. OMP_NUM_THREADS=1 nice -n 5 python3 benchmarks/innovations_states.py --system anharmonic6 --orders 2 --folds 5
"""

from __future__ import annotations

import argparse
import time
import warnings


def _mixed(m, x, xr):
    """60 pairs of states between the data: each coordinate's (q_i, v_i) from a random one of the pairs' states."""
    import torch

    X = torch.cat([x, xr])
    P, n = x.shape[0], m.n
    pick = torch.randint(X.shape[0], (2 * P, n), generator=torch.Generator().manual_seed(m.seed + 1))
    cols = torch.arange(n)
    Xm = torch.cat([X[pick, cols], X[pick, n + cols]], -1)
    return Xm[:P], Xm[P:]


def _row(m, system, gps, subsets, N, a, b, s_use=None):
    """The scales of one set of differences ``a - b`` at order ``N`` (module docstring)."""
    import torch

    import benchmarks.innovations_diagnosis as I
    from learners.shadow.calibration import scale_for

    mean, var, bound = I._evaluate(m, gps, subsets, N, a, b)
    true, trunc = I._true_differences(m, system, a, b), I._truncation(m, N, a, b)
    dz, w, vk = mean[0] - mean[1:], var[1:] - var[0], var[1:]
    keep = w > bound[0] + bound[1:]
    zero = lambda t: torch.zeros(t.numel(), dtype=t.dtype)  # noqa: E731
    innov = scale_for(dz[keep], w[keep], zero(w[keep]))
    cv, cv_kept = scale_for(dz.reshape(-1), vk.reshape(-1), zero(vk)), scale_for(dz[keep], vk[keep], zero(vk[keep]))
    c = float((mean[0] * true).sum() / true.pow(2).sum())
    truth = scale_for(mean[0] - c * true, var[0], trunc)
    ratio = float((var[0][None].expand_as(vk) / vk).median())
    tg = float((trunc ** 2 / ((s_use or innov) * var[0])).mean().sqrt())
    return (f"innov {innov:.4g} | cv {cv:.4g} (kept {cv_kept:.4g}) | truth {truth:.4g} | v/v_k {ratio:.3f} | "
            f"kept {int(keep.sum())}/{keep.numel()} | trunc/gp {tg:.3g}"), innov


def main(argv=None) -> None:
    import torch

    import benchmarks.identification_acceptance as B
    import benchmarks.innovations_diagnosis as I
    import learners.shadow.difference_calibration as D
    import tests.test_learners_shadow_auto as A
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP
    from learners.shadow.hyperparameters import IdentifiabilityWarning

    rows = {make.__name__: (make, h, T) for make, h, T in A.SYSTEMS + A.UNTUNED + B.UNTUNED}
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=sorted(rows), required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--orders", type=int, nargs="+", default=[4, 2])
    ap.add_argument("--folds", type=int, default=None,
                    help="this many folds for the model's calibration and here (this process only: FOLD_BUDGET lifted; "
                         "a diagnostic of the fold count, which the budget holds at 2 for n = 6 with 200 trajectories)")
    args = ap.parse_args(argv)
    if args.folds is not None:
        D.CALIBRATION_FOLDS, D.FOLD_BUDGET = args.folds, 10**9
    make, h, T = rows[args.system]
    system = make()
    warnings.simplefilter("ignore", IdentifiabilityWarning)
    c0 = time.process_time()
    m = InverseModifiedLagrangianGP(h, progress=False).fit(snapshots(system, h, T, 5, seed=args.seed))
    print(f"{args.system} seed {args.seed} (degree {m.kernel_degree}); scales: "
          + ", ".join(f"{k} {c.scale:.4g}" for k, c in m.calibration.items()), flush=True)
    x, xr = D._pairs(m, torch.Generator().manual_seed(m.seed))
    q, v = A.held_out_states(system, 40)
    xh = m._standard_state(q[1:], v[1:]).detach()
    sets = {"pairs": (x, xr), "mixed": _mixed(m, x, xr),
            "held": (xh, m._standard_state(q[:1], v[:1]).detach().expand_as(xh).contiguous())}
    data_q = m._to_standard(m.snapshots).reshape(-1, m.n)
    for name, (a, b) in sets.items():
        print(f"{name}: {I._where(m, system, a, b, data_q)}")
    gps, subsets = I._folds(m)
    for N in args.orders:
        s_use = None
        for name, (a, b) in sets.items():
            text, innov = _row(m, system, gps, subsets, N, a, b, s_use)
            s_use = s_use or innov  # the pairs' scale: the one the model uses
            print(f"N = {N} {name}: {text}", flush=True)
    print(f"total {time.process_time() - c0:.0f} s cpu")


if __name__ == "__main__":
    main()
