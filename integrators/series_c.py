r"""A :mod:`bea` series of a model, in C, for the compiled integrator path (:mod:`integrators.compiled`).

For :math:`L_{inv} = \sum_{k \le N} h^k F_k(\partial^{\le r}M, v)`, the model writes its Taylor polynomial
:math:`T_\beta = \partial^\beta M(x)/\beta!` to degree :math:`K = r + 2` (:class:`CTaylor`); each
:math:`\partial^\alpha M` is read off it as a second-order jet (:func:`_gather_table`), and the formula is lowered
and emitted on those jets: the result's value, gradient and Hessian are :math:`L_{inv}, g, H` (docs/theory/codegen.md).
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
#: larger component formulas stay eager (sizes and times measured: docs/theory/codegen.md)
MAX_TERMS = 2000


@dataclass(frozen=True)
class CTaylor:
    r"""A model's Taylor polynomial in C, for :func:`series_c_lagrangian`.

    ``source`` defines ``static void lag_taylor(const double *x, const double *P, double *T)`` writing the
    coefficients :math:`\partial^\beta M(x)/\beta!`, :math:`|\beta| \le` ``order``, in the order of
    ``integrators.codegen.monomials(2n, order)`` (it includes any ``integrators.codegen.header`` it uses).
    ``params``, ``cost``, ``refresh``, ``vectorise`` as for :class:`~integrators.compiled.CLagrangian`."""

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
    # the largest n whose formula is derived at all (derivation times: docs/theory/codegen.md)
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
    # no auto_max_batch: the eager series stays slower at any batch (docs/theory/codegen.md)
    return CLagrangian(n=n, source=source, params=params, cost=cost, refresh=refresh, vectorise=taylor.vectorise)
