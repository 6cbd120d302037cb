r"""Exact numbers in a pure radical extension :math:`\mathbb{Q}(\theta)`, :math:`\theta = c^{1/d}`.

The Lobatto nodes of ``galerkin3`` are :math:`(5 \mp \sqrt5)/10` and the triple jump's sub-steps are
:math:`1/(2 - 2^{1/3})`, :math:`1 - 2/(2 - 2^{1/3})`: elements of :math:`\mathbb{Q}(\sqrt5)` and
:math:`\mathbb{Q}(2^{1/3})`. When :math:`x^d - c` is irreducible over :math:`\mathbb{Q}` (``c > 0`` not a
``p``-th power for a prime ``p | d``, and ``4 \nmid d`` or :math:`-4c` not a fourth power), every element
is uniquely :math:`\sum_{k<d} a_k \theta^k` with rational :math:`a_k`, products reduce with
:math:`\theta^d = c`, and inverses follow by solving the linear system of the multiplication matrix.

:class:`RadicalNumber` is such an element. It is a ``float`` (its value to double precision, computed
from 50 digits), so torch and every float check accept it, and it carries the exact coordinates
``coeffs``, so the series engine (:mod:`bea.hseries`) can represent it exactly: there :math:`\theta` is a
variable of the polynomials, reduced by :math:`\theta^d = c` (:class:`bea.poly.Rules`), and SymPy prints
it as the exact radical. A result that is rational is returned as :class:`~bea.schemes.Exact`.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Optional, Tuple

from .errors import BeaTypeError, BeaValueError

__all__ = ["RadicalNumber", "radical", "from_sympy", "Field"]

Field = Tuple[Fraction, int]  # (c, d): theta = c^(1/d)


def _floor_root(x: int, p: int) -> int:
    r""":math:`\lfloor x^{1/p} \rfloor` for an integer ``x >= 0``, exactly (integer Newton from above: a float root
    overflows past 308 digits and is inexact long before, so a perfect power could be missed)."""
    if x < 2:
        return x
    y = 1 << -(-x.bit_length() // p)  # 2^ceil(bits/p) > x^(1/p)
    while True:
        z = ((p - 1) * y + x // y ** (p - 1)) // p
        if z >= y:
            return y
        y = z


def _root_is_rational(c: Fraction, p: int) -> bool:
    return all(_floor_root(x, p) ** p == x for x in (c.numerator, c.denominator))


def _check_field(c: Any, d: Any) -> Field:
    if isinstance(d, bool) or not isinstance(d, int) or d < 2:
        raise BeaTypeError(f"the root degree d of c^(1/d) must be an integer >= 2, got {d!r}")
    if isinstance(c, bool) or not isinstance(c, (int, Fraction)) or c <= 0:
        raise BeaValueError(f"the radicand c of c^(1/d) must be a positive int or Fraction, got {c!r}")
    c = Fraction(c)
    primes = [p for p in range(2, d + 1) if d % p == 0 and all(p % q for q in range(2, p))]
    if any(_root_is_rational(c, p) for p in primes) or (d % 4 == 0 and _root_is_rational(4 * c, 4)):
        raise BeaValueError(f"{c}^(1/{d}) does not generate a field of degree {d} (x^{d} - {c} is reducible): "
                            "write the number with a smaller root, e.g. sqrt(4) as 2 or 4^(1/4) as sqrt(2)")
    return c, d


def check_same_field(a: Field, b: Field) -> None:
    """Refuse to combine numbers of two different radical extensions (no exact engine carries two radicals)."""
    if a != b:
        raise BeaValueError(f"numbers from two different radical extensions, Q({a[0]}^(1/{a[1]})) and Q({b[0]}^(1/{b[1]})), "
                            "cannot be combined exactly; use one radical per scheme")


class RadicalNumber(float):
    r""":math:`\sum_k a_k \theta^k` in :math:`\mathbb{Q}(\theta)`, :math:`\theta = c^{1/d}` (module docstring)."""

    field: Field
    coeffs: Tuple[Fraction, ...]

    def __new__(cls, field: Field, coeffs) -> Any:
        c, d = field
        co = tuple(Fraction(x) for x in coeffs) + (Fraction(0),) * (d - len(coeffs))
        if len(co) != d:
            raise BeaValueError(f"an element of Q({c}^(1/{d})) has {d} coordinates, got {len(co)}")
        if not any(co[1:]):  # rational: the exact constant of bea.schemes
            from .schemes import exact

            return exact(co[0])
        import mpmath

        with mpmath.workdps(50):
            theta = mpmath.root(mpmath.mpf(c.numerator) / c.denominator, d)
            value = float(sum(mpmath.mpf(a.numerator) / a.denominator * theta**k for k, a in enumerate(co)))
        obj = super().__new__(cls, value)
        obj.field, obj.coeffs = (c, d), co
        return obj

    # -- coercion
    def _other(self, o: Any) -> Optional[Tuple[Fraction, ...]]:
        """``o``'s coordinates in this field, or None for a non-number (then float arithmetic applies)."""
        if isinstance(o, RadicalNumber):
            check_same_field(self.field, o.field)
            return o.coeffs
        r = getattr(o, "exact", None)
        if r is None and isinstance(o, (int, Fraction)) and not isinstance(o, bool):
            r = Fraction(o)
        return None if r is None else (Fraction(r),) + (Fraction(0),) * (self.field[1] - 1)

    def _make(self, coeffs) -> Any:
        return RadicalNumber(self.field, coeffs)

    def _mul(self, a, b) -> Any:
        return self._make(mul_coords(self.field, a, b))

    def inverse(self) -> Any:
        """:math:`1/x` (:func:`inverse_coords`)."""
        return self._make(inverse_coords(self.field, self.coeffs))

    # -- arithmetic: exact with rationals and the same field, float with anything else
    def _op(self, o: Any, exact_op, float_op: str) -> Any:
        oc = self._other(o)
        if oc is not None:
            return exact_op(oc)
        if type(o).__module__.startswith("sympy"):
            return getattr(self._sympy_(), float_op)(o)
        return getattr(float(self), float_op)(o)

    def __add__(self, o):
        return self._op(o, lambda b: self._make([x + y for x, y in zip(self.coeffs, b)]), "__add__")

    __radd__ = __add__

    def __sub__(self, o):
        return self._op(o, lambda b: self._make([x - y for x, y in zip(self.coeffs, b)]), "__sub__")

    def __rsub__(self, o):
        return self._op(o, lambda b: self._make([y - x for x, y in zip(self.coeffs, b)]), "__rsub__")

    def __mul__(self, o):
        return self._op(o, lambda b: self._mul(self.coeffs, b), "__mul__")

    __rmul__ = __mul__

    def _inv(self, b) -> Tuple[Fraction, ...]:
        if not any(b[1:]):
            return (1 / b[0],) + b[1:]  # ZeroDivisionError for 0, as for any number
        return tuple(inverse_coords(self.field, b))

    def __truediv__(self, o):
        return self._op(o, lambda b: self._mul(self.coeffs, self._inv(b)), "__truediv__")

    def __rtruediv__(self, o):
        return self._op(o, lambda b: self._mul(b, self.inverse().coeffs), "__rtruediv__")

    def __neg__(self):
        return self._make([-x for x in self.coeffs])

    def __pos__(self):
        return self

    def __eq__(self, o):
        if hasattr(o, "field") and hasattr(o, "coeffs"):  # an exact element of a field (this class, FieldElement)
            return (o.field, tuple(o.coeffs)) == (self.field, self.coeffs)  # symmetric, as the hashes agree
        oc = self._other(o) if isinstance(o, (RadicalNumber, int, Fraction)) or hasattr(o, "exact") else None
        return oc == self.coeffs if oc is not None else float(self) == o

    def __ne__(self, o):
        return not self == o

    def __hash__(self):
        return hash((self.field, self.coeffs))

    def __bool__(self):
        return True  # rational results are Exact, so a RadicalNumber is never zero

    def __reduce__(self):
        return (RadicalNumber, (self.field, self.coeffs))

    # -- display
    def _sympy_(self):
        import sympy

        theta = radical_sympy(self.field)
        return sum((sympy.Rational(a.numerator, a.denominator) * theta**k for k, a in enumerate(self.coeffs)), sympy.S.Zero)

    def __repr__(self) -> str:
        c, d = self.field
        terms = " + ".join(f"({a})*{c}^({k}/{d})" for k, a in enumerate(self.coeffs) if a)
        return f"RadicalNumber({terms})"

    __str__ = __repr__


def mul_coords(field: Field, a, b) -> list:
    r"""The coordinates of :math:`xy` from those of :math:`x, y` (any exact rational type), reduced by
    :math:`\theta^d = c`."""
    c, d = field
    out = [a[0] * 0] * d
    for i, x in enumerate(a):
        if x:
            for j, y in enumerate(b):
                if y:
                    k = i + j
                    out[k % d] += x * y * (c if k >= d else 1)
    return out


def inverse_coords(field: Field, a) -> list:
    r"""The coordinates of :math:`1/x`: solves :math:`M_x y = e_0` with :math:`M_x` the matrix of multiplication by
    :math:`x` (invertible for :math:`x \ne 0`, the extension being a field)."""
    d = field[1]
    cols = [mul_coords(field, a, [int(j == k) for j in range(d)]) for k in range(d)]
    A = [[cols[k][i] for k in range(d)] + [a[0] * 0 + int(i == 0)] for i in range(d)]
    for col in range(d):
        piv = next(r for r in range(col, d) if A[r][col] != 0)
        A[col], A[piv] = A[piv], A[col]
        A[col] = [v / A[col][col] for v in A[col]]
        for r in range(d):
            if r != col and A[r][col]:
                f = A[r][col]
                A[r] = [u - f * v for u, v in zip(A[r], A[col])]
    return [A[i][d] for i in range(d)]


def radical_sympy(field: Field):
    """:math:`c^{1/d}` as an exact SymPy number (``sqrt(5)``, ``2**(1/3)``)."""
    import sympy

    c, d = field
    return sympy.root(sympy.Rational(c.numerator, c.denominator), d)


def radical(c: Any, d: int = 2) -> "RadicalNumber":
    r""":math:`\theta = c^{1/d}` itself (``radical(5)`` is :math:`\sqrt5`, ``radical(2, 3)`` is :math:`2^{1/3}`).
    Combine it with rationals to write irrational nodes exactly: ``(5 - radical(5)) / 10``."""
    field = _check_field(c, d)
    return RadicalNumber(field, [0, 1])


def from_sympy(expr: Any) -> Any:
    r"""An exact SymPy number of some :math:`\mathbb{Q}(c^{1/d})` (e.g. ``(5 - sympy.sqrt(5))/10``,
    ``1/(2 - 2**Rational(1, 3))``) as a :class:`RadicalNumber` (an :class:`~bea.schemes.Exact` if rational)."""
    import sympy

    expr = sympy.nsimplify(expr) if not isinstance(expr, sympy.Basic) else expr
    if expr.free_symbols or not expr.is_real:
        raise BeaValueError(f"{expr} is not a real number: nodes, weights and sub-steps must be constants")
    if expr.is_Rational:
        from .schemes import exact

        return exact(Fraction(int(expr.p), int(expr.q)))
    pows = [p for p in expr.atoms(sympy.Pow) if p.base.is_Rational and p.exp.is_Rational and not p.exp.is_Integer]
    bases = {(p.base, p.exp.q) for p in pows}
    if len(bases) != 1 or any(not isinstance(a, (sympy.Add, sympy.Mul, sympy.Pow, sympy.Rational)) for a in sympy.preorder_traversal(expr)):
        raise BeaValueError(f"{expr} is not a rational expression in a single radical c^(1/d): the exact engine supports "
                            "one pure radical per number, such as sqrt(5) or 2**(1/3)")
    (base, d), = bases
    field = _check_field(Fraction(int(base.p), int(base.q)), int(d))
    t = sympy.Symbol("theta")
    sub = expr.subs({p: t ** (p.exp * d) for p in pows})
    num, den = sympy.fraction(sympy.together(sub))
    minpoly = sympy.Poly(t**d - radical_sympy(field) ** d, t)
    rem = sympy.rem(sympy.Poly(num, t) * sympy.invert(sympy.Poly(den, t), minpoly), minpoly)
    co = [Fraction(int(x.p), int(x.q)) for x in reversed(sympy.Poly(rem, t).all_coeffs())]
    return RadicalNumber(field, co[:d])
