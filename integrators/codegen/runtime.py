r"""The C runtime of the code-generation IR: arithmetic on truncated Taylor polynomials in ``D`` variables to degree
``K``, coefficients :math:`c_\beta = \partial^\beta f(x_0)/\beta!` in :func:`monomials` order. Product
:math:`(ab)_\gamma = \sum_{\alpha+\beta=\gamma} a_\alpha b_\beta`; quotient :math:`o_\gamma = (a_\gamma -
\sum_{\beta<\gamma} o_\beta b_{\gamma-\beta})/b_0`; a function of one value :math:`\phi(a) = \sum_{k\le K} f_k\delta^k`,
:math:`\delta = a - a_0`, :math:`f_k = \phi^{(k)}(a_0)/k!` from one-variable recurrences (``coef``; each rule and why
it is written so: docs/theory/codegen.md).
"""

from __future__ import annotations

import itertools
from functools import lru_cache
from math import comb
from typing import Dict, List, Tuple

__all__ = ["monomials", "monomial_index", "size", "header", "FUNCTIONS"]

#: functions of one value: C expression of phi(a) and the rule for its Taylor coefficients (``coef`` cases)
FUNCTIONS = {
    "sin": "sin(a)", "cos": "cos(a)", "sinh": "sinh(a)", "cosh": "cosh(a)", "tan": "tan(a)", "tanh": "tanh(a)",
    "exp": "exp(a)", "expm1": "expm1(a)", "log": "log(a)", "log1p": "log1p(a)", "sqrt": "sqrt(a)",
    "rsqrt": "1.0 / sqrt(a)", "reciprocal": "1.0 / a", "sigmoid": "1.0 / (1.0 + exp(-a))", "atan": "atan(a)",
    "abs": "fabs(a)", "relu": "(a > 0.0 ? a : 0.0)", "softplus": "(a > 20.0 ? a : log1p(exp(a)))", "pow": "pow(a, e)",
    "erf": "erf(a)",
}

#: ``coef`` bodies (after f[0] = phi(a)): the Taylor coefficients f_k of phi(a + t). Where phi' = w(phi), f_k = w_{k-1}/k
#: with w's coefficients from f's; ``ode(c0, c1, c2)`` is w = c0 + c1 phi + c2 phi^2 (tan 1 + phi^2, tanh 1 - phi^2,
#: sigmoid phi - phi^2); pow: the binomial series; log: f_k = -f_{k-1}(k - 1)/(k a). u, w: scratch arrays of K + 1;
#: ``e``: the exponent of pow
_COEF = {
    "sin": "u[0] = cos(a); for (k = 1; k <= K; k++) { f[k] = u[k - 1] / k; u[k] = -f[k - 1] / k; }",
    "cos": "u[0] = sin(a); for (k = 1; k <= K; k++) { f[k] = -u[k - 1] / k; u[k] = f[k - 1] / k; }",
    "sinh": "u[0] = cosh(a); for (k = 1; k <= K; k++) { f[k] = u[k - 1] / k; u[k] = f[k - 1] / k; }",
    "cosh": "u[0] = sinh(a); for (k = 1; k <= K; k++) { f[k] = u[k - 1] / k; u[k] = f[k - 1] / k; }",
    "tan": "ode(f, 1.0, 0.0, 1.0);", "tanh": "ode(f, 1.0, 0.0, -1.0);", "sigmoid": "ode(f, 0.0, 1.0, -1.0);",
    "exp": "for (k = 1; k <= K; k++) f[k] = f[k - 1] / k;",
    "expm1": "u[0] = f[0] + 1.0; for (k = 1; k <= K; k++) f[k] = u[k] = u[k - 1] / k;",
    "log": "if (K >= 1) f[1] = 1.0 / a; for (k = 2; k <= K; k++) f[k] = -f[k - 1] * (k - 1) / (k * a);",
    "log1p": "if (K >= 1) f[1] = 1.0 / (1.0 + a); for (k = 2; k <= K; k++) f[k] = -f[k - 1] * (k - 1) / (k * (1.0 + a));",
    "sqrt": "for (k = 1; k <= K; k++) f[k] = f[k - 1] * (1.5 - k) / (k * a);",
    "rsqrt": "for (k = 1; k <= K; k++) f[k] = f[k - 1] * (0.5 - k) / (k * a);",
    "reciprocal": "for (k = 1; k <= K; k++) f[k] = -f[k - 1] / a;",
    "pow": "double b = 1.0; for (k = 1; k <= K; k++) { b *= (e - k + 1) / k; f[k] = b * pow(a, e - k); }",
    "atan": "w[0] = 1.0 / (1.0 + a * a); for (k = 1; k < K; k++) w[k] = -(2.0 * a * w[k - 1] + (k >= 2 ? w[k - 2] : 0.0))"
            " * w[0]; for (k = 1; k <= K; k++) f[k] = w[k - 1] / k;",
    # erf' = (2/sqrt(pi)) g, g = exp(-a^2), g' = -2 a g: (k + 1) g_{k+1} = -2 (a g_k + g_{k-1})
    "erf": "u[0] = 1.1283791670955126 * exp(-a * a); for (k = 1; k <= K; k++) { f[k] = u[k - 1] / k;"
           " u[k] = -2.0 * (a * u[k - 1] + (k >= 2 ? u[k - 2] : 0.0)) / k; }",
    "abs": "if (K >= 1) f[1] = (a > 0.0) - (a < 0.0);",
    "relu": "if (K >= 1) f[1] = a > 0.0 ? 1.0 : 0.0;",
    "softplus": "if (a > 20.0) { if (K >= 1) f[1] = 1.0; } else { u[0] = 1.0 / (1.0 + exp(-a)); ode(u, 0.0, 1.0, -1.0);"
                " for (k = 1; k <= K; k++) f[k] = u[k - 1] / k; }",
}


@lru_cache(maxsize=32)
def monomials(D: int, K: int) -> Tuple[Tuple[int, ...], ...]:
    """Exponent tuples of the monomials in ``D`` variables of degree at most ``K``, graded."""
    out: List[Tuple[int, ...]] = []
    for d in range(K + 1):
        for combo in itertools.combinations_with_replacement(range(D), d):
            e = [0] * D
            for i in combo:
                e[i] += 1
            out.append(tuple(e))
    return tuple(out)


@lru_cache(maxsize=32)
def monomial_index(D: int, K: int) -> Dict[Tuple[int, ...], int]:
    """``{exponents: position}`` in :func:`monomials` order (do not modify: shared)."""
    return {m: k for k, m in enumerate(monomials(D, K))}


def size(D: int, K: int) -> int:
    """Number of coefficients, :math:`\\binom{D + K}{K}`."""
    return comb(D + K, K)


def _products(D: int, K: int, min_a: int = 0, min_b: int = 0) -> Dict[int, List[Tuple[int, int]]]:
    """``{k: [(i, j), ...]}``: the coefficient pairs of a truncated product landing on monomial ``k``, the first
    factor's monomial of degree at least ``min_a``, the second's at least ``min_b``."""
    mons, index = monomials(D, K), monomial_index(D, K)
    out: Dict[int, List[Tuple[int, int]]] = {}
    for i, a in enumerate(mons):
        for j, b in enumerate(mons):
            if sum(a) >= min_a and sum(b) >= min_b and sum(a) + sum(b) <= K:
                out.setdefault(index[tuple(x + y for x, y in zip(a, b))], []).append((i, j))
    return out


def _sum(pairs, a: str, b: str) -> str:
    return " + ".join(f"{a}[{i}] * {b}[{j}]" for i, j in pairs) if pairs else "0.0"


def _unrolled(D: int, K: int, p: str) -> List[str]:
    r"""``mul``, ``div`` and ``powers`` (:math:`\delta^k`, ``k = 1..K``) written out for one ``(D, K)``: every
    coefficient one expression with constant indices."""
    S, full = size(D, K), _products(D, K)
    lines = ["/* c = a b (c distinct from a and b) */", f"static void {p}_mul(const double *a, const double *b, double *c) {{"]
    lines += [f"    c[{k}] = {_sum(full.get(k, []), 'a', 'b')};" for k in range(S)]
    lines += ["}", "/* c = a / b, degree by degree (c distinct from a and b) */",
              f"static void {p}_div(const double *a, const double *b, double *c) {{"]
    for k in range(S):
        rest = [(i, j) for i, j in full.get(k, []) if i != k]
        lines.append(f"    c[{k}] = (a[{k}] - ({_sum(rest, 'c', 'b')})) / b[0];" if rest else f"    c[{k}] = a[{k}] / b[0];")
    lines += ["}", "/* pw[(k - 1) S ..]: delta^k, k = 1..K, delta = a - a_0 (starts at degree k) */",
              f"static void {p}_powers(const double *a, double *pw) {{",
              f"    for (int k = 0; k < {S}; k++) pw[k] = a[k];", "    pw[0] = 0.0;"]
    degree = [sum(m) for m in monomials(D, K)]
    for q in range(2, K + 1):
        prods = _products(D, K, q - 1, 1)
        prev, cur = f"(pw + {(q - 2) * S})", f"(pw + {(q - 1) * S})"
        lines += [f"    {cur}[{k}] = {_sum(prods.get(k, []), prev, 'pw') if degree[k] >= q else '0.0'};"
                  for k in range(S)]
    return lines + ["}"]


_HELPERS = r"""
static void p_const(double c, double *o) { for (int k = 0; k < P_S; k++) o[k] = 0.0; o[0] = c; }
static void p_seed(double v, int dir, double *o) { p_const(v, o); o[1 + dir] = 1.0; }
static void p_copy(const double *a, double *o) { for (int k = 0; k < P_S; k++) o[k] = a[k]; }
static void p_add(const double *a, const double *b, double *o) { for (int k = 0; k < P_S; k++) o[k] = a[k] + b[k]; }
static void p_sub(const double *a, const double *b, double *o) { for (int k = 0; k < P_S; k++) o[k] = a[k] - b[k]; }
static void p_scale(const double *a, double c, double *o) { for (int k = 0; k < P_S; k++) o[k] = c * a[k]; }
static void p_axpy(double c, const double *a, double *o) { for (int k = 0; k < P_S; k++) o[k] += c * a[k]; }
/* o = a from a space of fewer variables: a[k] to o[map[k]], k < m, zeros elsewhere */
static void p_embed(const double *a, const int *map, int m, double *o) {
    for (int k = 0; k < P_S; k++) o[k] = 0.0;
    for (int k = 0; k < m; k++) o[map[k]] = a[k];
}
static void p_sel(double c, const double *a, const double *b, double *o) { p_copy(c != 0.0 ? a : b, o); }
/* o = phi(a) = sum_q f[q] delta^q from f[q] = phi^(q)(a_0)/q! and the powers of p_powers (o distinct from a) */
static void p_fun(const double *a, const double *f, double *o) {
    double pw[P_K * P_S];
    p_powers(a, pw);
    for (int k = 0; k < P_S; k++) {
        double s = k == 0 ? f[0] : 0.0;
        for (int q = 1; q <= P_K; q++) s += f[q] * pw[(q - 1) * P_S + k];
        o[k] = s;
    }
}
/* o = sum over the P_S coefficients of fac[k] T[idx[k]]: a derivative of a model read off its Taylor polynomial */
static void p_gather(const double *T, const int *idx, const double *fac, double *o) {
    for (int k = 0; k < P_S; k++) o[k] = fac[k] * T[idx[k]];
}
/* y' = c0 + c1 y + c2 y^2 in one variable: y[k] = w[k - 1] / k from y[0] */
static void p_ode(double *y, double c0, double c1, double c2) {
    for (int k = 1; k <= P_K; k++) {
        double s = 0.0;
        for (int i = 0; i < k; i++) s += y[i] * y[k - 1 - i];
        y[k] = ((k == 1 ? c0 : 0.0) + c1 * y[k - 1] + c2 * s) / k;
    }
}
"""


def _lin_p(S: int, p: str) -> List[str]:
    """``lin_p(T, m, P, W, o)``: ``o = sum_t P[T[2t+1]] W[T[2t] ..]``, a linear combination with run-time
    coefficients, ``T[2t]`` the offset of a term in the work array ``W`` (``o`` is never a term); for ``S <= 64`` in
    registers, 4 lanes per GNU C vector, each in the scalar order (the same results)."""
    head = [f"static void {p}_lin_p(const int *restrict T, int m, const double *restrict P, const double *restrict W,",
            "                    double *restrict o) {"]
    if S > 64:
        return head + [f"    double acc[{S}];", f"    for (int k = 0; k < {S}; k++) acc[k] = 0.0;",
                       "    for (int t = 0; t < m; t++) {", "        const double *b = W + T[2 * t], c = P[T[2 * t + 1]];",
                       f"        for (int k = 0; k < {S}; k++) acc[k] += c * b[k];", "    }",
                       f"    for (int k = 0; k < {S}; k++) o[k] = acc[k];", "}"]
    nv, tail = S // 4, list(range(4 * (S // 4), S))
    body = [f"    {p}_v4 v{c} = {{0.0, 0.0, 0.0, 0.0}}, xv{c};" for c in range(nv)] + [f"    double s{k} = 0.0;" for k in tail]
    body += ["    for (int t = 0; t < m; t++) {", "        const double *b = W + T[2 * t], c = P[T[2 * t + 1]];",
             f"        const {p}_v4 cv = {{c, c, c, c}};"]
    for c in range(nv):
        body += [f"        memcpy(&xv{c}, b + {4 * c}, sizeof xv{c});", f"        v{c} += cv * xv{c};"]
    body += [f"        s{k} += c * b[{k}];" for k in tail] + ["    }"]
    body += [f"    memcpy(o + {4 * c}, &v{c}, sizeof v{c});" for c in range(nv)] + [f"    o[{k}] = s{k};" for k in tail]
    return [f"typedef double {p}_v4 __attribute__((vector_size(32)));"] + head + body + ["}"]


#: defines ``BEA_UNROLL``, the pragma before the loops over coefficients (a source that defines it empty first
#: keeps them rolled)
UNROLL = ["#ifndef BEA_UNROLL", '#define BEA_UNROLL _Pragma("GCC unroll 64")', "#endif"]


def _unroll(code: str) -> str:
    return code.replace("for (", "BEA_UNROLL for (")


def _coef(p: str) -> List[str]:
    """``coef(fn, a, e, f)``: ``f[k] = phi^(k)(a)/k!`` for the function number ``fn`` (:data:`FUNCTIONS` order)."""
    lines = [f"static void {p}_coef(int fn, double a, double e, double *f) {{",
             f"    const int K = {p.upper()}_K;", "    double u[K + 1], w[K + 1];", "    int k;",
             "    for (k = 0; k <= K; k++) f[k] = u[k] = w[k] = 0.0;", "    (void)e; (void)w;", "    switch (fn) {"]
    for i, (name, value) in enumerate(FUNCTIONS.items()):
        body = _COEF[name].replace("ode(", f"{p}_ode(")
        lines.append(f"    case {i}: {{ f[0] = {value}; {body} break; }}")
    return lines + ["    }", "}"]


def header(D: int, K: int, prefix: str = "tp", noinline: bool = False, inline: bool = False) -> str:
    """Sizes and the ``<prefix>_*`` functions for polynomials in ``D`` variables to degree ``K``. ``noinline``: the
    helpers stay calls; ``inline``: they are always inlined (when to use which: docs/theory/codegen.md)."""
    P = prefix.upper()
    lines = [f"#define {P}_D {D}", f"#define {P}_K {K}", f"#define {P}_S {size(D, K)}", *UNROLL]
    # the loops over coefficients unrolled (not those over a network's terms, _lin_p): jets stay in registers
    lines += [_unroll(x) for x in _unrolled(D, K, prefix)] + _lin_p(size(D, K), prefix)
    text = "\n".join(lines) + _unroll(_HELPERS.replace("p_", prefix + "_").replace("P_", P + "_") + "\n".join(_coef(prefix)))
    text += "\n"
    if noinline:
        return text.replace("static void", "static __attribute__((noinline)) void")
    return text.replace("static void", "static inline __attribute__((always_inline)) void") if inline else text
