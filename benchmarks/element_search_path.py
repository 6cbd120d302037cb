"""The element kernel's hyperparameter search, step by step (session 13, branch elsearch; issue 27): every positions-
objective evaluation of the fit (stage, scales, value), then the full-data objective at given tied points, and the fit's
energy differences -- or, with ``--force``, a fit at a given tied point instead of the search (the search skipped).
Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/element_search_path.py --system two_body_lj6 [--seed 0]
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/element_search_path.py --system two_body_lj6 --probe 1,4 2,8
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/element_search_path.py --system two_body_lj6 --force 2,8

Points are ``ell_q,ell_v[,correction]`` in the fit's standardised units, relative to ``scale0`` (the search's
base scale, :data:`~learners.shadow.position_search.SCALES` x it is the tied grid).
"""

from __future__ import annotations

import argparse
import math
import time
import warnings


def _point(text: str):
    vals = [float(x) for x in text.split(",")]
    return vals + [1e-4] * (3 - len(vals))


def main(argv=None) -> None:
    import identification_acceptance as I
    import tests.test_learners_shadow_auto as A
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP
    import learners.shadow.element_search as E
    import learners.shadow.hyperparameter_search as H
    from learners.shadow.functionals import Functionals

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", default="two_body_lj6", choices=sorted(I.ELEMENT_STRUCTURES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--probe", nargs="*", default=[], help="tied points scored with all training functionals after the search")
    ap.add_argument("--force", default=None, help="fit at this tied point instead of searching")
    args = ap.parse_args(argv)
    systems = {make.__name__: (make, h, T) for make, h, T in A.SYSTEMS + A.UNTUNED + I.UNTUNED}
    make, h, T = systems[args.system]
    system = make()
    data = snapshots(system, h, T, 5, seed=args.seed)
    ns = argparse.Namespace(system=args.system, kernel="element", element_degree=None, no_correction=False)
    log, original_objective, original_search = [], H.objective, E.search_elements

    def logged_objective(gp, kind, F, *rest):
        f = original_objective(gp, kind, F, *rest)

        def evaluate(theta):
            t = time.process_time()
            val = f(theta)
            log.append((F.count, [round(math.exp(float(x)), 4) for x in theta[:-1]], val, time.process_time() - t))
            return val
        return evaluate

    def search(model, F_data, groups, F_tr, F_va, P_va, F_norm, positions, scale0, F_norm_alt=None):
        print(f"scale0 {scale0:.4f} (standardised), unit {model._unit:.4f}, speed {model._speed:.4f}", flush=True)
        kernel = model.gp.kernel.base_kernel
        if args.force is None:
            F_all, theta, norm = original_search(model, F_data, groups, F_tr, F_va, P_va, F_norm, positions, scale0,
                                                 F_norm_alt)
        else:
            norm = F_norm_alt if F_norm_alt is not None else F_norm
            F_all = Functionals.cat([F_data.subset(H.split_functionals(groups, F_data.count)[0]), norm])
            lq, lv, c = _point(args.force)
            theta = E.element_theta(kernel, lq * scale0, lv * scale0, c)
        evaluate = original_objective(model.gp, "positions", F_all, F_va, Functionals.cat([F_va, P_va]), positions)
        for p in args.probe + ([args.force] if args.force else []):
            lq, lv, c = _point(p)
            print(f"probe {p}: held-out {evaluate(E.element_theta(kernel, lq * scale0, lv * scale0, c)):.4f}", flush=True)
        print(f"kept theta {[round(math.exp(float(x)), 4) for x in theta[:-1]]}: held-out {evaluate(theta):.4f}", flush=True)
        return F_all, theta, norm

    H.objective, E.search_elements = logged_objective, search
    t = time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = InverseModifiedLagrangianGP(h, progress=False, kernel=I._element_kernel(ns)).fit(data)
    for w in caught:
        print(f"warning ({type(w.message).__name__}): {w.message}")
    print(f"fit {time.process_time() - t:.0f} CPU s; names {model.gp.kernel.base_kernel.parameter_names()}")
    for count, scales, val, cpu in log:
        print(f"  functionals {count:5d}  value {val:9.4f}  scales {scales}  ({cpu:.1f} CPU s)")
    for key in ("grid_alt", "basins", "search", "correction_scan", "search_untied", "objective", "degenerate_scales"):
        print(f"{key}: {model.history.get(key)}")
    print(f"hyperparameters {model.hyperparameters}")
    rel = [A.energy_differences(model, system, N, return_std=False)[0] for N in (2, 4)]
    print(f"{args.system} seed {args.seed} force {args.force}: dE2 {rel[0]:.3g} dE4 {rel[1]:.3g}", flush=True)


if __name__ == "__main__":
    main()
