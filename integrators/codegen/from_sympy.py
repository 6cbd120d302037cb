r"""The SymPy front-end of the code generator: expressions lowered onto a program of :mod:`integrators.codegen.ir`,
one rule per kind of node after common-subexpression elimination (numbers, sums by halves, products, powers, the
runtime's functions by name and others by composition, exact on truncated series; :func:`_composed`, :func:`_atan2`).
Anything else raises :class:`~integrators.compiled.NotLowerable` (the rules and their reasons: docs/theory/codegen.md).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Sequence, Tuple

import sympy

from ..compiled import NotLowerable
from .ir import Jet, Program

__all__ = ["lower_sympy", "lower_terms"]

#: SymPy functions with a Taylor rule of the runtime under the same name (Abs: "abs")
_NAMED = {"sin", "cos", "tan", "sinh", "cosh", "tanh", "exp", "log", "atan", "Abs", "erf"}
#: SymPy functions lowered by composition (:func:`_composed`)
_COMPOSED = {"asin", "acos", "atan2", "erfc", "asinh", "acosh", "atanh", "acot"}


def lower_sympy(prog: Program, names: Dict[Any, Any], exprs: Sequence[sympy.Expr]) -> List[Any]:
    """The IR scalars of ``exprs`` in ``prog``; ``names`` maps the free symbols to scalars (seeded jets for the
    state, :class:`~integrators.codegen.ir.Val` for run-time numbers); it is not modified."""
    names = dict(names)
    return [_node(prog, names, e) for e in _cse(prog, names, exprs)]


def lower_terms(prog: Program, names: Dict[Any, Any], expr: sympy.Expr) -> List[Tuple[float, Any]]:
    """``[(c, scalar)]`` with ``expr = sum c * scalar``: the terms of the sum ``expr`` (numeric multiples of sums
    distributed) lowered one by one after one ``cse`` over all of them, never added, so that each keeps the
    small space of its variables (the caller adds their derivatives into the output:
    :func:`~integrators.codegen.emit.emit_c` with a list of terms)."""
    names = dict(names)
    coefs, parts = zip(*_terms(expr, 1.0))
    out = []
    for c, e in zip(coefs, _cse(prog, names, parts)):
        k, rest = e.as_coeff_Mul()
        out.append((c * float(k), _node(prog, names, rest)))
    return out


def _cse(prog: Program, names: Dict[Any, Any], exprs) -> List[sympy.Expr]:
    """``exprs`` after common-subexpression elimination, their common subexpressions lowered into ``names``."""
    temps, reduced = sympy.cse(list(exprs), symbols=sympy.numbered_symbols("_cse"), optimizations="basic")
    for s, e in temps:
        names[s] = _node(prog, names, e)
    return reduced


def _terms(expr: sympy.Expr, c: float) -> List[Tuple[float, sympy.Expr]]:
    """``[(c_k, e_k)]`` with ``c expr = sum c_k e_k``, each ``e_k`` no sum and no numeric multiple of one."""
    if expr.is_Add:
        return [t for a in expr.args for t in _terms(a, c)]
    k, rest = expr.as_coeff_Mul()
    if k != 1 and rest.is_Add:
        return _terms(rest, c * float(k))
    return [(c, expr)]


def _node(prog: Program, names: Dict[Any, Any], e):
    if e in names:
        return names[e]
    if e.is_Number or e.is_NumberSymbol:
        if not e.is_finite:
            raise NotLowerable(f"the expression has an infinite or undefined number ({e})")
        out = float(e)
    elif e.is_Add:
        out, neg = _sum(prog, names, [(-t if t.as_coeff_Mul()[0].is_negative else t, t.as_coeff_Mul()[0].is_negative)
                                      for t in e.args])
        out = prog.neg(out) if neg else out
    elif e.is_Mul:
        out = _product(prog, names, e)
    elif e.is_Pow:
        out = _power(prog, names, e.base, e.exp)
    elif isinstance(e, sympy.Function):
        name = type(e).__name__
        if name not in _NAMED and name not in _COMPOSED:  # before its arguments (a Piecewise's are no expressions)
            raise NotLowerable(f"the function {name} has no C form here")
        out = _function(prog, name, [_node(prog, names, a) for a in e.args])
    elif e.is_Symbol:
        raise NotLowerable(f"the expression has the unexpected symbol {e}")
    else:
        raise NotLowerable(f"the expression has a term without a C jet form: {type(e).__name__}")
    names[e] = out
    return out


def _sum(prog: Program, names, terms):
    """``(s, negative)``: the sum of the terms ``(expr, negative)`` is ``-s`` if ``negative`` else ``s``, added by
    halves, each half lowered only when it is added (why: docs/theory/codegen.md)."""
    if len(terms) == 1:
        return _node(prog, names, terms[0][0]), terms[0][1]
    half = len(terms) // 2
    a, na = _sum(prog, names, terms[:half])
    b, nb = _sum(prog, names, terms[half:])
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


def _power(prog: Program, names, base_expr, exp):
    r""":math:`b^e`: integer :math:`e` by repeated squaring (:math:`1/b^{|e|}` for :math:`e < 0`), :math:`e = \pm 1/2` as
    sqrt / rsqrt, another number through pow's binomial series, a state-dependent :math:`e` as :math:`\exp(e \log b)`."""
    base = _node(prog, names, base_expr)
    if exp.is_Integer:
        out = prog.ipow(base, abs(int(exp)))
        return out if exp >= 0 else prog.div(1.0, out)
    if exp == sympy.Rational(1, 2):
        return prog.unary("sqrt", base)
    if exp == sympy.Rational(-1, 2):
        return prog.unary("rsqrt", base)
    if exp.is_Number:
        return prog.pow(base, float(exp))
    e = _node(prog, names, exp)
    if not isinstance(e, Jet):
        return prog.pow(base, e)
    # an exponent that depends on the state: b^e = exp(e log b) (b > 0, where the real power is smooth)
    log_b = math.log(base) if isinstance(base, float) and base > 0 else prog.unary("log", base)
    return prog.unary("exp", prog.mul(e, log_b))


def _function(prog: Program, name: str, args: List[Any]):
    if name in _NAMED and len(args) == 1:
        return prog.unary("abs" if name == "Abs" else name, args[0])
    if len(args) == 1:
        return _composed(prog, name, args[0])
    if name == "atan2" and len(args) == 2:
        return _atan2(prog, *args)
    raise NotLowerable(f"the function {name} with {len(args)} arguments has no C form here")


def _composed(prog: Program, name: str, a):
    r""":math:`\arcsin a = \arctan(a/\sqrt{1-a^2})`, :math:`\arccos a = \pi/2 - \arcsin a`, :math:`\mathrm{erfc} = 1 -
    \mathrm{erf}`, :math:`\mathrm{acot}\,a = \arctan(1/a)`, :math:`\mathrm{atanh}\,a = (\log(1+a) - \log(1-a))/2`,
    :math:`\mathrm{acosh}\,a = \log(a + \sqrt{a^2-1})`, :math:`\mathrm{asinh}\,a = \pm\log(|a| + \sqrt{a^2+1})` (sign of a)."""
    if name == "asin":
        return prog.unary("atan", prog.mul(a, prog.unary("rsqrt", prog.sub(1.0, prog.mul(a, a)))))
    if name == "acos":
        return prog.sub(math.pi / 2, _composed(prog, "asin", a))
    if name == "erfc":
        return prog.sub(1.0, prog.unary("erf", a))
    if name == "acot":
        return prog.unary("atan", prog.div(1.0, a))
    if name == "atanh":
        return prog.mul(0.5, prog.sub(prog.unary("log1p", a), prog.unary("log1p", prog.neg(a))))
    if name == "acosh":
        return prog.unary("log", prog.add(a, prog.unary("sqrt", prog.sub(prog.mul(a, a), 1.0))))
    if name == "asinh":  # log(|a| + sqrt(a^2 + 1)) with the sign of a: no cancellation on either side
        root = prog.unary("sqrt", prog.add(prog.mul(a, a), 1.0))
        pos, neg = prog.unary("log", prog.add(root, a)), prog.neg(prog.unary("log", prog.sub(root, a)))
        return prog.select(prog.value("ge", a, 0.0), pos, neg)
    raise NotLowerable(f"the function {name} has no C form here")


def _atan2(prog: Program, y, x):
    r""":math:`2\arctan(y/(r + x))` for :math:`x > 0`, else :math:`\pm\pi - 2\arctan(y/(r - x))` with the sign
    of :math:`y` (:math:`r - x \ge r`: no cancellation, finite on the cut :math:`x < 0, y = 0`)."""
    r = prog.unary("sqrt", prog.add(prog.mul(x, x), prog.mul(y, y)))
    right = prog.mul(2.0, prog.unary("atan", prog.div(y, prog.add(r, x))))
    turn = prog.select(prog.value("ge", y, 0.0), math.pi, -math.pi)
    left = prog.sub(turn, prog.mul(2.0, prog.unary("atan", prog.div(y, prog.sub(r, x)))))
    return prog.select(prog.value("gt", x, 0.0), right, left)
