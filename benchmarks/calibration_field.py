"""Candidate changes to the energy std of issue 23 session 11 (branch cal), measured against the library's on one fit:
a diagnostic, not a test (none of them is adopted: benchmarks/RESULTS_identification.md, Session 11).

``energy(N, return_std=True, reference=...)``'s std is the GP part times the ``"energy_differences"`` scale (the
innovations' one scale) and the unit-free truncation term ``|r(x) - r(x_ref)|`` in quadrature. On one fit (library
defaults, the acceptance's data and 40 held-out differences, tests/test_learners_shadow_auto.py) this prints, for
N = 2 and 4, the RMS z and the fraction within 2 sigma of the held-out differences under each pair of

* GP scale: ``one`` (the library's) or ``two`` (the final posterior's ``a`` of the two-scale fit,
  benchmarks/_two_scale.py, whether its rule would use it or not);
* truncation term: ``point`` (the library's), ``field`` (the RMS of ``r(y) - r(x_ref)`` over the data states ``y`` of
  the calibration pairs: the term as a random field over the data's states), ``energy`` (the same over the
  ``round(sqrt(#y))`` data states nearest in ``H_rec[N]`` to the queried state: the field at the queried energy) or
  ``batch`` (the RMS of the pointwise term over the 40 queried states: the field where it is used),

with the two-scale fit (a, b, rho and its bootstrap interval, the one scale s, used or not) and the relative energy
error (no candidate changes the mean). Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 nice -n 5 python3 benchmarks/calibration_field.py --system duffing3 [--seed 1]
"""

from __future__ import annotations

import argparse
import math
import time
import warnings


def _rests(m, N, x):
    """The unit-free truncation term r (origin b included) and H_rec[N] at standardised states ``x`` (data units)."""
    from learners.shadow.recovery import next_order
    from learners.shadow.truncation import energy_unit_fit, jet_energies, unit_free

    c, b = energy_unit_fit(m, N)
    H, H_next = jet_energies(m, N, x, (N, next_order(N, m.scheme)))
    return unit_free(H_next - H, H, c, b), H


def _terms(m, N, q, v, ref, mean):
    """The four truncation terms (module docstring) of the differences of states ``q, v`` to ``ref``."""
    import torch

    from learners.shadow.difference_calibration import data_pairs
    from learners.shadow.truncation import terms_and_unit_fit, unit_free

    (c, _), d = terms_and_unit_fit(m, N, m._states_with_ref(q, v, ref))
    point = unit_free(d[:-1] - d[-1], mean, c, 0.0)  # as energy() takes it
    r_y, H_y = _rests(m, N, torch.cat(data_pairs(m)))
    r_x, H_x = _rests(m, N, m._states_with_ref(q, v, ref))
    r_ref, H_x = r_x[-1], H_x[:-1]
    field = (r_y - r_ref).pow(2).mean().sqrt().expand_as(point)
    k = round(math.sqrt(r_y.numel()))
    near = (H_x[:, None] - H_y[None]).abs().topk(k, dim=1, largest=False).indices  # (B, k)
    energy = (r_y[near] - r_ref).pow(2).mean(1).sqrt()
    batch = point.pow(2).mean().sqrt().expand_as(point)
    return {"point": point, "field": field, "energy": energy, "batch": batch}


def _rows(m, system, N, scales):
    """RMS z and 2-sigma fraction of the 40 held-out differences under each combination (module docstring)."""
    import tests.test_learners_shadow_auto as A

    q, v = A.held_out_states(system, 40)
    true = (system.energy(q[1:], v[1:]) - system.energy(q[:1], v[:1])).detach()
    ref = (q[0], v[0])
    mean, sd_gp = m.energy(N, return_std=True, reference=ref, truncation=False)(q[1:], v[1:])
    mean, sd_gp = mean.detach(), sd_gp.detach()
    c = float((mean * true).sum() / true.pow(2).sum())
    err = mean - c * true
    terms = _terms(m, N, q[1:], v[1:], ref, mean)
    used = m.calibration["energy_differences"].scale
    out = []
    for sname, s in scales.items():
        for tname, t in terms.items():
            z = err / (sd_gp ** 2 * s / used + t ** 2).sqrt()
            out.append(f"{sname}/{tname} {float(z.pow(2).mean().sqrt()):.2f}, {100 * float((z.abs() <= 2).double().mean()):.1f}%")
    rel = float(err.norm() / (c * true).norm())
    tg = float((terms["point"].pow(2).mean() / sd_gp.pow(2).mean()).sqrt())
    return f"N = {N}: dE {rel:.3g} | " + " | ".join(out) + f" | trunc(point)/gp {tg:.3g}"


def main(argv=None) -> None:
    import benchmarks._two_scale as S
    import benchmarks.identification_acceptance as B
    import learners.shadow.difference_calibration as D
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
    print(f"{args.system} seed {args.seed} (degree {m.kernel_degree}); scales: "
          + ", ".join(f"{k} {c.scale:.4g}" for k, c in cal.items()), flush=True)
    dz, vk, v, pair = D.innovation_variances(m)
    ok = dz.isfinite() & vk.isfinite() & (vk > v) & (v > 0)
    two = S.two_scales(dz[ok], vk[ok], v[ok], pair[ok], m.seed)
    print("two scales: " + ", ".join(f"{k} {x:.4g}" if isinstance(x, float) else f"{k} {x}" for k, x in two.as_dict().items())
          + f"; median v/v_k {float((v[ok] / vk[ok]).median()):.3f}, innovations {int(ok.sum())}", flush=True)
    used = cal["energy_differences"].scale
    for N in (2, 4):
        print(_rows(m, system, N, {"one": used, "two": two.a}), flush=True)
    print(f"total {time.process_time() - c0:.0f} s cpu")


if __name__ == "__main__":
    main()
