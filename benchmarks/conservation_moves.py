"""How far the conservation calibration's values move under this tree's ``conservation_values`` (one velocities pass)
against the route it replaced (``model.energies(..., return_std=True)`` then ``model.velocities``), and how far that old
route moves by itself when only the element energies' autograd pass changes (6 -> 12 states): the yardstick for
"rounding" (benchmarks/RESULTS_calibration.md, Session 21). One process, one fit (first_std_cost's case: notebook 07's
planar two-body system at CI size). Prints, per value (err: the energy along a data trajectory minus its first
snapshot's; var: its posterior variance; trunc: the next order's difference), the largest move of an element relative
to itself and relative to the largest element, then the calibration summaries.

    OMP_NUM_THREADS=1 PYTHONPATH=<tree> python3 benchmarks/conservation_moves.py
"""

import os
import sys
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _old_values(model, qs, order=2):
    """Main's conservation values before Session 21 (the energies' own velocities, then the velocities again)."""
    import bea
    from learners.shadow.element_uncertainty import energies_at
    from learners.shadow.recovery import next_order

    E, sd = model.energies(qs, order, return_std=True, reference_index=0, truncation=False)
    q_std, v_std = model._to_standard(qs), model._vector_to_standard(model.velocities(qs, order))
    H = energies_at(model, bea.energy(model._recovered_std(next_order(order, model.scheme), jets=False)), q_std, v_std)
    H = model._speed ** 2 * H
    err, var, trunc = E[1:].reshape(-1), sd[1:].reshape(-1) ** 2, ((H - H[0]) - E)[1:].reshape(-1)
    ok = torch.isfinite(err) & torch.isfinite(var) & torch.isfinite(trunc) & (var + trunc ** 2 > 0)
    return err[ok], var[ok], trunc[ok]


def _moves(tag, a, b):
    for name, x, y in zip(("err", "var", "trunc"), a, b):
        own = float(((x - y).abs() / y.abs()).max())
        print(f"{tag:28s} {name:6s} element-wise {own:9.2e}   to the largest {float((x - y).abs().max() / y.abs().max()):9.2e}")


def main():
    from first_std_cost import _fit
    from learners.shadow import calibration as C

    warnings.simplefilter("ignore")
    model, _ = _fit()
    pending, model._pending_calibration = model._pending_calibration, None
    new = C._conservation(model, *pending)
    route = C.conservation_values
    C.conservation_values = _old_values
    try:
        old6 = C._conservation(model, *pending)
        model._autograd_chunk = lambda: 12
        old12 = C._conservation(model, *pending)
    finally:
        C.conservation_values = route
    _moves("this tree vs old route", new, old6)
    _moves("old route, pass 12 vs 6", old12, old6)
    floor = model.gp.variance_scale
    for tag, v in (("this tree", new), ("old route, pass 6", old6), ("old route, pass 12", old12)):
        print(f"{tag:20s}", C.summary(*v, max(C.scale_for(*v), floor)))


if __name__ == "__main__":
    main()
