r"""The intermediate representation of the code generator: straight-line programs whose scalars are literals
(floats, folded while building: ``x * 0``, ``x * 1``, ``x + 0``), run-time values constant in the state (:class:`Val`),
jets (:class:`Jet`: Taylor polynomials to degree ``K`` in :math:`x \in \mathbb R^D`) and :data:`OPAQUE` (no lowering;
reaches guards only, which are then dropped). Each instruction ``(op, out, *args)`` has one C rule in
:mod:`integrators.codegen.runtime`; on jets: ``seed``, ``gather``, ``add sub mul div`` (two jets), ``lin``
:math:`c + \sum_t s_t j_t` (``(c, s_0, j_0, ..)``), ``fun`` (``(a, name, exponent)``), ``sel`` (docs/theory/codegen.md).
"""

from __future__ import annotations

import math
import operator
import re
import sys
from functools import partialmethod
from typing import List, Tuple

from bea.errors import InternalError

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

#: functions of one value as C format strings (the value ``({0})``)
_VALUE_FUN = {name: re.sub(r"\ba\b", "({0})", c) for name, c in FUNCTIONS.items()}

#: most instructions one program may hold (beyond it the C would take minutes to compile)
MAX_INSTRUCTIONS = 60000


def _lit(x) -> bool:
    return isinstance(x, float)


def _fdiv(a: float, b: float) -> float:
    """IEEE division of literals (Python raises on a zero divisor): ``a / 0`` a signed inf, ``0 / 0``, ``nan / 0`` nan."""
    if b != 0.0:
        return a / b
    return math.nan if a != a or a == 0.0 else math.copysign(math.inf, a) * math.copysign(1.0, b)


def _fpow(a: float, e: float) -> float:
    """C's ``pow`` of literals (Python's ``**`` calls it, but raises for ``pow(0, e < 0)`` and an overflow, both inf,
    signed for an odd integer ``e``, and gives a complex number for a negative base to a fractional power: nan)."""
    if -math.inf < a < 0.0 and math.isfinite(e) and not e.is_integer():  # pow(-inf, 1/2) is inf in C, not nan
        return math.nan  # before the overflow, which is not signed: pow(-10, 400.5) is nan in C, not inf
    odd = e % 2.0 == 1.0
    try:
        r = a ** e
    except (ZeroDivisionError, OverflowError):
        return math.copysign(math.inf, a) if odd else math.inf
    return math.nan if isinstance(r, complex) else float(r)


#: ``1/c`` is a normal float for ``_RECIPROCAL_NORMAL[0] < |c| <= _RECIPROCAL_NORMAL[1]`` (5.6e-309, 4.5e307)
_RECIPROCAL_NORMAL = (1.0 / sys.float_info.max, 1.0 / sys.float_info.min)


#: literal arithmetic of the binary operations
_FOLD = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": _fdiv}


_NEG = object()  # "the negated second operand" (0 - x)


def _identity(op: str, a, b):
    """The result of ``a op b`` when one operand is a literal identity (``x + 0``, ``x - 0``, ``x * 1``, ``x / 1``;
    ``0 - x`` is :data:`_NEG`), exact for every ``x``; else None. Two assume a finite ``x`` (IEEE gives nan for inf,
    nan): ``x * 0`` is ``0.0`` (as autograd's zero cotangents; a model differs only where it is already non-finite),
    and ``0 / x`` also a nonzero ``x``: for a jet, which is 0 at some state, :meth:`Program._binary` adds a guard
    (that state goes to the eager path, whose 0/0 is nan); for a value (constant in the state) it is assumed."""
    if _lit(b) and b == (1.0 if op in ("mul", "div") else 0.0):
        return a
    if _lit(a) and a == 0.0:
        return {"add": b, "sub": _NEG, "mul": 0.0, "div": 0.0}[op]
    if op == "mul" and ((_lit(b) and b == 0.0) or (_lit(a) and a == 1.0)):
        return 0.0 if _lit(b) and b == 0.0 else b
    return None


class Program:
    """Builds the instruction list; every method takes and returns scalars (float, :class:`Val`,
    :class:`Jet`, :data:`OPAQUE`). Instructions are tuples ``(op, out, *args)``; ``D`` variables, degree ``K``."""

    def __init__(self, D: int, K: int = 2):
        self.D, self.K = D, K
        self.code: List[tuple] = []
        self.njets = 0
        self.nvals = 0
        self.guards: List[Tuple[object, object]] = []

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
    def _binary(self, op: str, a, b):
        r"""``a op b`` for ``op`` in :data:`_FOLD`: literals fold, identities (:func:`_identity`) drop, two jets
        are one instruction, a jet and a constant the affine :math:`o = s\,j + c` (``lin``), ``c / j`` is
        ``c * reciprocal(j)``, two constants a value. ``j / c`` is ``j * (1/c)`` (1 ulp): for a literal ``c`` only
        when ``1/c`` is normal (:data:`_RECIPROCAL_NORMAL`, else no lowering); for a run-time ``c`` this assumes
        ``5.6e-309 < |c| <= 4.5e307`` (outside, ``1/c`` is inf or subnormal where eager's ``j / c`` is not)."""
        if a is OPAQUE or b is OPAQUE:
            return OPAQUE
        if _lit(a) and _lit(b):
            return _FOLD[op](a, b)
        same = _identity(op, a, b)
        if same is not None:
            if op == "div" and isinstance(b, Jet):  # 0 / j is 0 where j's value is nonzero, else the eager path
                self.guard(b, None)
            return self.neg(b) if same is _NEG else same
        if isinstance(a, Jet) and isinstance(b, Jet):
            return self._jet(op, a, b)
        if isinstance(a, Jet):  # o = s a + c
            if op == "div" and _lit(b) and not _RECIPROCAL_NORMAL[0] < abs(b) <= _RECIPROCAL_NORMAL[1]:
                raise NotLowerable(f"a division by {b!r}, whose reciprocal is not a normal float, stays eager")
            s, c = {"add": (1.0, b), "sub": (1.0, None), "mul": (b, 0.0), "div": (None, 0.0)}[op]
            return self.affine(a, self.div(1.0, b) if s is None else s, self.neg(b) if c is None else c)
        if isinstance(b, Jet):
            if op == "div":
                return self.mul(a, self.unary("reciprocal", b))
            s, c = {"add": (1.0, a), "sub": (-1.0, a), "mul": (a, 0.0)}[op]
            return self.affine(b, s, c)
        return self._val(VALUE_BINARY[op], a, b)

    add, sub = partialmethod(_binary, "add"), partialmethod(_binary, "sub")
    mul, div = partialmethod(_binary, "mul"), partialmethod(_binary, "div")

    def neg(self, a):
        if a is OPAQUE or _lit(a):
            return a if a is OPAQUE else -a
        return self.affine(a, -1.0, 0.0) if isinstance(a, Jet) else self._val("(-{})", a)

    def affine(self, j: Jet, s, c) -> Jet:
        """``s * j + c`` for a jet ``j`` and constants ``s``, ``c``: one ``lin`` (constant term first)."""
        return self._jet("lin", c, s, j)

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
        if len(terms) < 2 or acc is OPAQUE:  # OPAQUE before a dead lin is built
            return self.add(acc, self.mul(*terms[0])) if terms and acc is not OPAQUE else acc
        flat = [z for t in terms for z in t]
        if isinstance(acc, Jet):
            return self.add(self._jet("lin", 0.0, *flat), acc)
        return self._jet("lin", acc, *flat)

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
            return _fpow(a, e)
        if _lit(e) and e == 1.0:
            return a
        if _lit(e) and e == 2.0:
            return self.mul(a, a)  # torch computes x**2 as x * x
        if isinstance(a, Jet):
            return self._jet("fun", a, "pow", e)
        return self._val(VALUE_BINARY["pow"], a, e)

    def unary(self, name: str, a):
        if a is OPAQUE:
            return OPAQUE
        if name == "pow":
            raise InternalError("Program.unary('pow') has no exponent: call Program.pow(a, e)")
        if name not in FUNCTIONS:
            raise NotLowerable(f"the function {name} has no Taylor rule in the code generator")
        return self._jet("fun", a, name, 0.0) if isinstance(a, Jet) else self._val(_VALUE_FUN[name], a)

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

    def guard(self, a, expected) -> None:
        """At run time the scalar ``a`` must equal ``expected`` (its traced value; None: be nonzero, not nan), else
        the element is handed back to the eager path; opaque guards are dropped (see the module docstring)."""
        if a is OPAQUE or _lit(a):
            return
        self.guards.append((a, None if expected is None else float(expected)))
