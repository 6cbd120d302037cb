"""The element search's two stops (Session 23, issue 23 item 5): the tied refinement ends at its first failing trial
after an improvement, the correction's scan at its first scale not lower than the one before. Synthetic objectives,
no fit (well under a second)."""

import math

import torch

from learners.shadow.element_kernel import ElementKernel
from learners.shadow.element_search import CORRECTION_SCALES, correction_scan, element_theta
from learners.shadow.position_search import refine


def _bowl(calls):
    """A tied objective (n = 1: theta = log ell_q, log ell_v, log nugget) whose minimum is at ell_q = 1 / 1.5,
    ell_v = 1 from the start (1, 1): the first direction (-1, -1) improves once, then fails; (0, +1), the sweep's last,
    improves after it, so a search without the stop (7 trials) moves on."""
    def evaluate(theta):
        calls.append(theta.clone())
        q, v = float(theta[0]) / math.log(1.5), float(theta[1]) / math.log(1.5)
        return (q + 1) ** 2 + 0.3 * v ** 2
    return evaluate


def test_the_tied_refinement_stops_at_its_first_failure_after_an_improvement():
    calls, full_calls = [], []
    start = _bowl([])(torch.tensor([0.0, 0.0, 0.0], dtype=torch.float64))
    lq, lv, best, trace = refine(_bowl(calls), 1, 1.0, 1.0, 7, start=start, first_failure=True)
    *_, full = refine(_bowl(full_calls), 1, 1.0, 1.0, 7, start=start)
    assert trace == full[:3] and len(full) == 8  # a prefix of the same path: start, the improvement, the failure
    assert trace[1] < trace[0] and not trace[2] < trace[1] and len(calls) == 2
    assert best == trace[1] and min(full) < best  # the search without the stop goes on improving: the stop decided
    assert math.isclose(lq, 1 / 1.5, rel_tol=1e-12) and math.isclose(lv, 1 / 1.5, rel_tol=1e-12)


def test_the_tied_refinement_without_an_improvement_searches_as_before():
    """No trial improves at the first step: the stop never applies, the trace is the search's without it."""
    def flat(theta):
        return float(theta[:2].pow(2).sum())  # the start (0, 0) is the minimum
    assert refine(flat, 1, 1.0, 1.0, 6, start=0.0, first_failure=True) == refine(flat, 1, 1.0, 1.0, 6, start=0.0)


def test_the_correction_scan_stops_at_its_first_scale_not_lower():
    kernel = ElementKernel.bodies(2, 2)
    values = {1e-3: -2.0, 1e-2: -1.5, 1e-1: -3.0}  # a later scale lower again: only the scan without the stop finds it
    seen = []

    def evaluate(theta):
        c = next(math.exp(float(x)) for name, x in zip(kernel.parameter_names(), theta)
                 if name == "correction:scale")
        seen.append(c)
        return next(v for k, v in values.items() if math.isclose(c, k, rel_tol=1e-12))
    theta0 = element_theta(kernel, 1.0, 2.0)
    val, theta, scan = correction_scan(evaluate, kernel, 1.0, 2.0, -1.0, theta0)
    assert scan == [-1.0, -2.0, -1.5] and len(seen) == 2 and val == -2.0  # 1e-1 (-3.0) not scored
    assert torch.equal(theta, element_theta(kernel, 1.0, 2.0, CORRECTION_SCALES[1]))
