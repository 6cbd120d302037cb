"""What a cold derivation costs: measured wall times, so that the CLI can say what is coming.

Times in seconds on 2 CPU cores (the README's benchmarks, midpoint rule; the trapezoidal rule costs about
the same), for a modified Lagrangian; the inverse one needs the modified series of a larger Lagrangian and
costs the sum of both columns of the benchmark. Entries beyond the measured ones are extrapolated with the
observed growth (about 20-fold per two orders), and said to be so.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from .errors import BeaValueError

#: a cold derivation expected to take longer than this (or not measured to finish in 10 minutes) is refused
#: unless the caller passes ``allow_slow=True`` (CLI: ``--allow-slow``): such a request is usually a typo
LIMIT_SECONDS = 3600.0


class TooSlowError(BeaValueError):
    """A derivation expected to run longer than :data:`LIMIT_SECONDS`, asked for without ``allow_slow=True``."""

#: dimension-free engine (dim=None): modified + inverse, benchmarks/derive_free.py
_FREE: Dict[int, float] = {2: 0.03, 4: 0.2, 6: 3.6, 8: 473.0}  # the slower of midpoint and trapezoidal
#: component engine: (dim, order) -> (modified, modified + inverse), benchmarks/derive.py
_COMPONENT: Dict[Tuple[int, int], Tuple[float, float]] = {
    (1, 2): (0.09, 0.14), (1, 4): (0.16, 0.35), (1, 6): (0.30, 1.04), (1, 8): (2.91, 10.6), (1, 10): (60.2, 205.0),
    (2, 2): (0.14, 0.26), (2, 4): (2.42, 5.8), (3, 2): (0.20, 0.47),
    (4, 2): (2.1, 4.1), (5, 2): (148.0, 347.0),  # issue 24, measured with generic_raw on the shared 2 cores
}
#: (dim, order) measured not to finish in 10 minutes (n = 6 at h^2: bea.api.MAX_DIM)
_BEYOND_10_MIN = {(2, 6), (3, 4), (6, 2)}
_GROWTH_PER_TWO_ORDERS = 20.0
_FREE_GROWTH_PER_TWO_ORDERS = 130.0  # 6 -> 8 in the benchmark


def estimate(kind: str, order: int, dim: Optional[int]) -> Tuple[Optional[float], str]:
    """``(seconds, basis)``: the expected cold wall time (``None``: unknown but over 10 minutes) and how it
    was obtained (``"measured"``, ``"extrapolated"``, or why only a lower bound is known)."""
    inverse = kind == "inverse_modified_lagrangian"
    if dim is None:
        if order in _FREE:
            return _FREE[order], "measured"
        below = max((o for o in _FREE if o < order), default=min(_FREE))
        return _FREE[below] * _FREE_GROWTH_PER_TWO_ORDERS ** ((order - below) / 2), "extrapolated"
    if (dim, order) in _COMPONENT:
        mod, both = _COMPONENT[(dim, order)]
        return (both if inverse else mod), "measured"
    above = sorted(o for d, o in _COMPONENT if d == dim and o > order)
    if above:  # odd orders (non-symmetric schemes) and order 0: bounded by the next measured order
        mod, both = _COMPONENT[(dim, above[0])]
        return (both if inverse else mod), f"at most the time measured at order {above[0]}"
    smaller = [(d, o) for d, o in _BEYOND_10_MIN if d <= dim and o <= order]
    if smaller or dim >= 3 and order >= 4:
        return None, "the benchmarks did not finish in 10 minutes"
    if dim == 1 and order > 10:
        mod, both = _COMPONENT[(1, 10)]
        return (both if inverse else mod) * _GROWTH_PER_TWO_ORDERS ** ((order - 10) / 2), "extrapolated"
    known = [o for d, o in _COMPONENT if d == dim and o < order]
    if known:
        o = max(known)
        mod, both = _COMPONENT[(dim, o)]
        return (both if inverse else mod) * _GROWTH_PER_TWO_ORDERS ** ((order - o) / 2), "extrapolated"
    return None, "the benchmarks did not finish in 10 minutes"


def check_affordable(kind: str, order: int, dim: Optional[int], allow_slow: bool) -> None:
    """Raise :class:`TooSlowError` with the estimate unless the cold derivation of ``kind`` to ``h^order`` (``dim``:
    its dimension, ``None`` for the dimension-free engine) is expected within :data:`LIMIT_SECONDS`, or
    ``allow_slow`` is true. Called only on a cache miss: a cached result costs nothing."""
    if allow_slow is not True and allow_slow is not False:
        from .errors import BeaTypeError

        raise BeaTypeError(f"allow_slow must be True or False, got {type(allow_slow).__name__}")
    seconds, basis = estimate(kind, order, dim)
    if allow_slow or (seconds is not None and seconds <= LIMIT_SECONDS):
        return
    span = "for every n (dimension-free)" if dim is None else f"for n = {dim}"
    raise TooSlowError(
        f"the {kind.replace('_', ' ')} to h^{order} {span} is not cached, and deriving it is expected to take "
        f"{describe(seconds)} on 2 cores ({basis}); derivations not known to finish within {describe(LIMIT_SECONDS)} are "
        "refused: lower the order or "
        "the dimension (the dimension-free form serves every n), or pass allow_slow=True (CLI: --allow-slow) to start "
        "it anyway"
    )


def describe(seconds: Optional[float]) -> str:
    """``"about 6 minutes"`` and the like (``None``: over 10 minutes, not measured)."""
    if seconds is None:
        return "more than 10 minutes"
    if seconds < 1:
        return "under a second"
    if seconds < 90:
        return f"about {seconds:.0f} s"
    if seconds < 5400:
        return f"about {seconds / 60:.0f} minutes"
    return f"about {seconds / 3600:.0f} hours"
