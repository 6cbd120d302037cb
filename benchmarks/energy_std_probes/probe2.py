"""Two levels of removal: s1 (one fold out), s2 (two folds out); beta estimate; at held-out states and data pairs."""
import os, sys, time, torch
sys.path.insert(0, 'benchmarks'); sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tests.test_learners_shadow_auto as A
from learners import InverseModifiedLagrangianGP
from learners.shadow import difference_calibration as DC
from learners.shadow.calibration import scale_for
from learners.shadow.uncertainty import LinearisedQuantity
from systems_ import systems, OUT
name, seed = sys.argv[1], int(sys.argv[2])
c = time.process_time()
m = InverseModifiedLagrangianGP.load(f"{OUT}/{name}_{seed}.pt")
system = systems[name][0]()
print("calibration", {k: round(v.scale, 4) for k, v in m.calibration.items()})
q, v = A.held_out_states(system, 40)
true = (system.energy(q[1:], v[1:]) - system.energy(q[:1], v[:1])).detach()
x = m._standard_state(q[1:], v[1:]); xr = m._standard_state(q[0], v[0]).expand_as(x).contiguous()
px, pr = DC.data_pairs(m)
final = m.gp; F = final.train_functionals
groups = DC.fold_groups(m, F.count); T = int(groups.max()) + 1
K = max(2, min(DC.CALIBRATION_FOLDS, T, DC.FOLD_BUDGET // F.count))
if len(sys.argv) > 3: K = int(sys.argv[3])
rest = torch.arange(groups.numel(), F.count)
gps, subsets = [final], [torch.arange(F.count)]
for k in range(K):
    subsets.append(torch.cat([torch.nonzero(groups % K != k).flatten(), rest]))
    gps.append(DC._conditioned(m, F.subset(subsets[-1])))
for k in range(K):
    subsets.append(torch.cat([torch.nonzero((groups % K != k) & (groups % K != (k + 1) % K)).flatten(), rest]))
    gps.append(DC._conditioned(m, F.subset(subsets[-1])))
out = {}
for tag, (xa, xb) in {"held-out": (x, xr), "data pairs": (px, pr)}.items():
    G = LinearisedQuantity(m._quantity("energy", 2), xa, 1, m._jet_order("energy", 2))
    rows = DC._raw_variances(gps, subsets, G, xb)
    means = [DC._mean_differences(m, gp, xa, xb, 2) for gp in gps]
    out[tag] = (means, rows)
    v0 = rows[0][0]
    share = DC._factorisation_share(m, gps[1], G, xb, rows[:K + 1]); print(tag, 'share', m.history.get('innovation_factorisation_share'))
    if tag == "held-out":
        for j in range(len(gps)):
            a = float((means[j] * true).sum() / (true * true).sum()); r = means[j] - a * true
            print(f"  posterior {j}: truth asks mean z2 {float((r*r/rows[j][0]).mean()):.4g}  median var ratio to final {float((rows[j][0]/v0).median()):.3g}")
    for k in range(K):
        j=k+1; vk=rows[j][0]; ok=(vk-v0 > rows[0][1]+share*rows[0][2]+rows[j][1]+share*rows[j][2]); d=(means[0]-means[j])[ok]; w=(vk-v0)[ok]
        print(f'  {tag} fold {k}: n {int(ok.sum())} mean z2 {float((d*d/w).mean()):.4g} median z2/.455 {float((d*d/w).median()/0.455):.4g}')
    lv = []
    for lev in (1, 2):
        D, V, VK = [], [], []
        for k in range(K):
            j = k + 1 + (lev - 1) * K
            vk = rows[j][0]; guard = rows[0][1] + share * rows[0][2] + rows[j][1] + share * rows[j][2]
            ok = (vk - v0 > guard)
            D.append((means[0] - means[j])[ok]); V.append(v0[ok]); VK.append(vk[ok])
        lv.append((torch.cat(D), torch.cat(V), torch.cat(VK)))
    def s_of(beta, d, vv, vk):
        w = vv.pow(1 - beta) * (vk.pow(beta) - vv.pow(beta)) / beta if False else vv * ((vk / vv).pow(beta) - 1)
        return scale_for(d, w, torch.zeros_like(w))
    for beta in (0.5, 1.0, 1.5, 2.0, 2.5, 3.0):
        if min(lv[0][0].numel(), lv[1][0].numel()) < 5: print(tag, 'too few', lv[0][0].numel(), lv[1][0].numel()); break
        s1, s2 = s_of(beta, *lv[0]), s_of(beta, *lv[1])
        print(f"{tag}: beta {beta}: s1 {s1:.4g} s2 {s2:.4g} ratio {s2/s1:.3f}  (n {lv[0][0].numel()}, {lv[1][0].numel()}) mean z2 {float((lv[0][0]**2/(lv[0][1]*((lv[0][2]/lv[0][1]).pow(beta)-1))).mean()):.4g} {float((lv[1][0]**2/(lv[1][1]*((lv[1][2]/lv[1][1]).pow(beta)-1))).mean()):.4g}")
print("cpu", time.process_time() - c)
torch.save(out, f"{OUT}/probe2_{name}_{seed}.pt")
