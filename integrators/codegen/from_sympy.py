r"""The SymPy front-end of the code generator: expressions lowered onto a program of :mod:`integrators.codegen.ir`.

One rule per kind of node, after SymPy's common-subexpression elimination (``cse``), so that a subexpression
is computed once:

* numbers (rationals, :math:`\pi`, ...): literals;
* sums: added pairwise (partial sums in few variables), terms with a negative coefficient subtracted;
* products: the numerator's factors multiplied, divided once by the product of the factors :math:`b^{-k}`
  (:math:`k` a positive integer);
* powers :math:`b^e` with :math:`e` a number: integer :math:`e` by repeated squaring (products of jets, no
  ``pow`` call), :math:`e = \pm 1/2` as ``sqrt``/``rsqrt``, other exponents the binomial series of ``pow``;
  an exponent that is a run-time value (a parameter) also takes ``pow``;
* functions: those of :data:`~integrators.codegen.runtime.FUNCTIONS` by name, and three by composition,
  exact on Taylor polynomials because composition of truncated series is:
  :math:`\arcsin a = \arctan(a/\sqrt{1-a^2})`, :math:`\arccos a = \pi/2 - \arcsin a`,
  :math:`\operatorname{atan2}(y, x) = 2\arctan t` with the half-angle tangent :math:`t = y/(r + x)` for
  :math:`x > 0` and :math:`t = (r - x)/y` otherwise (:math:`r = \sqrt{x^2+y^2}`; each form free of cancellation
  where it is used; on the cut :math:`x \le 0, y = 0`, where atan2 jumps, the derivatives are not finite and
  the eager path takes the step).

Anything else (an unknown symbol, a piecewise or unevaluated term) raises
:class:`~integrators.compiled.NotLowerable`. Used by :mod:`integrators.compiled` (a SymPy Lagrangian, whose
value becomes a second-order jet: gradient and Hessian come with it) and :mod:`integrators.series_c` (a
:mod:`bea` series formula over the derivatives of a model).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Sequence

import sympy

from ..compiled import NotLowerable
from .ir import Program

__all__ = ["lower_sympy"]

#: SymPy functions with a Taylor rule of the runtime under the same name (Abs: "abs")
_NAMED = {"sin", "cos", "tan", "sinh", "cosh", "tanh", "exp", "log", "atan", "Abs"}


def lower_sympy(prog: Program, names: Dict[Any, Any], exprs: Sequence[sympy.Expr]) -> List[Any]:
    """The IR scalars of ``exprs`` in ``prog``; ``names`` maps the free symbols to scalars (seeded jets for the
    state, :class:`~integrators.codegen.ir.Val` for run-time numbers) and grows with the subexpressions."""
    temps, reduced = sympy.cse(list(exprs), symbols=sympy.numbered_symbols("_cse"), optimizations="basic")
    for s, e in temps:
        names[s] = _node(prog, names, e)
    return [_node(prog, names, e) for e in reduced]


def _node(prog: Program, names: Dict[Any, Any], e):
    if e in names:
        return names[e]
    if e.is_Number or e.is_NumberSymbol:
        if not e.is_finite:
            raise NotLowerable(f"the expression has an infinite or undefined number ({e})")
        out = float(e)
    elif e.is_Add:
        negative = [t.as_coeff_Mul()[0].is_negative for t in e.args]
        out, neg = _sum(prog, [(_node(prog, names, -t if m else t), m) for t, m in zip(e.args, negative)])
        out = prog.neg(out) if neg else out
    elif e.is_Mul:
        out = _product(prog, names, e)
    elif e.is_Pow:
        out = _power(prog, _node(prog, names, e.base), e.exp, names)
    elif isinstance(e, sympy.Function):
        out = _function(prog, type(e).__name__, [_node(prog, names, a) for a in e.args])
    elif e.is_Symbol:
        raise NotLowerable(f"the expression has the unexpected symbol {e}")
    else:
        raise NotLowerable(f"the expression has a term without a C jet form: {type(e).__name__}")
    names[e] = out
    return out


def _sum(prog: Program, terms):
    """``(s, negative)``: the sum of the terms ``(x, negative)`` is ``-s`` if ``negative`` else ``s``, added pairwise.
    A term's jet lives in the space of its variables (:mod:`integrators.codegen.spaces`); SymPy lists terms in
    the same variables together, so partial sums of neighbours stay in small spaces (a chain's potential: a
    running sum would carry every partial sum in all the variables)."""
    while len(terms) > 1:
        pairs = [terms[k:k + 2] for k in range(0, len(terms), 2)]
        terms = [p[0] if len(p) == 1 else _plus(prog, *p[0], *p[1]) for p in pairs]
    return terms[0]


def _plus(prog: Program, a, na: bool, b, nb: bool):
    if na == nb:
        return prog.add(a, b), na
    return (prog.sub(b, a), False) if na else (prog.sub(a, b), False)


def _product(prog: Program, names, e):
    """Numerator factors times each other, over the product of the denominator factors, times the coefficient."""
    c, rest = e.as_coeff_Mul()
    num, den = 1.0, 1.0
    for f in sympy.Mul.make_args(rest):
        if f.is_Pow and f.exp.is_Integer and f.exp < 0:
            den = prog.mul(den, _node(prog, names, f.base ** -f.exp))
        else:
            num = prog.mul(num, _node(prog, names, f))
    out = num if den == 1.0 else prog.div(num, den)
    return prog.mul(float(c), out)


def _power(prog: Program, base, exp, names):
    if exp.is_Integer:
        k, out, square = abs(int(exp)), 1.0, base
        while k:  # base^|k| by repeated squaring, the bits of |k| lowest first
            if k & 1:
                out = prog.mul(out, square)
            k >>= 1
            if k:
                square = prog.mul(square, square)
        return out if exp >= 0 else prog.div(1.0, out)
    if exp == sympy.Rational(1, 2):
        return prog.unary("sqrt", base)
    if exp == sympy.Rational(-1, 2):
        return prog.unary("rsqrt", base)
    if exp.is_Number:
        return prog.pow(base, float(exp))
    return prog.pow(base, _node(prog, names, exp))


def _function(prog: Program, name: str, args: List[Any]):
    if name in _NAMED and len(args) == 1:
        return prog.unary("abs" if name == "Abs" else name, args[0])
    if name == "asin":
        (a,) = args
        return prog.unary("atan", prog.mul(a, prog.unary("rsqrt", prog.sub(1.0, prog.mul(a, a)))))
    if name == "acos":
        return prog.sub(math.pi / 2, _function(prog, "asin", args))
    if name == "atan2":
        y, x = args
        r = prog.unary("sqrt", prog.add(prog.mul(x, x), prog.mul(y, y)))
        half = prog.select(prog.value("gt", x, 0.0), prog.div(y, prog.add(r, x)), prog.div(prog.sub(r, x), y))
        return prog.mul(2.0, prog.unary("atan", half))
    raise NotLowerable(f"the function {name} has no C form here")
