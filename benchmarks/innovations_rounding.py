"""Are the distant-difference innovations resolved? The worst-case rounding guard against the rounding actually present
(issue 23, session 15, branch morsecal; a diagnostic, not a test).

One fit (library defaults, the acceptance data, seed 0, 5 steps); the calibration's folds plus the final posterior
re-factorised with its functionals in another order (the same GP in exact arithmetic). For the calibration's pairs
and the 40 held-out differences, at each order: the raw variance ``v``, the guard's bound (solve + factorisation terms)
and its factorisation part over ``v``, the move of ``v`` and of the mean under re-factorisation, ``(v_k - v)/v``, how many
are positive, the innovations' scale over all pairs with ``v_k > v`` (no guard), and on the held-out set the scale the
true errors ask for (``truth``, with the truncation term as ``energy`` forms it; the acceptance's best scale). The
variances are *not* floored to their bounds here (``floored`` replaced in this process), the DEL scale printed is the
model's. Usage (argv: system, h, trajectories, orders)::

    PYTHONPATH=. OMP_NUM_THREADS=1 nice -n 5 python3 benchmarks/innovations_rounding.py two_body_morse4 0.25 150 2 4
    PYTHONPATH=. OMP_NUM_THREADS=1 nice -n 5 python3 benchmarks/innovations_rounding.py two_body4 0.2 150 2
"""
import sys, time, warnings, torch
sys.path.insert(0, 'benchmarks')
import identification_acceptance as B
import innovations_diagnosis as I
import tests.test_learners_shadow_auto as A
from integrators.data import snapshots
from learners import InverseModifiedLagrangianGP
import learners.shadow.difference_calibration as D
from learners.shadow.calibration import scale_for
warnings.simplefilter("ignore")
name = sys.argv[1]; h = float(sys.argv[2]); T = int(sys.argv[3])
system = getattr(B, name)() if hasattr(B, name) else getattr(A, name)()
c0 = time.process_time()
m = InverseModifiedLagrangianGP(h, progress=False).fit(snapshots(system, h, T, 5, seed=0))
F = m.gp.train_functionals
print(name, "kept", m.history.get("structure_kept"), "fit", round(time.process_time() - c0), "count", F.count,
      "del", m.gp.variance_scale, flush=True)
rec = {}
fb = D.factorisation_bound
D.factorisation_bound = lambda R, V: rec.setdefault("fact", []).append(fb(R, V)) or rec["fact"][-1]
D.floored = lambda cov, bound: (rec.setdefault("res", []).append(bound[:, 0]), cov)[1]
gps, subsets = I._folds(m)
perm = torch.randperm(F.count, generator=torch.Generator().manual_seed(3))
gps.append(D._conditioned(m, F.subset(perm))); subsets.append(perm)
x, xr = D.data_pairs(m)
q, v = A.held_out_states(system, 40)
xh = m._standard_state(q[1:], v[1:]).detach()
sets = {"pairs": (x, xr), "held": (xh, m._standard_state(q[:1], v[:1]).detach().expand_as(xh).contiguous())}
Q = lambda t: " ".join(f"{float(a):.3g}" for a in torch.quantile(t, torch.tensor([0.1, 0.5, 0.9], dtype=t.dtype)))
for N in tuple(int(a) for a in sys.argv[4:]) or (2, 4):
    for nm, (a, b) in sets.items():
        rec.clear()
        mean, var, bound = I._evaluate(m, gps, subsets, N, a, b)
        v0, vp = var[0], var[-1]
        fact = torch.stack(rec["fact"]).reshape(len(gps), -1) if len(rec["fact"]) == len(gps) else None
        print(f"N={N} {nm}: v [{Q(v0)}] bound/v [{Q(bound[0] / v0)}]"
              + (f" fact/v [{Q(fact[0] / v0)}]" if fact is not None else "")
              + f" |v_perm - v|/v [{Q((vp - v0).abs() / v0)}]"
              + f" |m_perm - m|/sqrt(v) [{Q((mean[-1] - mean[0]).abs() / v0.sqrt())}]", flush=True)
        dz, w = mean[0] - mean[1:-1], var[1:-1] - v0
        ok = w > 0
        zero = torch.zeros(int(ok.sum()), dtype=w.dtype)
        print(f"   (v_k - v)/v [{Q((w / v0).reshape(-1))}] positive {int(ok.sum())}/{ok.numel()}; "
              f"innov scale (w>0) {scale_for(dz[ok], w[ok], zero):.4g}; "
              f"(v_k - v)/|v_perm - v| [{Q((w / (vp - v0).abs()).reshape(-1))}]", flush=True)
        if nm == "held":
            true = I._true_differences(m, system, a, b)
            trunc = I._truncation(m, N, a, b)
            c = float((mean[0] * true).sum() / true.pow(2).sum())
            err = mean[0] - c * true
            ratio = float(trunc.pow(2).mean().sqrt() / (m.gp.variance_scale * v0).mean().sqrt())
            print(f"   truth scale {scale_for(err, v0, trunc):.4g}, "
                  f"truth without trunc {scale_for(err, v0, torch.zeros_like(v0)):.4g}; "
                  f"RMS trunc / RMS (del std) {ratio:.3g}", flush=True)
print("cpu", round(time.process_time() - c0))
