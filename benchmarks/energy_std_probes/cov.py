"""Posterior covariance of the 40 held-out differences (final GP, raw); the acceptance statistics' spread under a
calibrated std (errors ~ N(0, s Sigma), best scale fitted out as the acceptance does)."""
import os, sys, time, torch
sys.path.insert(0, 'benchmarks'); sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tests.test_learners_shadow_auto as A
from learners import InverseModifiedLagrangianGP
from learners.shadow import difference_calibration as DC
from learners.shadow.uncertainty import LinearisedQuantity
from systems_ import systems, OUT
for arg in sys.argv[1:]:
    c = time.process_time()
    name, seed = arg.split(":")
    m = InverseModifiedLagrangianGP.load(f"{OUT}/{name}_{seed}.pt")
    system = systems[name][0]()
    q, v = A.held_out_states(system, 40)
    x = m._standard_state(q, v)
    i, j = torch.triu_indices(41, 41, 1)
    G = LinearisedQuantity(m._quantity("energy", 2), x[i].contiguous(), 1, m._jet_order("energy", 2))
    V = torch.zeros(41, 41, dtype=torch.float64)
    V[i, j] = DC._raw_variances([m.gp], [torch.arange(m.gp.train_functionals.count)], G, x[j].contiguous())[0][0]
    V = V + V.T
    S = (V[1:, :1] + V[:1, 1:] - V[1:, 1:]) / 2  # Cov(H_i - H_0, H_j - H_0)
    true = (system.energy(q[1:], v[1:]) - system.energy(q[:1], v[:1])).detach()
    t = true / true.norm()
    P = torch.eye(40, dtype=torch.float64) - t[:, None] * t[None]
    d = S.diagonal().clamp_min(0).sqrt()
    C = P @ S @ P / d[:, None] / d[None]
    lam = torch.linalg.eigvalsh((C + C.T) / 2).clamp_min(0)
    g = torch.Generator().manual_seed(0)
    L = torch.linalg.cholesky(C + 1e-12 * torch.eye(40, dtype=torch.float64)) if False else None
    ev, U = torch.linalg.eigh((C + C.T) / 2)
    Z = torch.randn(20000, 40, generator=g, dtype=torch.float64) * ev.clamp_min(0).sqrt() @ U.T
    rms = Z.pow(2).mean(1).sqrt(); cov = (Z.abs() <= 2).double().mean(1)
    qs = torch.quantile(rms, torch.tensor([0.05, 0.5, 0.95], dtype=torch.float64))
    print(f"{name} s{seed}: diag(S) vs model var rel {float(((S.diagonal() - DC._raw_variances([m.gp],[torch.arange(m.gp.train_functionals.count)], LinearisedQuantity(m._quantity('energy', 2), x[1:].contiguous(), 1, m._jet_order('energy', 2)), x[:1].expand(40, -1).contiguous())[0][0]) / S.diagonal()).abs().max()):.2e}; "
          f"eigen shares top3 {[round(float(e), 3) for e in (lam.sort(descending=True).values[:3] / lam.sum())]}, eff. dof (sum l)^2/sum l^2 {float(lam.sum()**2 / lam.pow(2).sum()):.1f}; "
          f"calibrated RMS z 5/50/95%: {[round(float(a), 2) for a in qs]}, P(RMS z<0.5) {float((rms < 0.5).double().mean()):.3f}, "
          f"P(40/40 within 2s) {float((cov == 1).double().mean()):.3f}, P(<85%) {float((cov < 0.85).double().mean()):.3f}; cpu {time.process_time() - c:.0f}", flush=True)
    torch.save(dict(S=S, true=true), f"{OUT}/cov_{name}_{seed}.pt")
