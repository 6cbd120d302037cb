"""Is the too-narrow energy std of element-structure fits model misspecification? (issue 23 item 2, session 19, branch
cal9; a diagnostic, not a test.)

Hypothesis: the element prior makes :math:`L_{inv}` a sum of element energies plus a small full-dimensional correction
of scale :math:`s_c` (learners/shadow/element_kernel.py); the :math:`h^2, h^4` terms of :math:`L_{inv}` are not
element-additive, so if :math:`s_c` is too small the posterior is confidently wrong where the cross terms act.

One fit with the library defaults on the acceptance data (seed 0, 5 steps; ``--h`` another step), its search's result
recorded; then the same fit again with the search's result reused and only the correction's scale :math:`s_c`
replaced (everything after the search -- DEL calibration, final solve, normalisation targets, both energy
calibrations -- redone), for each ``--scales`` value (``0`` = the fitted value; 1e-8 is the correction off). Per
variant and order N: dE (relative error of the 40 held-out differences after the best scale), RMS z, fraction within
2 sigma, the ``energy_differences`` scale in use, the scale the held-out differences ask for (``held``:
:func:`~learners.shadow.calibration.scale_for` with the model's truncation term) and their ratio, the RMS calibrated GP
std, the RMS truncation term. Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 nice -n 5 python3 benchmarks/correction_scale_calibration.py --system two_body_morse4
    PYTHONPATH=. OMP_NUM_THREADS=1 nice -n 5 python3 benchmarks/correction_scale_calibration.py --system two_body4 \
        --scales 0 1e-1
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path


def _parts(system, A):
    """The 40 held-out states and their reference, and two sets made from them for two equal bodies in the plane: the
    centre of mass (and its velocity) of each state with the reference's relative coordinates (``com``), and the
    reference's centre with each state's relative coordinates (``rel``). Where the two separate (same quadratic trap,
    equal masses) the true differences of ``com`` are the centre's energy alone, of ``rel`` the relative motion's."""
    import torch

    q, v = A.held_out_states(system, 40)
    out = {"held": (q, v)}
    if system.n != 4:
        return out
    x = torch.cat([q, v], -1).reshape(-1, 2, 2, 2)  # (state, q/v, body, axis)
    com, rel = x.sum(2, keepdim=True) / 2, x[:, :, :1] - x[:, :, 1:]
    for name, (C, R) in {"com": (com, rel[:1].expand_as(rel)), "rel": (com[:1].expand_as(com), rel)}.items():
        y = torch.cat([C + R / 2, C - R / 2], 2).reshape(-1, 8)
        y[0] = x[0].reshape(-1)
        out[name] = (y[:, :4].contiguous(), y[:, 4:].contiguous())
    return out


def _rows(m, system, A, N):
    """One order's numbers (module docstring)."""
    lines = []
    c = None
    for name, (q, v) in _parts(system, A).items():
        line, c = _row(m, system, q, v, N, c)
        lines.append(f"{name} {line}")
    return "\n    ".join(lines)


def _row(m, system, q, v, N, c=None):
    """One set's numbers at order N; ``c``: the best scale to use (None: fitted on this set)."""
    from learners.shadow.calibration import scale_for

    true = (system.energy(q[1:], v[1:]) - system.energy(q[:1], v[:1])).detach()
    ref = (q[0], v[0])
    mean, std = m.energy(N, return_std=True, reference=ref)(q[1:], v[1:])
    _, gp = m.energy(N, return_std=True, reference=ref, truncation=False)(q[1:], v[1:])
    mean, std, gp = mean.detach(), std.detach(), gp.detach()
    c = float((mean * true).sum() / true.pow(2).sum()) if c is None else c
    err, trunc = mean - c * true, (std ** 2 - gp ** 2).clamp_min(0).sqrt()
    cal = m.calibration
    s_cal = (cal.get("energy_differences") or cal.get("energy") or cal["del"]).scale
    raw = gp ** 2 / s_cal
    held = scale_for(err, raw, trunc)
    z = err / std
    rms = lambda t: float(t.pow(2).mean().sqrt())  # noqa: E731
    return (f"N = {N}: dE {float(err.norm() / (c * true).norm()):.3g}, RMS z {rms(z):.2f}, 2σ "
            f"{float((z.abs() <= 2).double().mean()):.3f}, max |z| {float(z.abs().max()):.2f}; scale in use {s_cal:.4g} "
            f"({'energy_differences' if 'energy_differences' in cal else 'fallback'}), held {held:.4g} "
            f"(x{held / s_cal:.2f}); RMS gp std {rms(gp):.3g}, trunc {rms(trunc):.3g}, err {rms(err):.3g}, "
            f"true {rms(true):.3g}"), c


class _Recorder:
    """Wraps ``ElementHooks._search_positions``: the first call runs the search and keeps its result and chosen GP;
    later calls return it with the correction's scale replaced (``scale``; None: as searched)."""

    def __init__(self):
        from learners.shadow.element_search import ElementHooks

        self.original, self.kept, self.scale = ElementHooks._search_positions, None, None
        recorder = self

        def search(model, *args):
            if recorder.kept is None:
                out = recorder.original(model, *args)
                recorder.kept = (out, model.kernel_structure, dict(model.history))
                return out
            (F_all, theta, norm), spec, history = recorder.kept
            if spec is None:
                raise SystemExit("kernel='auto' kept no element structure: nothing to vary")
            model.gp, model.kernel_structure, model.kernel_degree = model._structure_gp(spec, F_all.dim), spec, None
            model.history.update(history)
            theta = theta.clone()
            names = model.gp.kernel.base_kernel.parameter_names()
            theta[names.index("correction:scale")] = math.log(recorder.scale) if recorder.scale else theta[
                names.index("correction:scale")]
            return F_all, theta, norm

        ElementHooks._search_positions = search


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", default="two_body_morse4")
    ap.add_argument("--h", type=float, default=None)
    ap.add_argument("--orders", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--scales", type=float, nargs="+", default=[0, 1e-8, 1e-2, 1e-1, 1.0])
    ap.add_argument("--save", default=None, help="save the fitted (first) model there")
    ap.add_argument("--rows-of-first", type=int, default=1, help="0: no rows for the fitted model (known already)")
    args = ap.parse_args(argv)
    if args.scales[0] != 0:  # the first fit runs the search (the fitted scale); only later ones are forced
        ap.error("--scales must start with 0 (the fitted model's own correction scale)")
    root = Path(__file__).resolve().parent
    sys.path[:0] = [str(root), str(root.parent)]
    import tests.test_learners_shadow_auto as A
    from _acceptance_fit import acceptance_system
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP

    system, h, T = acceptance_system(args.system, args.h)
    data = snapshots(system, h, T, 5, seed=0)
    rec = _Recorder()
    for s in args.scales:
        rec.scale = s or None
        t = time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = InverseModifiedLagrangianGP(h, progress=False).fit(data)
            fit_s = time.process_time() - t
            base = m.gp.kernel.base_kernel
            ls = dict(zip(base.parameter_names(), base.lengthscale.detach().reshape(-1).tolist()))
            print(f"--- {args.system} h {h}: s_c {ls.get('correction:scale', float('nan')):.3g} "
                  f"({'fitted' if not s else 'forced'}); fit {fit_s:.0f} s cpu; structure {m.kernel_structure}", flush=True)
            if args.save and not s:
                m.save(args.save)
            if not s:
                print(f"    scales {ls}; correction_scan (stage 2b, tied theta; 1e-4..1e-1) "
                      f"{m.history.get('correction_scan')}; objective {m.history.get('objective')}", flush=True)
            for N in args.orders if (s or args.rows_of_first) else ():
                print("    " + _rows(m, system, A, N), flush=True)
            print(f"    cpu {time.process_time() - t:.0f} s", flush=True)


if __name__ == "__main__":
    main()
