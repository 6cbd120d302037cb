r"""The error of the normalisation's relative scales as a std term (issue 23 item 2, session 20, branch gauge10; a
diagnostic on a saved fit, not a test).

A fit with the whole-matrix normalisation takes the relative scales of separately conserved parts from the conditions
:math:`F(L_{inv}) = \partial_v^2 L_{inv}(x_0) - \kappa\,\partial_q^2 L_{inv}(x_0) = c\,I` at one point :math:`x_0`
(learners/shadow/normalisation.py). Here, on a saved model (benchmarks/correction_scale_calibration.py ``--save``):

* the sensitivities :math:`g_{bk} = \partial \Delta E_b / \partial y_k` of the 40 held-out energy differences to each
  matrix target :math:`y_k` (exact for the mean's linear part: the mean is linear in the targets, :math:`\mathrm{mod}_N`
  adds terms of order :math:`h^2` in the move; finite differences of ``--eps`` relative through
  :meth:`~learners.shadow.gp.FunctionalGP.retarget`, the factor reused);
* at ``--states`` data states :math:`x_j` (the DEL rows' midpoint states), the traceless part :math:`G_0(x_j)` of
  :math:`\partial_v^2\mathrm{mod}_4(\bar L)(x_j)` -- the condition the matrix stands for, met by the exact
  :math:`L_{inv}` to :math:`O(h^6)` at any state where the masses are equal (learners/shadow/mass_target.py) -- so
  that :math:`\delta y_j = -G_0(x_j)` is the move of the targets at :math:`x_0` that would make the fit's gauge the
  one read at :math:`x_j` where the response is global (a separate part's scale);
* per state :math:`b`, :math:`u_{jb} = \sum_k g_{bk}\,\delta y_{jk}`, its part along the mean differences (a common
  scale, which the acceptance fits out) removed, and the term :math:`t_b = (\mathrm{mean}_j u_{jb}^2)^{1/2}`;
* the held-out RMS z and fraction within 2 sigma under the model's std, and under :math:`(\sigma_b^2 + t_b^2)^{1/2}`.

Where the data fix the parts' relative scales (no separate parts) the targets' traceless moves are answered locally
and :math:`g` is small, whatever :math:`G_0(x_j)` (large where the masses vary with :math:`q`). Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 nice -n 5 python3 benchmarks/gauge_spread.py /tmp/cal9-morse4.pt --system two_body_morse4
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def _traceless_hessian(rec, x, n):
    """The traceless part of the symmetrised :math:`\\partial_v^2` rec at the standardised state ``x`` (n, n)."""
    import torch

    q0, v0 = x[:n].detach()[None], x[n:].detach()
    with torch.enable_grad():
        G = torch.autograd.functional.hessian(lambda v: rec(q0, v[None]).sum(), v0)
    G = 0.5 * (G + G.T)
    return G - torch.trace(G) / n * torch.eye(n, dtype=torch.float64)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", help="a saved model, or 'fit' for a default fit of --system here")
    ap.add_argument("--system", default="two_body_morse4")
    ap.add_argument("--orders", type=int, nargs="+", default=[2])
    ap.add_argument("--states", type=int, default=40)
    ap.add_argument("--eps", type=float, default=1e-3)
    args = ap.parse_args(argv)
    root = Path(__file__).resolve().parent
    sys.path[:0] = [str(root), str(root.parent)]
    import torch

    import tests.test_learners_shadow_auto as A
    from _acceptance_fit import acceptance_system
    from learners import InverseModifiedLagrangianGP
    from learners.shadow import mass_target as MT

    system, h, T = acceptance_system(args.system)
    if args.path == "fit":  # a default fit on the acceptance data (seed 0, 5 steps), not saved
        import warnings

        from integrators.data import snapshots

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = InverseModifiedLagrangianGP(h, progress=False).fit(snapshots(system, h, T, 5, seed=0))
    else:
        m = InverseModifiedLagrangianGP.load(args.path)
    gp, n = m.gp, m.n
    F = gp.train_functionals
    base = F.count - m._norm_count
    F_norm = F.subset(torch.arange(base, F.count))
    found = MT.matrix_conditions(F_norm)
    if found is None:
        print("no whole-matrix conditions with a curvature term: nothing to measure")
        return
    owners, ii, jj, x0 = found
    y0 = F.targets.clone()
    c = MT._diagonal_scale(y0[base:], F_norm)  # the whole matrix's or the trace's (matrix="diagonal") c
    q, v = A.held_out_states(system, 40)
    dE = (system.energy(q, v)[1:] - system.energy(q, v)[:1]).detach()
    rms = lambda t: float(t.pow(2).mean().sqrt())  # noqa: E731

    def means(N):
        m._recovered, m._jet = {}, None
        return m.energy(N, reference=(q[0], v[0]))(q[1:], v[1:]).detach()

    t0 = time.process_time()
    rec = MT._recovered(m)
    pts = F.atoms[1].points
    pick = torch.linspace(0, pts.shape[0] - 1, args.states).round().long()
    moves = torch.stack([-_traceless_hessian(rec, pts[p], n)[ii, jj] for p in pick])  # (K, owners)
    rel = lambda t: [round(float(x), 6) for x in t / c]  # noqa: E731
    print(f"{args.system}: c {c:.4g}; moves at {args.states} data states (relative to c): RMS per entry "
          f"{rel(moves.pow(2).mean(0).sqrt())}, mean {rel(moves.mean(0))} ({time.process_time() - t0:.0f} s CPU)", flush=True)
    for N in args.orders:
        t0 = time.process_time()
        mean, std = m.energy(N, return_std=True, reference=(q[0], v[0]))(q[1:], v[1:])
        mean, std = mean.detach(), std.detach()
        t_std = time.process_time() - t0
        g = []
        t0 = time.process_time()
        for k in owners.tolist():
            y = y0.clone()
            y[base + k] += args.eps * c
            gp.retarget(y)
            g.append((means(N) - mean) / (args.eps * c))
        gp.retarget(y0)
        m._recovered, m._jet = {}, None
        g = torch.stack(g, 1)  # (states, owners)
        t_g = time.process_time() - t0
        u = moves @ g.T  # (K, states)
        u = u - (u @ mean / mean.dot(mean))[:, None] * mean  # the common scale's part removed
        term = u.pow(2).mean(0).sqrt()
        s = float((mean * dE).sum() / dE.pow(2).sum())
        e = mean - s * dE
        for name, sd in (("model std", std), ("with the term", (std ** 2 + term ** 2).sqrt())):
            z = e / sd
            print(f"  N = {N} {name}: RMS z {rms(z):.2f}, within 2σ {float((z.abs() <= 2).double().mean()):.3f}; RMS std "
                  f"{rms(sd):.3g}", flush=True)
        print(f"  N = {N}: RMS err {rms(e):.3g}, RMS term {rms(term):.3g}, RMS |g| per owner "
              f"{[f'{float(x):.3g}' for x in g.pow(2).mean(0).sqrt()]}; std {t_std:.0f} s CPU, g {t_g:.0f} s CPU", flush=True)


if __name__ == "__main__":
    main()
