"""One element-kernel assembly of the fpu6 default fit, captured and timed (issue 23 item 5). Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/element_assembly_profile.py capture /tmp/fpu6_element.pt
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/element_assembly_profile.py time /tmp/fpu6_element.pt [--save M.pt]

``capture`` runs the default fit of ``structure_fit_cost.py --system fpu6`` (seed 0) until every structure's first
full solve (an ElementKernel evaluation with more than 3,000 training functionals) has been seen, and saves each one's
functional kernel (hyperparameters set) and training functionals; ``time`` assembles each saved covariance
(``symmetric_covariance``, what the positions objective assembles) twice and prints CPU and wall seconds; ``--save``
keeps the matrices, ``--compare`` compares them with saved ones (max abs difference, and whether bit-equal).
"""

from __future__ import annotations

import argparse
import resource
import time
import warnings

import torch


def capture(path: str) -> None:
    import learners.shadow.hyperparameter_search as HS
    import tests.test_learners_shadow_auto as A
    from benchmarks.identification_acceptance import UNTUNED
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP

    systems = {make.__name__: (make, h, T) for make, h, T in A.SYSTEMS + A.UNTUNED + UNTUNED}
    make, h, T = systems["fpu6"]
    real, saved = HS.objective, []

    def objective(gp, kind, F_tr, F_va, G_va, positions=None):
        evaluate = real(gp, kind, F_tr, F_va, G_va, positions)

        def hooked(theta):
            base = gp.kernel.base_kernel
            if type(base).__name__ == "ElementKernel" and F_tr.count > 3000 and len(saved) < 3:
                HS._set_theta(gp, theta)
                saved.append({"kernel": gp.kernel, "F": F_tr, "groups": [g["name"] for g in base.groups]})
                torch.save(saved, path)
                print("captured", saved[-1]["groups"], F_tr.count, flush=True)
                if len(saved) == 3:
                    raise SystemExit(0)
            return evaluate(theta)
        return hooked

    HS.objective = objective
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        InverseModifiedLagrangianGP(h, progress=False).fit(snapshots(make(), h, T, 5, seed=0))


def timed(path: str, save, compare, repeat: int) -> None:
    from learners.shadow.heap import kept_heap
    from learners.shadow.symmetric_covariance import symmetric_covariance

    saved = torch.load(path, weights_only=False)
    out, ref = [], torch.load(compare, weights_only=False) if compare else None
    with kept_heap():
        for i, entry in enumerate(saved):
            for r in range(repeat):
                c0, w0 = time.process_time(), time.perf_counter()
                f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                K = symmetric_covariance(entry["kernel"], entry["F"])
                print(f"{i} {len(entry['groups'])} groups, {entry['F'].count} functionals: CPU s "
                      f"{time.process_time() - c0:.2f} wall s {time.perf_counter() - w0:.2f} minor faults "
                      f"{resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0} (threads {torch.get_num_threads()})",
                      flush=True)
            out.append(K)
            if ref is not None:
                print(f"   vs saved: bit-equal {torch.equal(K, ref[i])}, max abs diff {float((K - ref[i]).abs().max()):.3e}"
                      f" (max abs {float(ref[i].abs().max()):.3e})", flush=True)
    if save:
        torch.save(out, save)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("action", choices=["capture", "time"])
    ap.add_argument("path")
    ap.add_argument("--save")
    ap.add_argument("--compare")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)
    if args.action == "capture":
        capture(args.path)
    else:
        timed(args.path, args.save, args.compare, args.repeat)


if __name__ == "__main__":
    main()
