"""Issue 23 item 3 for the element kernel: the same positions fitted in two units of time (step h and c h, c = 10 by
default) must give the same energies up to the unit. In the second unit velocities are v / c and energies E / c^2, so
with d_u the energy differences of the held-out states (tests/test_learners_shadow_auto.held_out_states) to their
reference, evaluated at (q, v / u): d_1 = a d_c with a = c^2 if the fit is unit-free (up to its normalisation's scale,
so the best a is reported too). Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/element_time_unit.py --system two_body_morse4
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/element_time_unit.py --system two_body_morse4 --kernel default
"""

from __future__ import annotations

import argparse
import time


def main(argv=None) -> None:
    import identification_acceptance as I
    import tests.test_learners_shadow_auto as A
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP

    systems = {make.__name__: (make, h, T) for make, h, T in A.SYSTEMS + I.UNTUNED}
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=sorted(I.ELEMENT_STRUCTURES), required=True)
    ap.add_argument("--kernel", choices=["element", "default"], default="element")
    ap.add_argument("--factor", type=float, default=10.0, help="the second unit of time, c (h -> c h)")
    args = ap.parse_args(argv)
    make, h, T = systems[args.system]
    system = make()
    data = snapshots(system, h, T, 5, seed=0)
    q, v = A.held_out_states(system, 40)
    true = (system.energy(q[1:], v[1:]) - system.energy(q[:1], v[:1])).detach()
    diffs = {}
    for c in (1.0, args.factor):
        ns = argparse.Namespace(system=args.system, kernel="element", element_degree=None, no_correction=False)
        kw = {} if args.kernel == "default" else {"kernel": I._element_kernel(ns)}
        t = time.process_time()
        m = InverseModifiedLagrangianGP(c * h, progress=False, **kw).fit(data)
        cpu = time.process_time() - t
        for N in (2, 4):
            H = m.energy(N)
            d = (H(q[1:], v[1:] / c) - H(q[:1], v[:1] / c)).detach()
            s = float((d * true).sum() / (true * true).sum())
            diffs[c, N] = d
            rel = float((d - s * true).norm() / (s * true).norm())
            print(f"unit {c:g} (h = {c * h:g}): fit {cpu:.0f} cpu s, N = {N}: dE {rel:.3g}, "
                  f"scale against the true energies {s:.4g}", flush=True)
        print(f"    hyperparameters {m.hyperparameters}", flush=True)
    for N in (2, 4):
        d1, dc = diffs[1.0, N], diffs[args.factor, N]
        a = float((d1 * dc).sum() / (dc * dc).sum())
        best, unit = (float((d1 - x * dc).norm() / d1.norm()) for x in (a, args.factor**2))
        print(f"N = {N}: best a {a:.6g} (c^2 = {args.factor**2:g}); |d_1 - a d_c| / |d_1| {best:.3g}; with a = c^2: {unit:.3g}")


if __name__ == "__main__":
    main()
