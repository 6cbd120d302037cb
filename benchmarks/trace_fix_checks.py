"""Three measurements of the tracer's checks (benchmarks/RESULTS_speed.md, Session 16 cgtrace, fix pass):

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/trace_fix_checks.py pivots [--off] | verify | steps

``pivots``: M = [[0.004, b], [b, 1]], b = q0/(10 (1 + q0^2)), traced with a row swap; the C derivatives' relative
error against autograd where partial pivoting would not swap (``--off``: without the pivot guards; with them such a
state declines, g[0] NaN). ``verify``: CPU seconds of the autograd reference of inv_4 (n = 2) at 4 and at 7 states
(the verification's cost). ``steps``: CPU seconds of 20,000 compiled steps of that series (least of 5).
"""

import sys
import time

import torch

import bea
import integrators._trace_linalg as TL
from integrators import VariationalIntegrator
from integrators.compiled import CompiledStepper
from integrators.model_protocol import derivatives

INV4 = bea.compile_torch("inverse_modified_lagrangian", "midpoint", 4)


def series(q, v):
    base = lambda q, v: (v ** 2).sum(-1) / 2 + torch.cos(q).sum(-1) + 0.05 * (q[..., :1] * q).sum(-1)  # noqa: E731
    return INV4(base, q, v, 0.1)


def swapped(q, v):
    b = 0.1 * q[0, 0] / (1 + q[0, 0] ** 2)
    M = torch.stack([torch.stack([0.004 + 0 * b, b]), torch.stack([b, 1.0 + 0 * b])])
    LU, piv = torch.linalg.lu_factor(M)
    return (0.5 * v[0] @ torch.linalg.lu_solve(LU, piv, v[0][:, None])[:, 0] + torch.cos(q).sum())[None]


def _least(fn, runs):
    ts = []
    for _ in range(runs):
        t = time.process_time()
        fn()
        ts.append(time.process_time() - t)
    return min(ts), sorted(ts)[runs // 2]


def main():
    what = sys.argv[1]
    if what == "pivots":
        if "--off" in sys.argv:
            TL._pivot_guards = lambda p, col, r: None
        stepper = CompiledStepper(swapped, 0.1, bea.get_scheme("midpoint"), 2)
        for c in (0.5, 1e-3, 1e-6, 1e-11):
            x = torch.tensor([[c, 0.2, 0.3, -0.4]], dtype=torch.float64)
            (g, H), (_, gr, Hr) = stepper.lagrangian_derivatives(x), derivatives(swapped, x)
            err = max(float((g - gr).abs().max()), float((H - Hr).abs().max()))
            print(f"q0 = {c:g}: relative error {err / (1 + max(float(gr.abs().max()), float(Hr.abs().max()))):.3g}")
    elif what == "verify":
        for m in (4, 7, 4, 7):
            xs = torch.rand(m, 4, dtype=torch.float64)
            print(m, "states: least / median CPU s %.4f / %.4f" % _least(lambda: derivatives(series, xs), 7))
    else:
        vi = VariationalIntegrator(series, 0.1, execution="compiled", progress=False)
        q0, v0 = torch.tensor([[0.5, -0.3]], dtype=torch.float64), torch.tensor([[0.1, 0.2]], dtype=torch.float64)
        vi.solve(q0, v0, 10)
        print("20,000 steps: least / median CPU s %.4f / %.4f" % _least(lambda: vi.solve(q0, v0, 20000), 5),
              vi.solve(q0, v0, 20000).q[-1].tolist())


if __name__ == "__main__":
    main()
