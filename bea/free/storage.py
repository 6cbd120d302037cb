"""Data-only encoding of dimension-free results (for the cache).

Trees are nested JSON lists and coefficients ``"p/q"`` strings. Decoding validates the whole
structure (node kinds, leaf codes, shapes, rationals) and rebuilds canonical tuples; nothing read
is ever executed, and an entry that does not validate raises ``ValueError`` (the caller then
derives afresh).
"""

from __future__ import annotations

from typing import Any, Dict, List

from ..errors import CacheFormatError
from ..poly import parse_rational
from .derive import FreeRaw
from .trees import A, UPPER, V, Forest, canonical, decode

_VALID_LEAVES = {V, A, UPPER}  # results hold v, the acceleration and the free index only (no jets, no open slots)


def _to_json(t: tuple) -> list:
    return [_to_json(x) if isinstance(x, tuple) else x for x in t]


def _check_child(x: Any) -> tuple:
    if not isinstance(x, list) or not x or x[0] not in (0, 1):
        raise CacheFormatError("malformed tree child")
    if x[0] == 0:
        if len(x) != 2 or type(x[1]) is not int or x[1] not in _VALID_LEAVES:
            raise CacheFormatError("malformed leaf")
        return (0, x[1])
    if len(x) != 4 or x[1] not in (0, 1):
        raise CacheFormatError("malformed edge")
    return (1, x[1], _check_group(x[2]), _check_group(x[3]))


def _check_group(g: Any) -> tuple:
    if not isinstance(g, list) or len(g) > 64:
        raise CacheFormatError("malformed slot group")
    return tuple(_check_child(c) for c in g)


def tree_from_json(x: Any) -> tuple:
    if not isinstance(x, list) or not x:
        raise CacheFormatError("malformed tree")
    if x[0] == 3:
        if len(x) != 2 or x[1] not in (V, A):
            raise CacheFormatError("malformed bare vector")
        return (3, x[1])
    if x[0] != 2 or len(x) != 3:
        raise CacheFormatError("malformed tree root")
    t = (2, _check_group(x[1]), _check_group(x[2]))
    (canon,) = canonical(decode(t)) or [None]  # a stored tree must already be canonical
    if canon != t:
        raise CacheFormatError("stored tree is not in canonical form")
    return t


def encode(raw: FreeRaw) -> Dict[str, Any]:
    used = sorted({x for p in raw.coeffs.values() for m in p for x in m})
    local = {x: i for i, x in enumerate(used)}
    return {
        "trees": [_to_json(raw.forest.trees[x]) for x in used],
        "coefficients": {
            str(k): [[[local[x] for x in m], f"{int(c.numerator)}/{int(c.denominator)}"] for m, c in p.items()]
            for k, p in raw.coeffs.items()
        },
        "symmetric": bool(raw.symmetric),
        "order": raw.order,
        "kind": raw.kind,
    }


def decode_raw(data: Dict[str, Any]) -> FreeRaw:
    if not isinstance(data, dict):
        raise CacheFormatError("malformed entry")
    forest = Forest()
    ids: List[int] = [forest.id(tree_from_json(t)) for t in data["trees"]]
    coeffs: Dict[int, dict] = {}
    for k, terms in data["coefficients"].items():
        poly = {}
        for m, c in terms:
            poly[tuple(sorted(ids[i] for i in m))] = parse_rational(c)  # canonical "p/q" only, bounded digits
        coeffs[int(k)] = poly
    order = data["order"]
    if type(order) is not int or sorted(coeffs) != list(range(order + 1)):
        raise CacheFormatError("malformed coefficient table")
    return FreeRaw(str(data["kind"]), forest, order, coeffs, bool(data["symmetric"]))
