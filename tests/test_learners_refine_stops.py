"""The element search's tied refinement ends at its first failing trial after an improvement (Session 23, issue 23
item 5). Synthetic objectives, no fit (well under a second)."""

import math

import torch

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
