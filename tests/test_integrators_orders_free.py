"""Observed orders of convergence at n >= 6 through the dimension-free series (issue 11, acceptance).

Two systems: an FPU-beta chain of 8 unit masses with fixed ends (``systems.fpu_chain(8)``, k = beta = 1,
linear frequencies 0.35..1.97) and a chain of 6 pendula with the position-dependent mass
``M_jk = (6 - max(j, k)) cos(q_j - q_k)`` (``systems.n_pendulum(6, g=1/4)``: unit masses and lengths;
g = 1/4 puts the linear frequencies at 0.24..2.0, so that the step sizes below are in the asymptotic
range, omega h <= 0.25). Two studies, for midpoint and trapezoidal and N = 0, 2, 4:

(a) the discrete solution of L against the exact flow of EL(L_mod[N]), started on that flow
    (``convergence.discrete_vs_modified_flow``: L_mod from ``bea.series_function``, its flow by Chebyshev
    collocation with the companion L, all step sizes in one flow);
(b) the scheme on L_inv[N] against the exact flow of L, started from two exact positions
    (``convergence.inverse_modified_vs_exact``).

Both errors are O(h^(N+2)); the observed order (least-squares slope over h = 1/8, 1/10, 1/16, T = 1) must
be N + 2 +- 0.3 (the issue's tolerance). Measured: within 0.12 of N + 2 in every case (the table:
``PYTHONPATH=. python3 tests/test_integrators_orders_free.py``). Every error is at least 100 times the
accuracy of its reference flow (collocation at rtol = atol = 1e-12 for (a), DOP853 at 1e-13 for (b));
the Newton solves go to 1e-13. (b) at N = 0 repeats (a) at N = 0 (L_mod[0] = L_inv[0] = L): kept, it
costs a second.

Cost: all 24 cases take about 55 s on one core (OMP_NUM_THREADS=1), most of it (b) at N = 4, which
evaluates the order-4 inverse modified Lagrangian by nested autograd in every Newton iteration (the
pendulum chain with the trapezoidal rule alone about 14 s).
"""

import pytest
import torch

from integrators import convergence as C
from integrators import systems

FPU = systems.fpu_chain(8)
CHAIN = systems.n_pendulum(6, g=0.25)
START = {
    "fpu": (FPU, torch.tensor([[0.2, -0.15, 0.25, 0.05, -0.2, 0.15, -0.1, 0.1]], dtype=torch.float64),
            torch.tensor([[0.2, 0.1, -0.3, 0.4, 0.0, -0.2, 0.3, -0.1]], dtype=torch.float64)),
    "pendulum_chain": (CHAIN, torch.tensor([[0.15, -0.1, 0.05, 0.2, -0.15, 0.1]], dtype=torch.float64),
                       torch.tensor([[0.05, 0.1, -0.15, 0.05, 0.0, -0.1]], dtype=torch.float64)),
}
HS = [0.125, 0.1, 0.0625]
T = 1.0
REFERENCE = {"rtol": 1e-12, "atol": 1e-12}  # collocation flow of EL(L_mod[N]), study (a)
#: smallest error that a fit may use: 100 times the reference accuracy (collocation 1e-12, DOP853 1e-13)
FLOOR = {"modified": 1e-10, "inverse": 1e-11}
NEWTON = {"xtol": 1e-13}


CASES = [pytest.param(system, scheme, N, study, id=f"{system}-{scheme}-N{N}-{study}")
         for system in START for scheme in ("midpoint", "trapezoidal") for N in (0, 2, 4) for study in ("modified", "inverse")]


def errors(system: str, scheme: str, N: int, study: str):
    L, q0, v0 = START[system]
    if study == "modified":
        return C.discrete_vs_modified_flow(L, scheme, N, HS, T, q0, v0, reference_options=REFERENCE, **NEWTON)
    return C.inverse_modified_vs_exact(L, scheme, N, HS, T, q0, v0, **NEWTON)


@pytest.mark.parametrize("system,scheme,N,study", CASES)
def test_observed_order(system, scheme, N, study):
    errs = errors(system, scheme, N, study)
    assert min(errs) >= FLOOR[study], f"errors too close to the reference accuracy for a clean fit: {errs}"
    order = C.observed_order(HS, errs)
    assert abs(order - (N + 2)) <= 0.3, f"observed order {order:.3f}, expected {N + 2} +- 0.3 (errors {errs})"


if __name__ == "__main__":  # the table of observed orders: PYTHONPATH=. python3 tests/test_integrators_orders_free.py
    import time

    print(f"{'system':15s} {'scheme':12s} {'N':>2s} {'study':9s} {'order':>6s} {'seconds':>8s}  errors at h = {HS}")
    for case in CASES:
        t0 = time.perf_counter()
        errs = errors(*case.values)
        system, scheme, N, study = case.values
        print(f"{system:15s} {scheme:12s} {N:2d} {study:9s} {C.observed_order(HS, errs):6.3f} {time.perf_counter() - t0:8.1f}  "
              + "  ".join(f"{e:.3g}" for e in errs), flush=True)
