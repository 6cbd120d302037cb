r"""Conversion of derivation results to SymPy, for generic and for concrete Lagrangians.

Generic results are expressed through an undefined function ``L(q_1..q_n, v_1..v_n)``: the
symbol :math:`\partial^m L` becomes ``Derivative(L(q, v), ...)`` and :math:`M^{-1}` enters as
:math:`\operatorname{adj}(M)/\det M`, written out, so every expression is self-contained.

Concrete results substitute the derivatives of a given SymPy Lagrangian into the same formula.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Dict, List, Sequence

import sympy
from sympy.core.function import AppliedUndef

from .errors import BeaTypeError, BeaValueError, InternalError, NotRegularError
from .hseries import Poly
from .jets import Jets
from .radicals import radical_sympy


def default_symbols(n: int):
    """Coordinate and velocity symbols: ``q, v`` in 1-D, ``q_1..q_n, v_1..v_n`` otherwise."""
    if n == 1:
        return [sympy.Symbol("q", real=True)], [sympy.Symbol("v", real=True)]
    q = [sympy.Symbol(f"q_{i + 1}", real=True) for i in range(n)]
    v = [sympy.Symbol(f"v_{i + 1}", real=True) for i in range(n)]
    return q, v


def rational(c) -> sympy.Rational:
    return sympy.Rational(int(c.numerator), int(c.denominator))


def poly_to_sympy(p: Poly, value: Callable[[int], sympy.Expr]) -> sympy.Expr:
    """Sum of monomials, each variable replaced by ``value(index)``."""
    terms = []
    for mono, c in p.items():
        factors = [rational(c)]
        i = 0
        while i < len(mono):
            j = i
            while j < len(mono) and mono[j] == mono[i]:
                j += 1
            base = value(mono[i])
            factors.append(base if j - i == 1 else base ** (j - i))
            i = j
        terms.append(sympy.Mul(*factors))
    return sympy.Add(*terms)


@dataclass
class Frame:
    """How the jet variables of a derivation map to SymPy objects."""

    n: int
    q: List[sympy.Symbol]
    v: List[sympy.Symbol]
    L: sympy.Expr  # the Lagrangian (an undefined function application, or a concrete expression)
    generic: bool
    params: List[sympy.Symbol] = field(default_factory=list)
    _cache: Dict[object, sympy.Expr] = field(default_factory=dict)

    @classmethod
    def generic_frame(cls, n: int) -> "Frame":
        q, v = default_symbols(n)
        return cls(n=n, q=q, v=v, L=sympy.Function("L")(*q, *v), generic=True)

    def slot_symbol(self, s: int) -> sympy.Symbol:
        return self.q[s] if s < self.n else self.v[s - self.n]

    def derivative(self, m: tuple) -> sympy.Expr:
        if m not in self._cache:
            if not m:
                out = self.L
            elif self.generic:
                counts: Dict[int, int] = {}
                for s in m:
                    counts[s] = counts.get(s, 0) + 1
                out = sympy.Derivative(self.L, *[(self.slot_symbol(s), k) for s, k in sorted(counts.items())])
            else:
                out = sympy.diff(self.derivative(m[:-1]), self.slot_symbol(m[-1]))
            self._cache[m] = out
        return self._cache[m]

    def mass(self) -> sympy.Matrix:
        n = self.n
        return sympy.Matrix(n, n, lambda i, j: self.derivative(tuple(sorted((n + i, n + j)))))

    def check_regular(self) -> None:
        r"""Raise if :math:`\partial^2 L/\partial v^2` is identically singular (concrete ``L``)."""
        if self.generic:
            return
        if sympy.simplify(self.mass().det()) == 0:
            raise NotRegularError(
                "the Lagrangian is not regular: its Hessian d^2L/dv^2 is singular, so the Euler-Lagrange "
                "equations do not determine the acceleration"
            )

    def inverse_det(self) -> sympy.Expr:
        if "idet" not in self._cache:
            self._cache["idet"] = 1 / self.mass().det()
        return self._cache["idet"]

    def value(self, jets: Jets) -> Callable[[int], sympy.Expr]:
        def val(idx: int) -> sympy.Expr:
            key = jets.kind[idx]
            if key[0] == "L":
                return self.derivative(key[1])
            if key[0] == "idet":
                return self.inverse_det()
            if key[0] == "jet":
                _, i, k = key
                if k == 1:
                    return self.v[i]
                if k == 0:
                    return self.q[i]
            if key[0] == "param":
                return self.params[key[1]]
            if key[0] == "radical":  # the exact c^(1/d) of a scheme's constants (bea.radicals)
                return radical_sympy((Fraction(key[1], key[2]), key[3]))
            raise InternalError(f"internal: unexpected variable {key} in a result")

        return val


def _symbol_list(name: str, value) -> List[sympy.Symbol]:
    if isinstance(value, sympy.Symbol):
        return [value]
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise BeaTypeError(
            f"{name} must be a list of SymPy symbols (e.g. {name}=[sympy.Symbol('x')]), got {type(value).__name__}"
        )
    for s in value:
        if not isinstance(s, sympy.Symbol):
            raise BeaTypeError(f"{name} must contain SymPy symbols only; got {type(s).__name__} {str(s)[:40]!r}")
    return list(value)


def check_expression(L) -> sympy.Expr:
    """The Lagrangian as a SymPy expression, without ever parsing or evaluating a string.

    The one gate for user expressions in every package (``bea``, ``integrators``): a ``str`` or ``bytes``
    is refused, never handed to :func:`sympy.sympify` (whose parser runs ``eval``); Python ``int``/``float``
    become SymPy numbers; anything else must already be a scalar SymPy ``Expr`` with finite constants,
    no undefined functions and no ``I``."""
    if isinstance(L, (str, bytes)):
        raise BeaTypeError(
            "lagrangian must be a SymPy expression, not a string: strings are not parsed, because SymPy's parser "
            "evaluates them as Python code. Build it from symbols, e.g. q, v = sympy.symbols('q v'); "
            "lagrangian=v**2/2 - sympy.cos(q)"
        )
    if isinstance(L, sympy.MatrixBase):
        raise BeaTypeError(
            f"lagrangian must be a scalar SymPy expression, got a {L.shape[0]}x{L.shape[1]} Matrix; "
            "pass the scalar (e.g. M[0, 0]) or, for a quadratic form, (v.T * K * v)[0, 0] / 2"
        )
    if isinstance(L, (int, float)) and not isinstance(L, bool):
        L = sympy.Float(L) if isinstance(L, float) else sympy.Integer(L)
    if not isinstance(L, sympy.Expr):
        raise BeaTypeError(f"lagrangian must be a SymPy expression, got {type(L).__name__}")
    bad = [a for a in L.atoms() if a in (sympy.oo, -sympy.oo, sympy.zoo, sympy.nan) or (a.is_Number and a.is_finite is False)]
    if bad or L.has(sympy.oo, sympy.zoo, sympy.nan):
        raise BeaValueError(
            f"the lagrangian contains a non-finite constant ({', '.join(sorted({str(b) for b in bad})) or 'oo/zoo/nan'}); "
            "backward error analysis needs a finite, smooth L: remove it (check for divisions by zero such as 1/0)"
        )
    if L.has(sympy.Derivative) or any(isinstance(f, AppliedUndef) for f in L.atoms(sympy.Function)):
        raise BeaTypeError("the lagrangian must be an explicit SymPy expression of q and v (no undefined functions)")
    if L.has(sympy.I):
        raise BeaValueError("the lagrangian must be real: it contains the imaginary unit I")
    return L


def validate_concrete(lagrangian, q: Sequence, v: Sequence, params: Sequence = ()) -> Frame:
    """Check a concrete SymPy Lagrangian and its declared symbols; return its :class:`Frame`.

    Only SymPy expressions are accepted (strings are refused, never parsed: SymPy's parser runs ``eval``)."""
    L = check_expression(lagrangian)
    if q is None or v is None:
        raise BeaValueError("a concrete lagrangian needs its coordinate symbols q=[...] and velocity symbols v=[...]")
    q, v = _symbol_list("q", q), _symbol_list("v", v)
    params = _symbol_list("params", () if params is None else params)
    if len(q) != len(v):
        raise BeaValueError(f"q and v must have the same length (one velocity per coordinate); got {len(q)} and {len(v)}")
    if not q:
        raise BeaValueError("q and v must contain at least one symbol each")
    if len(set(q) | set(v)) != 2 * len(q):
        raise BeaValueError("q and v must be distinct symbols")
    clash = sorted(str(s) for s in set(params) & (set(q) | set(v)))
    if clash:
        raise BeaValueError(
            f"params must not contain coordinates or velocities: {', '.join(clash)}; params are constants such as "
            "masses or spring constants"
        )
    if len(set(params)) != len(params):
        raise BeaValueError("params contains the same symbol twice")
    extra = L.free_symbols - set(q) - set(v) - set(params)
    if extra:
        names = ", ".join(sorted(str(s) for s in extra))
        raise BeaValueError(
            f"the lagrangian contains symbols not declared as q or v: {names}. Declare constants with params=[...] "
            "or substitute numbers for them"
        )
    return Frame(n=len(q), q=q, v=v, L=L, generic=False, params=params)
