"""What a cold derivation costs, from measured times, so that the CLI can say what is coming.

The model is fitted to measurements: CPU seconds of each derivation as ``bea derive`` runs it (a fresh process,
an empty cache, the midpoint rule), one table per engine and kind, from a run of ``benchmarks/derive_cost.py``
(5 Dec 2026, load 7-11 on 2 cores). Between measured orders the time is interpolated log-linearly; beyond the
last one it grows by the last measured factor per two orders, and is said to be extrapolated. The engine is
single-threaded Python, so CPU time is the wall time of an idle core, and it hardly depends on the load (a
second run at load 12-13 agreed within 8%); on a busy machine the *wall* time is longer, by about the load per
core. ``tests/test_report_tables.py`` checks the model against the run recorded in
``docs/data/derive_cost.json`` (a second, independent run, except the dimension-free order 8, which takes a
quarter of an hour of wall time on a busy machine and was measured once): every measured derivation within 2x.

Memory is measured only for the stage schemes on the dimension-free engine (:func:`memory_estimate`); a
derivation measured past :data:`LIMIT_MEMORY_GB` is refused like a slow one.

Other schemes: the trapezoidal rule's dimension-free inverse costs more than the midpoint rule's (4.4x at
``h^6``, 7.2x at ``h^8`` in ``benchmarks/derive_free.py``); every other combination costs about the same.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

from .derive import check_kind
from .errors import BeaValueError

#: a cold derivation expected to take longer than this (or not measured to finish in 10 minutes) is refused
#: unless the caller passes ``allow_slow=True`` (CLI: ``--allow-slow``): such a request is usually a typo
LIMIT_SECONDS = 3600.0


#: resident memory one derivation may take by default, in GB: the project's machines have 24 GiB for 2 cores
#: shared by several jobs at once, and a hosted CI runner about 7 GB in all; a derivation measured to need more
#: (before issue 26's performance pass, galerkin3 to h^6 dimension-free: about 4.6 GB) is refused unless
#: ``allow_slow=True``
LIMIT_MEMORY_GB = 4.0


class TooSlowError(BeaValueError):
    """A derivation expected to run longer than :data:`LIMIT_SECONDS` or to need more than :data:`LIMIT_MEMORY_GB`,
    asked for without ``allow_slow=True``. ``seconds`` and ``memory_gb``: the estimates (``None``: unknown)."""

    seconds: Optional[float] = None
    memory_gb: Optional[float] = None


#: CPU seconds, midpoint rule, cold: (n or None for dimension-free, kind) -> {order: seconds}
_MEASURED: Dict[Tuple[Optional[int], str], Dict[int, float]] = {
    (None, "modified_lagrangian"): {2: 0.040, 4: 0.051, 6: 1.48, 8: 162.0},
    (None, "inverse_modified_lagrangian"): {2: 0.038, 4: 0.044, 6: 0.662, 8: 50.5},
    # order 10 at n = 1 from benchmarks/derive.py, an earlier engine (modified; modified + inverse in one
    # process): not rerun, it takes minutes; it only steers the extrapolation beyond order 8
    (1, "modified_lagrangian"): {2: 0.042, 4: 0.045, 6: 0.140, 8: 2.46, 10: 60.2},
    (1, "inverse_modified_lagrangian"): {2: 0.039, 4: 0.054, 6: 0.364, 8: 4.96, 10: 204.7},
    (2, "modified_lagrangian"): {2: 0.043, 4: 2.54},
    (2, "inverse_modified_lagrangian"): {2: 0.043, 4: 3.96},
    (3, "modified_lagrangian"): {2: 0.073},
    (3, "inverse_modified_lagrangian"): {2: 0.083},
    # n = 4, 5 at h^2: wall seconds with generic_raw on the shared 2 cores (issue 24), an upper bound of CPU time
    (4, "modified_lagrangian"): {2: 2.1},
    (4, "inverse_modified_lagrangian"): {2: 4.1},
    (5, "modified_lagrangian"): {2: 148.0},
    (5, "inverse_modified_lagrangian"): {2: 347.0},
}
#: (n, order) measured not to finish in 10 minutes (benchmarks/derive.py), nor in 5 minutes of wall time at load
#: 7-11 (benchmarks/derive_cost.py); higher orders and dimensions neither
_BEYOND_10_MIN = {(2, 6), (3, 4), (6, 2)}  # n = 6 at h^2: bea.api.MAX_DIM
#: the trapezoidal (and any non-midpoint) rule's dimension-free inverse, relative to the midpoint rule's
_OTHER_SCHEME_FREE_INVERSE = {6: 4.4, 8: 7.2}
#: stage schemes (bea.stages) on the dimension-free engine, per built-in scheme and kind: CPU seconds, cold
#: (benchmarks/RESULTS_derive.md, table 1c: ``benchmarks/derive_free.py --stage-free``, a fresh process per cell, load
#: 3-5 on 2 cores). The Lagrangian kinds share one table, the modified *plus* the inverse modified Lagrangian, an upper
#: bound of either. Since issue 26's performance pass (interior points to half the order, the operator applied in the
#: jets, the modified equation from the modified Lagrangian) galerkin3 to h^6 takes 3 CPU s, not 315, and 0.35 GB, not
#: 4.6. The modified *equation* of a stage scheme comes from the Euler-Lagrange equations of its modified Lagrangian
#: (bea.free.euler_lagrange, to h^(2s+2)), so it costs the Lagrangian to the same order plus the derivatives of its
#: trees: a kind or an order without a table entry here is not measured, hence refused.
_LAGRANGIAN_KINDS = ("modified_lagrangian", "inverse_modified_lagrangian")
_STAGE_LAGRANGIANS = {
    "galerkin2": {2: 0.02, 4: 0.03, 6: 2.47},
    "triple_jump": {2: 0.14, 4: 0.19, 6: 5.39},
    "galerkin3": {2: 0.24, 4: 0.30, 6: 3.14, 8: 391.67},  # h^8: session 9, 3.27 GB (RESULTS_derive.md)
}


def _per_lagrangian_kind(tables: Dict[str, Dict[int, float]]) -> Dict[Tuple[str, str], Dict[int, float]]:
    """``{(scheme, kind): table}`` for every kind of :data:`_LAGRANGIAN_KINDS`: one measurement (both Lagrangians in
    one process) bounds each of them."""
    return {(name, kind): table for name, table in tables.items() for kind in _LAGRANGIAN_KINDS}


_STAGE_FREE: Dict[Tuple[str, str], Dict[int, float]] = _per_lagrangian_kind(_STAGE_LAGRANGIANS)
# the modified equation: CPU seconds of bea.modified_equation(scheme, order, cache=False, allow_slow=True) (table 1c,
# ``--stage-free-equation-max 6``; its memory in _STAGE_MEMORY_GB). galerkin3 at h^8 (session 9) was stopped by a 6 GB
# address-space limit after 440 CPU s at 5.6 GB resident, in the Euler-Lagrange step on its modified Lagrangian's
# 43,262 trees (the derivation itself released before it, bea.free.release): not measured, hence refused
_STAGE_FREE.update({
    ("galerkin2", "modified_equation"): {2: 0.01, 4: 0.57, 6: 22.86},
    ("galerkin3", "modified_equation"): {2: 0.11, 4: 0.13, 6: 21.22},
    ("triple_jump", "modified_equation"): {2: 0.07, 4: 0.65, 6: 28.31},
})
#: the modified equation by the discrete Euler-Lagrange route (before the route through the modified Lagrangian; the
#: costliest of galerkin2 / triple_jump / galerkin3, table 1b): what a user stage scheme that falls back to it costs
_STAGE_DISCRETE_EQUATION = {2: 1.64, 4: 4.70}
#: scheme -> (order, CPU s, GB resident): the lowest order whose derivation was stopped unfinished, to spare the memory
#: and time of a shared machine; it and the orders above are estimated "unknown, over the limit". galerkin2: table 1b,
#: before the performance pass (not re-measured). Orders above a scheme's table are refused too.
_STAGE_STOPPED = {
    "galerkin2": (8, 80.0, 2.8),
}
#: (scheme, kind) -> order -> GB resident at the end of a finished cold derivation (peak ``ru_maxrss``, table 1c, the
#: interpreter's 0.3 GB of imports included; the Lagrangian kinds: the modified *plus* the inverse modified Lagrangian
#: in one process, as their CPU table); orders not listed were not measured
_STAGE_MEMORY_GB: Dict[Tuple[str, str], Dict[int, float]] = _per_lagrangian_kind(
    {"galerkin2": {6: 0.43}, "triple_jump": {6: 0.45}, "galerkin3": {6: 0.35, 8: 3.27}})
_STAGE_MEMORY_GB.update({
    ("galerkin2", "modified_equation"): {4: 0.40, 6: 0.97},
    ("galerkin3", "modified_equation"): {4: 0.31, 6: 0.92},
    ("triple_jump", "modified_equation"): {4: 0.40, 6: 1.08},
})
#: built-in stage scheme -> interior points
_STAGE_INTERIOR = {"galerkin2": 1, "galerkin3": 2, "triple_jump": 2}
_MOST_INTERIOR = max(_STAGE_INTERIOR.values())
#: schemes with more interior points than any measured one: nothing above this order is estimated
_UNMEASURED_INTERIOR_TOP = 4


def _builtin_stage(sch) -> Optional[str]:
    """The built-in stage scheme ``sch`` is, recognised by its constants (the fingerprint), never by the name a user
    chose: ``Composition(..., name="galerkin2")`` is not galerkin2."""
    from .schemes import get_scheme

    fp = sch.fingerprint()
    return next((name for name in _STAGE_LAGRANGIANS if get_scheme(name).fingerprint() == fp), None)


def _like(m: int) -> list:
    """The measured schemes that stand for a user scheme with ``m`` interior points: those with at least as many
    (with more than any, those with the most)."""
    return [r for r, k in _STAGE_INTERIOR.items() if k >= min(m, _MOST_INTERIOR)]


def _one_stage_estimate(ref: str, kind: str, order: int) -> Tuple[Optional[float], str]:
    """The estimate from the measurements of the built-in scheme ``ref``."""
    stop, cpu, gb = _STAGE_STOPPED.get(ref, (math.inf, 0.0, 0.0))
    if order >= stop:
        return None, (f"on the dimension-free engine {ref} to h^{stop} was stopped unfinished after {cpu:.0f} CPU s at "
                      f"{gb:.1f} GB resident")
    table = _STAGE_FREE.get((ref, kind))
    if table is None:
        return None, f"the {kind.replace('_', ' ')} of {ref} on the dimension-free engine is not measured"
    if order > max(table):
        return None, f"{ref} on the dimension-free engine is not measured above h^{max(table)}"
    return _from_table(table, order)


def _stage_refs(scheme) -> Optional[Tuple[Optional[str], List[str], int, bool]]:
    """For a stage scheme (an object or a registered name): the built-in it is (or None), the measured schemes it is
    estimated by (itself, or those with at least as many interior points), its number of interior points and whether
    it is symmetric; ``None`` for other schemes."""
    from .schemes import get_scheme
    from .stages import StageScheme

    sch = get_scheme(scheme) if isinstance(scheme, str) else scheme
    if not isinstance(sch, StageScheme):
        return None
    ref = _builtin_stage(sch)
    return ref, ([ref] if ref is not None else _like(sch.n_interior)), sch.n_interior, sch.symmetric is True


#: a stage scheme that is not symmetric against the symmetric measured ones (2: 9.76 / 5.39 = 1.8 measured at h^6)
_NON_SYMMETRIC_STAGE_FACTOR = 2.0


def _free_stage_estimate(scheme, kind: str, order: int) -> Optional[Tuple[Optional[float], str]]:
    """The estimate of a stage scheme on the dimension-free engine (``None``: ``scheme`` is not one). A scheme that
    is not a built-in one is estimated as the costliest measured scheme with at least as many interior points (each
    one more re-expands ``L`` at one more point with its trees glued in; galerkin3 is cheap only because its h^2 and
    h^4 terms vanish); with more interior points than any measured scheme, nothing above h^4 is estimated. The
    measured schemes are symmetric, which halves their work (one stationary value gives both Euler-Lagrange
    residuals, odd powers vanish); a scheme that is not symmetric is estimated at ``_NON_SYMMETRIC_STAGE_FACTOR``
    times that (measured: ``Composition(["1/3", "2/3"])`` at h^6, 9.76 CPU s against the triple jump's 5.39)."""
    found = _stage_refs(scheme)
    if found is None:
        return None
    ref, refs, m, symmetric = found
    if ref is not None:
        return _one_stage_estimate(ref, kind, order)
    if m > _MOST_INTERIOR and order > _UNMEASURED_INTERIOR_TOP:
        return None, (f"a stage scheme with {m} interior points on the dimension-free engine is not measured above "
                      f"h^{_UNMEASURED_INTERIOR_TOP}")
    if kind == "modified_equation":
        # a user scheme may fall back to the discrete Euler-Lagrange route (not symmetric, or order 2): its table
        if order > max(_STAGE_DISCRETE_EQUATION):
            return None, (f"the modified equation of a stage scheme that is not a built-in one is measured (by the "
                          f"discrete route it may take) only to h^{max(_STAGE_DISCRETE_EQUATION)}")
        seconds, basis = _from_table(_STAGE_DISCRETE_EQUATION, order)
        basis = f"{basis} by the discrete route (the costliest built-in scheme)"
    else:
        estimates = [(r,) + _one_stage_estimate(r, kind, order) for r in refs]
        unknown = [e for e in estimates if e[1] is None]
        r, seconds, basis = unknown[0] if unknown else max(estimates, key=lambda e: e[1])
        basis = f"{basis} for {r}, the costliest measured scheme with at least {min(m, _MOST_INTERIOR)} interior point(s)"
    if seconds is not None and not symmetric:
        seconds *= _NON_SYMMETRIC_STAGE_FACTOR
        basis += f", x{_NON_SYMMETRIC_STAGE_FACTOR:g} for a scheme that is not symmetric"
    return seconds, basis


def memory_estimate(kind: str, order: int, *, n: Optional[int], scheme="midpoint") -> Optional[float]:
    """GB resident that a cold derivation of ``kind`` (one of :data:`bea.derive.KINDS`, else :class:`BeaValueError`)
    to ``h^order`` was measured to need: only stage schemes on the dimension-free engine are measured (a user scheme:
    the most of the built-ins it is estimated by); ``None`` where not measured."""
    check_kind(kind)  # an unknown kind would otherwise read as "not measured"
    found = None if n is not None else _stage_refs(scheme)
    if found is None:
        return None
    known = [_STAGE_MEMORY_GB.get((r, kind), {}).get(order) for r in found[1]]
    return max((g for g in known if g is not None), default=None)


def _too_long(n: Optional[int], order: int) -> bool:
    return n is not None and any(d <= n and o <= order for d, o in _BEYOND_10_MIN)


def _from_table(table: Dict[int, float], order: int) -> Tuple[float, str]:
    if order in table:
        return table[order], "measured"
    orders = sorted(table)
    if order < orders[0]:  # order 0, or odd orders of non-symmetric schemes: no more than the next measured order
        return table[orders[0]], f"at most the time measured at order {orders[0]}"
    below = [o for o in orders if o < order]
    above = [o for o in orders if o > order]
    if below and above:  # log-linear between the neighbours
        a, b = below[-1], above[0]
        w = (order - a) / (b - a)
        return math.exp((1 - w) * math.log(table[a]) + w * math.log(table[b])), "interpolated"
    if len(orders) >= 2 and below:  # beyond: the last measured growth per two orders
        a, b = orders[-2], orders[-1]
        growth = (table[b] / table[a]) ** (2 / (b - a))
        return table[b] * growth ** ((order - b) / 2), "extrapolated"
    o = orders[0]
    return table[o] * 20.0 ** ((order - o) / 2), "extrapolated"  # one point: the component engine's usual 20x


def estimate(kind: str, order: int, n: Optional[int], scheme="midpoint") -> Tuple[Optional[float], str]:
    """``(seconds, basis)``: the expected cold CPU time (``None``: unknown but over 10 minutes) and how it was
    obtained (``"measured"``, ``"interpolated"``, ``"extrapolated"``, or why only a lower bound is known).
    ``modified_equation`` is estimated by the modified Lagrangian, which needs it (an upper bound), except for a stage
    scheme on the dimension-free engine, which has its own table for each kind (there the equation is derived from
    the modified Lagrangian instead). ``scheme``: a name or a :class:`bea.schemes.Scheme`."""
    if n is None:
        staged = _free_stage_estimate(scheme, kind, order)
        if staged is not None:
            return staged
    if _too_long(n, order):
        return None, "the benchmarks did not finish in 10 minutes"
    key = (n, "modified_lagrangian" if kind == "modified_equation" else kind)
    if key not in _MEASURED:
        return None, f"not measured for n = {n}; larger n cost far more"
    seconds, basis = _from_table(_MEASURED[key], order)
    if n is None and kind == "inverse_modified_lagrangian" and str(getattr(scheme, "name", scheme)).strip().lower() != "midpoint":
        seconds *= _OTHER_SCHEME_FREE_INVERSE.get(order, 1.0 if order < 6 else max(_OTHER_SCHEME_FREE_INVERSE.values()))
    return seconds, basis


def check_affordable(kind: str, order: int, n: Optional[int], allow_slow: bool, scheme="midpoint") -> None:
    """Raise :class:`TooSlowError` with the estimates unless the cold derivation of ``kind`` to ``h^order`` (``n``:
    its dimension, ``None`` for the dimension-free engine) is expected within :data:`LIMIT_SECONDS` and, where
    its memory was measured (:func:`memory_estimate`), within :data:`LIMIT_MEMORY_GB`, or ``allow_slow`` is true.
    Called only on a cache miss: a cached result costs nothing."""
    if allow_slow is not True and allow_slow is not False:
        from .errors import BeaTypeError

        raise BeaTypeError(f"allow_slow must be True or False, got {type(allow_slow).__name__}")
    seconds, basis = estimate(kind, order, n, scheme)
    gb = memory_estimate(kind, order, n=n, scheme=scheme)
    if allow_slow or (seconds is not None and seconds <= LIMIT_SECONDS and (gb is None or gb <= LIMIT_MEMORY_GB)):
        return
    span = "for every n (dimension-free)" if n is None else f"for n = {n}"
    memory = "" if gb is None else f" and about {gb:.1f} GB of memory (measured)"
    err = TooSlowError(
        f"the {kind.replace('_', ' ')} to h^{order} {span} is not cached, and deriving it is expected to take "
        f"{describe(seconds)} of CPU time ({basis}){memory}; derivations not known to finish within "
        f"{describe(LIMIT_SECONDS)} and {LIMIT_MEMORY_GB:.0f} GB are refused: lower the order or "
        "the dimension (the dimension-free form serves every n), or pass allow_slow=True (CLI: --allow-slow) to start "
        "it anyway"
    )
    err.seconds, err.memory_gb = seconds, gb
    raise err


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
