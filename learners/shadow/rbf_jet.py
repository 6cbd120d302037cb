r"""Closed-form jets of the GP posterior mean with an RBF kernel: every partial derivative up to an order.

The posterior mean of :class:`~learners.shadow.kernels.AtomExpansion` (RBF kernel, atoms of order <= 2) is

.. math::  f(x) = \sigma_f^2 \sum_k e_k\, P_k(r_k), \qquad r_k = (x - y_k)/\ell, \qquad e_k = e^{-|r_k|^2/2},
           \qquad P_k(r) = c_k + \tilde v_k\cdot r + c^{(2)}_k (\tilde u_k\cdot r)(\tilde d_k\cdot r)

(:mod:`learners.shadow.compiled_mean`). With the probabilists' Hermite polynomials
:math:`He_0 = 1,\ He_1(t) = t,\ He_{m+1}(t) = t\,He_m(t) - m\,He_{m-1}(t)` and
:math:`He_\beta(r) = \prod_i He_{\beta_i}(r_i)`, the derivatives of the Gaussian are
:math:`\partial_r^\beta e = (-1)^{|\beta|} He_\beta(r)\, e`, and Leibniz' rule with the quadratic
:math:`P` (gradient :math:`g = \tilde v + c^{(2)}(\tilde u\,\tilde d\cdot r + \tilde d\,\tilde u\cdot r)`,
constant Hessian :math:`W = c^{(2)}(\tilde u\tilde d^\top + \tilde d\tilde u^\top)`) gives, for every
multi-index :math:`\alpha`,

.. math::  \partial_x^\alpha f = \frac{(-1)^{|\alpha|}\sigma_f^2}{\ell^\alpha} \sum_k e_k \Big[He_\alpha P_k
           - \sum_i \alpha_i He_{\alpha - \epsilon_i}\, g_{k,i}
           + \sum_{i<j} \alpha_i\alpha_j He_{\alpha-\epsilon_i-\epsilon_j} W_{k,ij}
           + \sum_i \tbinom{\alpha_i}{2} He_{\alpha-2\epsilon_i} W_{k,ii}\Big](r_k)

(:math:`\ell^\alpha = \prod_i \ell_i^{\alpha_i}`). :class:`RBFJet` evaluates all
:math:`\binom{D+K}{K}` of them (:math:`|\alpha| \le K`) in one pass over the atoms per state, in C
(straight-line code generated here for each ``(D, K)`` from a fixed template; the atoms are run-time
data), instead of nested autograd passes over dense (states x atoms) matrices.

:class:`JetLagrangian` hands such jets to code written for a torch Lagrangian (the :mod:`bea`
formulas, Newton's method on velocities): it is a callable ``L(q, v)`` whose value and every
derivative that autograd asks for are looked up in the jet at those points -- an autograd node per
derivative, each a column of the table, differentiable again up to the jet's order, which grows on
demand.
"""

from __future__ import annotations

import ctypes
import math
from itertools import combinations_with_replacement
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

from bea.errors import BeaValueError

from .compiled_mean import packed_atoms
from .kernels import AtomExpansion

__all__ = ["RBFJet", "JetLagrangian", "multi_indices", "MAX_JET_COLUMNS", "jet_source", "jets_fit"]

#: largest number of partial derivatives per state (binom(D + K, K)); beyond it the generated C would be
#: impractically large and autograd is the better tool
MAX_JET_COLUMNS = 2000

MultiIndex = Tuple[int, ...]


def multi_indices(D: int, K: int) -> List[MultiIndex]:
    """All multi-indices :math:`\\alpha \\in \\mathbb N^D` with :math:`|\\alpha| \\le K`, by order, then
    lexicographically by the sorted slot tuple (the column order of :meth:`RBFJet.__call__`)."""
    out = []
    for m in range(K + 1):
        for slots in combinations_with_replacement(range(D), m):
            a = [0] * D
            for s in slots:
                a[s] += 1
            out.append(tuple(a))
    return out


#: states per inner loop: the per-atom work is written once for LANES states side by side, so that the
#: compiler can keep each quantity in one vector register (the loop over lanes has no branches or calls)
LANES = 4

#: exp for arguments <= 0 without a library call, so that the lane loop vectorises: Cody--Waite
#: reduction x = k ln2 + t, |t| <= ln2/2, Taylor polynomial to t^13 (truncation < 1e-17 relative), 2^k
#: assembled in the exponent bits; 0 below -708 (where exp is subnormal: the terms there are < 1e-290)
EXP_SOURCE = r"""
static inline double bea_exp(double x) {
    const double shifter = 6755399441055744.0; /* 2^52 + 2^51: adding it rounds to an integer */
    const double xc = x < -708.0 ? -708.0 : x;
    const double kd = (xc * 1.4426950408889634 + shifter) - shifter;
    const double t = (xc - kd * 6.93147180369123816490e-01) - kd * 1.90821492927058770002e-10;
    double p = 1.0 / 6227020800.0;
    p = p * t + 1.0 / 479001600.0;
    p = p * t + 1.0 / 39916800.0;
    p = p * t + 1.0 / 3628800.0;
    p = p * t + 1.0 / 362880.0;
    p = p * t + 1.0 / 40320.0;
    p = p * t + 1.0 / 5040.0;
    p = p * t + 1.0 / 720.0;
    p = p * t + 1.0 / 120.0;
    p = p * t + 1.0 / 24.0;
    p = p * t + 1.0 / 6.0;
    p = p * t + 0.5;
    p = p * t + 1.0;
    p = p * t + 1.0;
    union { double d; long long i; } u;
    u.d = kd + (shifter + 1023.0); /* low bits: k + 1023 */
    u.i <<= 52;
    return x < -708.0 ? 0.0 : p * u.d;
}
"""


_IND = "                "


def _minus(a: MultiIndex, *slots: int) -> Optional[MultiIndex]:
    """``a`` with one unit taken from each of ``slots`` (None if that goes negative)."""
    b = list(a)
    for s in slots:
        b[s] -= 1
        if b[s] < 0:
            return None
    return tuple(b)


def _hermite_lines(D: int, K: int, alphas: List[MultiIndex], col: Dict[MultiIndex, int]) -> List[str]:
    r"""C lines of one lane: the Gaussian factor and the products of Hermite polynomials :math:`He_\beta(r)`."""
    ind = _IND
    out = [f"{ind}const double r{i} = xs{i}[w] - y{i};" for i in range(D)]
    out.append(f"{ind}const double e = bea_exp(-0.5 * (" + " + ".join(f"r{i} * r{i}" for i in range(D)) + "));")
    for i in range(D):  # Hermite polynomials He_m(r_i), m <= K
        out.append(f"{ind}const double H{i}_0 = 1.0;")
        if K >= 1:
            out.append(f"{ind}const double H{i}_1 = r{i};")
        for m in range(1, K):
            out.append(f"{ind}const double H{i}_{m + 1} = r{i} * H{i}_{m} - {m}.0 * H{i}_{m - 1};")
    for a in alphas:  # He_beta, one product each, from beta without its last slot
        nz = [i for i in range(D) if a[i]]
        if not nz:
            out.append(f"{ind}const double p{col[a]} = 1.0;")
            continue
        last = nz[-1]
        rest = list(a)
        rest[last] = 0
        rest = tuple(rest)
        rhs = f"H{last}_{a[last]}" if not any(rest) else f"p{col[rest]} * H{last}_{a[last]}"
        out.append(f"{ind}const double p{col[a]} = {rhs};")
    return out


def _accumulate_lines(D: int, alphas: List[MultiIndex], col: Dict[MultiIndex, int], second: bool) -> List[str]:
    """C lines of one lane: the atom's polynomial factor and its contribution to every derivative column."""
    ind = _IND
    out = []
    lin = " + ".join(f"v{i} * r{i}" for i in range(D))
    if second:
        out.append(f"{ind}const double ur = " + " + ".join(f"u{i} * r{i}" for i in range(D)) + ";")
        out.append(f"{ind}const double dr = " + " + ".join(f"d{i} * r{i}" for i in range(D)) + ";")
        out.append(f"{ind}const double Pk = c + {lin} + c2 * ur * dr;")
        out += [f"{ind}const double g{i} = v{i} + c2 * (u{i} * dr + d{i} * ur);" for i in range(D)]
    else:
        out.append(f"{ind}const double Pk = c + {lin};")
    for a in alphas:
        terms = [f"p{col[a]} * Pk"]
        for i in range(D):
            b = _minus(a, i)
            if b is not None:
                coef = "" if a[i] == 1 else f"{a[i]}.0 * "
                terms.append(f"- {coef}p{col[b]} * {'g' if second else 'v'}{i}")
        if second:
            for i in range(D):
                for j in range(i, D):
                    b = _minus(a, i, j)
                    if b is None:
                        continue
                    c = a[i] * (a[i] - 1) // 2 if i == j else a[i] * a[j]
                    coef = "" if c == 1 else f"{c}.0 * "
                    terms.append(f"+ {coef}p{col[b]} * W{i}_{j}")
        out.append(f"{ind}acc[{col[a]}][w] += e * ({' '.join(terms)});")
    return out


def jet_source(D: int, K: int) -> str:
    r"""C source of ``void rbf_jet(const double *X, long B, const double *P, double *out)``: the
    :math:`\binom{D+K}{K}` partial derivatives (columns in :func:`multi_indices` order) of the expansion
    packed in ``P`` at each of the ``B`` states ``X`` (row-major ``B x D``, ``B`` a multiple of
    :data:`LANES`), as the sums in brackets of the module docstring (the factor
    :math:`(-1)^{|\alpha|}\sigma_f^2/\ell^\alpha` is applied by the caller).
    ``P = [K1, K2, ell (D), K1 x (y (D), v (D), c), K2 x (y, v, c, c2, u (D), d (D))]``."""
    alphas = multi_indices(D, K)
    col = {a: i for i, a in enumerate(alphas)}
    M = len(alphas)

    def lane_body(second: bool) -> List[str]:
        return _hermite_lines(D, K, alphas, col) + _accumulate_lines(D, alphas, col, second)

    L: List[str] = ["#include <math.h>", "", f"#define LANES {LANES}", EXP_SOURCE,
                    "void rbf_jet(const double *X, long B, const double *P, double *out) {",
                    "    const long K1 = (long)P[0], K2 = (long)P[1];",
                    "    const double *ell = P + 2;",
                    f"    const double *A1 = P + 2 + {D}, *A2 = A1 + K1 * {2 * D + 1};",
                    "    for (long b0 = 0; b0 < B; b0 += LANES) {",
                    "        double " + ", ".join(f"xs{i}[LANES]" for i in range(D)) + f", acc[{M}][LANES];",
                    "        for (int w = 0; w < LANES; w++) {"]
    L += [f"            xs{i}[w] = X[(b0 + w) * {D} + {i}] / ell[{i}];" for i in range(D)]
    L += [f"            for (int c = 0; c < {M}; c++) acc[c][w] = 0.0;", "        }"]
    for second in (False, True):
        width = 4 * D + 2 if second else 2 * D + 1
        L.append(f"        for (long k = 0; k < {'K2' if second else 'K1'}; k++) {{")
        L.append(f"            const double *y = {'A2' if second else 'A1'} + k * {width};")
        L += [f"            const double y{i} = y[{i}], v{i} = y[{D + i}];" for i in range(D)]
        L.append(f"            const double c = y[{2 * D}];")
        if second:
            L.append(f"            const double c2 = y[{2 * D + 1}];")
            L += [f"            const double u{i} = y[{2 * D + 2 + i}], d{i} = y[{3 * D + 2 + i}];" for i in range(D)]
            for i in range(D):
                for j in range(i, D):
                    L.append(f"            const double W{i}_{j} = c2 * (u{i} * d{j} + d{i} * u{j});")
        L.append("            for (int w = 0; w < LANES; w++) {")
        L += lane_body(second)
        L += ["            }", "        }"]
    L += ["        for (int w = 0; w < LANES; w++)",
          f"            for (int c = 0; c < {M}; c++) out[(b0 + w) * {M} + c] = acc[c][w];",
          "    }", "}", ""]
    return "\n".join(L)


class RBFJet:
    r"""All partial derivatives :math:`\partial^\alpha f`, :math:`|\alpha| \le K`, of an RBF
    :class:`~learners.shadow.kernels.AtomExpansion` (module docstring), in C.

    Raises :class:`ValueError` for other expansions (a non-RBF kernel, atoms of order > 2, or
    hyperparameters that carry gradients) and :class:`integrators.ccompile.CompileError` without a C
    compiler; callers fall back to autograd then."""

    def __init__(self, ex: AtomExpansion):
        if not isinstance(ex, AtomExpansion) or not ex.fast:
            raise BeaValueError("a closed-form jet needs the RBF posterior mean (atoms of order <= 2, fixed hyperparameters)")
        with torch.no_grad():
            Y = ex._Y
            self.D = int(Y.shape[1])
            counts, atoms = packed_atoms(ex)
            parts = [counts, ex._ls.reshape(-1).expand(self.D).to(torch.float64), atoms]
            # the jet is computed in C on the host: its numbers live there, whatever the model's device
            self._params = np.ascontiguousarray(torch.cat(parts).cpu().numpy(), dtype=np.float64)
            self._ell = ex._ls.reshape(-1).expand(self.D).to(device="cpu", dtype=torch.float64).clone()
            self._scale = float(ex._scale)
        self.atoms = int(Y.shape[0])
        self._fns: Dict[int, object] = {}
        self._factors: Dict[int, torch.Tensor] = {}

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_fns"], state["_factors"] = {}, {}  # loaded libraries are per process: rebuilt on first use
        return state

    def columns(self, K: int) -> List[MultiIndex]:
        """The multi-indices of the columns of ``self(X, K)``."""
        return multi_indices(self.D, K)

    def _fn(self, K: int):
        fn = self._fns.get(K)
        if fn is None:
            M = math.comb(self.D + K, K)
            if M > MAX_JET_COLUMNS:
                raise BeaValueError(f"a jet of order {K} in {self.D} variables has {M} partial derivatives per state, more than "
                                 f"MAX_JET_COLUMNS = {MAX_JET_COLUMNS}; use autograd for such orders")
            from integrators.ccompile import load_library  # learners depend on integrators, not the reverse

            lib = load_library(jet_source(self.D, K), vectorise=True)
            fn = lib.lib.rbf_jet
            fn.restype = None
            f64p = ctypes.POINTER(ctypes.c_double)
            fn.argtypes = [f64p, ctypes.c_long, f64p, f64p]
            self._fns[K] = fn
            alphas = multi_indices(self.D, K)
            expo = torch.tensor(alphas, dtype=torch.float64, device="cpu")  # (M, D)
            sign = torch.tensor([(-1.0) ** sum(a) for a in alphas], dtype=torch.float64, device="cpu")
            self._factors[K] = sign * self._scale / torch.prod(self._ell ** expo, -1)
        return fn

    def __call__(self, X: torch.Tensor, K: int) -> torch.Tensor:
        """``(B, M)``: column ``j`` is :math:`\\partial^{\\alpha_j} f` at the rows of ``X`` ``(B, D)``,
        :math:`\\alpha_j` the ``j``-th of :meth:`columns`."""
        if X.dim() != 2 or X.shape[1] != self.D:
            raise BeaValueError(f"states must have shape (B, {self.D}), got {tuple(X.shape)}")
        fn = self._fn(K)
        B = X.shape[0]
        Bp = -(-B // LANES) * LANES  # whole groups of lanes: pad with copies of the last state
        x = np.empty((Bp, self.D), dtype=np.float64)
        x[:B] = X.detach().to(torch.float64).cpu().numpy()
        if Bp > B:
            x[B:] = x[B - 1]
        out = np.empty((Bp, math.comb(self.D + K, K)), dtype=np.float64)
        f64p = ctypes.POINTER(ctypes.c_double)
        if B:
            fn(x.ctypes.data_as(f64p), Bp, self._params.ctypes.data_as(f64p), out.ctypes.data_as(f64p))
        return (torch.from_numpy(out[:B]) * self._factors[K]).to(X.device)


class _Table:
    """The jet of one :class:`JetLagrangian` at one batch of states ``X`` ``(B, D)``, extended on demand."""

    def __init__(self, owner: "JetLagrangian", X: torch.Tensor, K: int):
        self.owner, self.X, self.K = owner, X, -1
        self._extend(K)

    def _extend(self, K: int) -> None:
        self.values = self.owner.jet(self.X, K)
        self.col = {a: i for i, a in enumerate(self.owner.jet.columns(K))}
        self.K = K
        self.owner.order = max(self.owner.order, K)

    def column(self, alpha: MultiIndex) -> torch.Tensor:
        if sum(alpha) > self.K:
            self._extend(sum(alpha))
        return self.values[:, self.col[alpha]]


class _JetNode(torch.autograd.Function):
    """:math:`\\partial^\\alpha L` at the table's states, as a function of ``(q, v)``; its backward is
    the nodes of the next order (so autograd differentiates it again, to any order)."""

    @staticmethod
    def forward(ctx, q, v, table, alpha):  # noqa: D102
        ctx.save_for_backward(q, v)
        ctx.table, ctx.alpha = table, alpha
        return table.column(alpha).reshape(q.shape[:-1]).clone()

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        q, v = ctx.saved_tensors
        n = q.shape[-1]
        table, alpha = ctx.table, ctx.alpha
        out = []
        for part, offset in ((0, 0), (1, n)):
            if not ctx.needs_input_grad[part]:
                out.append(None)
                continue
            cols = []
            for i in range(n):
                a = list(alpha)
                a[offset + i] += 1
                cols.append(_JetNode.apply(q, v, table, tuple(a)))
            out.append(grad.unsqueeze(-1) * torch.stack(cols, -1))
        return out[0], out[1], None, None


class JetLagrangian:
    r"""The RBF posterior mean as a torch Lagrangian ``L(q, v)`` (``x = (q, v)``, shapes ``(..., n)``)
    whose derivatives of every order come from :class:`RBFJet` instead of autograd through the atom sums.

    A call at new states computes the jet there up to :attr:`order` (the highest order asked for so
    far, at least ``order`` given here); later calls at the same states (compared by value) reuse it,
    so the several evaluations of :math:`L` that a :mod:`bea` formula and Newton's method make at one
    batch of states cost one pass over the atoms. Derivatives beyond the computed order extend the jet.
    Results are differentiable in ``q`` and ``v`` (not in the hyperparameters)."""

    def __init__(self, jet: RBFJet, order: int = 2):
        if jet.D % 2:
            raise BeaValueError(f"a Lagrangian lives on (q, v): the expansion's dimension {jet.D} must be even")
        self.jet = jet
        self.n = jet.D // 2
        self.order = int(order)
        self._last: Optional[_Table] = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_last"] = None
        return state

    def __call__(self, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if q.shape != v.shape or q.shape[-1] != self.n:
            raise BeaValueError(f"q and v must have the same shape (..., {self.n}), got {tuple(q.shape)} and {tuple(v.shape)}")
        X = torch.cat([q, v], -1).detach().reshape(-1, 2 * self.n).to(torch.float64)
        table = self._last
        if table is None or table.X.shape != X.shape or not torch.equal(table.X, X):
            table = _Table(self, X.clone(), self.order)
            self._last = table
        return _JetNode.apply(q, v, table, (0,) * (2 * self.n))


def jets_fit(n: int, order: int) -> bool:
    r"""Whether the closed-form jet of :math:`\bar L'_{inv}` up to the derivatives that :math:`\mathrm{mod}_N`, its
    energy and Newton's method take (order ``N + 3`` in ``2n`` variables) stays within :data:`MAX_JET_COLUMNS`
    (e.g. not ``N = 4`` at ``n = 4``: autograd then)."""
    return order == 0 or math.comb(2 * n + order + 3, order + 3) <= MAX_JET_COLUMNS
