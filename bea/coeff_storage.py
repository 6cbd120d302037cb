"""JSON form of a component derivation's result for the cache (:mod:`bea.cache`): its variable table and, per power
of ``h``, polynomials with rational coefficients as canonical ``"p/q"`` strings (:func:`bea.poly.parse_rational`).

Decoding validates everything against what this engine writes -- known variables, indices in range, sorted
monomials, no duplicates, canonical bounded rationals -- and raises :class:`CacheFormatError` otherwise (the
caller then derives afresh). Nothing read is executed.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from .errors import CacheFormatError
from .jets import Jets
from .poly import format_rational, parse_rational

__all__ = ["CacheFormatError", "encode_coeffs", "decode_coeffs"]


def _key_to_json(key: tuple) -> list:
    return [list(x) if isinstance(x, tuple) else x for x in key]


def _key_from_json(raw: Any) -> tuple:
    if not isinstance(raw, list):
        raise CacheFormatError("a variable must be a list")
    return tuple(tuple(x) if isinstance(x, list) else x for x in raw)


def encode_coeffs(jets: Jets, coeffs: Dict[int, object]) -> Dict[str, Any]:
    """JSON-able form of a derivation result: the variable table and, per power of h, a
    polynomial (``{"poly": ...}``) or a vector of them (``{"vector": [...]}``)."""

    def enc(p):
        return [[list(m), format_rational(c)] for m, c in p.items()]

    return {
        "variables": [_key_to_json(k) for k in jets.kind],
        "coefficients": {
            str(k): ({"vector": [enc(p) for p in c]} if isinstance(c, list) else {"poly": enc(c)}) for k, c in coeffs.items()
        },
    }


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_variable(key: tuple, n: int) -> None:
    tag = key[0] if key else None
    if tag == "L" and len(key) == 2 and isinstance(key[1], tuple):
        slots = key[1]
        if all(_is_int(s) and 0 <= s < 2 * n for s in slots) and list(slots) == sorted(slots):
            return
    elif tag == "jet" and len(key) == 3 and _is_int(key[1]) and _is_int(key[2]) and 0 <= key[1] < n and 0 <= key[2] < 10_000:
        return
    elif tag == "param" and len(key) == 2 and _is_int(key[1]) and 0 <= key[1] < 10_000:
        return
    elif tag == "radical" and len(key) == 4 and all(_is_int(x) and 0 < x < 10**12 for x in key[1:]) and 2 <= key[3] <= 64:
        return  # c^(1/d) = (key[1]/key[2])^(1/key[3]) of a scheme's constants (bea.radicals)
    raise CacheFormatError(f"unknown variable {key!r}")


def decode_coeffs(n: int, data: Dict[str, Any], *, vector: Optional[bool] = None, order: Optional[int] = None):
    """Inverse of :func:`encode_coeffs`, validating everything: a :class:`Jets` with the same variable
    table, and coefficients. ``vector``/``order``, if given, are checked too. Raises
    :class:`CacheFormatError` for anything this engine would not have written (a zero denominator, an
    unknown variable, an index out of range, a monomial out of order, a zero or duplicated term...)."""
    if not isinstance(data, dict) or not isinstance(data.get("variables"), list) or not isinstance(data.get("coefficients"), dict):
        raise CacheFormatError("expected {'variables': [...], 'coefficients': {...}}")
    jets = Jets(n)
    keys = [_key_from_json(r) for r in data["variables"]]
    if keys[: len(jets.kind)] != jets.kind:
        raise CacheFormatError("variable table of the cache entry does not match this engine")
    for key in keys[len(jets.kind) :]:
        _check_variable(key, n)
        if key in jets._index:
            raise CacheFormatError(f"duplicated variable {key!r}")
        jets._new(key)
    nvar = len(jets.kind)

    def dec(p):
        if not isinstance(p, list):
            raise CacheFormatError("a polynomial must be a list of terms")
        out = {}
        for term in p:
            if not (isinstance(term, list) and len(term) == 2 and isinstance(term[0], list) and isinstance(term[1], str)):
                raise CacheFormatError("a term must be [monomial, 'num/den']")
            m, c = term
            if not all(_is_int(x) and 0 <= x < nvar for x in m) or m != sorted(m):
                raise CacheFormatError(f"invalid monomial {m!r}")
            try:
                value = parse_rational(c)
            except ValueError as err:
                raise CacheFormatError(str(err)) from None
            mono = tuple(m)
            if mono in out:
                raise CacheFormatError(f"duplicated monomial {m!r}")
            out[mono] = value
        return out

    coeffs = {}
    for k, c in data["coefficients"].items():
        if not (isinstance(k, str) and k.isdigit() and len(k) < 6) or not isinstance(c, dict) or len(c) != 1:
            raise CacheFormatError(f"invalid coefficient entry {k!r}")
        power = int(k)
        if order is not None and power > order:
            raise CacheFormatError(f"coefficient of h^{power} beyond the order {order}")
        if "vector" in c:
            if vector is False or not isinstance(c["vector"], list) or len(c["vector"]) != n:
                raise CacheFormatError("unexpected vector coefficient")
            coeffs[power] = [dec(p) for p in c["vector"]]
        elif "poly" in c:
            if vector is True:
                raise CacheFormatError("expected a vector coefficient")
            coeffs[power] = dec(c["poly"])
        else:
            raise CacheFormatError(f"invalid coefficient entry {k!r}")
    return jets, coeffs
