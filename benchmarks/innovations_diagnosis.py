"""Why the distant-difference (innovations) calibration under-states the GP error of energy differences (issue 23,
session 8, branch id-cal8): a diagnostic, not a test.

The ``"energy_differences"`` scale (learners/shadow/difference_calibration.py) is what the innovations
``(m - m_k) / sqrt(v_k - v)`` ask for: how far removing a fold of trajectories moves the posterior mean of
``H_rec[2]`` differences between pairs of data states. Here, on one system and kernel, the same fold posteriors are
evaluated on two sets of differences -- the calibration's own pairs of data states and the acceptance's 40 held-out
differences to a reference (tests/test_learners_shadow_auto.py's held_out_states) -- and on each set two scales are
printed side by side:

* ``innovations``: what ``(m - m_k) / sqrt(v_k - v)`` asks for (the estimator, moved to that set of states);
* ``truth (final)``: what the final posterior's true errors ``(m - c dH) / sqrt(v)`` ask for (``c`` the energy unit,
  fitted on the 40 held-out differences, used for both sets), with the truncation term in quadrature as ``energy``
  takes it;
* ``truth (folds)``: the same for the fold posteriors, ``(m_k - c dH) / sqrt(v_k)``: the quantity whose variance the
  innovations estimate if the GP's form were right.

The innovations' rounding guard here is the worst case (solve bounds plus the whole factorisation term), not the
library's (which scales the factorisation term by an estimated share where the worst case drops innovations,
learners/shadow/difference_calibration.py).

If innovations and truth agree on the pairs but not on the held-out states, the pairs sample the wrong region; if
truth asks for more than the innovations on the pairs too, the error is common to all folds (fold removal cannot see
it). Also printed: the spread of the innovations' scale over a bootstrap of folds, and where the two sets lie (true
energies, distance of positions to the nearest data position, size of the differences), and how much of the final
posterior's errors three candidate shapes explain (least squares on the pairs, then out of sample on the held-out
differences with the pairs' coefficients): each part's own energy and its square (a relabelling of nearly decoupled
parts), the quartic-in-velocity terms :math:`v_i^4, V_i^{(4)} v_i^4` (the :math:`h^4` terms of :math:`L_{inv}` a
kernel of degree 2 in :math:`v` cannot hold), and the directions in which the normalisation's targets move the
posterior mean (skipped with ``--no-normalisation``: one re-conditioning per target). Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/innovations_diagnosis.py --system pendula3 --kernel auto
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/innovations_diagnosis.py --system pendula3 --no-normalisation
"""

from __future__ import annotations

import argparse
import time
import warnings


def _folds(m):
    """The final GP and the fold posteriors with their functional subsets, as difference_innovations builds them."""
    import torch

    import learners.shadow.difference_calibration as D

    F_all = m.gp.train_functionals
    groups = D.fold_groups(m, F_all.count)
    T = int(groups.max()) + 1
    folds = max(2, min(D.CALIBRATION_FOLDS, T, D.FOLD_BUDGET // max(F_all.count, 1)))
    rest = torch.arange(groups.numel(), F_all.count)
    gps, subsets = [m.gp], [torch.arange(F_all.count)]
    for k in range(folds):
        subsets.append(torch.cat([torch.nonzero(groups % folds != k).flatten(), rest]))
        gps.append(D._conditioned(m, F_all.subset(subsets[-1])))
    return gps, subsets


def _truncation(m, N, x, xr):
    """The truncation term of ``energy``'s std for the differences ``x - xr`` (standardised states), in the GP's
    energy units, as ``energy(N, reference=...)`` forms it (the unit part left out at n >= 3)."""
    import bea
    from learners.shadow.truncation import energy_unit_fit, unit_free

    n = m.n
    q, v = m._from_standard(x[:, :n]), m._vector_from_standard(x[:, n:])
    qr, vr = m._from_standard(xr[:, :n]), m._vector_from_standard(xr[:, n:])
    H = bea.energy(m.recovered_lagrangian(N))
    mean = (H(q, v) - H(qr, vr)).detach()
    d = (m._next_energy(N, q, v) - m._next_energy(N, qr, vr)) - mean
    if n >= 3:
        c, _ = energy_unit_fit(m, N)
        d = unit_free(d, mean, c, 0.0)
    return d / m._speed ** 2


def _true_differences(m, system, x, xr):
    n = m.n
    E = lambda s: system.energy(m._from_standard(s[:, :n]), m._vector_from_standard(s[:, n:])).detach()  # noqa: E731
    return E(x) - E(xr)


def _evaluate(m, gps, subsets, N, x, xr):
    """Means (G, B) and raw variances with rounding bounds of ``H_rec[N]`` differences under every posterior."""
    import torch

    import learners.shadow.difference_calibration as D
    from learners.shadow.uncertainty import LinearisedQuantity

    G = LinearisedQuantity(m._quantity("energy", N), x, 1, m._jet_order("energy", N))
    var = D._raw_variances(gps, subsets, G, xr)
    mean = torch.stack([D._mean_differences(m, gp, x, xr, N) for gp in gps])
    return mean, torch.stack([vb[0] for vb in var]), torch.stack([vb[1] + vb[2] for vb in var])  # worst-case guard


def _scales(mean, var, bound, err_final, trunc, gen):
    """Innovations' scale (pooled, rounding-guarded as the estimator does), its bootstrap over folds (10/50/90%),
    and the truth scales of the final and fold posteriors."""
    import torch

    from learners.shadow.calibration import scale_for

    dz, w = mean[0] - mean[1:], var[1:] - var[0]
    keep = w > bound[0] + bound[1:]
    zero = torch.zeros_like(w[0])
    innov = scale_for(dz[keep], w[keep], zero[None].expand_as(w)[keep])
    K = dz.shape[0]
    boot = []
    for _ in range(200):
        pick = torch.randint(K, (K,), generator=gen)
        ok = keep[pick]
        boot.append(scale_for(dz[pick][ok], w[pick][ok], torch.zeros(int(ok.sum()), dtype=w.dtype)))
    boot = torch.tensor(boot, dtype=torch.float64)
    final = scale_for(err_final[0], var[0], trunc)
    folds = scale_for((err_final[1:]).reshape(-1), var[1:].reshape(-1), trunc.repeat(K))
    return innov, torch.quantile(boot, torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)).tolist(), final, folds


def _normalisation_directions(m, N, sets):
    """Per set, (B, J): how the final posterior mean of the ``H_rec[N]`` differences moves per change of each
    normalisation target by the largest target (the functionals after the DEL residuals: the only non-zero targets; the mean is linear in
    them), by re-conditioning a copy of the final GP on targets moved one at a time."""
    import torch

    import learners.shadow.difference_calibration as D

    F_all = m.gp.train_functionals
    first = D.fold_groups(m, F_all.count).numel()
    base = {k: D._mean_differences(m, m.gp, a, b, N) for k, (a, b) in sets.items()}
    step = float(F_all.targets.abs().max())
    cols = {k: [] for k in sets}
    for j in range(first, F_all.count):
        F = F_all.subset(torch.arange(F_all.count))
        F.targets = F.targets.clone()
        F.targets[j] += step
        gp = D._conditioned(m, F)
        for k, (a, b) in sets.items():
            cols[k].append(D._mean_differences(m, gp, a, b, N) - base[k])  # per change of the largest target
    return {k: torch.stack(c, 1) for k, c in cols.items()}


def _explained(err_p, D_p, err_h, D_h):
    """Fractions of the errors' sum of squares explained by the directions: on the pairs (fit there), on the
    held-out differences with the pairs' coefficients (out of sample), and on the held-out fitted on themselves."""
    import torch

    def fit(e, D):
        return torch.linalg.lstsq(D, e[:, None], rcond=None).solution[:, 0]

    r2 = lambda e, pred: 1 - float((e - pred).pow(2).sum() / e.pow(2).sum())  # noqa: E731
    a = fit(err_p, D_p)
    return r2(err_p, D_p @ a), r2(err_h, D_h @ a), r2(err_h, D_h @ fit(err_h, D_h)), a


def _part_energies(m, system, x):
    """(B, 2n): each coordinate's own energy :math:`H_i = v_i^2/2 + V(q_i e_i) - V(0)` at the standardised states and
    its square -- what nearly decoupled parts conserve one by one, so that a relabelling of each (a flat direction of
    the motions, which the coupling alone breaks) passes every positions check."""
    import torch

    n = m.n
    q, v = m._from_standard(x[:, :n]), m._vector_from_standard(x[:, n:])
    zero = torch.zeros(1, n, dtype=q.dtype)
    E0 = system.energy(zero, zero).detach()
    H = torch.stack([v[:, i] ** 2 / 2 + system.energy(q[:, i:i + 1] * torch.eye(n, dtype=q.dtype)[i], torch.zeros_like(q)).detach()
                     - E0 for i in range(n)], 1)
    return torch.cat([H, H ** 2], 1)


def _quartic_velocity_terms(m, system, x):
    r"""(B, 2n): :math:`v_i^4` and :math:`V_i^{(4)}(q_i)\,v_i^4` at the standardised states (data units; :math:`V_i`
    the potential along coordinate :math:`i`, by autograd): the shape of the :math:`h^4` terms of a midpoint
    :math:`L_{inv}` of :math:`\tfrac12|v|^2 - V` that are quartic in the velocities, which a kernel of degree 2 in
    :math:`v` cannot hold."""
    import torch

    n = m.n
    q, v = m._from_standard(x[:, :n]), m._vector_from_standard(x[:, n:])
    cols = []
    for i in range(n):
        s = q[:, i].detach().clone().requires_grad_(True)
        f = system.energy(s[:, None] * torch.eye(n, dtype=q.dtype)[i], torch.zeros_like(q)).sum()
        for _ in range(4):
            (g,) = torch.autograd.grad(f, s, create_graph=True, allow_unused=True)
            if g is None:  # a polynomial of lower degree: the derivative vanishes
                g = torch.zeros_like(s)
                break
            f = g.sum()
        cols.append(g.detach())
    return torch.cat([v ** 4, torch.stack(cols, 1) * v ** 4], 1).detach()


def _where(m, system, x, xr, data_q):
    """Median true energy of the states, median distance of their positions to the nearest data position
    (standardised), median |dH| and median standardised distance |x - x_ref|."""
    import torch

    n = m.n
    E = system.energy(m._from_standard(x[:, :n]), m._vector_from_standard(x[:, n:])).detach()
    dist = torch.cdist(x[:, :n], data_q).min(1).values
    dH = _true_differences(m, system, x, xr).abs()
    med = lambda t: float(t.median())  # noqa: E731
    return (f"E median {med(E):.3f} (10-90% {float(E.quantile(0.1)):.3f}-{float(E.quantile(0.9)):.3f}), "
            f"q to data {med(dist):.3f} (90% {float(dist.quantile(0.9)):.3f}), |dH| median {med(dH):.3f}, "
            f"|x - x_ref| median {med((x - xr).norm(dim=1)):.3f}, |v| median {med(x[:, n:].norm(dim=1)):.3f}")


def _order_report(m, system, gps, subsets, sets, N, normalisation=True) -> None:
    """The scales on both sets at order ``N``, and the part of the final errors along the normalisation's directions
    (with the held-out differences' scale once that part, fitted on the pairs, is taken out)."""
    import torch

    from learners.shadow.calibration import scale_for

    res = {name: _evaluate(m, gps, subsets, N, a, b) for name, (a, b) in sets.items()}
    true = {name: _true_differences(m, system, a, b) for name, (a, b) in sets.items()}
    mh = res["held-out (40)"][0][0]
    c = float((mh * true["held-out (40)"]).sum() / true["held-out (40)"].pow(2).sum())
    print(f"N = {N}: energy unit (GP units per true unit, from the held-out) {c:.6g}")
    trunc = {}
    for name, (a, b) in sets.items():
        mean, var, bound = res[name]
        err = mean - c * true[name]
        trunc[name] = _truncation(m, N, a, b)
        innov, boot, final, folds = _scales(mean, var, bound, err, trunc[name], torch.Generator().manual_seed(1))
        cc = float((mean[0] * true[name]).sum() / true[name].pow(2).sum())
        print(f"  {name}: innovations {innov:.4g} (fold bootstrap 10/50/90% "
              f"{boot[0]:.3g}/{boot[1]:.3g}/{boot[2]:.3g}) | truth (final) {final:.4g} | truth (folds) {folds:.4g}"
              f" | own unit {cc:.6g}; RMS err/sqrt(v) final {float((err[0] ** 2 / var[0]).mean().sqrt()):.3g}, "
              f"RMS trunc/sqrt(v) {float((trunc[name] ** 2 / var[0]).mean().sqrt()):.3g}", flush=True)
    P, H = "pairs (data)", "held-out (40)"
    e = {name: res[name][0][0] - c * true[name] for name in sets}
    parts = {k: _part_energies(m, system, a) - _part_energies(m, system, b) for k, (a, b) in sets.items()}
    ins, out, own, a = _explained(e[P], parts[P], e[H], parts[H])
    print(f"  the final errors explained by the parts' energies and their squares: pairs {ins:.3f} (fit there), "
          f"held-out {out:.3f} (pairs' coefficients), held-out {own:.3f} (own fit); the held-out differences less "
          f"that part ask for {scale_for(e[H] - parts[H] @ a, res[H][1][0], trunc[H]):.4g}", flush=True)
    quartic = {k: _quartic_velocity_terms(m, system, a) - _quartic_velocity_terms(m, system, b) for k, (a, b) in sets.items()}
    ins, out, own, a = _explained(e[P], quartic[P], e[H], quartic[H])
    print(f"  the final errors explained by v_i^4 and V_i''''(q_i) v_i^4: pairs {ins:.3f} (fit there), held-out {out:.3f}"
          f" (pairs' coefficients), held-out {own:.3f} (own fit); coefficients in true energy units "
          f"{[f'{float(t) / c:.3g}' for t in a]}; the held-out differences less that part ask for "
          f"{scale_for(e[H] - quartic[H] @ a, res[H][1][0], trunc[H]):.4g}", flush=True)
    if not normalisation:
        return
    dirs = _normalisation_directions(m, N, sets)
    ins, out, own, a = _explained(e[P], dirs[P], e[H], dirs[H])
    rest = scale_for(e[H] - dirs[H] @ a, res[H][1][0], trunc[H])
    print(f"  the final errors explained by the {dirs[P].shape[1]} normalisation targets' directions: "
          f"pairs {ins:.3f} (fit there), held-out {out:.3f} (pairs' coefficients), held-out {own:.3f} (own fit); "
          f"the pairs' target changes relative to the largest target {[f'{float(t):.2g}' for t in a]}; the held-out "
          f"differences less that part (pairs' coefficients) ask for {rest:.4g}", flush=True)


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
    ap.add_argument("--system", choices=sorted(rows), required=True)
    ap.add_argument("--kernel", default="rbf")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--orders", type=int, nargs="+", default=[4])
    ap.add_argument("--no-normalisation", action="store_true", help="skip the normalisation targets' directions")
    args = ap.parse_args(argv)
    make, h, T = rows[args.system]
    system = make()
    warnings.simplefilter("ignore", IdentifiabilityWarning)
    c0 = time.process_time()
    m = InverseModifiedLagrangianGP(h, progress=False, kernel=args.kernel).fit(snapshots(system, h, T, 5, seed=args.seed))
    print(f"{args.system} seed {args.seed}, kernel {args.kernel} (degree {m.kernel_degree}); scales: "
          + ", ".join(f"{k} {c.scale:.4g}" for k, c in m.calibration.items()), flush=True)
    x, xr = D._pairs(m, torch.Generator().manual_seed(m.seed))
    q, v = A.held_out_states(system, 40)
    xh = m._standard_state(q[1:], v[1:]).detach()
    xhr = m._standard_state(q[:1], v[:1]).detach().expand_as(xh).contiguous()
    data_q = m._to_standard(m.snapshots).reshape(-1, m.n)
    gps, subsets = _folds(m)
    sets = {"pairs (data)": (x, xr), "held-out (40)": (xh, xhr)}
    for name, (a, b) in sets.items():
        print(f"{name}: {_where(m, system, a, b, data_q)}")
    for N in args.orders:
        _order_report(m, system, gps, subsets, sets, N, not args.no_normalisation)
    print(f"total {time.process_time() - c0:.0f} s cpu")


if __name__ == "__main__":
    main()
