"""Where the default fit's velocity std (``model.velocities(q, N, return_std=True)``) fails, and whether a positions-only
calibration can see it (issue 23; Session 25, branch velstd15; a diagnostic, the library untouched).

Parts (``--part``):

* ``decompose`` -- along the runner's held-out trajectory (``tests.test_learners_shadow_auto.velocity_z``: 20 steps of
  the exact flow, seed 5) the error ``e`` of the order-``N`` velocities, the GP part of the std (``truncation=False``),
  the first omitted term ``|v[N+2] - v[N]|``, the error of ``v[N+2]`` itself, per coordinate; then the coverage if the
  GP variance were multiplied by ``s`` (what a scale-only velocity calibration could reach).
* ``data`` -- the same z-scores against the truth on trajectories drawn as the data are (``--traj`` x 5 steps, seed
  11), interior snapshots, binned by the relative speed of the first two bodies; and the positions-only reference a
  held-back velocity calibration would need: the derivative of the degree-5 interpolant of the 6 snapshots.
* ``innovations`` -- refits, then the change of the posterior mean velocity at the held-back snapshots of the
  calibration when the held-back functionals are added (the final GP against the one conditioned on the training
  functionals only), over the sd of that change (``var_tr - var_full``): the positions-only check of the GP part.

Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/velocity_std_probe.py --system gravity_unequal4 --part decompose
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/velocity_std_probe.py --system gravity_unequal4 --part data

``decompose`` and ``data`` fit once and keep the model in ``--cache`` (default /tmp/velocity_std_probe_S_seed.pt).
"""

from __future__ import annotations

import argparse
import math
import os
import warnings

import torch


def _systems():
    import identification_acceptance as IA
    import tests.test_learners_shadow_auto as A
    from _systems12 import NEW12
    from _systems23 import NEW23
    from _systems24 import NEW24
    from _systems24b import NEW24B

    rows = A.SYSTEMS + A.UNTUNED + IA.UNTUNED + NEW12 + NEW23 + NEW24 + NEW24B
    return {make.__name__: (make, h, T) for make, h, T in rows}


def _fit(make, h, T, seed):
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP

    return InverseModifiedLagrangianGP(h, progress=False).fit(snapshots(make(), h, T, 5, seed=seed))


def _model(args, make, h, T):
    from learners import InverseModifiedLagrangianGP

    path = args.cache or f"/tmp/velocity_std_probe_{args.system}_{args.seed}.pt"
    if os.path.exists(path):
        return InverseModifiedLagrangianGP.load(path)
    m = _fit(make, h, T, args.seed)
    m.save(path)  # runs the pending calibrations: the loaded model reports the same stds
    return m


def _rms(x, dim=None):
    return x.pow(2).mean().sqrt().item() if dim is None else [round(v, 2) for v in x.pow(2).mean(dim).sqrt().tolist()]


def decompose(m, system, h, N):
    from integrators import reference_flow
    from integrators.data import snapshots

    _, (q0, v0) = snapshots(system, h, 1, 1, seed=5, return_initial=True)
    ref = reference_flow(system, q0, v0, h * torch.arange(21, dtype=torch.float64))
    inner = slice(1, -1)
    v, sd = (x.detach()[inner].reshape(-1, m.n) for x in m.velocities(ref.q, N, return_std=True))
    _, gp = (x.detach()[inner].reshape(-1, m.n) for x in m.velocities(ref.q, N, return_std=True, truncation=False))
    vn = m.velocities(ref.q, N + 2).detach()[inner].reshape(-1, m.n)
    vr = ref.v[inner].reshape(-1, m.n)
    e, tr = v - vr, (vn - v).abs()
    z = e / sd
    print(f"N = {N}: within 2 sigma {(z.abs() <= 2).double().mean().item():.2f}, RMS z {_rms(z):.2f}, per coordinate "
          f"{_rms(z, 0)}; GP part alone: RMS z per coordinate {_rms(e / gp, 0)}")
    print(f"  RMS error per coordinate: v[N] {[f'{x:.2e}' for x in e.pow(2).mean(0).sqrt().tolist()]}, v[N+2] "
          f"{[f'{x:.2e}' for x in (vn - vr).pow(2).mean(0).sqrt().tolist()]}; median |v[N+2]-v[N]| / GP sd "
          f"{[round(x, 2) for x in (tr / gp).median(0).values.tolist()]}")
    for s in (1, 1.5, 2, 4, 9, 16):
        zs = e / (s * gp ** 2 + tr ** 2).sqrt()
        print(f"  GP variance x {s}: within 2 sigma {(zs.abs() <= 2).double().mean().item():.2f}, RMS z {_rms(zs):.2f}")
    for j in range(e.shape[0]):
        print(f"  state {j + 1:2d}: e {[f'{x:+.1e}' for x in e[j].tolist()]} GP sd {[f'{x:.1e}' for x in gp[j].tolist()]} "
              f"|v[N+2]-v[N]| {[f'{x:.1e}' for x in tr[j].tolist()]} z {[round(x, 1) for x in z[j].tolist()]}")


def _derivative_weights(nodes, at):
    """Weights of the derivative at ``at`` of the polynomial through ``nodes`` (unit spacing): Lagrange's basis."""
    w = []
    for i, xi in enumerate(nodes):
        others = [x for k, x in enumerate(nodes) if k != i]
        den = math.prod(xi - x for x in others)
        w.append(sum(math.prod(at - x for k2, x in enumerate(others) if k2 != k) for k in range(len(others))) / den)
    return w


def data_like(m, system, h, trajectories):
    from integrators import reference_flow
    from integrators.data import snapshots

    _, (q0, v0) = snapshots(system, h, trajectories, 5, seed=11, return_initial=True)
    ref = reference_flow(system, q0, v0, h * torch.arange(6, dtype=torch.float64))
    rows = [1, 2, 3, 4]
    interp = torch.stack([sum(w * ref.q[i] for i, w in enumerate(_derivative_weights(range(6), j))) / h for j in rows])
    v, sd = (x.detach()[rows] for x in m.velocities(ref.q, 2, return_std=True))
    vt = ref.v[rows]
    z = ((v - vt) / sd).reshape(-1, m.n)
    print(f"{trajectories} trajectories x 4 interior snapshots: within 2 sigma {(z.abs() <= 2).double().mean().item():.3f}, "
          f"RMS z {_rms(z):.2f}; RMS error: model {_rms(v - vt):.2e}, degree-5 interpolant {_rms(interp - vt):.2e}, "
          f"model sd {_rms(sd):.2e}")
    if m.n == 4:  # two bodies in the plane: bins of the relative speed
        speed = (vt[..., :2] - vt[..., 2:]).norm(dim=-1).reshape(-1)
        for lo, hi in ((0, 1), (1, 1.6), (1.6, 10)):
            k = (speed >= lo) & (speed < hi)
            print(f"  relative speed [{lo}, {hi}): {int(k.sum())} states, within 2 sigma "
                  f"{(z[k].abs() <= 2).double().mean().item():.2f}, RMS z per coordinate {_rms(z[k], 0)}")


def innovations(make, h, T, seed):
    from learners.shadow import calibration as C

    m = _fit(make, h, T, seed)
    F_tr, S = m._pending_calibration
    qs = m._from_standard(S[:C.CALIBRATION_TRAJECTORIES]).transpose(0, 1)
    v_full, sd_full = (x.detach() for x in m.velocities(qs, 2, return_std=True, truncation=False))
    final, caches = m.gp, (m._recovered, m._jet)
    gp = m._make_gp(2 * m.n)
    gp.load_state_dict(final.state_dict())
    for p in gp.parameters():
        p.requires_grad_(False)
    with torch.no_grad():
        gp.condition(C._final_targets(m, F_tr))
    m.gp, m._recovered, m._jet = gp, {}, None
    try:
        v_tr, sd_tr = (x.detach() for x in m.velocities(qs, 2, return_std=True, truncation=False))
    finally:
        m.gp, (m._recovered, m._jet) = final, caches
    d, var = (v_tr - v_full).reshape(-1), (sd_tr ** 2 - sd_full ** 2).reshape(-1)
    ok = torch.isfinite(d) & (var > 0)
    z = d[ok] / var[ok].sqrt()
    print(f"innovations of the velocities at {int(ok.sum())} held-back values: RMS z {_rms(z):.2f}, within 2 sigma "
          f"{(z.abs() <= 2).double().mean().item():.3f}; the calibration rule's scale "
          f"{C.scale_for(d[ok], var[ok], torch.zeros_like(d[ok])):.3g}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--system", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--part", choices=("decompose", "data", "innovations"), default="decompose")
    ap.add_argument("--orders", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--traj", type=int, default=40, help="trajectories of the data part")
    ap.add_argument("--cache", default=None)
    args = ap.parse_args(argv)
    make, h, T = _systems()[args.system]
    warnings.simplefilter("ignore")
    if args.part == "innovations":
        return innovations(make, h, T, args.seed)
    m = _model(args, make, h, T)
    if args.part == "data":
        return data_like(m, make(), h, args.traj)
    for N in args.orders:
        decompose(m, make(), h, N)


if __name__ == "__main__":
    main()
