r"""A :mod:`bea` series of a model, in C, for the compiled integrator path (:mod:`integrators.compiled`).

The integrated Lagrangian of a position-trained model of the true :math:`L` is a series such as
:math:`L_{inv} = \mathrm{inv}_N(M) = \sum_{k \le N} h^k F_k(\partial^{\le r}M, v)`, with :math:`F_k` the
component formula of :mod:`bea` for ``n`` coordinates (rational in the derivatives of :math:`M` of order
:math:`\le r` and in :math:`v`; :math:`r = 2` for the midpoint :math:`\mathrm{inv}_2`). The Newton step
needs its gradient :math:`g` and Hessian :math:`H` in :math:`x = (q, v)`, i.e. derivatives of :math:`M` up
to order :math:`K = r + 2`. Here:

1. the model writes the Taylor polynomial of :math:`M` at :math:`x` to degree :math:`K`
   (:class:`CTaylor`, from its method ``c_taylor(K)``; arithmetic of :mod:`integrators._taylor_c`);
2. every derivative :math:`\partial^\alpha M` in the formula is read off it as a second-order jet
   (value, gradient, Hessian) at :math:`x`: :math:`\partial_i\partial_j\partial^\alpha M =
   (\alpha + e_i + e_j)!\,c_{\alpha + e_i + e_j}` for the coefficients :math:`c_\beta = \partial^\beta M/\beta!`;
3. the formula runs as a straight-line program (SymPy's common subexpressions) on those jets, with
   :math:`v_i` as seeded jets and :math:`h` a constant: sums, products and powers
   :math:`\phi(a) = a^e`, :math:`(\phi, \phi'\nabla a, \phi'\nabla^2a + \phi''\nabla a\nabla a^\top)`;
   its value, gradient and Hessian are :math:`L_{inv}, g, H`.

The C source depends on the series (kind, scheme, order, ``n``) and the model's structure; :math:`h` and the
model's numbers are the run-time array ``(h, model params...)``, refreshed before every chunk like the
model's own :class:`~integrators.compiled.CLagrangian`. A model without ``c_taylor`` (or one whose
``c_taylor`` raises :class:`~integrators.compiled.NotLowerable`) leaves the series to the eager path.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from math import factorial
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import sympy

import bea
from bea.deprecation import h_before_scheme

from ._taylor_c import monomials, size
from .compiled import MAX_N, CLagrangian, NotLowerable

__all__ = ["CTaylor", "series_c_lagrangian", "formula_program", "KINDS"]

#: the series with a C form (functions of the derivatives of the model at one point)
KINDS = ("modified_lagrangian", "inverse_modified_lagrangian")
#: larger component formulas stay eager: midpoint inv_2 has 25 terms for n = 2 (C generated in 0.05 s), 163 for
#: n = 3 (0.5 s), 1 211 for n = 4 (10 s, 2 050 jet operations; 15 s with compiling); inv_4 has 10 528 for n = 2
#: (27 s to generate, 20 108 operations, minutes to compile)
MAX_TERMS = 2000


def max_dimension(order: int) -> int:
    """Largest ``n`` whose component formula is derived at all: midpoint inv_2 takes 0.9 s for n = 4 and 89 s for
    n = 5 (10 080 terms, beyond MAX_TERMS anyway); at order 4, n = 2 takes 0.3 s (then rejected by MAX_TERMS)."""
    return 4 if order <= 2 else 2

J2 = r"""
#define J2S (1 + J2D + J2D * J2D)
/* second-order jets in the J2D variables x: (value, gradient, Hessian row-major) */
static void j2_const(double c, double *o) {
    for (int k = 0; k < J2S; k++) o[k] = 0.0;
    o[0] = c;
}
static void j2_seed(double v, int dir, double *o) {
    j2_const(v, o);
    o[1 + dir] = 1.0;
}
/* o = sum over the J2S entries of fac[k] T[idx[k]]: a derivative of the model read off its Taylor polynomial */
static void j2_gather(const double *T, const int *idx, const int *fac, double *o) {
    for (int k = 0; k < J2S; k++) o[k] = fac[k] * T[idx[k]];
}
static void j2_axpy(double c, const double *a, double *o) {
    for (int k = 0; k < J2S; k++) o[k] += c * a[k];
}
static void j2_mul(const double *a, const double *b, double *o) {
    const int D = J2D;
    o[0] = a[0] * b[0];
    for (int i = 0; i < D; i++) o[1 + i] = a[0] * b[1 + i] + b[0] * a[1 + i];
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++)
            o[1 + D + i * D + j] = a[0] * b[1 + D + i * D + j] + b[0] * a[1 + D + i * D + j] + a[1 + i] * b[1 + j]
                                   + b[1 + i] * a[1 + j];
}
/* o = a^e */
static void j2_pow(const double *a, double e, double *o) {
    const int D = J2D;
    const double f0 = pow(a[0], e), f1 = e * pow(a[0], e - 1.0), f2 = e * (e - 1.0) * pow(a[0], e - 2.0);
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) o[1 + D + i * D + j] = f1 * a[1 + D + i * D + j] + f2 * a[1 + i] * a[1 + j];
    for (int i = 0; i < D; i++) o[1 + i] = f1 * a[1 + i];
    o[0] = f0;
}
"""


@dataclass(frozen=True)
class CTaylor:
    r"""A model's Taylor polynomial in C, for :func:`series_c_lagrangian`.

    ``source`` defines ``static void lag_taylor(const double *x, const double *P, double *T)`` writing the
    coefficients :math:`\partial^\beta M(x)/\beta!`, :math:`|\beta| \le` ``order``, in the order of
    ``integrators._taylor_c.monomials(2n, order)``; it may use the helpers of ``integrators._taylor_c.header``
    (for polynomials in variables of its choice), which it then includes. ``params``, ``cost``, ``refresh``, ``vectorise`` as for
    :class:`~integrators.compiled.CLagrangian`."""

    n: int
    order: int
    source: str
    params: np.ndarray = field(default_factory=lambda: np.zeros(1))
    cost: int = 1
    refresh: Optional[Callable[[], np.ndarray]] = None
    vectorise: bool = False


def _number(x) -> str:
    if isinstance(x, sympy.Rational):
        return f"({float(x.p)!r} / {float(x.q)!r})"
    return repr(float(x))


class _Program:
    """Emits the jet operations of SymPy expressions (``emit``) as C lines."""

    def __init__(self, names: Dict[sympy.Symbol, str]):
        self.names = dict(names)
        self.lines: List[str] = []
        self.count = 0

    def new(self) -> str:
        self.count += 1
        name = f"t{self.count}"
        self.lines.append(f"    double {name}[J2S];")
        return name

    def emit(self, e) -> str:
        if e in self.names:
            return self.names[e]
        if e.is_Number:
            out = self.new()
            self.lines.append(f"    j2_const({_number(e)}, {out});")
        elif e.is_Add:
            out = self.new()
            self.lines.append(f"    j2_const(0.0, {out});")
            for term in e.args:
                c, rest = term.as_coeff_Mul()
                if rest == 1:
                    self.lines.append(f"    {out}[0] += {_number(c)};")
                else:
                    self.lines.append(f"    j2_axpy({_number(c)}, {self.emit(rest)}, {out});")
        elif e.is_Mul:
            c, rest = e.as_coeff_Mul()
            factors = sympy.Mul.make_args(rest)
            cur = self.emit(factors[0])
            for f in factors[1:]:
                nxt = self.new()
                self.lines.append(f"    j2_mul({cur}, {self.emit(f)}, {nxt});")
                cur = nxt
            if c == 1:
                return cur
            out = self.new()
            self.lines.append(f"    j2_const(0.0, {out});")
            self.lines.append(f"    j2_axpy({_number(c)}, {cur}, {out});")
        elif e.is_Pow and e.exp.is_Number:
            out = self.new()
            self.lines.append(f"    j2_pow({self.emit(e.base)}, {_number(e.exp)}, {out});")
        else:
            raise NotLowerable(f"the series formula has a term without a C jet form: {type(e).__name__}")
        self.names[e] = out
        return out


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
    """Monomial indices and factorial factors of the second-order jet of :math:`\\partial^\\alpha M`."""
    index = {m: k for k, m in enumerate(monomials(D, K))}
    idx, fac = [], []

    def add(beta):
        idx.append(index[tuple(beta)])
        f = 1
        for b in beta:
            f *= factorial(b)
        fac.append(f)

    add(alpha)
    for i in range(D):
        add([a + (k == i) for k, a in enumerate(alpha)])
    for i in range(D):
        for j in range(D):
            add([a + (k == i) + (k == j) for k, a in enumerate(alpha)])
    return idx, fac


def formula_program(kind: str, scheme, order: int, n: int) -> Tuple[int, str, int]:
    """``(K, source, ops)``: the degree of the Taylor polynomial the series needs, the C of ``lag_derivs`` for
    it (to follow the jet helpers and the model's ``lag_taylor``), and its number of jet operations."""
    if kind not in KINDS:
        raise NotLowerable(f"the series {kind!r} has no C form (only {', '.join(KINDS)})")
    limit = max_dimension(order)
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
    names = {hs: "hj"}
    lines = ["static void lag_derivs(const double *x, const double *P, double *g, double *H) {",
             f"    double T[{size(D, K)}], hj[J2S];", "    lag_taylor(x, P + 1, T);", "    j2_const(P[0], hj);"]
    head = []
    for k, (s, alpha) in enumerate(sorted(alphas.items(), key=lambda kv: (sum(kv[1]), kv[1]))):
        idx, fac = _gather_table(alpha, D, K)
        head.append(f"static const int GI{k}[] = {{{', '.join(map(str, idx))}}};")
        head.append(f"static const int GF{k}[] = {{{', '.join(map(str, fac))}}};")
        lines += [f"    double a{k}[J2S];", f"    j2_gather(T, GI{k}, GF{k}, a{k});"]
        names[s] = f"a{k}"
    for i, xi in enumerate(list(series.q) + list(series.v)):
        if expr.has(xi):
            lines += [f"    double x{i}[J2S];", f"    j2_seed(x[{i}], {i}, x{i});"]
            names[xi] = f"x{i}"
    temps, (reduced,) = sympy.cse([expr], symbols=sympy.numbered_symbols("c_"), optimizations="basic")
    prog = _Program(names)
    for s, e in temps:
        prog.names[s] = prog.emit(e)
    result = prog.emit(reduced)
    body = lines + prog.lines + [
        "    for (int i = 0; i < J2D; i++) {",
        f"        g[i] = {result}[1 + i];",
        f"        for (int j = 0; j < J2D; j++) H[i * J2D + j] = {result}[1 + J2D + i * J2D + j];",
        "    }", "}"]
    return K, "\n".join(head) + "\n" + "\n".join(body) + "\n", prog.count


#: formulas kept per process (schemes compare by value; a CustomScheme by its function)
FORMULA_CACHE_SIZE = 32
_formulas: Dict[Any, Tuple[int, str, int]] = {}
_lock = threading.Lock()


def _cached_formula(kind: str, scheme, order: int, n: int) -> Tuple[int, str, int]:
    try:
        key = (kind, scheme, order, n)
        hash(key)
    except TypeError:  # an unhashable scheme: derive every time (bea's own cache keeps that cheap)
        return formula_program(kind, scheme, order, n)
    with _lock:
        hit = _formulas.get(key)
    if hit is None:
        hit = formula_program(kind, scheme, order, n)
        with _lock:
            _formulas[key] = hit
            while len(_formulas) > FORMULA_CACHE_SIZE:  # oldest first (dicts keep insertion order)
                _formulas.pop(next(iter(_formulas)))
    return hit


@h_before_scheme("kind", "scheme", "order", "h", "model")
def series_c_lagrangian(kind: str, order: int, h: float, scheme, model) -> CLagrangian:
    """The :class:`~integrators.compiled.CLagrangian` of the series ``kind`` of ``model`` (module docstring);
    :class:`NotLowerable` if the model has no ``c_taylor`` or the series no C form."""
    hook = getattr(model, "c_taylor", None)
    n = getattr(model, "n", None)
    if not callable(hook) or not isinstance(n, int):
        raise NotLowerable(f"a {type(model).__name__} has no Taylor form in C (c_taylor and n): the series runs eagerly")
    if n > MAX_N:
        raise NotLowerable(f"n = {n} coordinates; the compiled loop handles at most {MAX_N}")
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
    source = f"#define J2D {2 * n}\n" + J2 + taylor.source + body
    cost = taylor.cost + max(1, ops * (2 * n) ** 2 // 100)
    # no auto_max_batch: with its nested autograd passes the eager series stays slower at any batch (midpoint
    # inv_2 of the double pendulum, cells 2 x 50: compiled / eager 2.9x at batch 100, 1.4x at 4 000; RESULTS_speed.md)
    return CLagrangian(n=n, source=source, params=params, cost=cost, refresh=refresh, vectorise=taylor.vectorise)
