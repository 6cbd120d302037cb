r"""Data-only encoding of dimension-free results (for the cache).

Trees are nested JSON lists and coefficients ``"p/q"`` strings; a scheme with constants in a radical extension
:math:`\mathbb{Q}(c^{1/d})` has its irrational coefficients stored as lists of their ``d`` coordinates ``"p/q"``
(:class:`~bea.field_element.FieldElement`), with the field as ``"field": ["c", d]``. Decoding validates the whole
structure (node kinds, leaf codes, shapes, rationals) and rebuilds canonical tuples; nothing read
is ever executed, and an entry that does not validate raises ``ValueError`` (the caller then
derives afresh).
"""

from __future__ import annotations

from typing import Any, Dict, List

from fractions import Fraction

from ..errors import BeaError, CacheFormatError
from ..field_element import FieldElement, make
from ..poly import format_rational, parse_rational
from ..radicals import _check_field
from .components import field_of
from .derive import FreeRaw
from .trees import A, UPPER, V, Forest, canonical, decode

_MAX_DEGREE = 64  # of a stored radical c^(1/d): bounds the work of validating it
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


def _coefficient(c: Any) -> Any:
    """``"p/q"``, or for an element of the radical field the list of its ``d`` coordinates ``"p/q"``."""
    return [format_rational(a) for a in c.coeffs] if isinstance(c, FieldElement) else format_rational(c)


def encode(raw: FreeRaw) -> Dict[str, Any]:
    used = sorted({x for p in raw.coeffs.values() for m in p for x in m})
    local = {x: i for i, x in enumerate(used)}
    out = {
        "trees": [_to_json(raw.forest.trees[x]) for x in used],
        "coefficients": {
            str(k): [[[local[x] for x in m], _coefficient(c)] for m, c in p.items()]
            for k, p in raw.coeffs.items()
        },
        "symmetric": bool(raw.symmetric),
        "order": raw.order,
        "kind": raw.kind,
    }
    field = field_of(raw.coeffs)
    if field is not None:  # only then: rational entries are written as before
        out["field"] = [format_rational(field[0]), field[1]]
    return out


def _field(x: Any):
    """The stored field ``[c, d]`` (theta = c^(1/d)), validated as :func:`bea.radicals.radical` validates it."""
    if x is None:
        return None
    if not isinstance(x, list) or len(x) != 2 or type(x[1]) is not int or not 2 <= x[1] <= _MAX_DEGREE:
        raise CacheFormatError("malformed radical field")
    c = parse_rational(x[0])
    try:
        return _check_field(Fraction(int(c.numerator), int(c.denominator)), x[1])
    except (BeaError, ArithmeticError) as e:  # ArithmeticError: a radicand too large for the float value
        raise CacheFormatError(f"invalid radical field: {e}") from None


def _read_coefficient(c: Any, field) -> Any:
    if isinstance(c, str):
        return parse_rational(c)  # canonical "p/q" only, bounded digits
    if field is None or not isinstance(c, list) or len(c) != field[1]:
        raise CacheFormatError("malformed coefficient")
    coords = [parse_rational(a) for a in c]
    if not any(coords[1:]):  # a rational is stored as "p/q": the element form would not be canonical
        raise CacheFormatError("rational coefficient stored as a field element")
    return make(field, coords)


def decode_raw(data: Dict[str, Any]) -> FreeRaw:
    if not isinstance(data, dict):
        raise CacheFormatError("malformed entry")
    forest = Forest()
    ids: List[int] = [forest.id(tree_from_json(t)) for t in data["trees"]]
    field = _field(data.get("field"))
    coeffs: Dict[int, dict] = {}
    for k, terms in data["coefficients"].items():
        poly = {}
        for m, c in terms:
            poly[tuple(sorted(ids[i] for i in m))] = _read_coefficient(c, field)
        coeffs[int(k)] = poly
    order = data["order"]
    if type(order) is not int or sorted(coeffs) != list(range(order + 1)):
        raise CacheFormatError("malformed coefficient table")
    return FreeRaw(str(data["kind"]), forest, order, coeffs, bool(data["symmetric"]))
