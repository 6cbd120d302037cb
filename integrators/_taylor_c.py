r"""Truncated multivariate Taylor polynomials in C, for derivatives of a Lagrangian beyond the second
(:mod:`integrators.series_c`: a :mod:`bea` series of a model needs the model's derivatives up to order
:math:`K`, e.g. 4 for the gradient and Hessian of :math:`\mathrm{inv}_2`).

A polynomial in ``D`` variables of total degree at most ``K`` is the array of its Taylor coefficients
:math:`c_\beta = \partial^\beta f(x_0)/\beta!` over the multi-indices :math:`|\beta| \le K`, in
:func:`monomials` order: graded (degree 0, then 1, ...), so index ``1 + i`` is the variable ``i``.
With coefficients (not derivatives) a product is a plain truncated convolution,
:math:`(ab)_\gamma = \sum_{\alpha + \beta = \gamma} a_\alpha b_\beta`, done from a table of the index
triples; a smooth scalar function of a polynomial is its Taylor series in :math:`\delta = a - a_0`,
:math:`\phi(a) = \sum_{k \le K} \phi^{(k)}(a_0)/k!\,\delta^k`, where :math:`\delta` has no constant term,
so :math:`\delta^k` has none below degree :math:`k` (the products skip those coefficients).

:func:`header` writes the sizes (``TP_D``, ``TP_K``, ``TP_S``), the tables and the helpers for one
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


def _tables(D: int, K: int):
    mons = monomials(D, K)
    index: Dict[Tuple[int, ...], int] = {m: k for k, m in enumerate(mons)}
    full, nc = [], []
    for i, a in enumerate(mons):
        for j, b in enumerate(mons):
            if sum(a) + sum(b) > K:
                continue
            t = (i, j, index[tuple(x + y for x, y in zip(a, b))])
            full.append(t)
            if sum(a) >= 1 and sum(b) >= 1:
                nc.append(t)
    # nc is sorted by the degree of its first factor (graded order): start[m] = first triple with deg >= m
    start = [next((k for k, t in enumerate(nc) if sum(mons[t[0]]) >= m), len(nc)) for m in range(K + 2)]
    return full, nc, start


def _array(name: str, values) -> str:
    return f"static const int {name}[] = {{{', '.join(str(int(v)) for v in values)}}};"


HELPERS = r"""
/* c = a b, truncated at degree TP_K (c distinct from a and b) */
static void tp_mul(const double *a, const double *b, double *c) {
    for (int k = 0; k < TP_S; k++) c[k] = 0.0;
    for (int t = 0; t < TP_NMUL; t++) c[TP_MUL[3 * t + 2]] += a[TP_MUL[3 * t]] * b[TP_MUL[3 * t + 1]];
}

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

/* pw[(k - 1) TP_S ..]: delta^k for k = 1..TP_K, delta = a - a_0 (delta^k starts at degree k: the products
   take only the table rows whose first factor has degree >= k - 1) */
static void tp_powers(const double *a, double *pw) {
    for (int k = 0; k < TP_S; k++) pw[k] = a[k];
    pw[0] = 0.0;
    for (int p = 2; p <= TP_K; p++) {
        const double *prev = pw + (p - 2) * TP_S;
        double *cur = pw + (p - 1) * TP_S;
        for (int k = 0; k < TP_S; k++) cur[k] = 0.0;
        for (int t = TP_NCSTART[p - 1]; t < TP_NNC; t++) cur[TP_NC[3 * t + 2]] += prev[TP_NC[3 * t]] * pw[TP_NC[3 * t + 1]];
    }
}

/* out = sum_k f[k] delta^k (f[k] = phi^(k)(a_0)/k!), from the powers of tp_powers */
static void tp_series(const double *pw, const double *f, double *out) {
    for (int k = 0; k < TP_S; k++) out[k] = 0.0;
    out[0] = f[0];
    for (int p = 1; p <= TP_K; p++) tp_axpy(f[p], pw + (p - 1) * TP_S, out);
}

/* nout polynomials out_o = sum_i W[o, i] in_i + bias[o] (bias NULL: none), W row-major (nout, nin) */
static void tp_lin(int nin, int nout, const double *W, const double *bias, const double *in, double *out) {
    for (int o = 0; o < nout; o++) {
        double *y = out + (long)o * TP_S;
        for (int k = 0; k < TP_S; k++) y[k] = 0.0;
        for (int i = 0; i < nin; i++) {
            const double w = W[o * nin + i], *x = in + (long)i * TP_S;
            for (int k = 0; k < TP_S; k++) y[k] += w * x[k];
        }
        if (bias) y[0] += bias[o];
    }
}
"""


def header(D: int, K: int) -> str:
    """Sizes, multiplication tables and the ``tp_*`` helpers for polynomials in ``D`` variables to degree ``K``."""
    full, nc, start = _tables(D, K)
    lines = [f"#define TP_D {D}", f"#define TP_K {K}", f"#define TP_S {size(D, K)}",
             f"#define TP_NMUL {len(full)}", f"#define TP_NNC {len(nc)}",
             _array("TP_MUL", [x for t in full for x in t]), _array("TP_NC", [x for t in nc for x in t] or [0]),
             _array("TP_NCSTART", start)]
    return "\n".join(lines) + "\n" + HELPERS
