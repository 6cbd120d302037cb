r"""Sparse polynomials over :math:`\mathbb{Q}` in normal form: the coefficients of :mod:`bea.hseries`.

A polynomial is a ``dict`` mapping a *monomial* to its coefficient, where a monomial is a sorted tuple of
variable indices with repetition (``(3, 3, 7)`` is :math:`x_3^2 x_7`); coefficients are exact rationals
(gmpy2's ``mpq`` when installed, else :class:`fractions.Fraction`).

Products are put in normal form by :class:`Rules`:

* variables with an index below ``rules.nil`` are first-order infinitesimals (a monomial with two
  of them vanishes); they carry the variation :math:`q_j \to q_j + h\varepsilon` used to read
  off discrete Euler--Lagrange equations;
* ``rules.reduce = (lead, replacement)`` rewrites any monomial divisible by the monomial ``lead``
  by substituting the polynomial ``replacement`` for ``lead``. The engine uses it for
  :math:`\det(M)\cdot\delta = 1` (:math:`\delta = 1/\det M`) with ``lead`` the product of the
  diagonal of :math:`M` and :math:`\delta`: a single relation is its own Gröbner basis, so this
  gives a canonical normal form and keeps expressions free of identically-zero terms.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Dict, List, Optional, Tuple

from .errors import BeaTypeError, BeaValueError

try:  # gmpy2's rationals are about 10x faster than fractions.Fraction
    from gmpy2 import mpq as Q
except ImportError:  # pragma: no cover - exercised only without gmpy2
    Q = Fraction  # type: ignore[misc,assignment]

Monomial = Tuple[int, ...]
Poly = Dict[Monomial, object]

ONE: Monomial = ()


#: the most digits a stored numerator or denominator may have (the largest the engine writes, at order 24
#: on the concrete path, have a few hundred); a longer one is refused before ``int()`` reads it
MAX_DIGITS = 4000
_CANONICAL = re.compile(r"(0|-?[1-9][0-9]{0,%d})/([1-9][0-9]{0,%d})" % (MAX_DIGITS - 1, MAX_DIGITS - 1))


def format_rational(c: object) -> str:
    """``"p/q"`` in lowest terms (``q >= 1``, ``0`` as ``"0/1"``), the canonical form that :func:`parse_rational`
    reads back, for any exact rational (``int``, ``Fraction``, ``mpq``)."""
    return f"{int(c.numerator)}/{int(c.denominator)}"


def parse_rational(text: object):
    """The rational written as ``"p/q"`` by the engine, checked to be in exactly that canonical form: ASCII digits
    only (``[0-9]``, not ``\\d``, which accepts other scripts' digits), no sign but an optional ``-`` on ``p``, no
    ``_``, spaces, decimals or exponents, no leading zeros, ``q >= 1``, lowest terms (``0`` as ``"0/1"``), at most
    :data:`MAX_DIGITS` digits each. ``ValueError`` otherwise (``"0.5"``, ``"1_0/24"``, ``"2/4"``,
    ``"1e999999999"`` -- refused by the pattern, without building a huge integer)."""
    m = _CANONICAL.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise BeaValueError(f"invalid coefficient {str(text)[:50]!r} (canonical 'p/q': ASCII digits, q >= 1, at most "
                         f"{MAX_DIGITS} digits each)")
    q = int(m.group(2))
    value = Q(int(m.group(1)), q)
    if value.denominator != q:  # Q reduces: a different denominator means p/q was not in lowest terms
        raise BeaValueError(f"invalid coefficient {text[:50]!r} (not in lowest terms)")
    return value


def to_rational(x: object):
    """Exact rational from an int, Fraction, gmpy2 rational, SymPy Rational or :class:`Exact`."""
    exact = getattr(x, "exact", None)
    if exact is not None:
        return Q(exact.numerator, exact.denominator)
    if isinstance(x, bool):
        raise BeaTypeError("a boolean is not a coefficient")
    if isinstance(x, int):
        return Q(x)
    if getattr(x, "coeffs", None) is not None and getattr(x, "field", None) is not None:
        raise BeaTypeError(f"{x!r} is irrational: it is exact only as a polynomial in its radical (bea.hseries)")
    if isinstance(x, float):
        # exact binary value of the float: correct, if not pretty. Use Fraction or
        # bea.schemes.exact() for decimal constants such as 0.3.
        return Q(*x.as_integer_ratio())
    if isinstance(x, Fraction):
        return Q(x.numerator, x.denominator)
    if type(x) is type(Q(0)):
        return x
    p, q = getattr(x, "p", None), getattr(x, "q", None)  # sympy.Rational
    if isinstance(p, int) and isinstance(q, int):
        return Q(p, q)
    raise BeaTypeError(f"cannot use {x!r} (type {type(x).__name__}) as an exact coefficient")


# --------------------------------------------------------------------------- polynomials


def padd(p: Poly, q: Poly, scale=1) -> Poly:
    """``p + scale*q`` (new dict)."""
    out = dict(p)
    for m, c in q.items():
        v = out.get(m, 0) + scale * c
        if v:
            out[m] = v
        else:
            out.pop(m, None)
    return out


def pscale(p: Poly, c) -> Poly:
    if not c:
        return {}
    return {m: c * a for m, a in p.items()}


class Rules:
    """Normal-form rules for monomials (see module docstring). Immutable."""

    __slots__ = ("nil", "lead", "replacement", "_lead_set", "radical")

    def __init__(self, nil: int = 0, reduce: Optional[Tuple[Monomial, "Poly"]] = None,
                 radical: Optional[Tuple[int, int, object]] = None):
        self.nil = nil
        self.lead, self.replacement = reduce if reduce is not None else (None, None)
        self._lead_set = set(self.lead) if self.lead else None
        #: ``(var, d, c)``: the variable ``var`` is :math:`\theta = c^{1/d}` (:mod:`bea.radicals`), reduced by
        #: :math:`\theta^d = c`; its leading monomial shares no variable with ``lead``, so the two rules
        #: together stay a Groebner basis and the normal form stays canonical
        self.radical = radical

    def __repr__(self) -> str:
        return f"Rules(nil={self.nil}, lead={self.lead}, radical={self.radical})"


PLAIN = Rules()


def _divides(lead: Monomial, m: Monomial) -> bool:
    for x in set(lead):
        if m.count(x) < lead.count(x):
            return False
    return True


def _remove(m: Monomial, lead: Monomial) -> Monomial:
    lst = list(m)
    for x in lead:
        lst.remove(x)
    return tuple(lst)


def _reduce_radical(m: Monomial, rules: Rules) -> Tuple[Monomial, object]:
    r""":math:`\theta^k \to c^{\lfloor k/d\rfloor}\theta^{k \bmod d}` (``rules.radical``)."""
    var, d, c = rules.radical
    k = m.count(var)
    if k < d:
        return m, 1
    drop = k - k % d
    i = m.index(var)
    return m[:i] + m[i + drop:], c ** (k // d)


def reduce_monomial(m: Monomial, rules: Rules) -> List[Tuple[Monomial, object]]:
    """Normal form of one monomial as ``[(monomial, coefficient), ...]``."""
    nil = rules.nil
    if nil and len(m) > 1 and m[1] < nil:
        return []
    if rules.radical is not None:
        m, f = _reduce_radical(m, rules)
        if f != 1:
            return [(mm, f * c) for mm, c in reduce_monomial(m, rules)]
    lead = rules.lead
    if lead is None or not rules._lead_set.issubset(m) or not _divides(lead, m):
        return [(m, 1)]
    rest = _remove(m, lead)
    out: Dict[Monomial, object] = {}
    for rm, rc in rules.replacement.items():
        for mm, cc in reduce_monomial(merge(rest, rm), rules):
            out[mm] = out.get(mm, 0) + rc * cc
    return [(mm, c) for mm, c in out.items() if c]


def merge(a: Monomial, b: Monomial) -> Monomial:
    if not a:
        return b
    if not b:
        return a
    return tuple(sorted(a + b))


def pmul(p: Poly, q: Poly, rules: Rules = PLAIN, out: Optional[Poly] = None) -> Poly:
    """Product of two polynomials, in normal form under ``rules``; accumulated into ``out`` if given."""
    if len(p) > len(q):
        p, q = q, p
    accumulate = out is not None
    if out is None:
        out = {}
    get = out.get
    nil = rules.nil
    lead_set = rules._lead_set
    if rules.radical is not None:  # theta^d = c as well
        var, d = rules.radical[:2]
        for m1, c1 in p.items():
            for m2, c2 in q.items():
                m = merge(m1, m2)
                if (lead_set is not None and lead_set.issubset(m)) or m.count(var) >= d:
                    for mm, cc in reduce_monomial(m, rules):
                        out[mm] = get(mm, 0) + c1 * c2 * cc
                elif not (nil and len(m) > 1 and m[1] < nil):
                    out[m] = get(m, 0) + c1 * c2
        return out if accumulate else {m: c for m, c in out.items() if c}
    for m1, c1 in p.items():
        for m2, c2 in q.items():
            m = merge(m1, m2)
            if nil and len(m) > 1 and m[1] < nil:
                continue
            if lead_set is not None and lead_set.issubset(m):
                for mm, cc in reduce_monomial(m, rules):
                    out[mm] = get(mm, 0) + c1 * c2 * cc
                continue
            out[m] = get(m, 0) + c1 * c2
    return out if accumulate else {m: c for m, c in out.items() if c}


def pmul_var(p: Poly, var: int, rules: Rules = PLAIN) -> Poly:
    """``var * p``."""
    out: Poly = {}
    for m, c in p.items():
        for mm, cc in reduce_monomial(tuple(sorted(m + (var,))), rules):
            out[mm] = out.get(mm, 0) + c * cc
    return {m: c for m, c in out.items() if c}


def pdiff(p: Poly, var: int) -> Poly:
    """Partial derivative with respect to variable ``var``."""
    out: Poly = {}
    for m, c in p.items():
        k = m.count(var)
        if k:
            i = m.index(var)
            mm = m[:i] + m[i + 1 :]
            out[mm] = out.get(mm, 0) + k * c
    return {m: c for m, c in out.items() if c}


def pvars(p: Poly) -> set:
    return {x for m in p for x in m}
