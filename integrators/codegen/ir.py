r"""The intermediate representation of the code generator: straight-line programs whose scalars are literals
(floats, folded while building: ``x * 0``, ``x * 1``, ``x + 0``), run-time values constant in the state (:class:`Val`),
jets (:class:`Jet`: Taylor polynomials to degree ``K`` in :math:`x \in \mathbb R^D`) and :data:`OPAQUE` (no lowering;
reaches guards only, which are then dropped). Each instruction ``(op, out, *args)`` has one C rule in
:mod:`integrators.codegen.runtime` (docs/theory/codegen.md).
"""
from __future__ import annotations

import math
from typing import List, Tuple

from ..compiled import NotLowerable
from .runtime import FUNCTIONS

__all__ = ["Jet", "Val", "OPAQUE", "Program", "FUNCTIONS"]


class Jet:
    """A scalar that depends on the state (its Taylor polynomial to the program's degree is carried)."""
    __slots__ = ("k",)

    def __init__(self, k: int):
        self.k = k


class Val:
    """A run-time number that does not depend on the state: a C expression (``P[3]``) or a named temporary."""
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


class _Opaque:
    __slots__ = ()

    def __repr__(self):
        return "OPAQUE"


OPAQUE = _Opaque()

#: binary value operations (no derivatives): C format strings
VALUE_BINARY = {"add": "({} + {})", "sub": "({} - {})", "mul": "({} * {})", "div": "({} / {})", "pow": "pow({}, {})",
                "lt": "(double)({} < {})", "le": "(double)({} <= {})", "gt": "(double)({} > {})",
                "ge": "(double)({} >= {})", "eq": "(double)({} == {})", "ne": "(double)({} != {})",
                "and": "(double)({} != 0.0 && {} != 0.0)", "or": "(double)({} != 0.0 || {} != 0.0)",
                "max": "fmax({}, {})", "min": "fmin({}, {})"}

#: most instructions one program may hold (beyond it the C would take minutes to compile)
MAX_INSTRUCTIONS = 60000


def _lit(x) -> bool:
    return isinstance(x, float)


class Program:
    """Builds the instruction list; every method takes and returns scalars (float, :class:`Val`,
    :class:`Jet`, :data:`OPAQUE`). Instructions are tuples ``(op, out, *args)``; ``D`` variables, degree ``K``."""

    def __init__(self, D: int, K: int = 2):
        self.D, self.K = D, K
        self.code: List[tuple] = []
        self.njets = 0
        self.nvals = 0
        self.guards: List[Tuple[object, float]] = []

    # ------------------------------------------------------------------ creation
    def _jet(self, op: str, *args) -> Jet:
        if len(self.code) >= MAX_INSTRUCTIONS:
            raise NotLowerable(f"the traced program exceeds {MAX_INSTRUCTIONS} jet operations (the size policy)")
        out = Jet(self.njets)
        self.njets += 1
        self.code.append((op, out, *args))
        return out

    def _val(self, fmt: str, *args) -> Val:
        out = Val(f"v{self.nvals}")
        self.nvals += 1
        self.code.append(("val", out, fmt, *args))
        return out

    def seed(self, i: int) -> Jet:
        return self._jet("seed", i)

    def gather(self, array: str, idx, fac) -> Jet:
        """The jet ``o[k] = fac[k] * array[idx[k]]`` (a derivative of a model read off its Taylor polynomial)."""
        return self._jet("gather", array, tuple(idx), tuple(float(f) for f in fac))

    # ------------------------------------------------------------------ arithmetic
    def add(self, a, b):
        if a is OPAQUE or b is OPAQUE:
            return OPAQUE
        if _lit(a) and _lit(b):
            return a + b
        if _lit(b) and b == 0.0:
            return a
        if _lit(a) and a == 0.0:
            return b
        if isinstance(a, Jet) and isinstance(b, Jet):
            return self._jet("add", a, b)
        if isinstance(a, Jet) or isinstance(b, Jet):
            j, c = (a, b) if isinstance(a, Jet) else (b, a)
            return self._jet("addc", j, c)
        return self._val(VALUE_BINARY["add"], a, b)

    def dot(self, xs, ys, start=0.0):
        """``start + sum_k xs[k] * ys[k]``; the terms (value) x (jet) become one linear combination (``lin``),
        as in a network's matrix products with its weights."""
        acc, terms = start, []
        for x, y in zip(xs, ys):
            if isinstance(x, Jet) and not isinstance(y, (Jet, _Opaque)):
                x, y = y, x
            if isinstance(y, Jet) and not isinstance(x, (Jet, _Opaque)):
                if not (_lit(x) and x == 0.0):
                    terms.append((x, y))
            else:
                acc = self.add(acc, self.mul(x, y))
        if len(terms) < 2:
            for c, j in terms:
                acc = self.add(acc, self.mul(c, j))
            return acc
        if acc is OPAQUE:
            return OPAQUE
        flat = [z for t in terms for z in t]
        lin = self._jet("lin", *flat)
        return self.add(lin, acc)

    def neg(self, a):
        if a is OPAQUE:
            return OPAQUE
        if _lit(a):
            return -a
        return self._jet("scale", a, -1.0) if isinstance(a, Jet) else self._val("(-{})", a)

    def sub(self, a, b):
        if a is OPAQUE or b is OPAQUE:
            return OPAQUE
        if _lit(a) and _lit(b):
            return a - b
        if _lit(b) and b == 0.0:
            return a
        if _lit(a) and a == 0.0:
            return self.neg(b)
        if isinstance(a, Jet) and isinstance(b, Jet):
            return self._jet("sub", a, b)
        if isinstance(a, Jet):
            return self._jet("addc", a, self.neg(b))
        if isinstance(b, Jet):
            return self._jet("rsubc", b, a)
        return self._val(VALUE_BINARY["sub"], a, b)

    def mul(self, a, b):
        if a is OPAQUE or b is OPAQUE:
            return OPAQUE
        if _lit(a) and _lit(b):
            return a * b
        for x, y in ((a, b), (b, a)):
            if _lit(x) and x == 0.0:
                return 0.0  # as autograd's zero cotangents: finite products assumed
            if _lit(x) and x == 1.0:
                return y
        if isinstance(a, Jet) and isinstance(b, Jet):
            return self._jet("mul", a, b)
        if isinstance(a, Jet) or isinstance(b, Jet):
            j, c = (a, b) if isinstance(a, Jet) else (b, a)
            return self._jet("scale", j, c)
        return self._val(VALUE_BINARY["mul"], a, b)

    def div(self, a, b):
        if a is OPAQUE or b is OPAQUE:
            return OPAQUE
        if _lit(a) and _lit(b):
            return a / b if b != 0.0 else (math.copysign(math.inf, a) * math.copysign(1.0, b) if a != 0.0 else math.nan)
        if _lit(b) and b == 1.0:
            return a
        if _lit(a) and a == 0.0 and not isinstance(b, Jet):
            return 0.0
        if isinstance(a, Jet) and isinstance(b, Jet):
            return self._jet("div", a, b)
        if isinstance(a, Jet):
            return self._jet("divc", a, b)
        if isinstance(b, Jet):
            return self._jet("cdiv", b, a)
        return self._val(VALUE_BINARY["div"], a, b)

    def ipow(self, a, k: int):
        """``a ** k`` for an integer ``k >= 0`` as products, by repeated squaring (the bits of ``k`` lowest first)."""
        out, square = 1.0, a
        while k:
            if k & 1:
                out = self.mul(out, square)
            k >>= 1
            if k:
                square = self.mul(square, square)
        return out

    def pow(self, a, e):
        if a is OPAQUE or e is OPAQUE:
            return OPAQUE
        if isinstance(e, Jet):
            raise NotLowerable("a power with an exponent that depends on the state has no compiled form here")
        if _lit(a) and _lit(e):
            return float(a ** e) if not (a < 0 and e != int(e)) else math.nan
        if _lit(e) and e == 1.0:
            return a
        if _lit(e) and e == 2.0:
            return self.mul(a, a)  # torch computes x**2 as x * x
        if isinstance(a, Jet):
            return self._jet("pow", a, e)
        return self._val(VALUE_BINARY["pow"], a, e)

    def unary(self, name: str, a):
        if a is OPAQUE:
            return OPAQUE
        if name not in FUNCTIONS:
            raise NotLowerable(f"the function {name} has no Taylor rule in the code generator")
        if isinstance(a, Jet):
            return self._jet("fun", a, name)
        out = Val(f"v{self.nvals}")
        self.nvals += 1
        self.code.append(("vfun", out, name, a))
        return out

    def value(self, op: str, a, b):
        """A comparison or another value operation of :data:`VALUE_BINARY` (on jets: of their values)."""
        if a is OPAQUE or b is OPAQUE:
            return OPAQUE
        return self._val(VALUE_BINARY[op], a, b)

    def vnot(self, a):
        return OPAQUE if a is OPAQUE else self._val("(double)({} == 0.0)", a)

    def select(self, c, a, b):
        """``c ? a : b`` (``c`` not a literal: literals are folded by the caller)."""
        if c is OPAQUE or a is OPAQUE or b is OPAQUE:
            return OPAQUE
        if isinstance(a, Jet) or isinstance(b, Jet):
            return self._jet("sel", c, a, b)
        return self._val("({} != 0.0 ? {} : {})", c, a, b)

    def guard(self, a, expected: float) -> None:
        """At run time the scalar ``a`` must equal ``expected`` (its traced value), else the element is
        handed back to the eager path; opaque guards are dropped (see the module docstring)."""
        if a is OPAQUE or _lit(a):
            return
        self.guards.append((a, float(expected)))
