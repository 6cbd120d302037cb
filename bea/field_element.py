r"""Exact coefficients in a radical extension :math:`\mathbb{Q}(\theta)`, :math:`\theta = c^{1/d}`, for the
dimension-free engine (:mod:`bea.free`).

The component engine carries :math:`\theta` as a polynomial variable (:class:`bea.poly.Rules`). On trees the
coefficients are numbers, so :math:`\theta` goes into the numbers: :class:`FieldElement` is
:math:`\sum_{k<d} a_k \theta^k` with exact rational :math:`a_k` (the engine's :data:`bea.poly.Q`). Unlike
:class:`~bea.radicals.RadicalNumber` it computes no float value on construction (a series derivation makes
millions of them); the arithmetic is the same (:func:`bea.radicals.mul_coords`, :func:`~bea.radicals.inverse_coords`).

Canonical form, so that equality, hashing and the zero test are exact: an element whose coordinates beyond
:math:`a_0` vanish is returned as the rational :math:`a_0` itself; a :class:`FieldElement` is therefore never
rational, in particular never zero (``bool`` is true), and equals only a :class:`FieldElement` of the same field
with the same coordinates. Rational-only schemes never meet this type.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from .errors import BeaTypeError
from .poly import Q, to_rational
from .radicals import Field, RadicalNumber, check_same_field, inverse_coords, mul_coords, radical_sympy

__all__ = ["FieldElement", "coefficient", "make"]


def make(field: Field, coords) -> Any:
    """The element with coordinates ``coords`` (length ``d``): a :class:`FieldElement`, or the rational ``a_0``."""
    if not any(coords[1:]):
        return Q(coords[0])
    return FieldElement(field, tuple(Q(x) for x in coords))


def coefficient(x: Any) -> Any:
    """``x`` as a series coefficient: a rational (:func:`bea.poly.to_rational`), or a :class:`FieldElement` for a
    :class:`~bea.radicals.RadicalNumber` or a :class:`FieldElement`."""
    if isinstance(x, FieldElement):
        return x
    if isinstance(x, RadicalNumber):
        return make(x.field, [Q(a.numerator, a.denominator) for a in x.coeffs])
    return to_rational(x)


class FieldElement:
    r""":math:`\sum_{k<d} a_k \theta^k`, not rational (module docstring). Immutable."""

    __slots__ = ("field", "coeffs")

    def __init__(self, field: Field, coeffs: Tuple[Any, ...]):
        self.field = field
        self.coeffs = coeffs

    # -- coercion
    def _other(self, o: Any) -> Optional[Tuple[Any, ...]]:
        """``o``'s coordinates in this field; None for what is not an exact number of it."""
        if isinstance(o, FieldElement):
            check_same_field(self.field, o.field)
            return o.coeffs
        if isinstance(o, RadicalNumber):
            return self._other(coefficient(o))
        if isinstance(o, bool) or isinstance(o, float) and not hasattr(o, "exact"):
            return None  # a float has no exact place here: refuse rather than round
        try:
            r = to_rational(o)
        except BeaTypeError:
            return None
        return (r,) + (Q(0),) * (self.field[1] - 1)

    def _make(self, coords) -> Any:
        return make(self.field, coords)

    # -- arithmetic
    def __add__(self, o):
        b = self._other(o)
        return NotImplemented if b is None else self._make([x + y for x, y in zip(self.coeffs, b)])

    __radd__ = __add__

    def __sub__(self, o):
        b = self._other(o)
        return NotImplemented if b is None else self._make([x - y for x, y in zip(self.coeffs, b)])

    def __rsub__(self, o):
        b = self._other(o)
        return NotImplemented if b is None else self._make([y - x for x, y in zip(self.coeffs, b)])

    def __mul__(self, o):
        b = self._other(o)
        if b is None:
            return NotImplemented
        if not any(b[1:]):  # by a rational: no reduction needed
            return self._make([x * b[0] for x in self.coeffs]) if b[0] else Q(0)
        return self._make(mul_coords(self.field, self.coeffs, b))

    __rmul__ = __mul__

    def __truediv__(self, o):
        b = self._other(o)
        if b is None:
            return NotImplemented
        if not any(b[1:]):
            if not b[0]:
                raise ZeroDivisionError("division of a field element by zero")
            return self._make([x / b[0] for x in self.coeffs])
        return self._make(mul_coords(self.field, self.coeffs, inverse_coords(self.field, b)))

    def __rtruediv__(self, o):
        b = self._other(o)
        if b is None:
            return NotImplemented
        return self._make(mul_coords(self.field, b, inverse_coords(self.field, self.coeffs)))

    def __pow__(self, k: int):
        if isinstance(k, bool) or not isinstance(k, int):
            return NotImplemented
        if k < 0:
            return (1 / self) ** (-k)
        out: Any = Q(1)
        for _ in range(k):
            out = out * self
        return out

    def __neg__(self):
        return FieldElement(self.field, tuple(-x for x in self.coeffs))

    def __pos__(self):
        return self

    # -- exact comparison: canonical coordinates
    def __eq__(self, o):
        if isinstance(o, FieldElement):
            return o.field == self.field and o.coeffs == self.coeffs
        if isinstance(o, RadicalNumber):
            return self == coefficient(o)
        return False if isinstance(o, (int, float)) or hasattr(o, "numerator") else NotImplemented

    def __ne__(self, o):
        eq = self.__eq__(o)
        return eq if eq is NotImplemented else not eq

    def __hash__(self):
        return hash((self.field, self.coeffs))

    def __bool__(self):
        return True  # canonical: a rational value is returned as a rational, so this is never zero

    # -- values
    def __float__(self) -> float:
        return float(RadicalNumber(self.field, self.coeffs))  # rounded from 50 digits there

    def _sympy_(self):
        import sympy

        theta = radical_sympy(self.field)
        return sympy.Add(*(sympy.Rational(int(a.numerator), int(a.denominator)) * theta**k for k, a in enumerate(self.coeffs)))

    def __repr__(self) -> str:
        c, d = self.field
        terms = " + ".join(f"({a})*{c}^({k}/{d})" for k, a in enumerate(self.coeffs) if a)
        return f"FieldElement({terms})"
