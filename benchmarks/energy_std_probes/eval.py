import os, sys, math, torch
sys.path.insert(0, 'benchmarks'); sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tests.test_learners_shadow_auto as A
from learners import InverseModifiedLagrangianGP
from learners.shadow import difference_calibration as DC
from systems_ import systems, OUT
def mle(z2, u):
    # z2 ~ exp(a + b u) chi2_1: minimise sum(a + b u + z2 exp(-a - b u))
    p = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    with torch.no_grad(): p[0] = math.log(float(z2.mean()))
    opt = torch.optim.LBFGS([p], max_iter=200, line_search_fn="strong_wolfe")
    def cl():
        opt.zero_grad(); e = p[0] + p[1] * u; l = (e + z2 * torch.exp(-e)).mean(); l.backward(); return l
    opt.step(cl)
    return p.detach()
for arg in sys.argv[1:]:
    name, seed = arg.split(":")
    m = InverseModifiedLagrangianGP.load(f"{OUT}/{name}_{seed}.pt")
    system = systems[name][0]()
    n = m.n
    px, pr = DC.data_pairs(m); P = px.shape[0]
    d, w = DC.difference_innovations(m)
    pair = torch.arange(P).repeat(d.numel() // P)
    ok = torch.isfinite(w) & (w > 0); d, w, pair = d[ok], w[ok], pair[ok]
    z2 = d * d / w
    s_now = m.calibration["energy_differences"].scale
    q, v = A.held_out_states(system, 40)
    x = m._standard_state(q, v)
    H = torch.load(f"{OUT}/probe2_{name}_{seed}.pt")["held-out"]
    mean0, var0 = H[0][0], H[1][0][0]
    true = (system.energy(q[1:], v[1:]) - system.energy(q[:1], v[:1])).detach()
    a = float((mean0 * true).sum() / (true * true).sum()); r2 = (mean0 - a * true) ** 2 / var0
    out = [f"{name} s{seed}: need {float(r2.mean()):.4g}, now {s_now:.4g} rmsz {math.sqrt(float(r2.mean())/s_now):.2f}"]
    for feat in ("v2", "v", "x2"):
        f = {"v2": lambda y: y[:, n:].pow(2).sum(1), "v": lambda y: y[:, n:].pow(2).sum(1).sqrt(), "x2": lambda y: y.pow(2).sum(1)}[feat]
        up = torch.maximum(f(px), f(pr))
        uh = torch.maximum(f(x[1:]), f(x[:1]).expand(40))
        ab = mle(z2, up[pair])
        s_h = torch.exp(ab[0] + ab[1] * uh)
        out.append(f"{feat}: b {float(ab[1]):.3g}, s at held-out median {float(s_h.median()):.4g} (pairs' u {float(up.min()):.2f}-{float(up.max()):.2f}, held-out {float(uh.min()):.2f}-{float(uh.max()):.2f}) rmsz {math.sqrt(float((r2 / s_h).mean())):.2f} 2sig {float(((r2 / s_h) <= 4).double().mean()):.2f}")
    print(" | ".join(out), flush=True)
