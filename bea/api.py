r"""Public entry points: derive series for a scheme, a dimension and an order.

Each derivation accepts either a *generic* Lagrangian (``n=...``, the number of degrees of freedom: an undefined function
``L(q_1..q_n, v_1..v_n)``) or a concrete SymPy Lagrangian with its coordinate and velocity
symbols (``lagrangian=L, q=[...], v=[...]``, constants in ``params=[...]``).
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

from . import cache as _cache
from ._version import __version__
from .concrete import PolynomialLagrangian
from .cost import check_affordable
from .deprecation import renamed
from .derive import KINDS, Derivation, Raw, derive_raw
from .errors import BeaTypeError, BeaValueError, CacheFormatError
from .jets import Jets
from .schemes import Scheme, get_scheme
from .stages import StageScheme
from .series import Series
from .free.derive import FreeRaw, derive_free
from .free.series import FreeSeries
from .free.stages import check_supported as check_free_stages
from .free.stages import supported as free_stages_supported
from .free.storage import decode_raw
from .free.storage import encode as encode_free
from .symbolic import Frame, validate_concrete

SchemeLike = Union[str, Scheme]


#: Highest order for a generic Lagrangian. The cost grows about 20-fold per two orders (midpoint, n = 1,
#: modified + inverse on 2 cores: order 8 in 11 s, order 10 in 205 s), so order 12 takes about an hour and
#: order 14 most of a day: beyond 12 a request is a typo, not a computation.
MAX_ORDER = 12
#: Highest order on the fast path for concrete polynomial Lagrangians with constant mass (harmonic
#: oscillator, modified + inverse: order 20 in 29 s, about 3-fold per 4 orders).
MAX_ORDER_CONCRETE = 24
#: Highest dimension of a derivation: building the generic variable registry (det and adjugate of the
#: symbolic n x n mass matrix) takes 2.4 s for n = 5 and 31 s for n = 6, about 13-fold per dimension, and
#: the midpoint h^2 series for n = 6 does not finish in 10 minutes (see bea.closed_form for any n at h^2).
MAX_DIM = 6


def _check_order(order, scheme: Scheme, limit: int = MAX_ORDER) -> None:
    if isinstance(order, bool) or not isinstance(order, int):
        raise BeaTypeError(f"order must be an integer (the highest power of h kept), got {type(order).__name__} {_short(order)}")
    if order < 0:
        raise BeaValueError(f"order must be >= 0 (the highest power of h kept), got {order}")
    if order > limit:
        raise BeaValueError(
            f"order={order} is above the supported maximum {limit}: the cost grows about 20-fold per two orders "
            f"(order 10 takes minutes, 12 about an hour); use an order <= {limit}"
        )
    if scheme.symmetric and order % 2:
        raise BeaValueError(
            f"{scheme!r} is symmetric: its series contain only even powers of h, so order={order} is "
            f"ambiguous; use order={order - 1} or order={order + 1}"
        )


def _short(x, width: int = 60) -> str:
    r = repr(x)
    return r if len(r) <= width else r[: width - 3] + "..."


def _check_n(n, capped: bool = True) -> int:
    """``n`` as a positive integer; ``capped``: at most :data:`MAX_DIM` (the component engine's limit; the
    dimension-free engine's functions take any ``n``)."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise BeaTypeError(f"n (the number of degrees of freedom) must be a positive integer, got {type(n).__name__} {_short(n)}")
    if n < 1:
        raise BeaValueError(f"n must be >= 1, got {n}")
    if capped and n > MAX_DIM:
        raise BeaValueError(
            f"n={n} is above the supported maximum {MAX_DIM}: the generic derivation's cost grows about 13-fold "
            "per dimension; omit n= to derive once for every n (vector notation, evaluated in torch at any n), "
            "and use .components(n) only for small n"
        )
    return n


def _check_flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise BeaTypeError(f"{name} must be True or False, got {type(value).__name__} {_short(value)}")
    return value


def _cache_key(kind: str, scheme: Scheme, order: int, n):
    """The scheme enters through its fingerprint (its discrete Lagrangian on symbols, see
    :mod:`bea.scheme_check`), so every constant that determines the result is in the key."""
    skey = scheme.cache_key(n if isinstance(n, int) else None)
    if skey is None:
        return None
    # the text "dim" stays: it is part of every stored entry's key, and renaming it would orphan the cache
    key = {"kind": kind, "scheme": skey, "order": order, "dim": n, "engine": __version__}
    if n == "any":
        # dimension-free entries are written with the acceleration leaf A (bea.free.trees)
        key["form"] = "accel"
    return key


def _scheme(scheme: SchemeLike) -> Scheme:
    sch = get_scheme(scheme)
    sch.check_consistent()  # a clear message naming the cause, before any work (cached per scheme)
    return sch


def _lookup(kind: str, scheme: SchemeLike, order: int, n: int, cache: bool):
    """Validated scheme and cache key (``None``: not cached)."""
    sch = _scheme(scheme)
    _check_order(order, sch)
    _check_n(n)
    _check_flag("cache", cache)
    key = _cache_key(kind, sch, order, n) if cache else None
    return sch, key


def _decoder(kind: str, order: int, n: int):
    def decode(body):
        if not isinstance(body, dict) or not isinstance(body.get("symmetric"), bool):
            raise _cache.CacheFormatError("missing 'symmetric' flag")
        jets, coeffs = _cache.decode_coeffs(n, body["raw"], vector=kind == "modified_equation", order=order)
        return Raw(kind, jets, order, coeffs, body["symmetric"])

    return decode


def generic_raw(kind: str, scheme: SchemeLike, order: int, n: int, cache: bool = True, allow_slow: bool = False) -> Raw:
    """Coefficients in jet variables for the generic Lagrangian (from the cache when possible: a
    validated, authenticated entry; anything else is regenerated). A derivation expected to exceed
    :data:`bea.cost.LIMIT_SECONDS` is refused unless ``allow_slow`` (:func:`bea.cost.check_affordable`)."""
    sch, key = _lookup(kind, scheme, order, n, cache)
    if key is not None:
        raw = _cache.load(key, validate=_decoder(kind, order, n))
        if raw is not None:
            return raw
    check_affordable(kind, order, n, allow_slow)  # a cache miss: estimate before starting
    raw = derive_raw(sch, kind, order, n, Derivation(sch, n))
    if not sch.symmetric and raw.symmetric and order % 2:
        raise BeaValueError(f"{sch!r} turned out symmetric (only even powers of h); use an even order")
    if key is not None:
        _cache.save(key, {"raw": _cache.encode_coeffs(raw.jets, raw.coeffs), "symmetric": raw.symmetric})
    return raw


def free_raw(kind: str, scheme: SchemeLike, order: int, cache: bool = True, allow_slow: bool = False) -> FreeRaw:
    """Dimension-free coefficients (trees) for the generic Lagrangian, from the cache when possible.

    Cache entries are data (trees and rationals), validated when read; nothing is executed."""
    sch = _scheme(scheme)
    _check_order(order, sch)
    key = _cache_key(kind, sch, order, "any") if cache else None
    if key is not None:
        raw = _cache.load(key, part="trees", validate=lambda body: _valid_free(body, kind, order))
        if raw is not None:
            return raw
    if isinstance(sch, StageScheme):
        check_free_stages(sch)  # constants known only as floats are refused as such, before any estimate
    check_affordable(kind, order, None, allow_slow, sch)  # a cache miss: estimate before starting
    raw = derive_free(sch, kind, order)
    if not sch.symmetric and raw.symmetric and order % 2:
        raise BeaValueError(f"{sch!r} turned out symmetric (only even powers of h); use an even order")
    if key is not None:
        _cache.save(key, {"trees": encode_free(raw)}, part="trees")
    return raw


def _valid_free(body, kind: str, order: int) -> FreeRaw:
    raw = decode_raw(body["trees"])
    if raw.kind != kind or raw.order != order:
        raise CacheFormatError("entry for another derivation")
    return raw


def _derive(kind: str, scheme: SchemeLike, order: int, n: Optional[int], lagrangian, q, v, params, cache: bool, fast: bool = True,
            allow_slow: bool = False) -> Series:
    """``fast``: derive polynomial Lagrangians with constant mass directly (see :mod:`bea.concrete`)
    instead of substituting into the generic formula."""
    sch = _scheme(scheme)
    _check_flag("cache", cache)
    _check_flag("fast", fast)
    _check_flag("allow_slow", allow_slow)
    if lagrangian is None:
        if q is not None or v is not None or not (params is None or (isinstance(params, (list, tuple)) and not params)):
            raise BeaValueError("q, v and params are only meaningful with a concrete lagrangian=...; for the generic L pass n=<degrees of freedom>")
        if n is None:
            return FreeSeries(free_raw(kind, sch, order, cache, allow_slow), sch)
        n = _check_n(n)
        raw = generic_raw(kind, sch, order, n, cache, allow_slow)
        return Series(raw, sch, Frame.generic_frame(n))
    frame = validate_concrete(lagrangian, q, v, params)
    _check_n(frame.n)
    _check_order(order, sch, MAX_ORDER_CONCRETE)
    if n is not None and _check_n(n) != frame.n:
        raise BeaValueError(f"n={n} does not match the {frame.n} coordinates given in q")
    frame.check_regular()  # before any work
    if fast:
        jets = Jets(frame.n, radical=getattr(sch, "radical_field", None))
        poly = PolynomialLagrangian.from_frame(jets, frame)
        if poly is not None:
            raw = derive_raw(sch, kind, order, frame.n, Derivation(sch, frame.n, jets=jets, concrete=poly))
            return Series(raw, sch, frame)
    raw = generic_raw(kind, sch, order, frame.n, cache, allow_slow)
    return Series(raw, sch, frame)


@renamed(dim="n")
def modified_equation(scheme: SchemeLike, order: int, n: Optional[int] = None, *, lagrangian=None, q: Optional[Sequence] = None,
                      v: Optional[Sequence] = None, params: Sequence = (), cache: bool = True, fast: bool = True,
                      allow_slow: bool = False) -> Series:
    r"""Modified equation :math:`\ddot q = F_h(q, \dot q) = \sum_{k \le N} h^k A_k` of ``scheme``:
    the discrete solution interpolates, to :math:`O(h^{N+1})`, a solution of this ODE."""
    return _derive("modified_equation", scheme, order, n, lagrangian, q, v, params, cache, fast, allow_slow)


@renamed(dim="n")
def modified_lagrangian(scheme: SchemeLike, order: int, n: Optional[int] = None, *, lagrangian=None, q: Optional[Sequence] = None,
                        v: Optional[Sequence] = None, params: Sequence = (), cache: bool = True, fast: bool = True,
                        allow_slow: bool = False) -> Series:
    r"""Modified Lagrangian :math:`L_{mod} = L + \sum_{k \le N} h^k L_k`: its Euler--Lagrange
    equations are the modified equation of ``scheme`` applied to ``L`` (Vermeeren 2017)."""
    return _derive("modified_lagrangian", scheme, order, n, lagrangian, q, v, params, cache, fast, allow_slow)


@renamed(dim="n")
def inverse_modified_lagrangian(scheme: SchemeLike, order: int, n: Optional[int] = None, *, lagrangian=None, q: Optional[Sequence] = None,
                                v: Optional[Sequence] = None, params: Sequence = (), cache: bool = True, fast: bool = True,
                                allow_slow: bool = False) -> Series:
    r"""Inverse modified Lagrangian :math:`L_{inv}` with :math:`\mathrm{mod}(L_{inv}) = L`: the
    scheme applied to :math:`L_{inv}` reproduces the exact flow of ``L`` to :math:`O(h^{N+1})`."""
    return _derive("inverse_modified_lagrangian", scheme, order, n, lagrangian, q, v, params, cache, fast, allow_slow)


@renamed(dim="n")
def compile_torch(kind: str, scheme: SchemeLike, order: int, n: Optional[int] = None, cache: bool = True,
                  allow_slow: bool = False) -> Callable:
    """``f(L, q, v, h)`` for a generic series.

    Without ``n`` (the default) the function is dimension-free: ``q, v`` may have any last
    dimension ``n``; it is built from the cached trees (data, validated on load, never executed) or
    derived once. With ``n=...`` (the number of degrees of freedom): the component formula of that dimension (see :mod:`bea.codegen` for
    its contract on ``h``), loading the generated code from the cache when it is there (no derivation, no SymPy), else deriving,
    generating and caching it. Cached code is executed only after its entry is authenticated (see
    :mod:`bea.cache`)."""
    if not isinstance(kind, str):
        raise BeaTypeError(f"kind must be a string, one of {', '.join(KINDS)}; got {type(kind).__name__}")
    _check_flag("allow_slow", allow_slow)
    if kind not in KINDS:
        raise BeaValueError(f"unknown kind {_short(kind)}; one of {', '.join(KINDS)}")
    if n is None:
        sch = _scheme(scheme)
        return FreeSeries(free_raw(kind, sch, order, cache, allow_slow), sch).to_torch()
    sch, key = _lookup(kind, scheme, order, n, cache)
    if key is not None:
        fn = _cache.load(key, part="source", validate=_load_generated)
        if fn is not None:
            return fn
    raw = generic_raw(kind, sch, order, n, cache, allow_slow)
    series = Series(raw, sch, Frame.generic_frame(n))
    fn = series.to_torch()
    if key is not None:
        _cache.save(key, {"source": series.source}, part="source")  # its own file: no read-modify-write
    return fn


def _load_generated(body) -> Callable:
    from .codegen import HEADER, load_source

    source = body.get("source") if isinstance(body, dict) else None
    if not isinstance(source, str) or not source.startswith(HEADER):
        raise _cache.CacheFormatError("no generated source")
    return load_source(source, "generated")


def series_function(kind: str, scheme: SchemeLike, order: int, n: Optional[int] = None, cache: bool = True,
                    allow_slow: bool = False) -> Callable:
    """``f(L, q, v, h)`` by the cheapest exact route, for library code that knows its dimension.

    The dimension-free function (:func:`compile_torch` without ``n``) in general. For ``n = 1``
    the component formula: it is derived in about a second at every order and evaluates several
    times faster there (one scalar per derivative instead of a chain per tree); the two agree to
    rounding (``tests/test_free.py``). A stage scheme (:mod:`bea.stages`) with exact constants takes the same
    routes (its interior points are solved on trees, :mod:`bea.free.stages`), constants in a radical extension
    (``galerkin3``, the triple jump) included: they are exact tree coefficients (:mod:`bea.field_element`).
    """
    sch = _scheme(scheme)
    if n is not None:  # a positive integer; MAX_DIM caps the component routes only (compile_torch checks it there)
        n = _check_n(n, capped=False)
    if n == 1 or (n is not None and isinstance(sch, StageScheme) and not free_stages_supported(sch)):
        return compile_torch(kind, scheme, order, n=n, cache=cache, allow_slow=allow_slow)
    return compile_torch(kind, scheme, order, cache=cache, allow_slow=allow_slow)
