import os, sys, torch
sys.path.insert(0, 'benchmarks'); sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tests.test_learners_shadow_auto as A
from learners import InverseModifiedLagrangianGP
from learners.shadow import difference_calibration as DC
from learners.shadow.calibration import scale_for
from systems_ import systems, OUT
for name in sys.argv[1:]:
    m = InverseModifiedLagrangianGP.load(f"{OUT}/{name}_0.pt")
    system = systems[name][0]()
    px, pr = DC.data_pairs(m)
    q, v = A.held_out_states(system, 40)
    x = m._standard_state(q, v)
    n = m.n
    def rad(z): return z[:, :n].pow(2).sum(1).sqrt(), z[:, n:].pow(2).sum(1).sqrt()
    hq, hv = rad(x)
    print(name, "held-out |q| median %.3f |v| median %.3f" % (hq.median(), hv.median()))
    aq, av = rad(px); bq, bv = rad(pr)
    print(name, "pairs |q| median %.3f |v| median %.3f" % (torch.cat([aq,bq]).median(), torch.cat([av,bv]).median()))
    means, rows = torch.load(f"{OUT}/probe2_{name}_0.pt")["data pairs"]
    K = (len(means) - 1) // 2
    v0 = rows[0][0]
    share = 1.0
    hist = m.history.get('innovation_factorisation_share')
    d, w = DC.difference_innovations(m)
    P = px.shape[0]
    pair = torch.arange(P).repeat(d.numel() // P)
    ok = torch.isfinite(w) & (w > 0)
    for label, key in (("max|v|", torch.maximum(av, bv)), ("max|q|", torch.maximum(aq, bq)), ("max|x|", torch.maximum((aq**2+av**2).sqrt(), (bq**2+bv**2).sqrt()))):
        order = key.argsort(); thirds = [order[:P//3], order[P//3:2*P//3], order[2*P//3:]]
        out = []
        for t in thirds:
            sel = ok & torch.isin(pair, t)
            out.append(f"{scale_for(d[sel], w[sel], torch.zeros_like(w[sel])):.4g} (n{int(sel.sum())}, key<= {float(key[t].max()):.2f})")
        print(name, label, " | ".join(out))
