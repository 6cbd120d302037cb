"""The energy std of issue 23 taken apart at the acceptance's 40 held-out differences (Session 11, branch morse).

For one system of benchmarks/identification_acceptance.py (library defaults, its data and metric): the RMS error
after the best scale, the std's GP part and truncation term, the first omitted term ``d = H_rec[N'] - H_rec[N]``, the
unit slope ``c`` the model used and the one the reported states ask; and, from the exact inverse modified Lagrangian
(series order 6, ``identification_default._ExactInverse``; ~5 min CPU for n = 3, cached), the true error split into
its truncation part ``P(H_rec[N] of L_inv)`` and its GP part ``P(H_rec[N] of the model - that)`` (``P`` the best-scale
projection, linear). Usage::

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 nice -n 5 python3 benchmarks/std_decomposition.py morse_chain_unequal3 0
    PYTHONPATH=$PWD OMP_NUM_THREADS=1 nice -n 5 python3 benchmarks/std_decomposition.py toda4 0 noexact

The fit is saved under /tmp/bea-std-decomposition (reloaded on the next run: delete it after a code change).
"""

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
CACHE = "/tmp/bea-std-decomposition"


def rms(x):
    return float(x.pow(2).mean().sqrt())


def _model_and_system(name, seed):
    import identification_acceptance as IA
    import tests.test_learners_shadow_auto as A
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP

    systems = {mk.__name__: (mk, h, T) for mk, h, T in A.SYSTEMS + A.UNTUNED + IA.UNTUNED}
    make, h, T = systems[name]
    system, path = make(), f"{CACHE}/{name}_{seed}.pt"
    if os.path.exists(path):
        return InverseModifiedLagrangianGP.load(path), system, h
    m = InverseModifiedLagrangianGP(h, progress=False).fit(snapshots(system, h, T, 5, seed=seed))
    m.save(path)
    return m, system, h


def _exact(name, system, h, q, v):
    """Differences of H_rec[2], [4], [6] of the exact L_inv (series order 6) to the first state, cached."""
    from identification_default import _ExactInverse

    path = f"{CACHE}/{name}_exact.pt"
    if os.path.exists(path):
        return torch.load(path)
    ex, out = _ExactInverse(system, h, 6, system.n), {}
    for N in (2, 4, 6):
        H = ex.energy(N)
        out[N] = (H(q[1:], v[1:]) - H(q[:1], v[:1])).detach()
    torch.save(out, path)
    return out


def _order(m, N, q, v, true, exd):
    from learners.shadow.truncation import energy_unit_fit, jet_energies
    from learners.shadow.recovery import next_order

    P = lambda x: x - (x @ true) / (true @ true) * true  # noqa: E731 (the best-scale projection)
    ref = (q[0], v[0])
    mean, std = m.energy(N, return_std=True, reference=ref)(q[1:], v[1:])
    _, sgp = m.energy(N, return_std=True, reference=ref, truncation=False)(q[1:], v[1:])
    mean, std, sgp = mean.detach(), std.detach(), sgp.detach()
    H, Hn = jet_energies(m, N, m._states_with_ref(q[1:], v[1:], ref), (N, next_order(N, m.scheme)))
    d = (Hn - H).detach().reshape(-1)
    d = d[:-1] - d[-1]
    c_data, c_rep = energy_unit_fit(m, N)[0], float(d @ mean / (mean @ mean))
    e = P(mean)
    z, z_data = e / std, e / (sgp ** 2 + (d - c_data * mean) ** 2).sqrt()
    print(f"N={N}: rel {rms(e) / rms(true):.3g}, RMS error {rms(e):.3g}; std RMS {rms(std):.3g} = GP {rms(sgp):.3g} "
          f"+ truncation {rms((std ** 2 - sgp ** 2).clamp_min(0).sqrt()):.3g}; RMS z {rms(z):.2f}, within 2 sigma "
          f"{float((z.abs() <= 2).double().mean()):.2f}, max {float(z.abs().max()):.2f}")
    print(f"   d RMS {rms(d):.3g}, P(d) RMS {rms(P(d)):.3g}; unit slope c: data pairs {c_data:.3g}, reported states "
          f"{c_rep:.3g}; with the data pairs' c: RMS z {rms(z_data):.2f}, within 2 sigma "
          f"{float((z_data.abs() <= 2).double().mean()):.2f}")
    if exd:
        et, eg, dx = P(exd[N]), P(mean - exd[N]), exd[N + 2] - exd[N]
        corr = float(P(dx) @ et / (P(dx).norm() * et.norm()))
        print(f"   exact L_inv: error split RMS truncation {rms(et):.3g}, GP {rms(eg):.3g} (GP z RMS {rms(eg / sgp):.2f});"
              f" exact P(d) RMS {rms(P(dx)):.3g} (corr with the truncation error {corr:.3f}, "
              f"model's P(d) / exact {rms(P(d)) / rms(P(dx)):.3f})")


def main(argv):
    import tests.test_learners_shadow_auto as A

    os.makedirs(CACHE, exist_ok=True)
    name, seed = argv[0], int(argv[1])
    c0 = time.process_time()
    m, system, h = _model_and_system(name, seed)
    print(f"{name} seed {seed}: fit or load {time.process_time() - c0:.0f} s CPU", flush=True)
    q, v = A.held_out_states(system, 40)
    true = (system.energy(q[1:], v[1:]) - system.energy(q[:1], v[:1])).detach()
    exd = {} if "noexact" in argv else _exact(name, system, h, q, v)
    if exd:
        P = lambda x: x - (x @ true) / (true @ true) * true  # noqa: E731
        print(f"exact L_inv: dE2 {rms(P(exd[2])) / rms(true):.3g}, dE4 {rms(P(exd[4])) / rms(true):.3g}; RMS P(H4 - H2) "
              f"{rms(P(exd[4] - exd[2])):.3g}, P(H6 - H4) {rms(P(exd[6] - exd[4])):.3g}")
    for N in (2, 4):
        _order(m, N, q, v, true, exd)


if __name__ == "__main__":
    main(sys.argv[1:])
