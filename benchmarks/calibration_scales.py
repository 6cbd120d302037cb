"""The energy calibration's scales against what held-out energy differences ask for (issue 23, branch id-cal).

One system of tests/test_learners_shadow_auto.py (its data: seed 0, h = 0.2, 5 steps), one kernel, library defaults
otherwise. Prints ``model.calibration``'s scales, the scale that 40 held-out energy differences to a reference state
(after the best fit of scale) ask for (``scale_for`` on their errors, with the model's GP variance and truncation
term), and the RMS z and fraction within 2 sigma of those differences (N = 2, 4) and of the velocities along a
held-out trajectory under two rules, in the same run: the largest of the DEL, conservation and innovations scales
(this branch's, with the rounding guard) for every quantity (before) and each quantity on its own scale (now:
``energy`` the innovations', ``velocities`` the conservation one, at least DEL); for the energy also with the whole first omitted term in the std
(before Session 7, branch id-trunc: now its part affine in the energy is left out at ``n >= 3``,
learners/shadow/truncation.py). Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/calibration_scales.py --system duffing3 --kernel auto
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/calibration_scales.py --system henon3 --kernel auto   # untuned

(the systems of benchmarks/identification_acceptance.py's UNTUNED list too: no test uses them).
"""

from __future__ import annotations

import argparse
import time
import warnings


def _stats(z) -> str:
    return f"{float(z.pow(2).mean().sqrt()):.2f}, {float((z.abs() <= 2).double().mean()):.3f}"


def main(argv=None) -> None:
    import torch

    import benchmarks.identification_acceptance as B
    import tests.test_learners_shadow_auto as A
    from integrators import reference_flow
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP
    from learners.shadow.calibration import scale_for
    from learners.shadow.hyperparameters import IdentifiabilityWarning

    rows = {make.__name__: (make, h, T) for make, h, T in A.SYSTEMS + A.UNTUNED + B.UNTUNED}
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=sorted(rows), required=True)
    ap.add_argument("--kernel", default="rbf")
    ap.add_argument("--traj", type=int, default=None, help="trajectories (default: the acceptance test's)")
    args = ap.parse_args(argv)
    make, h, T = rows[args.system]
    system = make()
    warnings.simplefilter("ignore", IdentifiabilityWarning)
    t = time.process_time()
    m = InverseModifiedLagrangianGP(h, progress=False, kernel=args.kernel).fit(snapshots(system, h, args.traj or T, 5, seed=0))
    S = {k: c.scale for k, c in m.calibration.items()}
    print(f"{args.system}, kernel {args.kernel}, {args.traj or T} trajectories, fit {time.process_time() - t:.0f} s cpu, "
          f"mechanical degree {m.kernel_degree}; scales: " + ", ".join(f"{k} {v:.4g}" for k, v in S.items()))
    before = max(S.values())
    now = S.get("energy_differences", S.get("energy", S["del"]))
    q, v = A.held_out_states(system, 40)
    true = (system.energy(q[1:], v[1:]) - system.energy(q[:1], v[:1])).detach()
    for N in (2, 4):
        mean, sd = m.energy(N, return_std=True, reference=(q[0], v[0]))(q[1:], v[1:])
        _, sd_gp = m.energy(N, return_std=True, reference=(q[0], v[0]), truncation=False)(q[1:], v[1:])
        s = float((mean * true).sum() / (true * true).sum())
        err = mean - s * true
        raw, trunc2 = sd_gp ** 2 / now, (sd ** 2 - sd_gp ** 2).clamp_min(0)
        whole = m._next_energy(N, q[1:], v[1:], (q[0], v[0])) - mean  # the first omitted term with its unit part
        print(f"N = {N}: relative error {float(err.norm() / (s * true).norm()):.3g}; the differences ask for "
              f"{scale_for(err, raw, trunc2.sqrt()):.4g}; RMS z, 2 sigma: before {_stats(err / (before * raw + trunc2).sqrt())}"
              f" | now {_stats(err / sd)} | the whole omitted term (before Session 7) "
              f"{_stats(err / (sd_gp ** 2 + whole ** 2).sqrt())}")
    _, (q0, v0) = snapshots(system, h, 1, 1, seed=5, return_initial=True)
    ref = reference_flow(system, q0, v0, h * torch.arange(21, dtype=torch.float64))
    vel, sd = m.velocities(ref.q, 2, return_std=True)
    _, sd_gp = m.velocities(ref.q, 2, return_std=True, truncation=False)
    raw, trunc2 = sd_gp ** 2 / S.get("energy", S["del"]), (sd ** 2 - sd_gp ** 2).clamp_min(0)
    print(f"velocities: RMS z, 2 sigma: before {_stats(((vel - ref.v) / (before * raw + trunc2).sqrt())[1:-1])} | "
          f"now {_stats(((vel - ref.v) / sd)[1:-1])}")


if __name__ == "__main__":
    main()
