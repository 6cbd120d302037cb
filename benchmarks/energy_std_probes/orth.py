import os, sys, torch
import tests.test_learners_shadow_auto as A
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from systems_ import OUT, systems  # noqa: E402
sys.path.insert(0, 'benchmarks'); sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
for arg in sys.argv[1:]:
    name, seed = arg.split(":")
    H = torch.load(f"{OUT}/probe2_{name}_{seed}.pt")["held-out"]
    means, rows = H
    s = systems[name][0](); q, v = A.held_out_states(s, 40)
    true = (s.energy(q[1:], v[1:]) - s.energy(q[:1], v[:1])).detach()
    a = float((means[0] * true).sum() / (true * true).sum())
    e = means[0] - a * true
    K = (len(means) - 1) // 2
    out = []
    for k in range(1, K + 1):
        d = means[0] - means[k]; ek = means[k] - a * true
        out.append(f"k{k}: |e|2 {float(e.pow(2).mean()):.2e} |d|2 {float(d.pow(2).mean()):.2e} |e_k|2 {float(ek.pow(2).mean()):.2e} corr(e,d) {float((e*d).sum()/(e.norm()*d.norm())):.2f}")
    print(name, seed, " | ".join(out))
