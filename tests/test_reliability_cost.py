"""Requests that cannot finish are refused up front, with the estimate and the way to go ahead (issue 24, class 6).

Derivations: on a cache miss, ``bea.cost.check_affordable`` compares the estimate (``bea.cost.estimate``, the
CLI's table) with ``LIMIT_SECONDS`` (one hour); beyond it, or where the benchmarks did not finish in 10 minutes,
``TooSlowError`` unless ``allow_slow=True`` (CLI ``--allow-slow``). Sweeps: the number of tasks is counted from the
list lengths before any task is built; beyond ``[execution] max_tasks`` (default 100,000) a ``SpecError``.
"""

import re
import subprocess
import sys
import time

import pytest
import sympy
from hypothesis import given, settings, strategies as st

import bea
from bea import api, cost
from bea.errors import BeaTypeError
from pipelines.sweep import SpecError, load
from pipelines.sweep.spec import MAX_TASKS


class Started(Exception):
    """Raised by a stub engine: the request got past the cost check."""


def _started(*a, **k):
    raise Started


@pytest.mark.parametrize("call, words", [
    (lambda: bea.modified_lagrangian("midpoint", 12), r"about \d{3,} hours"),  # the case (CPU-time model: ~540 h)
    (lambda: bea.compile_torch("inverse_modified_lagrangian", "trapezoidal", 12), "hours"),
    (lambda: bea.series_function("modified_equation", "midpoint", 10, n=3), r"about \d+ hours"),  # variant: order 10 (dimension-free)
    (lambda: bea.modified_lagrangian("midpoint", 2, n=6), "more than 10 minutes"),  # the dim=6 (now n=6)
    (lambda: bea.modified_equation("midpoint", 4, n=5), "more than 10 minutes"),  # variant: dim 5, order 4
    (lambda: bea.modified_lagrangian("midpoint", 4, lagrangian=sum(sympy.cos(x) for x in sympy.symbols("x:3"))
                                     + sum(u**2 for u in sympy.symbols("u:3")) / 2 + sympy.symbols("u0") ** 4,
                                     q=list(sympy.symbols("x:3")), v=list(sympy.symbols("u:3"))),
     "more than 10 minutes"),  # variant: a concrete, non-polynomial L in 3 coordinates takes the generic route
])
def test_hopeless_derivations_are_refused_at_once(call, words, monkeypatch):
    monkeypatch.setattr(api, "derive_free", _started)
    monkeypatch.setattr(api, "derive_raw", _started)
    t0 = time.perf_counter()
    with pytest.raises(cost.TooSlowError, match=f"{words}.*pass allow_slow=True \\(CLI: --allow-slow\\)"):
        call()
    assert time.perf_counter() - t0 < 5.0


def test_allow_slow_goes_ahead_and_is_a_flag(monkeypatch):
    monkeypatch.setattr(api, "derive_free", _started)
    monkeypatch.setattr(api, "derive_raw", _started)
    with pytest.raises(Started):
        bea.modified_lagrangian("midpoint", 12, allow_slow=True, cache=False)
    with pytest.raises(Started):
        bea.compile_torch("modified_equation", "midpoint", 4, n=3, allow_slow=True, cache=False)
    for bad in ("yes", 1, None):
        with pytest.raises(BeaTypeError, match="allow_slow must be True or False"):
            bea.modified_lagrangian("midpoint", 2, allow_slow=bad)


def test_only_a_cache_miss_is_estimated(monkeypatch, tmp_path):
    monkeypatch.setenv("BEA_CACHE_DIR", str(tmp_path))
    f = bea.compile_torch("modified_lagrangian", "midpoint", 2)  # derived and cached (0.03 s expected)
    monkeypatch.setattr(cost, "LIMIT_SECONDS", 0.0)  # now every derivation is "too slow"
    assert bea.compile_torch("modified_lagrangian", "midpoint", 2) is not None  # served from the cache
    with pytest.raises(cost.TooSlowError, match="under a second"):
        bea.compile_torch("modified_lagrangian", "midpoint", 2, cache=False)
    assert callable(f)


def test_cli_refuses_with_one_line():
    r = subprocess.run([sys.executable, "-m", "bea", "derive", "--order", "12", "--no-cache"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and re.search(r"about \d{3,} hours", lines[0]) and "--allow-slow" in lines[0], r.stderr


def test_the_measured_table_covers_the_dimensions_that_are_accepted():
    assert cost.estimate("modified_lagrangian", 2, 4) == (2.1, "measured")
    assert cost.estimate("inverse_modified_lagrangian", 2, 5) == (347.0, "measured")
    assert cost.estimate("modified_lagrangian", 2, 6)[0] is None
    # odd orders (non-symmetric schemes) are bounded by the next measured even order, not "unknown"
    assert cost.estimate("modified_equation", 1, 2) == (0.043, "at most the time measured at order 2")
    assert cost.estimate("inverse_modified_lagrangian", 1, 1) == (0.039, "at most the time measured at order 2")
    assert cost.estimate("inverse_modified_lagrangian", 3, 1)[1] == "interpolated"
    cost.check_affordable("inverse_modified_lagrangian", 2, 5, False)  # 6 minutes: within the hour
    cost.check_affordable("modified_lagrangian", 8, None, False)  # 473 s measured


# ------------------------------------------------------------------ sweeps

def _grid(lengths, points=0, max_tasks=None):
    grid = {}
    for key, n in zip(("h", "T", "order"), lengths):
        grid[key] = [1.0 / (i + 2) for i in range(n)] if key == "h" else (
            [float(i + 1) for i in range(n)] if key == "T" else [2 * i for i in range(n)])
    spec = {"kind": "convergence", "defaults": {"scheme": "midpoint", "system": "pendulum"}, "grid": grid,
            "points": [{"h": 1 / (100 + i), "T": 1.0, "order": 0} for i in range(points)]}
    if max_tasks is not None:
        spec["execution"] = {"max_tasks": max_tasks}
    return spec


def test_a_27_million_task_grid_is_refused_before_it_is_built():
    t0 = time.perf_counter()
    with pytest.raises(SpecError, match=r"grid: 27,000,000 tasks \(300 h x 300 T x 300 order\) exceed the "
                                        r"limit of 100,000.*max_tasks = 27000000") as info:
        load(_grid([300, 300, 300]))
    assert info.value.key == "grid" and time.perf_counter() - t0 < 2.0
    with pytest.raises(SpecError, match=r"100,001 tasks .* \+ 1 points"):  # variant: the points count too
        load(_grid([100, 1000], points=1))
    with pytest.raises(SpecError, match="execution.max_tasks: must be >= 1"):
        load(_grid([2], max_tasks=0))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=3), st.integers(0, 3), st.integers(1, 200))
def test_task_counts_are_exact_and_the_limit_is_explicit(lengths, points, limit):
    count = 1
    for n in lengths:
        count *= n
    count += points
    spec = _grid(lengths, points, max_tasks=limit)
    if count > limit:
        with pytest.raises(SpecError, match=f"{count:,} tasks"):
            load(spec)
    else:
        assert len(load(spec).tasks) == count
    assert MAX_TASKS == 100_000
