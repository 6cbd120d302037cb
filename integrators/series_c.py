r"""A :mod:`bea` series of a model, in C, for the compiled integrator path (:mod:`integrators.compiled`).

The integrated Lagrangian of a position-trained model of the true :math:`L` is a series such as
:math:`L_{inv} = \mathrm{inv}_N(M) = \sum_{k \le N} h^k F_k(\partial^{\le r}M, v)`, with :math:`F_k` the
component formula of :mod:`bea` for ``n`` coordinates (rational in the derivatives of :math:`M` of order
:math:`\le r` and in :math:`v`; :math:`r = 2` for the midpoint :math:`\mathrm{inv}_2`). The Newton step
needs its gradient :math:`g` and Hessian :math:`H` in :math:`x = (q, v)`, i.e. derivatives of :math:`M` up
to order :math:`K = r + 2`. Here:

1. the model writes the Taylor polynomial of :math:`M` at :math:`x` to degree :math:`K`
   (:class:`CTaylor`, from its method ``c_taylor(K)``; arithmetic of :mod:`integrators.codegen.runtime`);
2. every derivative :math:`\partial^\alpha M` in the formula is read off it as a second-order jet
   (value, gradient, Hessian) at :math:`x`: :math:`\partial_i\partial_j\partial^\alpha M =
   (\alpha + e_i + e_j)!\,c_{\alpha + e_i + e_j}` for the coefficients :math:`c_\beta = \partial^\beta M/\beta!`;
3. the formula is lowered by the one SymPy front-end (:mod:`integrators.codegen.from_sympy`: common
   subexpressions, one rule per node) into a program of :mod:`integrators.codegen` on second-order Taylor
   jets, with :math:`x_i` as seeded jets and :math:`h` a run-time value, and emitted by its one C emitter;
   the result's value, gradient and Hessian are :math:`L_{inv}, g, H`.

The C source depends on the series (kind, scheme, order, ``n``) and the model's structure; :math:`h` and the
model's numbers are the run-time array ``(h, model params...)``, refreshed before every chunk like the
model's own :class:`~integrators.compiled.CLagrangian`. A model without ``c_taylor`` (or one whose
``c_taylor`` raises :class:`~integrators.compiled.NotLowerable`) leaves the series to the eager path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from math import factorial, prod
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import sympy

import bea
from bea.deprecation import h_before_scheme

from .codegen import Jet, Program, Val, emit_c, lower_sympy, monomials, size
from .codegen.runtime import monomial_index
from .compiled import CLagrangian, NotLowerable, check_n

__all__ = ["CTaylor", "series_c_lagrangian", "formula_program", "KINDS"]

#: the series with a C form (functions of the derivatives of the model at one point)
KINDS = ("modified_lagrangian", "inverse_modified_lagrangian")
#: larger component formulas stay eager: midpoint inv_2 has 25 terms for n = 2 (C generated in 0.05 s), 163 for
#: n = 3 (0.5 s), 1 211 for n = 4 (10 s, 2 050 jet operations; 15 s with compiling); inv_4 has 10 528 for n = 2
#: (27 s to generate, 20 108 operations, minutes to compile)
MAX_TERMS = 2000


@dataclass(frozen=True)
class CTaylor:
    r"""A model's Taylor polynomial in C, for :func:`series_c_lagrangian`.

    ``source`` defines ``static void lag_taylor(const double *x, const double *P, double *T)`` writing the
    coefficients :math:`\partial^\beta M(x)/\beta!`, :math:`|\beta| \le` ``order``, in the order of
    ``integrators.codegen.monomials(2n, order)``; it may use the helpers of ``integrators.codegen.header``
    (for polynomials in variables of its choice), which it then includes. ``params``, ``cost``, ``refresh``, ``vectorise`` as for
    :class:`~integrators.compiled.CLagrangian`."""

    n: int
    order: int
    source: str
    params: np.ndarray = field(default_factory=lambda: np.zeros(1))
    cost: int = 1
    refresh: Optional[Callable[[], np.ndarray]] = None
    vectorise: bool = False


def _derivative_symbols(expr, q, v, L):
    """``expr`` with every derivative of ``L`` (and ``L`` itself) replaced by a symbol; ``{symbol: alpha}``
    with ``alpha`` the multi-index over ``x = (q, v)``."""
    xs = list(q) + list(v)
    subs, alphas = {}, {}
    for d in expr.atoms(sympy.Derivative) | ({L} if expr.has(L) else set()):
        alpha = [0] * len(xs)
        for var, count in (d.variable_count if isinstance(d, sympy.Derivative) else ()):
            alpha[xs.index(var)] += int(count)
        s = sympy.Symbol("d_" + "_".join(map(str, alpha)))
        subs[d], alphas[s] = s, tuple(alpha)
    return expr.xreplace(subs), alphas


def _gather_table(alpha: Tuple[int, ...], D: int, K: int) -> Tuple[List[int], List[int]]:
    """Monomial indices and factors of the second-order Taylor jet of :math:`\\partial^\\alpha M` read off the
    coefficients :math:`T_\\beta = \\partial^\\beta M/\\beta!`: at the monomial :math:`m`,
    :math:`\\partial^{\\alpha+m}M/m! = T_{\\alpha+m}\\,(\\alpha+m)!/m!`."""
    index = monomial_index(D, K)
    idx, fac = [], []
    for m in monomials(D, 2):
        beta = tuple(a + b for a, b in zip(alpha, m))
        idx.append(index[beta])
        fac.append(prod(factorial(b_) // factorial(m_) for b_, m_ in zip(beta, m)))
    return idx, fac


def formula_program(kind: str, scheme, order: int, n: int) -> Tuple[int, str, int]:
    """``(K, source, ops)``: the degree of the Taylor polynomial the series needs, the C of ``lag_derivs`` for
    it (with its jet runtime; to follow the model's ``lag_taylor``), and its number of jet operations."""
    if kind not in KINDS:
        raise NotLowerable(f"the series {kind!r} has no C form (only {', '.join(KINDS)})")
    # the largest n whose formula is derived at all: midpoint inv_2 takes 0.9 s for n = 4 and 89 s for n = 5 (10 080
    # terms, beyond MAX_TERMS anyway); at order 4, n = 2 takes 0.3 s (then rejected by MAX_TERMS)
    limit = 4 if order <= 2 else 2
    if n > limit:
        raise NotLowerable(f"the component formula of the {kind} of order {order} is derived for n <= {limit} only "
                           f"(n = {n}: minutes of SymPy); the series runs eagerly")
    series = getattr(bea, kind)(scheme, order).components(n)
    terms = sum(len(sympy.Add.make_args(c)) for c in series.coefficients.values())
    if terms > MAX_TERMS:
        raise NotLowerable(f"the {kind} of order {order} has {terms} terms for n = {n} (more than {MAX_TERMS}: "
                           "its C form would take long to generate and compile); the series runs eagerly")
    hs = sympy.Symbol("h_step")
    total = sum((series.h ** k * c for k, c in series.coefficients.items()), sympy.Integer(0))
    total = total.xreplace({series.h: hs})
    expr, alphas = _derivative_symbols(total, series.q, series.v, series.lagrangian)
    D = 2 * n
    K = max(sum(a) for a in alphas.values()) + 2
    prog = Program(D, 2)
    names: Dict[Any, Any] = {hs: Val("P[0]")}
    for s, alpha in sorted(alphas.items(), key=lambda kv: (sum(kv[1]), kv[1])):
        names[s] = prog.gather("T", *_gather_table(alpha, D, K))
    for i, xi in enumerate(list(series.q) + list(series.v)):
        names[xi] = prog.seed(i)
    (result,) = lower_sympy(prog, names, [expr])
    if not isinstance(result, Jet):
        raise NotLowerable(f"the {kind} of order {order} does not depend on the state for n = {n}")
    source, ops, _ = emit_c(prog, result, prelude=f"    double T[{size(D, K)}];\n    lag_taylor(x, P + 1, T);")
    return K, source, ops


#: formulas kept per process (schemes compare by value; a CustomScheme by its function)
FORMULA_CACHE_SIZE = 32
_formulas = lru_cache(maxsize=FORMULA_CACHE_SIZE)(formula_program)


def _cached_formula(kind: str, scheme, order: int, n: int) -> Tuple[int, str, int]:
    try:
        hash(scheme)
    except TypeError:  # an unhashable scheme: derive every time (bea's own cache keeps that cheap)
        return formula_program(kind, scheme, order, n)
    return _formulas(kind, scheme, order, n)


@h_before_scheme("kind", "scheme", "order", "h", "model")
def series_c_lagrangian(kind: str, order: int, h: float, scheme, model) -> CLagrangian:
    """The :class:`~integrators.compiled.CLagrangian` of the series ``kind`` of ``model`` (module docstring);
    :class:`NotLowerable` if the model has no ``c_taylor`` or the series no C form."""
    hook = getattr(model, "c_taylor", None)
    n = getattr(model, "n", None)
    if not callable(hook) or not isinstance(n, int):
        raise NotLowerable(f"a {type(model).__name__} has no Taylor form in C (c_taylor and n): the series runs eagerly")
    check_n(n)
    K, body, ops = _cached_formula(kind, scheme, order, n)
    taylor = hook(K)
    if not isinstance(taylor, CTaylor) or taylor.n != n or taylor.order != K:
        raise NotLowerable(f"{type(model).__name__}.c_taylor({K}) did not return a CTaylor of order {K} for n = {n}")
    hv = np.array([float(h)])
    refresh = None
    if taylor.refresh is not None:
        def refresh() -> np.ndarray:
            return np.concatenate([hv, np.asarray(taylor.refresh(), dtype=np.float64).reshape(-1)])
    params = np.concatenate([hv, np.asarray(taylor.params, dtype=np.float64).reshape(-1)])
    source = taylor.source + body
    cost = taylor.cost + max(1, ops * (2 * n) ** 2 // 100)
    # no auto_max_batch: with its nested autograd passes the eager series stays slower at any batch (midpoint
    # inv_2 of the double pendulum, cells 2 x 50: compiled / eager 2.9x at batch 100, 1.4x at 4 000; RESULTS_speed.md)
    return CLagrangian(n=n, source=source, params=params, cost=cost, refresh=refresh, vectorise=taylor.vectorise)
