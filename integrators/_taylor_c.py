r"""Truncated multivariate Taylor polynomials in C, for derivatives of a Lagrangian beyond the second
(:mod:`integrators.series_c`: a :mod:`bea` series of a model needs the model's derivatives up to order
:math:`K`, e.g. 4 for the gradient and Hessian of :math:`\mathrm{inv}_2`).

A polynomial in ``D`` variables of total degree at most ``K`` is the array of its Taylor coefficients
:math:`c_\beta = \partial^\beta f(x_0)/\beta!` over the multi-indices :math:`|\beta| \le K`, in
:func:`monomials` order: graded (degree 0, then 1, ...), so index ``1 + i`` is the variable ``i``.
With coefficients (not derivatives) a product is a plain truncated convolution,
:math:`(ab)_\gamma = \sum_{\alpha + \beta = \gamma} a_\alpha b_\beta`, written out coefficient by
coefficient; a smooth scalar function of a polynomial is its Taylor series in :math:`\delta = a - a_0`,
:math:`\phi(a) = \sum_{k \le K} \phi^{(k)}(a_0)/k!\,\delta^k`, where :math:`\delta` has no constant term,
so :math:`\delta^k` has none below degree :math:`k` (the products skip those coefficients).

:func:`header` writes the sizes (``TP_D``, ``TP_K``, ``TP_S``) and the helpers for one
``(D, K)``; only integers enter it."""

from __future__ import annotations

import itertools
from functools import lru_cache
from math import comb
from typing import Dict, List, Tuple

__all__ = ["monomials", "size", "header"]


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


def size(D: int, K: int) -> int:
    """Number of coefficients, :math:`\\binom{D + K}{K}`."""
    return comb(D + K, K)


def _products(D: int, K: int, min_a: int = 0, min_b: int = 0) -> Dict[int, List[Tuple[int, int]]]:
    """``{k: [(i, j), ...]}``: the coefficient pairs of a truncated product landing on monomial ``k``, the first
    factor's monomial of degree at least ``min_a``, the second's at least ``min_b``."""
    mons = monomials(D, K)
    index: Dict[Tuple[int, ...], int] = {m: k for k, m in enumerate(mons)}
    out: Dict[int, List[Tuple[int, int]]] = {}
    for i, a in enumerate(mons):
        for j, b in enumerate(mons):
            if sum(a) >= min_a and sum(b) >= min_b and sum(a) + sum(b) <= K:
                out.setdefault(index[tuple(x + y for x, y in zip(a, b))], []).append((i, j))
    return out


def _sum(pairs, a: str, b: str) -> str:
    return " + ".join(f"{a}[{i}] * {b}[{j}]" for i, j in pairs) if pairs else "0.0"


def _unrolled(D: int, K: int) -> str:
    """``tp_mul`` and ``tp_powers`` written out for one ``(D, K)``: every coefficient one expression with constant
    indices (a table-driven loop spends its time on the indirect loads)."""
    S = size(D, K)
    full = _products(D, K)
    lines = ["/* c = a b, truncated at degree TP_K (c distinct from a and b) */",
             "static void tp_mul(const double *a, const double *b, double *c) {"]
    lines += [f"    c[{k}] = {_sum(full.get(k, []), 'a', 'b')};" for k in range(S)]
    lines += ["}", "",
              "/* pw[(k - 1) TP_S ..]: delta^k for k = 1..TP_K, delta = a - a_0: delta^k starts at degree k, so",
              "   delta^(k-1) delta takes only first factors of degree >= k - 1 */",
              "static void tp_powers(const double *a, double *pw) {",
              "    for (int k = 0; k < TP_S; k++) pw[k] = a[k];",
              "    pw[0] = 0.0;"]
    degree = [sum(m) for m in monomials(D, K)]
    for p in range(2, K + 1):
        prods = _products(D, K, p - 1, 1)
        prev, cur = f"(pw + {(p - 2) * S})", f"(pw + {(p - 1) * S})"
        lines += [f"    {cur}[{k}] = {_sum(prods.get(k, []), prev, 'pw') if degree[k] >= p else '0.0'};"
                  for k in range(S)]
    lines.append("}")
    return "\n".join(lines + _lin(S)) + "\n"


def _lin(S: int) -> List[str]:
    """``tp_lin``: for ``S <= 64`` the sums run in registers, 4 coefficients per vector (GNU C vector types, which gcc
    and clang accept) and the last ``S % 4`` in scalars: an accumulator array, or ``out`` itself, makes every term a
    store and a load. Each lane does the scalar operations in the scalar order, so the results are the same."""
    head = ["", "/* nout polynomials out_o = sum_i W[o, i] in_i + bias[o] (bias NULL: none), W row-major (nout, nin);",
            "   out distinct from in */"]
    sig = ["static void tp_lin(int nin, int nout, const double *restrict W, const double *restrict bias,",
           "                   const double *restrict in, double *restrict out) {",
           "    for (int o = 0; o < nout; o++) {"]
    if S > 64:
        body = ["        double *y = out + (long)o * TP_S;", "        for (int k = 0; k < TP_S; k++) y[k] = 0.0;",
                "        for (int i = 0; i < nin; i++) {",
                "            const double w = W[o * nin + i], *x = in + (long)i * TP_S;",
                "            for (int k = 0; k < TP_S; k++) y[k] += w * x[k];", "        }",
                "        if (bias) y[0] += bias[o];"]
        return head + sig + body + ["    }", "}"]
    nv = S // 4
    tail = list(range(4 * nv, S))
    body = [f"        tp_v4 v{c} = {{0.0, 0.0, 0.0, 0.0}};" for c in range(nv)]
    body += [f"        double s{k} = 0.0;" for k in tail]
    body += ["        for (int i = 0; i < nin; i++) {",
             "            const double w = W[o * nin + i], *x = in + (long)i * TP_S;",
             "            const tp_v4 wv = {w, w, w, w};", "            tp_v4 xv;"]
    for c in range(nv):
        body += [f"            memcpy(&xv, x + {4 * c}, sizeof xv);", f"            v{c} += wv * xv;"]
    body += [f"            s{k} += w * x[{k}];" for k in tail]
    body += ["            (void)xv;", "        }", "        double *y = out + (long)o * TP_S;"]
    body += [f"        memcpy(y + {4 * c}, &v{c}, sizeof v{c});" for c in range(nv)]
    body += [f"        y[{k}] = s{k};" for k in tail]
    body += ["        if (bias) y[0] += bias[o];"]
    return head + ["typedef double tp_v4 __attribute__((vector_size(32)));"] + sig + body + ["    }", "}"]


HELPERS = r"""
/* out += c a */
static void tp_axpy(double c, const double *a, double *out) {
    for (int k = 0; k < TP_S; k++) out[k] += c * a[k];
}

/* the variable `dir` as a polynomial with value v */
static void tp_seed(double v, int dir, double *out) {
    for (int k = 0; k < TP_S; k++) out[k] = 0.0;
    out[0] = v;
    out[1 + dir] = 1.0;
}

/* out = sum_k f[k] delta^k (f[k] = phi^(k)(a_0)/k!), from the powers of tp_powers */
static void tp_series(const double *pw, const double *f, double *out) {
    for (int k = 0; k < TP_S; k++) out[k] = 0.0;
    out[0] = f[0];
    for (int p = 1; p <= TP_K; p++) tp_axpy(f[p], pw + (p - 1) * TP_S, out);
}

"""


def header(D: int, K: int) -> str:
    """Sizes and the ``tp_*`` helpers for polynomials in ``D`` variables to degree ``K``."""
    lines = [f"#define TP_D {D}", f"#define TP_K {K}", f"#define TP_S {size(D, K)}"]
    return "\n".join(lines) + "\n" + _unrolled(D, K) + HELPERS
