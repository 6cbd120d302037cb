"""The energy std's two changes of issue 23 session 11 (branch cal), before and after, on one fit: a diagnostic.

``energy(N, return_std=True, reference=...)``'s std is the GP part times the ``"energy_differences"`` scale and a
truncation term in quadrature. Session 11 changed both (learners/shadow/two_scale.py: the final posterior's scale of
a two-scale fit of the innovations where the data reject one scale; learners/shadow/truncation.py ``field_term``: the
truncation term as a random field over the data's states, not pointwise). On one fit (library defaults, the
acceptance's data and 40 held-out differences, tests/test_learners_shadow_auto.py) this prints, for N = 2 and 4, the
RMS z and the fraction within 2 sigma under each combination: ``one/point`` (main before the session), ``two/point``
(the scale change only), ``one/field`` (the truncation change only) and ``two/field`` (this branch), with the
two-scale fit (a, b, rho and its bootstrap interval, the one scale s, used or not) and the relative energy error
(the mean is not changed). Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 nice -n 5 python3 benchmarks/calibration_field.py --system duffing3 [--seed 1]
"""

from __future__ import annotations

import argparse
import time
import warnings


def _pointwise(m, N, q, v, ref, mean):
    """The truncation term as ``energy`` took it before this session (n >= 3: pointwise, less its unit part)."""
    from learners.shadow.truncation import terms_and_unit_fit, unit_free

    (c, _), d = terms_and_unit_fit(m, N, m._states_with_ref(q, v, ref))
    return unit_free(d[:-1] - d[-1], mean, c, 0.0)


def _rows(m, system, N, two):
    """RMS z and 2-sigma fraction of the 40 held-out differences under the four combinations (module docstring)."""
    import tests.test_learners_shadow_auto as A

    q, v = A.held_out_states(system, 40)
    true = (system.energy(q[1:], v[1:]) - system.energy(q[:1], v[:1])).detach()
    ref = (q[0], v[0])
    mean, sd_gp = m.energy(N, return_std=True, reference=ref, truncation=False)(q[1:], v[1:])
    mean, sd_gp = mean.detach(), sd_gp.detach()
    c = float((mean * true).sum() / true.pow(2).sum())
    err = mean - c * true
    used = m.calibration["energy_differences"].scale
    point = _pointwise(m, N, q[1:], v[1:], ref, mean)
    field = m._truncation_term(N, q[1:], v[1:], ref, mean)
    # the one scale, and the two-scale fit's a whether the fit uses it or not (its rule: learners/shadow/two_scale.py)
    scales = {"one": two["s"] if two else used, "two": two["a"] if two else used}
    out = []
    for sname, s in scales.items():
        for tname, t in (("point", point), ("field", field)):
            z = err / (sd_gp ** 2 * s / used + t ** 2).sqrt()
            out.append(f"{sname}/{tname} {float(z.pow(2).mean().sqrt()):.2f}, {100 * float((z.abs() <= 2).double().mean()):.1f}%")
    rel = float(err.norm() / (c * true).norm())
    tg = float((point.pow(2).mean() / sd_gp.pow(2).mean()).sqrt())
    return f"N = {N}: dE {rel:.3g} | " + " | ".join(out) + f" | trunc(point)/gp {tg:.3g}, field {float(field[0]):.3g}"


def main(argv=None) -> None:
    import benchmarks.identification_acceptance as B
    import tests.test_learners_shadow_auto as A
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP
    from learners.shadow.hyperparameters import IdentifiabilityWarning

    rows = {make.__name__: (make, h, T) for make, h, T in A.SYSTEMS + A.UNTUNED + B.UNTUNED}
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=sorted(rows), required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    make, h, T = rows[args.system]
    system = make()
    warnings.simplefilter("ignore", IdentifiabilityWarning)
    c0 = time.process_time()
    m = InverseModifiedLagrangianGP(h, progress=False).fit(snapshots(system, h, T, 5, seed=args.seed))
    cal = m.calibration
    two = m.history.get("energy_differences_two_scales")
    print(f"{args.system} seed {args.seed} (degree {m.kernel_degree}); scales: "
          + ", ".join(f"{k} {c.scale:.4g}" for k, c in cal.items()), flush=True)
    if two:
        print("two scales: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in two.items()))
    for N in (2, 4):
        print(_rows(m, system, N, two), flush=True)
    print(f"total {time.process_time() - c0:.0f} s cpu")


if __name__ == "__main__":
    main()
