r"""A mechanical kernel: a Gaussian in the positions times a polynomial in the velocities.

For a mechanical system :math:`L = \tfrac12 v^\top M(q) v + b(q)\cdot v - V(q)` is quadratic in :math:`v`, and
the inverse modified Lagrangian truncated at :math:`h^N` is a polynomial in :math:`v` of degree :math:`N + 2`
(docs/theory/inverse.md). The kernel on :math:`x = (q, v) \in \mathbb R^{2n}`

.. math::  k\big((q, v), (q', v')\big) = E(q, q')\,P(v, v'), \qquad
           E = e^{-\frac12\sum_i (q_i - q'_i)^2/\ell_i^2}, \qquad
           P = \big(1 + \tilde v\cdot\tilde v'\big)^d, \quad \tilde v_i = v_i/\lambda_i,

has as its sample space the functions :math:`\sum_{|\beta| \le d} f_\beta(q)\, v^\beta`, with :math:`f_\beta` in
the Gaussian kernel's space: every polynomial in :math:`v` of degree :math:`\le d`, and nothing else, where an
RBF in :math:`v` has to learn the polynomial shape from data. The polynomial's offset is no extra
hyperparameter: :math:`(c + v\cdot v'/\lambda^2)^d = c^d\,(1 + v\cdot v'/(c\lambda^2))^d`, so it is the
outputscale and the velocity scale. The hyperparameters are the ``lengthscale`` vector
:math:`(\ell_1..\ell_n, \lambda_1..\lambda_n)` (with ``ard_num_dims = 2n``; two entries :math:`(\ell, \lambda)`
or one shared otherwise), so the search of :mod:`learners.shadow.hyperparameter_search` treats them as it
treats the RBF's lengthscales.

*Functional blocks in closed form.* With leaves :math:`t_r` (directions :math:`u_r = (u^q_r, u^v_r)` at
:math:`x`) and :math:`s_r` (directions :math:`w_r` at :math:`y`), :math:`E = e^{-Q}` with :math:`Q` quadratic
in the leaves (as for the RBF: :mod:`learners.shadow.kernels`) and :math:`P = f(a)`, :math:`f(a) = (1 + a)^d`,
with :math:`a = (\tilde v + \sum t_r\tilde u^v_r)\cdot(\tilde v' + \sum s_r\tilde w^v_r)` bilinear. The
multilinear derivative of the product splits the variables :math:`Z` into the set :math:`S` that
differentiates :math:`E` and the rest:

.. math::  \partial_Z (E P) = \sum_{S \subseteq Z} \partial_S E\;\partial_{Z \setminus S} P, \qquad
           \partial_S E = e^{-Q_0}\sum_{\pi} (-1)^{|\pi|}\prod_{\{i\}} Q_i\prod_{\{i,j\}} Q_{ij}, \qquad
           \partial_C P = \sum_{\pi} f^{(|\pi|)}(a_0)\prod_{\{i\}} a_i\prod_{\{i,j\}} a_{ij},

sums over the partitions :math:`\pi` of the set into singletons and pairs (Faà di Bruno for an inner
function quadratic in the leaves), :math:`f^{(k)}(a) = \frac{d!}{(d-k)!}(1 + a)^{d-k}` (zero for
:math:`k > d`), :math:`a_i = \tilde u^v_i\cdot\tilde v'` (x side) or :math:`\tilde v\cdot\tilde w^v_i` (y side),
:math:`a_{ij} = \tilde u^v_i\cdot\tilde w^v_j` for one leaf of each side and zero for two of the same side.
Agrees with the generic autograd path to rounding (tests).

*Feature expansion* (for the uncertainty of recovered quantities, :mod:`learners.shadow.uncertainty`):
:math:`E(q, q') = \sum_\gamma \varphi_\gamma(\tilde q - \tilde c)\varphi_\gamma(\tilde q' - \tilde c)` (Gaussian
features centred at any :math:`c`) and
:math:`P(v, v') = \sum_{|\beta| \le d} \psi_\beta(\tilde v)\psi_\beta(\tilde v')`,
:math:`\psi_\beta(z) = \sqrt{d!/((d - |\beta|)!\,\beta!)}\; z^\beta` (the multinomial theorem), so
:math:`k = \sum_{\gamma,\beta} \Phi_{\gamma\beta}(x)\Phi_{\gamma\beta}(y)` with
:math:`\Phi_{\gamma\beta} = \varphi_\gamma\psi_\beta`. A functional of the derivatives of order :math:`\le p` at
:math:`x_b` annihilates every :math:`\Phi_{\gamma\beta}` centred at :math:`q_b` with :math:`|\gamma| > p`, so the
sum over :math:`|\gamma| \le p`, :math:`|\beta| \le d` is exact (:class:`MechanicalFeatures`).

The posterior mean has its own closed form (:class:`MechanicalExpansion`: the derivatives along the atoms'
directions multiplied out, a few dense products), in ordinary torch operations: autograd gives every
derivative the integrators and :math:`\mathrm{mod}_N` ask for.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

import torch

from bea.errors import BeaValueError

from ..saving import recorded, register
from .feature_jets import GaussianFactor, MonomialFactor, SplitLayout
from .kernels import SmoothKernel, quadratic_pairs
from .rbf_block import mechanical_first_order_block, usable
from .uncertainty import GaussianFeatures
from .transpose_sum import fresh_block

__all__ = ["MechanicalKernel", "MechanicalFeatures", "MechanicalExpansion", "DEFAULT_DEGREE"]

#: default degree of the polynomial in the velocities: N + 2 for the series truncated at h^N, N = 6. Why not 6
#: (N = 4, the highest order the identification tables use): the scheme on L_inv predicts with all of the series,
#: and at large steps the h^6 terms matter -- full pendulum at h = 0.5 (benchmarks/RESULTS_mechanical.md), 1,000-step
#: trajectory error 6.4e-6 with degree 6 against 5.7e-7 with 8 (RBF 7.1e-7); on Henon-Heiles 1.2e-5 against 3.5e-6
#: (RBF 1.3e-5), level sets 4x (degree 6) and 2.5x (degree 8) better than the RBF's
DEFAULT_DEGREE = 8


@register
class MechanicalKernel(SmoothKernel):
    r""":math:`k = e^{-\frac12|\tilde q - \tilde q'|^2}(1 + \tilde v\cdot\tilde v')^{d}` (module docstring), ``degree``
    :math:`d \ge 2`. As a ``kernel=`` option of the GP Lagrangian models it is a template: the models build
    their own copy for the dimension of the data and learn its scales."""

    has_lengthscale = True

    @recorded
    def __init__(self, degree: int = DEFAULT_DEGREE, ard_num_dims: Optional[int] = None):
        if isinstance(degree, bool) or not isinstance(degree, int) or not 2 <= degree <= 12:
            raise BeaValueError(f"degree (of the polynomial in the velocities) must be an integer in [2, 12], got {degree!r}; a "
                             f"Lagrangian is at least quadratic in v, and the series truncated at h^N needs N + 2")
        super().__init__(ard_num_dims=ard_num_dims)
        self.degree = degree

    def build(self, D: int, ard: bool, constraint) -> "MechanicalKernel":
        """A fresh kernel of this degree on :math:`\\mathbb R^D` (one scale per input with ``ard``, else two:
        positions and velocities), with the lengthscale constraint ``constraint``."""
        k = MechanicalKernel(self.degree, ard_num_dims=D if ard else 2)
        k.register_constraint("raw_lengthscale", constraint)
        return k.to(torch.float64)

    def scales(self, D: int) -> Tuple[torch.Tensor, torch.Tensor]:
        r"""Position lengthscales :math:`\ell` and velocity scales :math:`\lambda`, each of shape (D/2,)."""
        if D % 2:
            raise BeaValueError(f"the mechanical kernel lives on (q, v): the dimension must be even, got {D}")
        n = D // 2
        ls = self.lengthscale.reshape(-1)
        if ls.numel() == 1:
            ls = ls.expand(2)
        if ls.numel() == 2:
            return ls[:1].expand(n), ls[1:].expand(n)
        if ls.numel() != D:
            raise BeaValueError(f"the mechanical kernel has {ls.numel()} scales, which fit neither 1, 2 nor D = {D} inputs")
        return ls[:n], ls[n:]

    def pointwise(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        n = x.shape[-1] // 2
        lq, lv = self.scales(x.shape[-1])
        E = torch.exp(-0.5 * (((x[..., :n] - y[..., :n]) / lq) ** 2).sum(-1))
        return E * (1 + ((x[..., n:] / lv) * (y[..., n:] / lv)).sum(-1)) ** self.degree

    @fresh_block
    def derivative_block(self, X, U, Y, V) -> torch.Tensor:
        A, B, D = X.shape[0], Y.shape[0], X.shape[1]
        n = D // 2
        lq, lv = self.scales(D)
        Xq, Yq, Uq, Vq = X[:, :n] / lq, Y[:, :n] / lq, U[..., :n] / lq, V[..., :n] / lq
        Xv, Yv, Uv, Vv = X[:, n:] / lv, Y[:, n:] / lv, U[..., n:] / lv, V[..., n:] / lv
        a, b = U.shape[1], V.shape[1]
        if usable(Uq, Vq, Xq, Yq, Uv, Vv, Xv, Yv):  # one direction a side, no gradients: in place, the same numbers
            return mechanical_first_order_block(Xq, Xv, Uq, Uv, Yq, Yv, Vq, Vv, self.degree)
        # Q0 = |q - q'|^2 / 2 expanded (smooth: no norm), as in RBFKernel.derivative_block
        Q0 = 0.5 * ((Xq * Xq).sum(-1)[:, None] + (Yq * Yq).sum(-1)[None, :]) - Xq @ Yq.T
        a0 = Xv @ Yv.T
        firstQ = [(Uq[:, r] * Xq).sum(-1)[:, None] - Uq[:, r] @ Yq.T for r in range(a)]
        firstQ += [-(Xq @ Vq[:, r].T) + (Vq[:, r] * Yq).sum(-1)[None, :] for r in range(b)]
        firstA = [Uv[:, r] @ Yv.T for r in range(a)] + [Xv @ Vv[:, r].T for r in range(b)]

        _pairQ = quadratic_pairs(Uq, Vq, a)

        def _pairA(i: int, j: int):
            if (i < a) == (j < a):
                return None  # a is bilinear: no second derivative within one side
            ii, jj = (i, j - a) if i < a else (j, i - a)
            return Uv[:, ii] @ Vv[:, jj].T

        m = a + b
        # every pair's matrix once (the partition sums of the 2^m splits share them)
        cacheQ = {(i, j): _pairQ(i, j) for i in range(m) for j in range(i + 1, m)}
        cacheA = {(i, j): _pairA(i, j) for i in range(m) for j in range(i + 1, m)}

        def pairQ(i: int, j: int):
            return cacheQ[(i, j)]

        def pairA(i: int, j: int):
            return cacheA[(i, j)]

        E0 = torch.exp(-Q0)
        f = _power_derivatives(1 + a0, self.degree, m)  # f[k] = d^k/da^k (1 + a)^d at a0
        total = X.new_zeros(A, B)
        for mask in range(1 << m):
            S = [i for i in range(m) if mask >> i & 1]
            C = [i for i in range(m) if not mask >> i & 1]
            dE = sum(((-1) ** k) * g for k, g in _graded_partitions(S, firstQ, pairQ).items())
            dP = sum(f[k] * g for k, g in _graded_partitions(C, firstA, pairA).items() if k < len(f))
            total = total + dE * dP
        return E0 * total

    def expansion(self, atoms, outputscale: torch.Tensor) -> "MechanicalExpansion":
        """The posterior mean over ``atoms`` (orders <= 2) in closed form, hyperparameters frozen."""
        return MechanicalExpansion(self, atoms, outputscale)

    def feature_map(self, D: int, order: int) -> "MechanicalFeatures":
        """The exact feature expansion for functionals of jet order ``order`` (module docstring)."""
        lq, lv = self.scales(D)
        return MechanicalFeatures(lq.detach(), lv.detach(), self.degree, order)


def _power_derivatives(base: torch.Tensor, d: int, m: int) -> List[torch.Tensor]:
    r""":math:`f^{(k)}(a) = \frac{d!}{(d-k)!}(1 + a)^{d-k}`, ``base`` :math:`= 1 + a`, for :math:`k \le \min(m, d)`."""
    top = min(m, d)
    powers = [base ** (d - top)]  # one pow, then products: b^(d-top), ..., b^d
    for _ in range(top):
        powers.append(powers[-1] * base)
    return [math.perm(d, k) * powers[top - k] for k in range(top + 1)]


def _graded_partitions(idx: List[int], first: List[torch.Tensor], pair) -> Dict[int, torch.Tensor]:
    r"""For the partitions :math:`\pi` of ``idx`` into singletons and pairs, the sums
    :math:`\sum_{|\pi| = k}\prod_{\{i\}} f_i\prod_{\{i,j\}} g_{ij}` by block count ``k`` (``pair`` returns None for a
    pair that is identically zero)."""
    if not idx:
        return {0: 1.0}
    i, rest = idx[0], idx[1:]
    out: Dict[int, torch.Tensor] = {}
    for k, val in _graded_partitions(rest, first, pair).items():
        out[k + 1] = out.get(k + 1, 0.0) + first[i] * val
    for pos, j in enumerate(rest):
        g = pair(i, j)
        if g is None:
            continue
        for k, val in _graded_partitions(rest[:pos] + rest[pos + 1:], first, pair).items():
            out[k + 1] = out.get(k + 1, 0.0) + g * val
    return out


class MechanicalFeatures:
    r""":math:`\Phi_{\gamma\beta}(x; c) = \varphi_\gamma((q - c_q)/\ell)\,\psi_\beta(v/\lambda)`, :math:`|\gamma| \le p`,
    :math:`|\beta| \le d` (module docstring): ``__call__(x, centres)`` (B, D), (B, D) -> (B, M)."""

    def __init__(self, lq: torch.Tensor, lv: torch.Tensor, degree: int, order: int):
        n = lq.numel()
        self.lq, self.lv = lq, lv
        self.order, self.degree = order, degree
        self.gauss = GaussianFeatures(n, order)
        self.mono = GaussianFeatures(n, degree, gaussian=False)  # z^beta / sqrt(beta!)
        self._w = torch.tensor([math.sqrt(math.perm(degree, int(k))) for k in self.mono.degree], dtype=torch.float64,
                               device=lq.device)

    def split(self) -> SplitLayout:
        """The map as its two factors, feature ``m = gamma * len(mono) + beta`` (:mod:`.feature_jets`)."""
        G, P = len(self.gauss), len(self.mono)
        return SplitLayout(GaussianFactor(self.lq, self.order), MonomialFactor(self.lv, self.degree),
                           torch.arange(G).repeat_interleave(P), torch.arange(P).repeat(G), self.order)

    def __len__(self) -> int:
        return len(self.gauss) * len(self.mono)

    def __call__(self, x: torch.Tensor, centres: torch.Tensor) -> torch.Tensor:
        n = self.lq.numel()
        g = self.gauss((x[:, :n] - centres[:, :n]) / self.lq)
        p = self.mono(x[:, n:] / self.lv) * self._w
        return (g[:, :, None] * p[:, None, :]).reshape(x.shape[0], -1)


class MechanicalExpansion:
    r"""The posterior mean :math:`f(x) = \sigma_f^2\sum_k c_k\,\partial_{w_{k,1}}\cdots\partial_{w_{k,m}}k(x, y_k)`
    (derivatives on the second argument, atoms of order :math:`m \le 2`) of the mechanical kernel, with the
    atoms scaled once. With :math:`r = \tilde q - \tilde y^q`, :math:`E = e^{-|r|^2/2}`, :math:`b = 1 + \tilde v\cdot\tilde y^v`,
    :math:`\rho_j = r\cdot\tilde w^q_j`, :math:`\nu_j = \tilde v\cdot\tilde w^v_j`, the atom's term is :math:`E\,T` with

    .. math::  T_0 = b^d, \qquad T_1 = \rho_1 b^d + d\,b^{d-1}\nu_1, \qquad
               T_2 = (\rho_1\rho_2 - \tilde w^q_1\cdot\tilde w^q_2)\,b^d + d\,b^{d-1}(\rho_1\nu_2 + \rho_2\nu_1)
               + d(d-1)\,b^{d-2}\nu_1\nu_2

    (the derivatives of :math:`E` and :math:`b^d` along :math:`y`, multiplied out): a few dense products per call,
    ordinary torch operations that autograd differentiates to any order (what the integrators and
    :math:`\mathrm{mod}_N` need)."""

    def __init__(self, kernel: MechanicalKernel, atoms, outputscale: torch.Tensor):
        with torch.no_grad():
            D = next(iter(atoms.values())).points.shape[-1]
            self.n, self.d = D // 2, kernel.degree
            lq, lv = kernel.scales(D)
            self._lq, self._lv = lq.detach().clone(), lv.detach().clone()
            self._scale = outputscale.detach().clone()
            self._groups = []
            n = self.n
            for m, A in atoms.items():
                if m > 2:
                    raise BeaValueError(f"the mechanical posterior mean takes atoms of order <= 2, got order {m}")
                Yq, Yv = A.points[:, :n] / self._lq, A.points[:, n:] / self._lv
                Wq = [A.dirs[:, j, :n] / self._lq for j in range(m)]
                Wv = [A.dirs[:, j, n:] / self._lv for j in range(m)]
                g = {"m": m, "c": A.coef.clone(), "Yq_t": Yq.T.contiguous(), "Yv_t": Yv.T.contiguous(),
                     "ynorm": 0.5 * (Yq * Yq).sum(-1),
                     "Wq_t": [w.T.contiguous() for w in Wq], "Wv_t": [w.T.contiguous() for w in Wv],
                     "yw": [(Yq * w).sum(-1) for w in Wq]}
                if m == 2:
                    g["ww"] = (Wq[0] * Wq[1]).sum(-1)
                self._groups.append(g)

    def __call__(self, X: torch.Tensor) -> torch.Tensor:
        return _MechanicalValue.apply(X, self)

    def _parts(self, X: torch.Tensor):
        """Scaled inputs and, per atom group, (group, E, b, powers b^(d-j), rho_j, nu_j)."""
        n, d = self.n, self.d
        Xq, Xv = X[:, :n] / self._lq, X[:, n:] / self._lv
        xnorm = 0.5 * (Xq * Xq).sum(-1, keepdim=True)
        out = []
        for g in self._groups:
            m = g["m"]
            E = torch.exp(Xq @ g["Yq_t"] - xnorm - g["ynorm"])
            b = 1 + Xv @ g["Yv_t"]
            top = min(m + 1, d)  # b^(d - j) for j = 0 .. m + 1 (the gradient needs one more)
            pw = [b ** (d - top)]
            for _ in range(top):
                pw.append(pw[-1] * b)
            powers = [pw[top - j] if j <= top else torch.zeros_like(b) for j in range(m + 2)]
            rho = [Xq @ w - yw for w, yw in zip(g["Wq_t"], g["yw"])]
            nu = [Xv @ w for w in g["Wv_t"]]
            out.append((g, E, powers, rho, nu))
        return Xq, Xv, out

    def value(self, X: torch.Tensor) -> torch.Tensor:
        """:math:`f` at the rows of ``X`` (B, D) -> (B,)."""
        _, _, parts = self._parts(X)
        out = X.new_zeros(X.shape[0])
        for g, E, P, rho, nu in parts:
            out = out + (E * _T(g, self.d, P, rho, nu)) @ g["c"]
        return self._scale * out

    def gradient(self, X: torch.Tensor) -> torch.Tensor:
        r""":math:`\nabla f` at the rows of ``X`` (B, D): with :math:`G = E\,c`,
        :math:`\nabla_{\tilde q} = \sum_k G_k[-r_k T_k + \sum_j \partial_{\rho_j}T_k\,\tilde w^q_{j,k}]`,
        :math:`\nabla_{\tilde v} = \sum_k G_k[\partial_b T_k\,\tilde y^v_k + \sum_j \partial_{\nu_j}T_k\,\tilde w^v_{j,k}]`
        (ordinary torch operations: differentiable again, for the Hessians Newton's method takes)."""
        Xq, _, parts = self._parts(X)
        gq, gv = torch.zeros_like(Xq), torch.zeros_like(Xq)
        for g, E, P, rho, nu in parts:
            G = E * g["c"]
            GT = G * _T(g, self.d, P, rho, nu)
            gq = gq - Xq * GT.sum(-1, keepdim=True) + GT @ g["Yq_t"].T
            dT_drho, dT_dnu, dT_db = _T_partials(g, self.d, P, rho, nu)
            gv = gv + (G * dT_db) @ g["Yv_t"].T
            for j in range(g["m"]):
                gq = gq + (G * dT_drho[j]) @ g["Wq_t"][j].T
                gv = gv + (G * dT_dnu[j]) @ g["Wv_t"][j].T
        return self._scale * torch.cat([gq / self._lq, gv / self._lv], -1)


def _T(g, d: int, P, rho, nu) -> torch.Tensor:
    """The atom terms T_m of :class:`MechanicalExpansion` (``P[j]`` = b^(d-j))."""
    m = g["m"]
    if m == 0:
        return P[0]
    if m == 1:
        return rho[0] * P[0] + d * P[1] * nu[0]
    return (rho[0] * rho[1] - g["ww"]) * P[0] + d * P[1] * (rho[0] * nu[1] + rho[1] * nu[0]) + d * (d - 1) * P[2] * nu[0] * nu[1]


def _T_partials(g, d: int, P, rho, nu):
    """Partial derivatives of T_m in rho_j, nu_j and b (``P[j]`` = b^(d-j))."""
    m = g["m"]
    if m == 0:
        return [], [], d * P[1]
    if m == 1:
        return [P[0]], [d * P[1]], d * rho[0] * P[1] + d * (d - 1) * P[2] * nu[0]
    c1, c2, c3 = d, d * (d - 1), d * (d - 1) * (d - 2)
    drho = [rho[1] * P[0] + c1 * P[1] * nu[1], rho[0] * P[0] + c1 * P[1] * nu[0]]
    dnu = [c1 * P[1] * rho[1] + c2 * P[2] * nu[1], c1 * P[1] * rho[0] + c2 * P[2] * nu[0]]
    db = c1 * (rho[0] * rho[1] - g["ww"]) * P[1] + c2 * P[2] * (rho[0] * nu[1] + rho[1] * nu[0]) + c3 * P[3] * nu[0] * nu[1]
    return drho, dnu, db


class _MechanicalValue(torch.autograd.Function):
    """The mean as one autograd node whose backward is the closed-form gradient (itself built of ordinary torch
    operations, so Newton's Hessians differentiate one closed form instead of a graph of the value's graph)."""

    @staticmethod
    def forward(ctx, X, ex):
        ctx.save_for_backward(X)
        ctx.ex = ex
        return ex.value(X)

    @staticmethod
    def backward(ctx, grad_out):
        (X,) = ctx.saved_tensors
        return grad_out[:, None] * ctx.ex.gradient(X), None
