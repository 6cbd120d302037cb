r"""Truncated power series in ``h`` with sparse polynomial coefficients.

This is the arithmetic kernel of the derivations. SymPy expressions are far too slow for the
expansions behind an ``h^8`` modified Lagrangian, so the engine works with

* **polynomials** over :math:`\mathbb{Q}` (:mod:`bea.poly`): a ``dict`` mapping a *monomial* to its
  coefficient, where a monomial is a sorted tuple of variable indices with repetition
  (``(3, 3, 7)`` is :math:`x_3^2 x_7`);
* **h-series** :class:`HSeries`: a list of such polynomials, entry ``k`` being the coefficient of
  :math:`h^k`, together with the highest power that is *known* (``order``). Operations track that
  order exactly, so a scheme that divides by ``h`` loses one power of precision visibly instead of
  silently producing wrong high-order terms.

Every series carries the :class:`~bea.poly.Rules` that put its monomials in normal form
(infinitesimal variables, the relation :math:`\det(M)\cdot\delta = 1`; see :mod:`bea.poly`).
The polynomial names (``Q``, ``Poly``, ``pmul``, ...) are re-exported here, where the engine has
always imported them from.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Mapping, Tuple

from .errors import BeaTypeError, BeaValueError, InconsistentSchemeError, SeriesError, UnsupportedSchemeError
from .poly import ONE, PLAIN, Monomial, Poly, Q, Rules, padd, pdiff, pmul, pmul_var, pscale, pvars  # noqa: F401
from .poly import merge, reduce_monomial, to_rational  # noqa: F401
from .field_element import FieldElement, coefficient
from .radicals import RadicalNumber


EXACT = 10**6  # "order" of an exact series (a constant, h, h^2/2): known to every power


class HSeries:
    r"""Truncated series :math:`\sum_{k=0}^{\text{order}} h^k c_k` with polynomial ``c_k``.

    ``order`` is the highest power of ``h`` that is known; arithmetic propagates it exactly.
    ``c`` may be shorter than ``order + 1``: missing coefficients are zero (so exact series such as
    ``h`` itself are cheap). ``nil`` holds the normal-form :class:`Rules` (see module docstring).
    """

    __slots__ = ("c", "order", "nil")

    def __init__(self, coeffs: List[Poly], order: int, nil: Rules = PLAIN):
        c = list(coeffs[: order + 1])
        while c and not c[-1]:
            c.pop()
        self.c = c
        self.order = order
        self.nil = nil

    # -- constructors
    @classmethod
    def const(cls, value, order: int = EXACT, nil: Rules = PLAIN) -> "HSeries":
        r = to_rational(value)
        return cls([{ONE: r}] if r else [], order, nil)

    @classmethod
    def var(cls, index: int, order: int = EXACT, nil: Rules = PLAIN) -> "HSeries":
        return cls([{(index,): Q(1)}], order, nil)

    @classmethod
    def h_power(cls, k: int, coeff=1, order: int = EXACT, nil: Rules = PLAIN) -> "HSeries":
        coeffs: List[Poly] = [{} for _ in range(k)] + [{ONE: to_rational(coeff)}]
        return cls(coeffs, order, nil)

    # -- queries
    def __getitem__(self, k: int) -> Poly:
        """Coefficient of ``h^k`` (zero beyond the stored list; error beyond ``order``)."""
        if k > self.order:
            raise SeriesError(f"series known only to h^{self.order}; h^{k} was asked for")
        return self.c[k] if k < len(self.c) else {}

    def valuation(self) -> int:
        for k, p in enumerate(self.c):
            if p:
                return k
        return EXACT

    def is_zero(self) -> bool:
        return not self.c

    def truncate(self, order: int) -> "HSeries":
        """Keep powers up to ``h^order``; ``order`` may not exceed what is known."""
        if order > self.order:
            raise SeriesError(f"series known only to h^{self.order}, cannot extend to h^{order}")
        return HSeries(self.c, order, self.nil)

    def truncate_soft(self, order: int) -> "HSeries":
        """Truncate to ``min(order, self.order)``."""
        return self if self.order <= order and len(self.c) <= order + 1 else HSeries(self.c, min(order, self.order), self.nil)

    def variables(self) -> set:
        s: set = set()
        for p in self.c:
            s |= pvars(p)
        return s

    # -- arithmetic
    def _coerce(self, other) -> "HSeries":
        if isinstance(other, HSeries):
            return other
        return HSeries.const(other, EXACT, self.nil)

    def __add__(self, other):
        try:
            o = self._coerce(other)
        except TypeError:
            return NotImplemented
        order = min(self.order, o.order)
        n = min(order + 1, max(len(self.c), len(o.c)))
        out = [padd(self[k] if k < len(self.c) else {}, o.c[k] if k < len(o.c) else {}) for k in range(n)]
        return HSeries(out, order, self.nil if self.nil is not PLAIN else o.nil)

    __radd__ = __add__

    def __neg__(self):
        return HSeries([pscale(p, -1) for p in self.c], self.order, self.nil)

    def __sub__(self, other):
        try:
            return self + (-self._coerce(other))
        except TypeError:
            return NotImplemented

    def __rsub__(self, other):
        try:
            return self._coerce(other) + (-self)
        except TypeError:
            return NotImplemented

    def __mul__(self, other):
        if isinstance(other, (RadicalNumber, FieldElement)) and self.nil is not PLAIN:
            # a component series: theta is a variable that its rules must have (else UnsupportedSchemeError)
            return mul(self, HSeries([radical_poly(other, self.nil)], EXACT, self.nil))
        if not isinstance(other, HSeries):
            try:
                r = to_rational(other)
            except TypeError:
                if isinstance(other, (RadicalNumber, FieldElement)):
                    # the dimension-free engine's plain rules have no variable for theta: it goes into the coefficients
                    return HSeries([pscale(p, coefficient(other)) for p in self.c], self.order, self.nil)
                return NotImplemented
            return HSeries([pscale(p, r) for p in self.c], self.order, self.nil)
        return mul(self, other)

    __rmul__ = __mul__

    def __truediv__(self, other):
        if isinstance(other, HSeries):
            return self._div_series(other)
        if isinstance(other, (RadicalNumber, FieldElement)):
            return self * (1 / other)
        try:
            r = to_rational(other)
        except TypeError:
            return NotImplemented
        if not r:
            raise ZeroDivisionError("division of a series by zero")
        return self * (1 / r)

    def __pow__(self, k: int):
        if not isinstance(k, int) or k < 0:
            raise BeaTypeError("only non-negative integer powers of series are supported")
        out = HSeries.const(1, EXACT, self.nil)
        for _ in range(k):
            out = out * self
        return out

    def _div_series(self, d: "HSeries") -> "HSeries":
        """Division by ``c h^k`` (the only case schemes need, as in ``(b - a)/h``)."""
        k = d.valuation()
        if k == EXACT:
            raise ZeroDivisionError("division by a series that is zero")
        lead = d.c[k]
        if list(lead) != [ONE] or len(d.c) > k + 1:
            raise SeriesError("a series can only be divided by a constant times a power of h")
        if self.valuation() < k:
            raise InconsistentSchemeError(
                f"cannot divide by h^{k}: the dividend has a term of lower order in h "
                "(is the discrete Lagrangian consistent?)"
            )
        inv = 1 / lead[ONE]
        # d is known to h^{d.order}: relative error O(h^{d.order-k+1}) -> result order below
        order = min(self.order - k, d.order - 2 * k + min(self.valuation(), EXACT))
        return HSeries([pscale(p, inv) for p in self.c[k:]], order, self.nil)

    def __repr__(self) -> str:
        terms = [f"h^{k}:{len(p)}" for k, p in enumerate(self.c) if p]
        return f"HSeries(order={self.order}; terms {', '.join(terms) or '0'})"


def radical_poly(x, rules: Rules) -> Poly:
    r""":math:`\sum_k a_k\theta^k` (a :class:`RadicalNumber` or :class:`FieldElement`) as a polynomial in the variable of :math:`\theta` (``rules.radical``)."""
    if rules.radical is None or (rules.radical[2], rules.radical[1]) != (Q(x.field[0].numerator, x.field[0].denominator), x.field[1]):
        raise UnsupportedSchemeError(
            f"{x!r} lies in Q({x.field[0]}^(1/{x.field[1]})), which this derivation was not set up for: a scheme's "
            "irrational constants must all lie in the one radical extension that its `radical_field` names")
    var = rules.radical[0]
    return {(var,) * k: Q(a.numerator, a.denominator) for k, a in enumerate(x.coeffs) if a}


def mul(a: HSeries, b: HSeries, limit: int = EXACT) -> HSeries:
    """Product, known to the exact order that the factors allow, and computed only to ``h^limit``."""
    va, vb = a.valuation(), b.valuation()
    order = min(a.order + vb, b.order + va, EXACT, limit)
    nil = a.nil if a.nil is not PLAIN else b.nil
    if va == EXACT or vb == EXACT:
        return HSeries([], order if order < EXACT else EXACT, nil)
    n = min(order + 1, len(a.c) + len(b.c) - 1)
    out: List[Poly] = [{} for _ in range(max(n, 0))]
    for i in range(va, min(len(a.c), n)):
        pa = a.c[i]
        if not pa:
            continue
        for j in range(vb, min(len(b.c), n - i)):
            pb = b.c[j]
            if pb:
                pmul(pa, pb, nil, out[i + j])
    return HSeries([{m: c for m, c in p.items() if c} for p in out], order, nil)


def mul_var(a: HSeries, var: int) -> HSeries:
    return HSeries([pmul_var(p, var, a.nil) for p in a.c], a.order, a.nil)


def diff(a: HSeries, var: int) -> HSeries:
    return HSeries([pdiff(p, var) for p in a.c], a.order, a.nil)


def dot(a: List["HSeries"], b: List["HSeries"], order: int = EXACT) -> "HSeries":
    r""":math:`\sum_i a_i b_i`, truncated at ``h^order``."""
    out = HSeries([], EXACT, a[0].nil if a else PLAIN)
    for x, y in zip(a, b):
        if not x.is_zero() and not y.is_zero():
            out = out + mul(x, y, order)
    return out


def add_all(items: Iterable[HSeries], order: int = EXACT, nil: Rules = PLAIN) -> HSeries:
    out = HSeries([], order, nil)
    for it in items:
        out = out + it
    return out


def _power_precision(a: HSeries, values: Mapping[int, HSeries], order: int) -> Dict[Tuple[int, int], int]:
    """The power of ``h`` to which each power ``var^k`` of a substituted variable is needed: ``order``
    minus the lowest ``h``-degree of a monomial of ``a`` that uses it, raised to cover ``var^j``,
    ``j < k`` (``var^k`` is built from ``var^(k-1)``)."""
    need: Dict[Tuple[int, int], int] = {}
    for hk in range(min(len(a.c), order + 1)):
        for mono in a.c[hk]:
            prev = None
            for x in mono:
                if x in values and x != prev:
                    key = (x, mono.count(x))
                    if need.get(key, -1) < order - hk:
                        need[key] = order - hk
                prev = x
    for (x, k), p in list(need.items()):
        for j in range(1, k):
            if need.get((x, j), -1) < p:
                need[(x, j)] = p
    return need


def substitute(a: HSeries, values: Mapping[int, HSeries], order: int) -> HSeries:
    """Replace each variable in ``values`` by a series, truncating at ``h^order``.

    Variables not in ``values`` are kept. Powers of the substituted series are cached, because the
    same factor (e.g. :math:`\\ddot q`) occurs in many monomials. The result is known to the lowest
    order that any contributing term is known to.
    """
    nil = a.nil
    need = _power_precision(a, values, order)
    powers: Dict[Tuple[int, int], HSeries] = {}

    def power(var: int, k: int) -> HSeries:
        key = (var, k)
        if key not in powers:
            p = need.get(key, order)
            powers[key] = values[var].truncate_soft(p) if k == 1 else mul(power(var, k - 1), values[var], p)
        return powers[key]

    known = min(a.order, order)
    out: List[Poly] = [{} for _ in range(known + 1)]
    for hk in range(min(len(a.c), known + 1)):
        for mono, coef in a.c[hk].items():
            kept: List[int] = []
            factors: List[HSeries] = []
            i = 0
            while i < len(mono):
                x = mono[i]
                j = i
                while j < len(mono) and mono[j] == x:
                    j += 1
                if x in values:
                    factors.append(power(x, j - i))
                else:
                    kept.extend(mono[i:j])
                i = j
            term = HSeries([{} for _ in range(hk)] + [{tuple(kept): coef}], EXACT, nil)
            for f in factors:
                term = mul(term, f, known)
                if term.is_zero():
                    break
            if term.is_zero():
                continue
            known = min(known, term.order)
            for k in range(term.valuation(), min(len(term.c), known + 1)):
                acc = out[k]
                for m, c in term.c[k].items():
                    acc[m] = acc.get(m, 0) + c
    return HSeries([{m: c for m, c in p.items() if c} for p in out], known, nil)


class SeriesVector:
    """A vector of :class:`HSeries` with elementwise arithmetic, so that schemes written for
    tensors of shape ``(..., n)`` run unchanged on series (numpy object arrays would turn exact
    constants into float64)."""

    __slots__ = ("items",)

    def __init__(self, items):
        self.items = list(items)

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self):
        return iter(self.items)

    def __getitem__(self, i):
        return self.items[i]

    def _zip(self, other, op):
        if isinstance(other, SeriesVector):
            if len(other) != len(self):
                raise BeaValueError(f"vector length mismatch: {len(self)} and {len(other)}")
            return SeriesVector(op(a, b) for a, b in zip(self.items, other.items))
        return SeriesVector(op(a, other) for a in self.items)

    def __add__(self, o):
        return self._zip(o, lambda a, b: a + b)

    def __radd__(self, o):
        return self._zip(o, lambda a, b: b + a)

    def __sub__(self, o):
        return self._zip(o, lambda a, b: a - b)

    def __rsub__(self, o):
        return self._zip(o, lambda a, b: b - a)

    def __mul__(self, o):
        return self._zip(o, lambda a, b: a * b)

    def __rmul__(self, o):
        return self._zip(o, lambda a, b: b * a)

    def __truediv__(self, o):
        return self._zip(o, lambda a, b: a / b)

    def __neg__(self):
        return SeriesVector(-a for a in self.items)

    def __repr__(self) -> str:
        return f"SeriesVector({self.items!r})"
