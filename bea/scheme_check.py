r"""What a scheme *is*: its discrete Lagrangian evaluated symbolically, and whether it is consistent.

Identity (:func:`fingerprint`). A derivation depends on a scheme only through its discrete Lagrangian
:math:`L_\Delta(L, a, b, h)`. We evaluate it on symbols :math:`a_i, b_i, h` and an undefined SymPy
function ``L`` of :math:`2n` arguments, for :math:`n = 1, 2` (and the derivation's own ``n`` when
given), expand, print with ``srepr`` (a canonical form: SymPy orders the terms of sums and products
structurally, independently of hashing) and hash it. Constants are converted exactly as the series
engine converts them (:func:`bea.hseries.to_rational`: ``Exact`` by its decimal value, a Python float
by its binary value), so the fingerprint contains every constant the derivation will see, including
values captured by closures, and two schemes with the same discrete Lagrangian share it.

Consistency (:func:`check_consistent`). The scheme is evaluated by the series engine on
:math:`a = q(t - h/2)`, :math:`b = q(t + h/2)` for the generic ``L``; it is consistent iff
:math:`L_\Delta = O(h)` and :math:`\Lambda = L_\Delta/h \to L(q, \dot q)` as :math:`h \to 0`. This is the
leading-order condition of Marsden--West (an :math:`L_\Delta` that approximates the exact discrete
Lagrangian to :math:`O(h^2)` gives an integrator of order :math:`\ge 1`); the derivations re-check the
discrete Euler--Lagrange equations on their own. Failures name the cause (a missing factor ``h``,
weights that do not sum to 1, float weights whose binary values do not sum to exactly 1, a function
such as ``sin`` applied to ``L``).
"""

from __future__ import annotations

import hashlib
from typing import Dict, Iterable, Optional, Tuple

import sympy

from .errors import BeaError, InconsistentSchemeError, UnsupportedSchemeError
from .hseries import EXACT, HSeries, Q, SeriesVector, to_rational

_ALLOWED = "only + - * / with numbers and h, integer powers, and calls of L"


class _Context:
    """What one symbolic evaluation saw: whether any Python float was converted (for messages)."""

    def __init__(self) -> None:
        self.floats: list = []


class _Sym:
    """A SymPy expression that coerces constants exactly like :class:`bea.hseries.HSeries`."""

    __slots__ = ("e", "ctx")

    def __init__(self, e: sympy.Expr, ctx: _Context):
        self.e = e
        self.ctx = ctx

    def _lift(self, x):
        if isinstance(x, _Sym):
            return x.e
        if isinstance(x, sympy.Basic):
            return x  # e.g. the result of sympy.sin(...): diagnosed by _check_grammar
        r = to_rational(x)  # TypeError for anything the series engine refuses too
        if isinstance(x, float) and getattr(x, "exact", None) is None:
            self.ctx.floats.append(x)
        return sympy.Rational(int(r.numerator), int(r.denominator))

    def _op(self, other, fn):
        try:
            o = self._lift(other)
        except TypeError:
            return NotImplemented
        return _Sym(fn(self.e, o), self.ctx)

    def __add__(self, o):
        return self._op(o, lambda a, b: a + b)

    def __radd__(self, o):
        return self._op(o, lambda a, b: b + a)

    def __sub__(self, o):
        return self._op(o, lambda a, b: a - b)

    def __rsub__(self, o):
        return self._op(o, lambda a, b: b - a)

    def __mul__(self, o):
        return self._op(o, lambda a, b: a * b)

    def __rmul__(self, o):
        return self._op(o, lambda a, b: b * a)

    def __truediv__(self, o):
        def div(a, b):
            if b == 0:
                raise ZeroDivisionError("division by zero in the discrete Lagrangian")
            return a / b

        return self._op(o, div)

    def __rtruediv__(self, o):
        return self._op(o, lambda a, b: b / a)

    def __neg__(self):
        return _Sym(-self.e, self.ctx)

    def __pos__(self):
        return self

    def __pow__(self, k):
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise UnsupportedSchemeError(f"only non-negative integer powers are allowed in a discrete Lagrangian, got **{k!r}")
        return _Sym(self.e**k, self.ctx)

    def _sympy_(self):  # lets sympy.sin(x) build sin(...), so that the message can name sin
        return self.e


def _symbols(n: int):
    a = [sympy.Symbol(f"a{i}") for i in range(n)]
    b = [sympy.Symbol(f"b{i}") for i in range(n)]
    return a, b, sympy.Symbol("h"), sympy.Function("L")


def evaluate(scheme, n: int) -> Tuple[sympy.Expr, _Context]:
    """:math:`L_\\Delta(L, a, b, h)` of ``scheme`` in dimension ``n`` as a SymPy expression (not expanded).

    Raises :class:`UnsupportedSchemeError` naming the cause if the scheme cannot run on symbols."""
    ctx = _Context()
    a_s, b_s, h_s, Lf = _symbols(n)
    a = SeriesVector(_Sym(x, ctx) for x in a_s)
    b = SeriesVector(_Sym(x, ctx) for x in b_s)
    h = _Sym(h_s, ctx)

    def L(x, y):
        args = [*x, *y]
        if len(args) != 2 * n:
            raise InconsistentSchemeError(f"L takes q and v of length {n} each; the scheme passed {len(list(x))} and {len(list(y))}")
        return _Sym(Lf(*[h._lift(t) for t in args]), ctx)

    try:
        out = scheme.discrete_lagrangian(L, a, b, h)
    except BeaError:
        raise
    except Exception as err:  # noqa: BLE001 - any failure on symbols is the scheme's, reported with its cause
        raise UnsupportedSchemeError(
            f"scheme {scheme!r}: its discrete Lagrangian could not be evaluated on symbols "
            f"({type(err).__name__}: {err}); it may use {_ALLOWED}, so that it runs on series as well as on tensors"
        ) from err
    if isinstance(out, _Sym):
        expr = out.e
    elif isinstance(out, sympy.Expr):
        expr = out
    else:
        try:
            expr = h._lift(out)
        except TypeError:
            raise UnsupportedSchemeError(
                f"scheme {scheme!r} returned {type(out).__name__}, not an expression in L; a discrete "
                f"Lagrangian may use {_ALLOWED}"
            ) from None
    return expr, ctx


def _check_grammar(scheme, expr: sympy.Expr, h: sympy.Symbol, Lf) -> None:
    """Raise naming the first construct the series engine cannot evaluate (``sin``, ``sqrt``, a float...)."""
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, (sympy.Add, sympy.Mul, sympy.Symbol, sympy.Rational)):
            continue
        if isinstance(node, sympy.core.function.AppliedUndef) and node.func == Lf:
            continue
        if isinstance(node, sympy.Pow) and node.exp.is_Integer and (node.exp >= 0 or node.base == h or node.base.is_Rational):
            continue
        if isinstance(node, sympy.Float):
            what = f"the SymPy Float {node}; use fractions.Fraction or bea.exact('...') for exact constants"
        elif isinstance(node, sympy.Pow):
            what = f"the power {node} (only non-negative integer powers, and negative powers of h, are allowed)"
        elif isinstance(node, sympy.Function):
            what = f"the function {node.func.__name__} (in {node})"
        else:
            what = f"{type(node).__name__} ({node})"
        raise UnsupportedSchemeError(
            f"scheme {scheme!r}: its discrete Lagrangian applies {what}; it may use {_ALLOWED}"
        )


def fingerprint(scheme, dims: Iterable[int] = (1, 2)) -> str:
    """A hash of the scheme's discrete Lagrangian on generic ``L`` in each dimension of ``dims``."""
    parts = []
    for n in sorted(set(dims)):
        expr, _ = evaluate(scheme, n)
        parts.append(f"n={n}:{sympy.srepr(sympy.expand(expr))}")
    if scheme.symmetric is False:  # True and None give the same results (symmetry is detected); False does not
        parts.append("declared-not-symmetric")
    # "ld2": keys written since declarations are verified (check_declarations) -- never shared with "ld1" entries,
    # one of which may hold the series of a scheme that lied about its symmetry
    return "ld2:" + hashlib.sha256("\n".join(parts).encode()).hexdigest()


# fingerprint -> None (consistent) or (exception class, message); schemes are few, so no eviction
_VERDICTS: Dict[Tuple[str, Optional[bool]], Optional[Tuple[type, str]]] = {}


def check_consistent(scheme) -> None:
    """Raise :class:`InconsistentSchemeError` or :class:`UnsupportedSchemeError` (naming the cause)
    unless ``scheme`` is a consistent discrete Lagrangian the engine can evaluate. Cached per fingerprint."""
    key = (fingerprint(scheme), scheme.symmetric)  # the declaration is checked too: part of the verdict's key
    if key not in _VERDICTS:
        try:
            for n in (1, 2):
                _check_dim(scheme, n)
            check_declarations(scheme)
        except (InconsistentSchemeError, UnsupportedSchemeError) as err:
            _VERDICTS[key] = (type(err), str(err))
        else:
            _VERDICTS[key] = None
    verdict = _VERDICTS[key]
    if verdict is not None:
        raise verdict[0](verdict[1])


def check_declarations(scheme) -> None:
    r"""Verify what a scheme declares about itself before any derivation trusts it (and before anything is
    cached): ``symmetric=True`` promises :math:`L_\Delta(L, b, a, -h) = -L_\Delta(L, a, b, h)` identically, and the
    engines then skip every odd power of ``h`` (in the modified equation without looking); ``symmetric=False``
    promises the opposite. Checked exactly by :func:`symmetric_identity`; bea's own schemes declaring their own
    value are exempt (about 20 ms a scheme saved in every process; ``tests/test_reliability_cache_integrity.py``
    checks that value against the identity). ``None`` declares nothing: symmetry is detected from the expansion."""
    if scheme.symmetric is None or scheme.symmetric == _builtin_symmetry(scheme):
        return
    holds, n = symmetric_identity(scheme)
    if holds == scheme.symmetric:
        return
    if scheme.symmetric:
        raise InconsistentSchemeError(
            f"scheme {scheme!r} is declared symmetric=True, but L_Delta(L, b, a, -h) != -L_Delta(L, a, b, h) (n = {n}): "
            "its series have odd powers of h, which the declaration would drop. Declare symmetric=None (detected) "
            "or False")
    raise InconsistentSchemeError(
        f"scheme {scheme!r} is declared symmetric=False, but L_Delta(L, b, a, -h) = -L_Delta(L, a, b, h) (n = {n}): it "
        "is symmetric. Declare symmetric=None (detected) or True")


def symmetric_identity(scheme) -> Tuple[bool, int]:
    r"""``(holds, n)``: whether :math:`L_\Delta(L, b, a, -h) = -L_\Delta(L, a, b, h)` exactly, on an undefined ``L`` in
    dimensions 1 and 2, and the first dimension where it fails (2 if it holds)."""
    for n in (1, 2):
        expr, _ = evaluate(scheme, n)
        a, b, h, _ = _symbols(n)
        swap = {**dict(zip(a, b)), **dict(zip(b, a)), h: -h}
        if sympy.expand(expr + expr.subs(swap, simultaneous=True)) != 0:
            return False, n
    return True, 2


def _builtin_symmetry(scheme) -> Optional[bool]:
    """The symmetry of bea's own schemes by their definition (``None`` for any other scheme)."""
    from fractions import Fraction

    from .schemes import GeneralisedMidpoint, Midpoint, Trapezoidal

    if type(scheme) in (Midpoint, Trapezoidal):
        return True
    if type(scheme) is GeneralisedMidpoint:
        return scheme.alpha.exact == Fraction(1, 2)
    return None


def _check_dim(scheme, n: int) -> None:
    from .jets import Jets  # the registry builds SymPy matrices: imported when first needed

    expr, ctx = evaluate(scheme, n)
    _, _, h_s, Lf = _symbols(n)
    _check_grammar(scheme, expr, h_s, Lf)
    J = Jets(n)
    a = SeriesVector(J.shifted_position(i, -Q(1, 2), 2) for i in range(n))
    b = SeriesVector(J.shifted_position(i, Q(1, 2), 2) for i in range(n))
    h = HSeries.h_power(1, 1, EXACT, J.nil)

    def L(x, y):
        return J.lagrangian_at(list(x), list(y))

    floats = ""
    if ctx.floats:
        x = ctx.floats[0]
        num, den = x.as_integer_ratio()
        floats = (
            f"; the scheme uses Python floats, which enter with their exact binary values ({x!r} is {num}/{den}), "
            "so decimal weights such as 0.3 and 0.7 do not sum to exactly 1: write them as fractions.Fraction(3, 10) "
            "or bea.exact('0.3')"
        )
    try:
        Ld = scheme.discrete_lagrangian(L, a, b, h)
        if not isinstance(Ld, HSeries):
            raise UnsupportedSchemeError(f"scheme {scheme!r}: its discrete Lagrangian returned {type(Ld).__name__}, "
                                         f"not a series; it may use {_ALLOWED}")
        lam0 = (Ld / h)[0] if Ld.valuation() >= 1 else None
    except UnsupportedSchemeError:
        raise
    except ValueError as err:  # the series engine's consistency errors (arguments of L, division by h), by class
        cause = str(err).removeprefix("inconsistent scheme: ")
        raise InconsistentSchemeError(f"inconsistent scheme {scheme!r}: {cause}{floats}") from err
    except (TypeError, AttributeError, ZeroDivisionError) as err:
        raise UnsupportedSchemeError(
            f"scheme {scheme!r}: its discrete Lagrangian could not be evaluated on series ({err}); it may use {_ALLOWED}"
        ) from err
    if lam0 is None:
        raise InconsistentSchemeError(
            f"inconsistent scheme {scheme!r}: L_Delta does not vanish as h -> 0; a discrete Lagrangian approximates "
            "the action over one step, integral of L dt ~ h L(q, v), so it needs an overall factor h, as in "
            f"h*L((a+b)/2, (b-a)/h){floats}"
        )
    L0 = J.L(())
    if lam0 == {(L0,): Q(1)}:
        return
    if set(lam0) == {(L0,)}:
        c = lam0[(L0,)]
        about = "" if c.denominator == 1 else f" (about {float(c):.17g})"
        cause = (
            f"L_Delta(q(t-h/2), q(t+h/2))/h tends to {c} * L(q, v) instead of L(q, v): the weights of its evaluations "
            f"of L sum to {c}{about}, not 1 (e.g. 2*h*L(...) counts the step twice)"
        )
    else:
        cause = "L_Delta(q(t-h/2), q(t+h/2))/h does not tend to L(q, v) as h -> 0 (it involves derivatives of L at leading order)"
    raise InconsistentSchemeError(f"inconsistent scheme {scheme!r}: {cause}{floats}")
