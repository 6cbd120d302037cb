"""CPU cost of the truncation term of ``energy(N, return_std=True)`` at n >= 3, before and after Session 8 (branch
id-tcost), in the same run, on the same fitted model (issue 23).

"before" is the procedure of Session 7 (branch id-trunc, f38c0a6), reproduced here from the code it ran: the pairs'
states recomputed (velocities by Newton's method), ``H_rec[N]`` there by autograd through the training atoms, the next
order ``H_rec[N']`` by ``RecoveryMixin._next_energy`` (kept for n <= 2: autograd through the atoms with the RBF, the
mean's Taylor polynomial otherwise) at those 120 states and at the 40 query states. "after" is
``RecoveryMixin._truncation_term`` now: the calibration's pairs reused, both energies on one table of the mean's jet
(learners/shadow/taylor_jet.py) for the 120 + 41 states at first use, for the 41 at the second. The model is fitted
and calibrated first (the pairs then cached by the calibration, as after a user's ``fit`` and first std); every
other cache is cleared before each first use. Also printed: the largest relative difference of the two stds
(GP part and truncation term in quadrature) and of the two terms (relative to the largest term), and how far the
"before" term itself moves when only its rounding changes: a third of the states per autograd pass, or its
``H_rec[N]`` (the reported mean; the compiled closed-form jet where the RBF has one) by autograd through the atoms as
its ``H_rec[N']``. Each energy rounds the mean's atom sums, whose terms are far larger than the term, so no two
routes agree more closely than that; and the cost of the pairs themselves (before Session 8 paid again after
``load``, now saved with the model). One system of tests/test_learners_shadow_auto.py (seed 0, h = 0.2, 5 steps). Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/truncation_cost.py --system toda4 --kernel auto
"""

from __future__ import annotations

import argparse
import time
import warnings


def old_term(model, N, q, v, ref, mean):
    """The truncation term as Session 7 computed it (first use: with the unit fit)."""
    import torch

    import bea
    from learners.shadow.difference_calibration import _pairs
    from learners.shadow.truncation import affine_fit, unit_free

    key = ("old unit", N)
    if key not in model._recovered:
        x, x_ref = _pairs(model, torch.Generator().manual_seed(model.seed))
        x = torch.cat([x, x_ref])
        n = model.n
        qp, vp = model._from_standard(x[:, :n]), x[:, n:] * model._speed
        m = bea.energy(model.recovered_lagrangian(N))(qp, vp).detach()
        model._recovered[key] = affine_fit(model._next_energy(N, qp, vp) - m, m)
    c, _ = model._recovered[key]
    return unit_free(model._next_energy(N, q, v, ref) - mean, mean, c, 0.0)


def _rechunked(f):
    """``f()`` with a third of the states per autograd pass (and per pass on the mean's Taylor polynomial)."""
    from learners.shadow import recovery, uncertainty

    saved = recovery.AUTOGRAD_ENTRIES, uncertainty.MEAN_JET_ENTRIES
    recovery.AUTOGRAD_ENTRIES, uncertainty.MEAN_JET_ENTRIES = saved[0] // 3, saved[1] // 3
    try:
        return f()
    finally:
        recovery.AUTOGRAD_ENTRIES, uncertainty.MEAN_JET_ENTRIES = saved


def _cpu(f):
    t = time.process_time()
    out = f()
    return time.process_time() - t, out


def main(argv=None) -> None:
    import torch

    import bea
    import tests.test_learners_shadow_auto as A
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP
    from learners.shadow.difference_calibration import _pairs

    rows = {make.__name__: (make, h, T) for make, h, T in A.SYSTEMS + A.UNTUNED}
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=sorted(rows), required=True)
    ap.add_argument("--kernel", default="rbf")
    ap.add_argument("--orders", type=int, nargs="+", default=[2, 4])
    args = ap.parse_args(argv)
    make, h, T = rows[args.system]
    system = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit_s, m = _cpu(lambda: InverseModifiedLagrangianGP(h, progress=False, kernel=args.kernel).fit(
            snapshots(system, h, T, 5, seed=0)))
        cal_s, _ = _cpu(lambda: m.calibration)
    pairs_s, _ = _cpu(lambda: _pairs(m, torch.Generator().manual_seed(m.seed)))
    print(f"{args.system} (n = {m.n}, {T} trajectories), kernel {args.kernel} (mechanical degree {m.kernel_degree}): "
          f"fit {fit_s:.0f} s, calibration {cal_s:.0f} s, the pairs' states alone {pairs_s:.1f} s CPU")
    q, v = A.held_out_states(system, 40)
    ref = (q[0], v[0])
    print("| N | before: first, second use (s CPU) | after: first, second use | first-use ratio | after vs before: "
          "max rel. diff of std / of the term | before's own: rechunked / mean by autograd |")
    for N in args.orders:
        mean, sd_gp = m.energy(N, return_std=True, reference=ref, truncation=False)(q[1:], v[1:])
        keep = {k: val for k, val in m._recovered.items() if isinstance(k, tuple) and k[0] == "pairs"}
        times, terms = {}, {}
        for label, term in (("before", old_term), ("after", type(m)._truncation_term)):
            m._recovered, m._jet = dict(keep), None
            first, _ = _cpu(lambda: term(m, N, q[1:], v[1:], ref, mean))
            second, terms[label] = _cpu(lambda: term(m, N, q[1:], v[1:], ref, mean))
            times[label] = (first, second)
        terms["rechunked"] = _rechunked(lambda: old_term(m, N, q[1:], v[1:], ref, mean))
        H = bea.energy(m._in_data_units(m._recovered_std(N, jets=False)))
        mean_autograd = (H(q[1:], v[1:]) - H(q[:1], v[:1])).detach()
        terms["mean by autograd"] = old_term(m, N, q[1:], v[1:], ref, mean_autograd)
        std = {k: (sd_gp ** 2 + t ** 2).sqrt() for k, t in terms.items()}
        rel_std = float(((std["after"] - std["before"]).abs() / std["before"]).max())
        rel_term, spread, spread2 = (float((terms[k] - terms["before"]).abs().max() / terms["before"].abs().max())
                                     for k in ("after", "rechunked", "mean by autograd"))
        (b1, b2), (a1, a2) = times["before"], times["after"]
        print(f"| {N} | {b1:.1f}, {b2:.1f} | {a1:.1f}, {a2:.1f} | {b1 / a1:.1f} | {rel_std:.1e} / {rel_term:.1e} | {spread:.1e} / {spread2:.1e} |")


if __name__ == "__main__":
    main()
