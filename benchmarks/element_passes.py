"""Velocities and energies along positions with an element kernel in passes (issue 27): relative differences to one
pass over every state, for time windows of 2-5 steps and for the passes ``ElementEnergy`` chooses at budgets of 3, 13
and the fit's own states a pass (the two-body CI fit of tests/test_learners_element_kernel.py, 4 trajectories of 6
positions). Only rounding should differ (the mean rounds differently in batches of other sizes).

Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/element_passes.py
"""

from __future__ import annotations


def main() -> None:
    from tests.test_learners_element_kernel import two_body_fit

    _, data, model = two_body_fit.__wrapped__()
    qs = data[:4].transpose(0, 1)
    whole = {name: getattr(model, name)(qs, chunk=qs.shape[0]) for name in ("velocities", "energies")}

    def report(label, **kw):
        for name, ref in whole.items():
            got = getattr(model, name)(qs, **kw)
            print(f"{label} {name}: {float((got - ref).abs().max() / ref.abs().max()):.2e}", flush=True)

    for c in (2, 3, 4, 5):
        report(f"windows of {c} steps", chunk=c)
    for budget in (3, 13, model._autograd_chunk()):
        model._autograd_chunk = lambda b=budget: b
        report(f"budget {budget} states a pass")


if __name__ == "__main__":
    main()
