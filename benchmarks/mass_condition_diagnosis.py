"""Session 23 (branch tp13): which kernel / mass condition pairing limits systems whose mass matrix depends on q and
is not diagonal (benchmarks/_systems12.triple_pendulum3, benchmarks/_systems23.cart_double_pendulum3). One fit per
run, the kernel and the normalisation fixed (no choice): the grid's best point (position lengthscale relative to the
data's spread s0, velocity factor; an edge of the grid says the search ended there), the refined held-out value and
lengthscales, the energy differences at N = 2, 4 after the best scale (the acceptance tests' metric) and the velocity
error. Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/mass_condition_diagnosis.py --system triple_pendulum3 --degree 8 \
        --condition trace --seed 2 --iterations 20

``--degree 0``: the RBF. ``--condition``: ``trace`` (the overall scale only), ``matrix`` (M(x0) = c I), ``diagonal``.
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

__all__ = ["main"]


def main(argv=None) -> None:
    import identification_acceptance as IA
    import tests.test_learners_shadow_auto as A
    from _systems12 import NEW12
    from _systems23 import NEW23
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP
    from learners.shadow.mechanical import MechanicalKernel
    from learners.shadow.normalisation import MassNormalisation
    from learners.shadow.position_search import SCALES, VELOCITY_FACTORS

    from tests.test_learners_normalisation_choice import skew_mass3
    from tests.test_learners_unequal_masses import unequal_chain3

    systems = {make.__name__: (make, h, T) for make, h, T in A.SYSTEMS + A.UNTUNED + IA.UNTUNED + NEW12 + NEW23}
    # the choice tests' systems with a mass matrix not proportional to I, at those tests' step and size
    systems.update({make.__name__: (make, 0.2, 40) for make in (skew_mass3, unequal_chain3)})
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=sorted(systems), required=True)
    ap.add_argument("--degree", type=int, default=8, help="mechanical kernel's degree in v; 0: the RBF")
    ap.add_argument("--condition", choices=("trace", "matrix", "diagonal"), default="trace")
    ap.add_argument("--iterations", type=int, default=None, help="refinement solves (default: the library's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--traj", type=int, default=None)
    args = ap.parse_args(argv)
    make, h, T = systems[args.system]
    system = make()
    data = snapshots(system, h, args.traj or T, 5, seed=args.seed)
    matrix = {"trace": False, "matrix": True, "diagonal": "diagonal"}[args.condition]
    kernel = "rbf" if args.degree == 0 else MechanicalKernel(degree=args.degree)
    c = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = InverseModifiedLagrangianGP(h, progress=False, kernel=kernel, normalisation=MassNormalisation(matrix=matrix),
                                        iterations=args.iterations).fit(data)
    cpu = time.process_time() - c
    grid = m.history.get("grid", [])
    best = min(grid, key=lambda g: g[2]) if grid else None
    lq_all = sorted({g[0] for g in grid})
    edge = "" if best is None else ("(position edge) " if best[0] in (lq_all[0], lq_all[-1]) else "") + \
        ("(velocity edge)" if round(best[1] / best[0], 6) in (VELOCITY_FACTORS[0], VELOCITY_FACTORS[-1]) else "")
    search = m.history.get("search", [])
    rel = [A.energy_differences(m, system, N, return_std=False)[0] for N in (2, 4)]
    ls = m.gp.kernel.base_kernel.lengthscale.reshape(-1).tolist()
    print(f"grid: {len(grid)} points (scales {SCALES} x s0, velocity factors {VELOCITY_FACTORS}); best lq {best[0]:.3g}, "
          f"lv {best[1]:.3g} ({best[1] / best[0]:.3g} lq), value {best[2]:.3f} {edge}" if best else "grid: none")
    print(f"refined: {len(search)} solves, {min(search) if search else math.nan:.3f}; final lengthscales "
          f"{[round(x, 3) for x in ls]}; objective {m.history.get('objective')}")
    print("| system | seed | traj | kernel | condition | iterations | held-out | dE2 | dE4 | v rel. error | cpu s |")
    print(f"| {args.system} | {args.seed} | {args.traj or T} | {'rbf' if args.degree == 0 else f'mechanical{args.degree}'} | "
          f"{args.condition} | {len(search)} | {m.history.get('objective'):.3f} | {rel[0]:.3g} | {rel[1]:.3g} | "
          f"{IA._velocity_error(A, m, system, h):.3g} | {cpu:.0f} |")


if __name__ == "__main__":
    main()
