"""Issue 23 item 5's idea (a), measured, not adopted: the element search's stages 2-3 (tied refinement, correction scan,
untied search) on a share of the training trajectories, only the point they end at solved with all training
functionals. Fits the opt-in element kernel (the same fit as ``kernel="auto"``'s refinement of that structure) on one
acceptance system (seed 0, 5 steps); prints the fit's CPU, the stages' CPU on the share, the held-out value on the
share and with all training functionals (compare the full search's refined value: ``model.history["objective"]`` of
the default fit), the scales in data spreads and the energy differences N = 2, 4. Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/element_subset_refine.py --system fpu6 --share 0.5
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import torch

INFO: dict = {}


def _search(share: float):
    """search_elements with stages 2-3 on every ``1/share``-th training trajectory (and the normalisation)."""
    import learners.shadow.element_search as ES
    from learners.shadow.functionals import Functionals
    from learners.shadow.hyperparameter_search import objective, split_functionals
    from learners.shadow.position_search import REFINE_EVALUATIONS, refine

    def search(model, F_data, groups, F_tr, F_va, P_va, F_norm, positions, scale0, F_norm_alt=None, start=None):
        n, kernel = F_data.dim // 2, model.gp.kernel.base_kernel
        lq, lv, full, F_all, norm, evaluate = start or ES.element_start(model, F_data, groups, F_tr, F_va, P_va, F_norm,
                                                                        positions, scale0, F_norm_alt)
        tr_all, _ = split_functionals(groups, F_data.count)
        ids = torch.unique(groups[tr_all])
        keep = ids[torch.arange(ids.numel()) % round(1 / share) == 0]
        F_part = Functionals.cat([F_data.subset(tr_all[torch.isin(groups[tr_all], keep)]), norm])
        part = objective(model.gp, "positions", F_part, F_va, Functionals.cat([F_va, P_va]), positions)
        started = time.process_time()
        lq, lv, val, _ = refine(ES._tied(kernel, part, n), n, lq, lv, REFINE_EVALUATIONS)
        names = kernel.parameter_names()
        overall = next(j for j, name in enumerate(names) if name.endswith(":scale"))
        with ES.reusing_parts(kernel) as grams:  # as search_elements: the searched point's Grams kept
            part = grams.keeping(part, val)
            trials = [ES.element_theta(kernel, lq, lv, c) for c in ES.CORRECTION_SCALES[1:]]
            scores = [(val, ES.element_theta(kernel, lq, lv))] + [(part(th), th) for th in trials]
            val, theta = min(scores, key=lambda x: x[0])
            theta, val, _ = ES.untied_search(part, theta, val, [i for i in range(len(names)) if i != overall],
                                             ES.UNTIED_EVALUATIONS)
        INFO.update(functionals=(F_part.count, F_all.count), share_cpu_s=time.process_time() - started, start=full,
                    share_value=val, scales={k: round(math.exp(float(x)) / scale0, 3) for k, x in zip(names, theta)})
        model.history["objective"] = INFO["all_value"] = evaluate(theta)
        ES.check_scales(model, kernel, theta, scale0)
        return F_all, theta, norm
    return search


def main(argv=None) -> None:
    import learners.shadow.element_search as ES
    import tests.test_learners_shadow_auto as A
    from benchmarks.identification_acceptance import UNTUNED
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP
    from learners.shadow import ElementKernel

    kernels = {"fpu6": ElementKernel.chain(6), "two_body4": ElementKernel.bodies(2, 2), "mass_chain4": ElementKernel.chain(4)}
    systems = {make.__name__: (make, h, T) for make, h, T in A.SYSTEMS + A.UNTUNED + UNTUNED}
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=sorted(kernels), required=True)
    ap.add_argument("--share", type=float, default=0.5, help="share of the training trajectories (1/k)")
    args = ap.parse_args(argv)
    make, h, T = systems[args.system]
    system = make()
    ES.search_elements = _search(args.share)
    started = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = snapshots(system, h, T, 5, seed=0)
        model = InverseModifiedLagrangianGP(h, progress=False, kernel=kernels[args.system]).fit(data)
    print(f"fit CPU s {time.process_time() - started:.1f}", INFO)
    print("dE2, dE4", [A.energy_differences(model, system, N, return_std=False)[0] for N in (2, 4)])


if __name__ == "__main__":
    main()
