r"""The GP posterior means in C: each one sum over atoms of the code generator's IR (:mod:`integrators.codegen.reduce`),
in scaled variables. RBF (:func:`rbf_blocks`): :math:`f(x) = \sigma_f^2 \sum_k e_k P_k(r_k)`, :math:`r_k = (x - y_k)/\ell`,
:math:`e_k = e^{-|r_k|^2/2}`, :math:`P_k` of degree 2 in :math:`r`; mechanical (:func:`mechanical_blocks`):
:math:`f = \sigma_f^2 \sum_k c_k E_k T_k` in :math:`(q/\ell, v/\lambda)`. Forms: :func:`c_lagrangian_of_expansion`
(gradient and Hessian) and :class:`RBFJet` (every derivative to order ``K``); the layouts of ``P``:
docs/theory/codegen.md, "The GP means".
"""

from __future__ import annotations

import ctypes
import math
from typing import Dict, List

import numpy as np
import torch

from bea.errors import BeaValueError
from integrators.ccompile import F64P, load_library, ptr  # learners depend on integrators, never the reverse
from integrators.codegen import Program, monomials, size
from integrators.codegen.emit import derivs_of_taylor
from integrators.codegen.reduce import EXP_SOURCE, Block, atom, emit_sum
from integrators.compiled import CLagrangian, NotLowerable

from .kernels import AtomExpansion

__all__ = ["c_lagrangian_of_expansion", "rbf_blocks", "mechanical_blocks", "RBFJet", "MAX_JET_COLUMNS",
           "jet_build"]

#: largest number of partial derivatives per state (binom(D + K, K)); beyond it autograd is the better tool
MAX_JET_COLUMNS = 2000
#: states per inner loop of :class:`RBFJet`, side by side in vector registers (docs/theory/codegen.md)
LANES = 8
#: first-use policy (issue 28): from this many partial derivatives per state (order 3 in 12 variables, 4 in 8-12, 5 in
#: 6-8, 6-7 in 5-7; 6:5, 8:4, 8:5 and 12:3 measured) a jet has LARGE_LANES lanes (half the vector code per statement)
#: and is built at ccompile's QUICK_LEVEL (-O1): 1.3-2x less compiler CPU, and the code ran within 17% of 8 lanes at
#: -O2 (D = 6, K = 5: 13% slower, D = 12, K = 3: 17%); at 210 columns 2.7x slower
LARGE_JET_COLUMNS, LARGE_LANES = 400, 4


def jet_build(D: int, K: int) -> "tuple[int, bool]":
    """The lane count of the jet of order ``K`` in ``D`` variables and whether ccompile's quick level builds it: both
    from its binom(D + K, K) columns (LARGE_JET_COLUMNS), so that the size policy is decided in one place."""
    large = size(D, K) >= LARGE_JET_COLUMNS
    return (LARGE_LANES if large else LANES), large


def _gaussian(prog, r):
    """:math:`e^{-|r|^2/2}`: a sum of functions of one variable each in the exponent, which reduce.py factors."""
    sq = 0.0
    for ri in r:
        sq = prog.add(sq, prog.mul(ri, ri))
    return prog.unary("exp", prog.mul(-0.5, sq))


def rbf_blocks(D: int, K: int):
    r"""The two :class:`integrators.codegen.reduce.Block` of the RBF mean in ``D`` variables to degree ``K``: one
    atom's term :math:`e_k P_k` (first-order atoms, then atoms with a second-order part) in :math:`x/\ell`, with
    :math:`P_k(r) = c_k + \tilde v_k\cdot r + c^{(2)}_k (\tilde u_k\cdot r)(\tilde d_k\cdot r)` (the last term only for
    second-order atoms); the callers multiply the coefficients by :math:`\sigma_f^2/\ell^\beta` (those in :math:`x`)."""
    blocks = []
    for second in (False, True):
        prog = Program(D, K)
        r = [prog.sub(prog.seed(i), atom(i)) for i in range(D)]
        e = _gaussian(prog, r)
        poly = prog.dot([atom(D + i) for i in range(D)], r, start=atom(2 * D))
        if second:
            ur = prog.dot([atom(2 * D + 2 + i) for i in range(D)], r)
            dr = prog.dot([atom(3 * D + 2 + i) for i in range(D)], r)
            poly = prog.add(poly, prog.mul(atom(2 * D + 1), prog.mul(ur, dr)))
        blocks.append(Block(prog, prog.mul(e, poly), 4 * D + 2 if second else 2 * D + 1))
    return blocks


def _params(ex: AtomExpansion) -> np.ndarray:
    """``P = [K1, K2, ell (D), sigma_f^2, K1 x (y, v, c), K2 x (y, v, c, c2, u, d)]`` of the RBF mean on the host (C reads
    host memory), ``c = c0 + y.v`` the constant of the atom's polynomial in ``r``."""
    with torch.no_grad():
        Y, V = ex._Y, ex._V
        c = ex._const + (Y * V).sum(-1)
        two = ex._c2 != 0 if ex._second else torch.zeros(Y.shape[0], dtype=torch.bool, device=Y.device)
        one = ~two
        rows = [torch.cat([Y[one], V[one], c[one, None]], 1).reshape(-1)]
        if bool(two.any()):
            rows.append(torch.cat([Y[two], V[two], c[two, None], ex._c2[two, None], ex._U[two], ex._Dd[two]], 1).reshape(-1))
        counts = torch.tensor([float(int(one.sum())), float(int(two.sum()))], dtype=torch.float64, device=Y.device)
        parts = [counts, ex._ls.reshape(-1).expand(Y.shape[1]).to(torch.float64), ex._scale.reshape(1).to(torch.float64), *rows]
        return np.ascontiguousarray(torch.cat([t.to(Y.device) for t in parts]).cpu().numpy(), dtype=np.float64)


def c_lagrangian_of_expansion(ex: AtomExpansion, n: int):
    """The :class:`integrators.compiled.CLagrangian` of an RBF or mechanical :class:`AtomExpansion` on ``(q, v)`` with
    ``n`` coordinates; raises :class:`integrators.compiled.NotLowerable` for other kernels."""
    from .mechanical import MechanicalExpansion

    custom = getattr(ex, "_custom", None)
    mechanical = isinstance(custom, MechanicalExpansion)
    if not mechanical and not ex.fast:
        raise NotLowerable("only the RBF posterior mean (atoms of order <= 2, fixed hyperparameters) has a C form")
    D = 2 * custom.n if mechanical else ex._Y.shape[1]
    if D != 2 * n:
        raise NotLowerable(f"the expansion lives on R^{D}, not on (q, v) with n = {n}")
    if mechanical:
        return units_form(mechanical_blocks(n, custom.d, 2), _mechanical_params(custom), n)
    return units_form(rbf_blocks(D, 2), _params(ex), n)


def mechanical_blocks(n: int, d: int, K: int):
    """The three :class:`integrators.codegen.reduce.Block` (atoms of order 0, 1, 2) of the mechanical mean in the
    ``2n`` scaled variables to degree ``K``, polynomial degree ``d`` in the velocities."""
    if d < 2:  # the kernel's polynomial in v has degree >= 2 (MechanicalKernel refuses less)
        raise BeaValueError(f"mechanical_blocks needs degree d >= 2, got {d}")

    blocks = []
    for m in range(3):
        prog = Program(2 * n, K)
        s = [prog.seed(i) for i in range(2 * n)]
        r = [prog.sub(s[i], atom(1 + i)) for i in range(n)]
        E = _gaussian(prog, r)
        b = prog.dot([atom(1 + n + i) for i in range(n)], s[n:], start=1.0)
        rho = [prog.dot([atom(1 + 2 * n + 2 * n * j + i) for i in range(n)], r) for j in range(m)]
        nu = [prog.dot([atom(1 + 3 * n + 2 * n * j + i) for i in range(n)], s[n:]) for j in range(m)]
        low = prog.ipow(b, max(d - 2, 0))
        pw = [prog.mul(prog.mul(low, b), b), prog.mul(low, b), low]  # b^d, b^(d-1), b^(d-2)
        if m == 0:
            T = pw[0]
        elif m == 1:
            T = prog.add(prog.mul(rho[0], pw[0]), prog.mul(float(d), prog.mul(pw[1], nu[0])))
        else:
            first = prog.mul(prog.sub(prog.mul(rho[0], rho[1]), atom(1 + 6 * n)), pw[0])
            mixed = prog.mul(float(d), prog.mul(pw[1], prog.add(prog.mul(rho[0], nu[1]), prog.mul(rho[1], nu[0]))))
            T = prog.add(prog.add(first, mixed), prog.mul(float(d * (d - 1)), prog.mul(pw[2], prog.mul(nu[0], nu[1]))))
        blocks.append(Block(prog, prog.mul(atom(0), prog.mul(E, T)), 1 + 2 * n + 2 * n * m + (m == 2)))
    return blocks


def _mechanical_params(ex) -> np.ndarray:
    """``P = [K0, K1, K2, ell (n), lambda (n), sigma_f^2, rows]`` of the mechanical mean on the host, a row of order ``m``
    ``(c, y^q, y^v, m x (w^q, w^v), [w^q_1 . w^q_2 if m = 2])``."""
    with torch.no_grad():
        counts, rows = [], []
        by_order = {g["m"]: g for g in ex._groups}
        for m in range(3):
            g = by_order.get(m)
            if g is None:
                counts.append(0.0)
                continue
            cols = [g["c"][:, None], g["Yq_t"].T, g["Yv_t"].T]
            for j in range(m):
                cols += [g["Wq_t"][j].T, g["Wv_t"][j].T]
            if m == 2:
                cols.append(g["ww"][:, None])
            block = torch.cat([c.to(torch.float64).cpu() for c in cols], 1)
            counts.append(float(block.shape[0]))
            rows.append(block.reshape(-1))
        head = torch.tensor(counts + ex._lq.tolist() + ex._lv.tolist() + [float(ex._scale)], dtype=torch.float64)
        return np.ascontiguousarray(torch.cat([head] + rows).numpy(), dtype=np.float64)


def units_form(blocks, params: np.ndarray, n: int):
    r"""The :class:`integrators.compiled.CLagrangian` of ``scale * f(x / units)``, ``f`` the sum over atoms of
    ``blocks`` (degree 2, in the scaled variables), ``P = [counts (one per block), units (2n), scale, rows]``: the
    Taylor coefficients in ``x`` are those in ``x / units`` times :math:`\mathrm{scale}/\mathrm{units}^\beta`."""
    D, nb = 2 * n, len(blocks)
    ells = [" * ".join(f"l[{i}]" for i, e in enumerate(m) for _ in range(e)) for m in monomials(D, 2)]
    source = "\n".join([EXP_SOURCE, emit_sum(blocks, D + 1, name="atom_taylor", lanes=1, exp="exp"),
                        "static void lag_taylor(const double *x, const double *P, double *T) {",
                        f"    const double *l = P + {nb}, s = P[{nb + D}];", f"    double xs[{D}];",
                        f"    for (int i = 0; i < {D}; i++) xs[i] = x[i] / l[i];", "    atom_taylor(xs, 1, P, T);"]
                       + [f"    T[{k}] = s * T[{k}]{f' / ({e})' if e else ''};" for k, e in enumerate(ells)]
                       + ["}", derivs_of_taylor(D, 2)])
    return CLagrangian(n=n, source=source, params=params, cost=int(sum(params[:nb])))


class RBFJet:
    r"""All partial derivatives :math:`\partial^\alpha f`, :math:`|\alpha| \le K`, of an RBF
    :class:`~learners.shadow.kernels.AtomExpansion` (module docstring), in C: the Taylor coefficients of the
    sum over atoms times :math:`\alpha!`, columns in :func:`integrators.codegen.monomials` order.

    Raises :class:`bea.errors.BeaValueError` for other expansions (a non-RBF kernel, atoms of order > 2, or
    hyperparameters that carry gradients) and :class:`integrators.ccompile.CompileError` without a C
    compiler; callers fall back to autograd then."""

    def __init__(self, ex: AtomExpansion):
        if not isinstance(ex, AtomExpansion) or not ex.fast:
            raise BeaValueError("a closed-form jet needs the RBF posterior mean (atoms of order <= 2, fixed hyperparameters)")
        self.D = int(ex._Y.shape[1])
        self._params = _params(ex)
        self._ell = self._params[2:2 + self.D].copy()
        self._scale = float(self._params[2 + self.D])
        self.atoms = int(ex._Y.shape[0])
        self.expansion = ex  #: the expansion tabulated (frozen: its fast path holds copies), for autograd on the same f
        self._fns: Dict[int, object] = {}
        self._factors: Dict[int, torch.Tensor] = {}

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_fns"], state["_factors"] = {}, {}  # loaded libraries are per process: rebuilt on first use
        return state

    def columns(self, K: int) -> List[tuple]:
        """The multi-indices of the columns of ``self(X, K)``."""
        return list(monomials(self.D, K))

    def _fn(self, K: int):
        """The loaded ``rbf_jet`` of order ``K`` and its lane count (built on first use)."""
        fn = self._fns.get(K)
        if fn is None:
            if size(self.D, K) > MAX_JET_COLUMNS:
                raise BeaValueError(f"a jet of order {K} in {self.D} variables has {size(self.D, K)} partial derivatives per "
                                    f"state, more than MAX_JET_COLUMNS = {MAX_JET_COLUMNS}; use autograd for such orders")
            # the sum over atoms in the variables x / ell; _factors turns its coefficients into derivatives in x
            lanes, quick = jet_build(self.D, K)
            source = EXP_SOURCE + emit_sum(rbf_blocks(self.D, K), self.D + 1, name="rbf_jet", lanes=lanes)
            fn = load_library(source, vectorise=True, quick=quick).function("rbf_jet", None, F64P, ctypes.c_long, F64P, F64P)
            self._fns[K] = fn = fn, lanes
            expo = np.array(monomials(self.D, K), dtype=np.float64)  # Taylor coefficients in x / ell to derivatives in x
            beta = np.array([math.prod(map(math.factorial, m)) for m in monomials(self.D, K)], dtype=np.float64)
            self._factors[K] = torch.from_numpy(self._scale * beta / np.prod(self._ell ** expo, -1))
        return fn

    def __call__(self, X: torch.Tensor, K: int) -> torch.Tensor:
        """``(B, M)``: column ``j`` is :math:`\\partial^{\\alpha_j} f` at the rows of ``X`` ``(B, D)``,
        :math:`\\alpha_j` the ``j``-th of :meth:`columns`."""
        if X.dim() != 2 or X.shape[1] != self.D:
            raise BeaValueError(f"states must have shape (B, {self.D}), got {tuple(X.shape)}")
        (fn, lanes), B = self._fn(K), X.shape[0]
        # the last group of lanes padded with zeros: each lane is computed alone
        x = np.zeros((-(-B // lanes) * lanes, self.D))
        x[:B] = X.detach().to(torch.float64).cpu().numpy() / self._ell
        out = np.empty((x.shape[0], len(self._factors[K])), dtype=np.float64)
        fn(ptr(x), x.shape[0], ptr(self._params), ptr(out))
        return (torch.from_numpy(out[:B]) * self._factors[K]).to(X.device)

