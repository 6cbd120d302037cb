r"""Exact rational values of the real scalars a caller may pass as a scheme constant.

A constant :math:`c` of a scheme enters the symbolic derivation as a rational number, so it is converted
to a :class:`fractions.Fraction`:

* ``int``, :class:`~fractions.Fraction`, :func:`bea.schemes.exact` constants, NumPy and torch integers, SymPy
  ``Integer``/``Rational``: exactly;
* decimal strings (``"0.3"``, ``"1/3"``, ``"1e-1"``) and :class:`decimal.Decimal`: exactly, as written;
* binary floats (Python, NumPy of any width, torch 0-d tensors, SymPy ``Float``): the shortest decimal that
  rounds to the same value *in the float's own format* (``0.3``, ``np.float32(0.3)`` and ``Float('0.3')``
  are all :math:`3/10`) -- the number the user typed, not the nearest binary fraction;
* anything else -- booleans, complex numbers, NaN, infinities, arrays or tensors with more than one
  element -- is refused with a :class:`~bea.errors.BeaTypeError` or :class:`~bea.errors.BeaValueError`
  naming the value.
"""

from __future__ import annotations

import decimal
import math
import numbers
import re
from fractions import Fraction
from typing import Any

from .errors import BeaTypeError, BeaValueError

__all__ = ["to_fraction"]

# a decimal or rational as typed, ASCII digits only (\d would take other scripts' digits); at most three exponent
# digits and 200 characters, so that Fraction never builds a huge integer ("1e999999999")
_DECIMAL = re.compile(r"[+-]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,3})?|[0-9]+/[0-9]+)")


def _from_text(text: str, what: str) -> Fraction:
    t = text.strip()
    if len(t) > 200 or not _DECIMAL.fullmatch(t):
        raise BeaValueError(f"{what} must be a number such as 0.3, 1e-1 or 1/3, got {text[:60]!r}")
    try:
        return Fraction(t)
    except ZeroDivisionError:
        raise BeaValueError(f"{what} {text!r} divides by zero") from None
    except ValueError:  # the pattern is stricter than Fraction's; kept typed should they ever disagree
        raise BeaValueError(f"{what} must be a number such as 0.3, 1e-1 or 1/3, got {text[:60]!r}") from None


def _from_float(x: float, text: str, what: str) -> Fraction:
    if not math.isfinite(x):
        raise BeaValueError(f"{what} must be a finite real number, got {text}")
    return _from_text(text, what)


def _from_tensor(t: Any, what: str) -> Fraction:
    if t.numel() != 1 or t.dim() != 0:
        raise BeaTypeError(f"{what} must be a scalar, got a tensor of shape {tuple(t.shape)}; pass t.item() of one element")
    if t.is_complex() or t.dtype.is_complex or str(t.dtype) == "torch.bool":
        raise BeaTypeError(f"{what} must be a real number, got a {t.dtype} tensor")
    t = t.detach().cpu()
    if not t.dtype.is_floating_point:
        return Fraction(int(t.item()))
    if str(t.dtype) in ("torch.float16", "torch.float32", "torch.float64"):
        return to_fraction(t.numpy()[()], what)  # NumPy prints the shortest decimal of the tensor's own width
    x = float(t.item())  # bfloat16 & co.: no NumPy twin; exact in float64
    return _from_float(x, repr(x), what)


def _from_sympy(value: Any, what: str) -> Fraction:
    if getattr(value, "is_Rational", False):
        return Fraction(int(value.p), int(value.q))
    if getattr(value, "is_Float", False):
        if not value.is_finite:
            raise BeaValueError(f"{what} must be a finite real number, got {value}")
        return _from_text(str(value), what)
    raise BeaTypeError(f"{what} must be a real number, got the SymPy {type(value).__name__} {str(value)[:60]}")


def to_fraction(value: Any, what: str = "the constant") -> Fraction:
    """The exact rational value of the real scalar ``value`` (see the module docstring); ``what`` names it
    in errors."""
    if isinstance(value, bool) or type(value).__name__ in ("bool_", "bool"):
        raise BeaTypeError(f"{what} must be a number, got the boolean {value!r}")
    if isinstance(value, (int, Fraction)):
        return Fraction(value)
    if isinstance(getattr(value, "exact", None), Fraction):  # bea.schemes.Exact: a float that knows its rational
        return value.exact
    if isinstance(value, str):
        return _from_text(value, what)
    module = type(value).__module__.split(".")[0]
    if module == "numpy":
        import numpy as np

        if isinstance(value, np.ndarray):
            if value.shape != ():
                raise BeaTypeError(f"{what} must be a scalar, got an array of shape {value.shape}")
            value = value[()]
        if isinstance(value, np.integer):
            return Fraction(int(value))
        if isinstance(value, np.floating):
            return _from_float(float(value), str(value), what)  # str: NumPy's shortest decimal for its width
        raise BeaTypeError(f"{what} must be a real number, got the NumPy {type(value).__name__} {value!r}")
    if module == "torch":
        return _from_tensor(value, what)
    if module == "sympy":
        return _from_sympy(value, what)
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise BeaValueError(f"{what} must be a finite real number, got {value}")
        return Fraction(value)
    if isinstance(value, numbers.Rational):  # gmpy2's mpq and other registered rationals
        return Fraction(int(value.numerator), int(value.denominator))
    if isinstance(value, float):
        return _from_float(value, repr(float(value)), what)
    raise BeaTypeError(f"{what} must be a real number (int, float, Fraction, Decimal, decimal string, NumPy/torch/SymPy "
                       f"scalar), got {type(value).__name__}")
