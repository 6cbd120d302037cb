r"""Variational integrators, each defined once by its discrete Lagrangian.

A scheme maps a Lagrangian :math:`L(q, v)` to a discrete Lagrangian
:math:`L_\Delta(a, b) \approx \int_{t}^{t+h} L(q, \dot q)\,dt` for the exact path from ``a`` to
``b``. :meth:`Scheme.discrete_lagrangian` is written with ordinary arithmetic only
(``+ - * /`` by numbers and by ``h``, and calls of ``L``), so the same code runs on

* torch tensors ``a, b`` of shape ``(..., n)`` (integrators, learning losses),
* SymPy matrices (a concrete, inspectable discrete Lagrangian),
* the truncated series of :mod:`bea.hseries` (all symbolic derivations).

To add a scheme, subclass :class:`Scheme` and implement ``discrete_lagrangian``, or wrap a
function with :class:`CustomScheme`. Every derivation in :mod:`bea` then works unchanged.

Constants inside a scheme should be exact: integers, :class:`fractions.Fraction`, or
:func:`exact` (a float that also remembers its exact rational value, so it multiplies tensors
and still gives exact symbolic formulas).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any, Callable, Dict, Optional, Union

from .deprecation import renamed
from .errors import BeaTypeError, BeaValueError, DuplicateNameError
from .registry import Registry
from .scalars import to_fraction

__all__ = [
    "Scheme",
    "Midpoint",
    "Trapezoidal",
    "GeneralisedMidpoint",
    "CustomScheme",
    "exact",
    "get_scheme",
    "available_schemes",
]


class Exact(float):
    """A float that carries its exact rational value (``.exact``).

    Arithmetic with ints, Fractions and other :class:`Exact` stays exact; with anything else
    (tensors, arrays) it behaves as the plain float. SymPy sees the exact ``Rational``.
    """

    exact: Fraction

    def __new__(cls, value: Union[int, float, str, Fraction]) -> "Exact":
        if isinstance(value, Exact):
            frac = value.exact
        elif isinstance(value, bool):
            raise BeaTypeError(f"exact() needs a number, got the boolean {value!r}")
        elif isinstance(value, (int, Fraction)):
            frac = Fraction(value)
        else:  # the decimal the user typed: 0.3 -> 3/10; NumPy, torch and SymPy scalars alike (bea.scalars)
            frac = to_fraction(value, "an exact constant")
        try:
            obj = super().__new__(cls, float(frac))
        except OverflowError:  # 1e310 is exact as a Fraction but has no float
            raise BeaValueError(f"{value!r} is out of range for an exact constant (beyond float64's 1.8e308)") from None
        obj.exact = frac
        return obj

    def _sympy_(self):
        import sympy

        return sympy.Rational(self.exact.numerator, self.exact.denominator)

    @staticmethod
    def _frac(other: Any) -> Optional[Fraction]:
        if isinstance(other, Exact):
            return other.exact
        if isinstance(other, (int, Fraction)) and not isinstance(other, bool):
            return Fraction(other)
        return None

    def _binary(self, other: Any, op: Callable[[Fraction, Fraction], Fraction], fop: str) -> Any:
        o = self._frac(other)
        if o is None:
            if getattr(other, "field", None) is not None and hasattr(other, "coeffs"):
                return NotImplemented  # a bea.radicals.RadicalNumber: exact in its field, it answers
            if type(other).__module__.startswith("sympy"):
                # SymPy converts float subclasses to Float before looking at _sympy_
                return op(self._sympy_(), other)
            return getattr(float, fop)(self, other)
        return Exact(op(self.exact, o))

    def __add__(self, o):
        return self._binary(o, lambda a, b: a + b, "__add__")

    def __radd__(self, o):
        return self._binary(o, lambda a, b: b + a, "__radd__")

    def __sub__(self, o):
        return self._binary(o, lambda a, b: a - b, "__sub__")

    def __rsub__(self, o):
        return self._binary(o, lambda a, b: b - a, "__rsub__")

    def __mul__(self, o):
        return self._binary(o, lambda a, b: a * b, "__mul__")

    def __rmul__(self, o):
        return self._binary(o, lambda a, b: b * a, "__rmul__")

    def __truediv__(self, o):
        return self._binary(o, lambda a, b: a / b, "__truediv__")

    def __rtruediv__(self, o):
        return self._binary(o, lambda a, b: b / a, "__rtruediv__")

    def __neg__(self):
        return Exact(-self.exact)

    def __repr__(self) -> str:
        return str(self.exact)


def exact(value: Union[int, float, str, Fraction]) -> Exact:
    """An exact constant usable in schemes on both SymPy/series and torch (``exact(0.3)`` is 3/10)."""
    return Exact(value)


class Scheme:
    r"""Base class: a one-step variational integrator given by :math:`L_\Delta(L, a, b, h)`.

    Attributes
    ----------
    name : str
        Identifier used by :func:`get_scheme`, the CLI and the cache key.
    symmetric : bool or None
        ``True`` if :math:`L_\Delta(b, a, -h) = -L_\Delta(a, b, h)`; then all series contain only
        even powers of ``h``. ``None`` means "unknown": derivations detect it from the expansion.
    """

    name: str = "scheme"
    symmetric: Optional[bool] = None

    def discrete_lagrangian(self, L: Callable, a: Any, b: Any, h: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    def __call__(self, L: Callable, a: Any, b: Any, h: Any) -> Any:
        return self.discrete_lagrangian(L, a, b, h)

    def params(self) -> Dict[str, Any]:
        """Parameters that distinguish instances (part of the cache key)."""
        return {}

    @renamed(dim="n")
    def fingerprint(self, n: Optional[int] = None) -> str:
        """A hash of this scheme's discrete Lagrangian evaluated symbolically on a generic ``L`` in
        dimensions 1 and 2 (and ``n``): equal for schemes with the same discrete Lagrangian, different
        for different ones, whatever their class or the constants their code captured (see
        :mod:`bea.scheme_check`). Raises :class:`~bea.errors.UnsupportedSchemeError` if the discrete
        Lagrangian cannot be evaluated on symbols."""
        from .scheme_check import fingerprint

        dims = (1, 2) if n is None else (1, 2, n)
        if type(self) in _BUILTIN:  # bea's own code, fixed given params(): computed once per process
            memo = (type(self), tuple(sorted(self.params().items())), dims)
            if memo not in _FINGERPRINTS:
                _FINGERPRINTS[memo] = fingerprint(self, dims)
            return _FINGERPRINTS[memo]
        return fingerprint(self, dims)

    @renamed(dim="n")
    def cache_key(self, n: Optional[int] = None) -> Optional[str]:
        """The part of cache keys that identifies the scheme: its :meth:`fingerprint`, recomputed on every
        call (a scheme's code may read mutable state), or ``None`` (nothing is cached) if the discrete
        Lagrangian cannot be evaluated on symbols."""
        from .errors import BeaError

        try:
            return self.fingerprint(n)
        except BeaError:
            return None

    def check_consistent(self) -> None:
        r"""Raise :class:`~bea.errors.InconsistentSchemeError` (a ``ValueError``) or
        :class:`~bea.errors.UnsupportedSchemeError` (a ``TypeError``), naming the cause, unless
        :math:`L_\Delta = O(h)` and :math:`L_\Delta(q(t-h/2), q(t+h/2))/h \to L(q, \dot q)` for a generic
        ``L`` (dimensions 1 and 2), and the engine can evaluate it. Cheap after the first call for the
        same discrete Lagrangian (the verdict is cached per :meth:`fingerprint`); integrators call it once
        at construction."""
        from .scheme_check import check_consistent

        check_consistent(self)

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in self.params().items())
        return f"{type(self).__name__}({params})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.params() == self.params()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__qualname__, tuple(sorted(self.params().items()))))


class Midpoint(Scheme):
    r"""Midpoint rule :math:`L_\Delta(a, b) = h\, L\big(\tfrac{a+b}{2}, \tfrac{b-a}{h}\big)`."""

    name = "midpoint"
    symmetric = True

    def discrete_lagrangian(self, L, a, b, h):
        return h * L((a + b) / 2, (b - a) / h)


class Trapezoidal(Scheme):
    r"""Trapezoidal rule :math:`L_\Delta(a, b) = \tfrac h2 \big[L(a, \tfrac{b-a}{h}) + L(b, \tfrac{b-a}{h})\big]`."""

    name = "trapezoidal"
    symmetric = True

    def discrete_lagrangian(self, L, a, b, h):
        v = (b - a) / h
        return h / 2 * (L(a, v) + L(b, v))


_ALPHA_MISSING = ("the generalised midpoint rule needs its parameter alpha in [0, 1]: GeneralisedMidpoint('0.3'), or the "
                  "name 'generalised_midpoint:0.3' (alpha = 1/2 is the midpoint rule, 'midpoint')")


class GeneralisedMidpoint(Scheme):
    r"""Generalised midpoint :math:`L_\Delta(a, b) = h\, L\big((1-\alpha) a + \alpha b, \tfrac{b-a}{h}\big)`.

    Symmetric only for :math:`\alpha = 1/2`; otherwise odd powers of ``h`` appear and the method is
    of order 1 (order 2 for separable Lagrangians, whose :math:`h^1` term is a total derivative).
    ``alpha`` has no default: a forgotten parameter would silently give the midpoint rule.
    """

    name = "generalised_midpoint"

    def __init__(self, alpha: Any = None):
        if alpha is None:
            raise BeaTypeError(_ALPHA_MISSING)
        # exact: NumPy, torch 0-d and SymPy scalars too; NaN, inf, arrays, complex: a typed error naming alpha
        self.alpha = exact(to_fraction(alpha, "alpha (in [0, 1], e.g. 0.3, '1/3' or Fraction(1, 3))"))
        if not 0 <= self.alpha.exact <= 1:
            raise BeaValueError(f"alpha must lie in [0, 1], got {alpha!r}")
        self.symmetric = self.alpha.exact == Fraction(1, 2)

    def params(self) -> Dict[str, Any]:
        return {"alpha": str(self.alpha.exact)}

    def discrete_lagrangian(self, L, a, b, h):
        return h * L((1 - self.alpha) * a + self.alpha * b, (b - a) / h)


class CustomScheme(Scheme):
    """A scheme from a plain function ``fn(L, a, b, h)`` returning :math:`L_\\Delta`.

    ``name`` identifies it in caches and messages; pass ``symmetric=True`` if you know it is.
    """

    def __init__(self, fn: Callable, name: str, symmetric: Optional[bool] = None):
        if not callable(fn):
            raise BeaTypeError(f"CustomScheme needs a callable fn(L, a, b, h), got {type(fn).__name__}")
        if not isinstance(name, str) or not name.strip():
            raise BeaTypeError(f"CustomScheme needs a non-empty name (a str) for messages, got {name!r}")
        if symmetric not in (None, True, False):
            raise BeaTypeError(f"symmetric must be True, False or None (unknown: detected), got {symmetric!r}")
        self.fn = fn
        self.name = name
        self.symmetric = symmetric

    def discrete_lagrangian(self, L, a, b, h):
        return self.fn(L, a, b, h)

    def params(self) -> Dict[str, Any]:
        return {"name": self.name}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CustomScheme) or other.name != self.name:
            return False
        if other.fn is self.fn and other.symmetric == self.symmetric:
            return True
        a, b = self.cache_key(), other.cache_key()
        return a is not None and a == b

    def __hash__(self) -> int:  # equal schemes have equal names
        return hash(("CustomScheme", self.name))


_BUILTIN = (Midpoint, Trapezoidal, GeneralisedMidpoint)
_FINGERPRINTS: Dict[tuple, str] = {}

def _normalise(name: str) -> str:
    """The stored spelling of a scheme name: case, hyphens and spaces do not matter ("Generalised-Midpoint")."""
    return name.strip().lower().replace("-", "_").replace(" ", "")


def _check_entry(obj: Any, name: str) -> None:
    if isinstance(obj, Scheme) or (isinstance(obj, type) and issubclass(obj, Scheme)):
        return
    if callable(obj) and not isinstance(obj, type):
        return  # a factory: what it returns is checked in get_scheme
    raise BeaTypeError(f"scheme {name!r} must be registered as a bea.Scheme (e.g. bea.CustomScheme(fn, name)), a Scheme "
                       f"subclass or a function returning one, got {type(obj).__name__}")


def _stage(name: str) -> Callable[[], Scheme]:
    """A factory for a stage scheme of :mod:`bea.stages` (imported when asked for: it imports this module)."""

    def make() -> Scheme:
        from . import stages

        return {"galerkin2": lambda: stages.galerkin_lobatto(2), "galerkin3": lambda: stages.galerkin_lobatto(3),
                "triple_jump": stages.triple_jump}[name]()

    return make


_BUILTIN_NAMES = ("midpoint", "trapezoidal", "generalised_midpoint", "galerkin2", "galerkin3", "triple_jump")

#: the schemes by name: the built-in classes, those of :func:`register_scheme` and, looked up lazily, those that
#: installed packages declare in the entry-point group ``bea.schemes`` (:class:`bea.registry.Registry`)
SCHEMES = Registry("scheme", "bea.schemes", _check_entry, _normalise,
                   {"midpoint": Midpoint, "trapezoidal": Trapezoidal, "generalised_midpoint": GeneralisedMidpoint,
                    "galerkin2": _stage("galerkin2"), "galerkin3": _stage("galerkin3"), "triple_jump": _stage("triple_jump")})


def register_scheme(name: str, scheme: Union[Scheme, Callable[[], Scheme]], *, replace: bool = False):
    """Make ``scheme`` usable by name wherever a scheme is taken (``bea.modified_lagrangian(name, ...)``, the
    integrators, the learners, ``python -m bea derive --scheme name``, sweep specifications). ``scheme``: a
    :class:`Scheme` (e.g. a :class:`CustomScheme`), a :class:`Scheme` subclass or a function of no arguments
    returning one. Names are compared ignoring case, hyphens and spaces. A taken name raises
    :class:`~bea.errors.DuplicateNameError` unless ``replace=True`` (the built-in names cannot be replaced).
    A package can declare schemes instead, in the entry-point group ``bea.schemes`` (:mod:`bea.registry`);
    returns ``scheme``."""
    key = SCHEMES._key(name)
    if key in _BUILTIN_NAMES or key == "generalized_midpoint":
        raise DuplicateNameError(f"{key!r} is a built-in scheme of bea and cannot be registered again; choose another name")
    return SCHEMES.register(key, scheme, replace=replace)


def available_schemes() -> list:
    """The names :func:`get_scheme` accepts (registered and declared by installed packages)."""
    return SCHEMES.names()


def _registered(key: str, scheme: str) -> Scheme:
    entry = SCHEMES.get(key) if key.strip() else None
    if entry is None:
        shown = scheme if len(scheme) <= 60 else scheme[:57] + "..."
        raise BeaValueError(f"unknown scheme {shown!r}; choose one of {', '.join(available_schemes())} or pass a Scheme "
                            f"object; register a scheme of your own by name with bea.register_scheme(name, scheme) or "
                            f"a package's 'bea.schemes' entry point")
    obj = entry if isinstance(entry, Scheme) else entry()
    if not isinstance(obj, Scheme):
        raise BeaTypeError(f"the factory registered as scheme {key!r} returned a {type(obj).__name__}, not a bea.Scheme")
    return obj


def get_scheme(scheme: Union[str, Scheme]) -> Scheme:
    """Return a scheme object from a scheme or its name.

    Names: ``"midpoint"``, ``"trapezoidal"`` and ``"generalised_midpoint:0.3"`` /
    ``"generalised_midpoint(alpha=0.3)"`` (the parameter is required); the stage schemes of
    :mod:`bea.stages` ``"galerkin2"``, ``"galerkin3"`` (Lobatto, orders 4 and 6) and ``"triple_jump"``.
    """
    if isinstance(scheme, Scheme):
        return scheme
    if not isinstance(scheme, str):
        raise BeaTypeError(f"scheme must be a bea.schemes.Scheme or its name (e.g. 'midpoint'), got {type(scheme).__name__}")
    # the name is normalised ("Generalised-Midpoint"), the parameter is not: "-" and "e" belong to "-0.1", "1e-1"
    name, sep, rest = re.match(r"\s*([^:(]*)([:(]?)(.*)", scheme, re.S).groups()
    key = name.strip().lower().replace("-", "_").replace(" ", "")
    alpha: Optional[str] = None
    if key in ("generalised_midpoint", "generalized_midpoint"):
        key = "generalised_midpoint"
        rest = rest.strip()
        if sep == "(":
            rest = rest[:-1] if rest.endswith(")") else rest
            rest = re.sub(r"^alpha\s*=", "", rest.strip())
        alpha = rest.strip() or None
    elif sep:
        key = scheme.strip()  # a parameter after a scheme that takes none: unknown
    if key == "generalised_midpoint":
        if alpha is None:
            raise BeaValueError(f"scheme {scheme.strip()!r} lacks its parameter: {_ALPHA_MISSING}")
        return GeneralisedMidpoint(alpha)
    return _registered(key, scheme)
