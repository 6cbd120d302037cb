r"""Public entry points: derive series for a scheme, a dimension and an order.

Each derivation accepts either a *generic* Lagrangian (``dim=n``: an undefined function
``L(q_1..q_n, v_1..v_n)``) or a concrete SymPy Lagrangian with its coordinate and velocity
symbols (``lagrangian=L, q=[...], v=[...]``, constants in ``params=[...]``).
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

from . import cache as _cache
from ._version import __version__
from .concrete import PolynomialLagrangian
from .derive import KINDS, Derivation, Raw, derive_raw
from .jets import Jets
from .schemes import Scheme, get_scheme
from .series import Series
from .free.derive import FreeRaw, derive_free
from .free.series import FreeSeries
from .free.storage import decode_raw
from .free.storage import encode as encode_free
from .symbolic import Frame, validate_concrete

SchemeLike = Union[str, Scheme]


def _check_order(order, scheme: Scheme) -> None:
    if isinstance(order, bool) or not isinstance(order, int):
        raise TypeError(f"order must be an integer (the highest power of h kept), got {order!r}")
    if order < 0:
        raise ValueError(f"order must be >= 0 (the highest power of h kept), got {order}")
    if scheme.symmetric and order % 2:
        raise ValueError(
            f"{scheme!r} is symmetric: its series contain only even powers of h, so order={order} is "
            f"ambiguous; use order={order - 1} or order={order + 1}"
        )


def _check_dim(dim) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"dim must be a positive integer, got {dim!r}")
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    return dim


def _cache_key(kind: str, scheme: Scheme, order: int, dim):
    skey = scheme.cache_key()
    if skey is None:
        return None
    return {"kind": kind, "scheme": skey, "order": order, "dim": dim, "engine": __version__}


def _lookup(kind: str, scheme: SchemeLike, order: int, dim: int, cache: bool):
    """Validated scheme, cache key (``None``: not cached) and cached body (``None``: absent)."""
    sch = get_scheme(scheme)
    _check_order(order, sch)
    _check_dim(dim)
    key = _cache_key(kind, sch, order, dim) if cache else None
    return sch, key, (_cache.load(key) if key is not None else None)


def generic_raw(kind: str, scheme: SchemeLike, order: int, dim: int, cache: bool = True) -> Raw:
    """Coefficients in jet variables for the generic Lagrangian (from the cache when possible)."""
    sch, key, body = _lookup(kind, scheme, order, dim, cache)
    if key is not None:
        if body is not None:
            try:
                jets, coeffs = _cache.decode_coeffs(dim, body["raw"])
                return Raw(kind, jets, order, coeffs, bool(body["symmetric"]))
            except (KeyError, ValueError, TypeError):
                pass  # unusable entry: fall through and regenerate
    raw = derive_raw(sch, kind, order, dim, Derivation(sch, dim))
    if not sch.symmetric and raw.symmetric and order % 2:
        raise ValueError(f"{sch!r} turned out symmetric (only even powers of h); use an even order")
    if key is not None:
        body = {"raw": _cache.encode_coeffs(raw.jets, raw.coeffs), "symmetric": raw.symmetric}
        _cache.save(key, body)
    return raw


def free_raw(kind: str, scheme: SchemeLike, order: int, cache: bool = True) -> FreeRaw:
    """Dimension-free coefficients (trees) for the generic Lagrangian, from the cache when possible.

    Cache entries are data (trees and rationals), validated when read; nothing is executed."""
    sch = get_scheme(scheme)
    _check_order(order, sch)
    key = _cache_key(kind, sch, order, "any") if cache else None
    body = _cache.load(key) if key is not None else None
    if body is not None:
        try:
            raw = decode_raw(body.get("trees"))
            if raw.kind == kind and raw.order == order:
                return raw
        except (KeyError, ValueError, TypeError, AttributeError, ZeroDivisionError):
            pass  # unusable entry: derive again and overwrite it
    raw = derive_free(sch, kind, order)
    if not sch.symmetric and raw.symmetric and order % 2:
        raise ValueError(f"{sch!r} turned out symmetric (only even powers of h); use an even order")
    if key is not None:
        _cache.save(key, {"trees": encode_free(raw)})
    return raw


def _derive(kind: str, scheme: SchemeLike, order: int, dim: Optional[int], lagrangian, q, v, params, cache: bool, fast: bool = True) -> Series:
    """``fast``: derive polynomial Lagrangians with constant mass directly (see :mod:`bea.concrete`)
    instead of substituting into the generic formula."""
    sch = get_scheme(scheme)
    if lagrangian is None:
        if q is not None or v is not None:
            raise ValueError("q and v are only meaningful with a concrete lagrangian=...")
        if dim is None:
            return FreeSeries(free_raw(kind, sch, order, cache), sch)
        n = _check_dim(dim)
        raw = generic_raw(kind, sch, order, n, cache)
        return Series(raw, sch, Frame.generic_frame(n))
    frame = validate_concrete(lagrangian, q, v, params)
    if dim is not None and _check_dim(dim) != frame.n:
        raise ValueError(f"dim={dim} does not match the {frame.n} coordinates given in q")
    frame.check_regular()  # before any work
    if fast:
        jets = Jets(frame.n)
        poly = PolynomialLagrangian.from_frame(jets, frame)
        if poly is not None:
            _check_order(order, sch)
            raw = derive_raw(sch, kind, order, frame.n, Derivation(sch, frame.n, jets=jets, concrete=poly))
            return Series(raw, sch, frame)
    raw = generic_raw(kind, sch, order, frame.n, cache)
    return Series(raw, sch, frame)


def modified_equation(scheme: SchemeLike, order: int, dim: Optional[int] = None, *, lagrangian=None, q: Optional[Sequence] = None,
                      v: Optional[Sequence] = None, params: Sequence = (), cache: bool = True, fast: bool = True) -> Series:
    r"""Modified equation :math:`\ddot q = F_h(q, \dot q) = \sum_{k \le N} h^k A_k` of ``scheme``:
    the discrete solution interpolates, to :math:`O(h^{N+1})`, a solution of this ODE."""
    return _derive("modified_equation", scheme, order, dim, lagrangian, q, v, params, cache, fast)


def modified_lagrangian(scheme: SchemeLike, order: int, dim: Optional[int] = None, *, lagrangian=None, q: Optional[Sequence] = None,
                        v: Optional[Sequence] = None, params: Sequence = (), cache: bool = True, fast: bool = True) -> Series:
    r"""Modified Lagrangian :math:`L_{mod} = L + \sum_{k \le N} h^k L_k`: its Euler--Lagrange
    equations are the modified equation of ``scheme`` applied to ``L`` (Vermeeren 2017)."""
    return _derive("modified_lagrangian", scheme, order, dim, lagrangian, q, v, params, cache, fast)


def inverse_modified_lagrangian(scheme: SchemeLike, order: int, dim: Optional[int] = None, *, lagrangian=None, q: Optional[Sequence] = None,
                                v: Optional[Sequence] = None, params: Sequence = (), cache: bool = True, fast: bool = True) -> Series:
    r"""Inverse modified Lagrangian :math:`L_{inv}` with :math:`\mathrm{mod}(L_{inv}) = L`: the
    scheme applied to :math:`L_{inv}` reproduces the exact flow of ``L`` to :math:`O(h^{N+1})`."""
    return _derive("inverse_modified_lagrangian", scheme, order, dim, lagrangian, q, v, params, cache, fast)


def compile_torch(kind: str, scheme: SchemeLike, order: int, dim: Optional[int] = None, cache: bool = True) -> Callable:
    """``f(L, q, v, h)`` for a generic series.

    Without ``dim`` (the default) the function is dimension-free: ``q, v`` may have any last
    dimension ``n``; it is built from the cached trees (data, validated on load) or derived once.
    With ``dim=n`` it is the component formula of that dimension (generated code, cached)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; one of {', '.join(KINDS)}")
    if dim is None:
        sch = get_scheme(scheme)
        return FreeSeries(free_raw(kind, sch, order, cache), sch).to_torch()
    sch, key, body = _lookup(kind, scheme, order, dim, cache)
    if body is not None and isinstance(body.get("source"), str):
        from .codegen import load_source

        return load_source(body["source"], "generated")
    raw = generic_raw(kind, sch, order, dim, cache)
    series = Series(raw, sch, Frame.generic_frame(dim))
    fn = series.to_torch()
    if key is not None:
        body = _cache.load(key) or {"raw": _cache.encode_coeffs(raw.jets, raw.coeffs), "symmetric": raw.symmetric}
        body["source"] = series.source
        _cache.save(key, body)
    return fn


def series_function(kind: str, scheme: SchemeLike, order: int, n: Optional[int] = None, cache: bool = True) -> Callable:
    """``f(L, q, v, h)`` by the cheapest exact route, for library code that knows its dimension.

    The dimension-free function (:func:`compile_torch` without ``dim``) in general. For ``n = 1``
    the component formula: it is derived in about a second at every order and evaluates several
    times faster there (one scalar per derivative instead of a chain per tree); the two agree to
    rounding (``tests/test_free.py``).
    """
    if n == 1:
        return compile_torch(kind, scheme, order, dim=1, cache=cache)
    return compile_torch(kind, scheme, order, cache=cache)
