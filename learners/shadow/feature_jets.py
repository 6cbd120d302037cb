r"""Feature coefficients of a jet functional in closed form, from the functional's action on monomials.

A recovered quantity's jet part :math:`T_b` (:mod:`learners.shadow.uncertainty`) depends on :math:`L` only through
its derivatives of order :math:`\le p` at one state :math:`x_b`. In the variables :math:`z = (x - x_b)/s`
(:math:`s` the kernel's scales, one per input) it is therefore fixed by its values on the scaled monomials

.. math::  J_\alpha = T_b[m_\alpha], \qquad m_\alpha(x) = z^\alpha/\sqrt{\alpha!}, \quad |\alpha| \le p, \qquad\text{as}\qquad
           T_b[f] = \sum_{|\alpha| \le p} J_\alpha\, \frac{\partial_z^\alpha f(x_b)}{\sqrt{\alpha!}}

(:math:`\partial_z^\alpha m_{\alpha'}(x_b) = \sqrt{\alpha!}\,\delta_{\alpha\alpha'}`). The :math:`J_\alpha` come from one
linearisation pass with the monomials as the basis functions: :math:`\binom{2n+p}{p}` columns whose values are
products of differences, where the kernel's features (the mechanical kernel's
:math:`\binom{n+p}{p}\binom{n+d}{d}`, e.g. 163,000 at :math:`n = 4`, :math:`p = 7`, :math:`d = 8`) made every nested
derivative of :math:`\mathrm{mod}_N` keep tensors as wide as the feature map (12.9 GB at :math:`n = 4`, :math:`N = 4`).

*From jets to features.* The kernels' features factor into a position part and a velocity part, and each part
into one-dimensional factors: :math:`\Phi_{\gamma\beta}(x; c) = F^q_\gamma(x_q; c_q)\,F^v_\beta(x_v; c_v)` with
:math:`F_\gamma(y; c) = w_{|\gamma|}\prod_i f_{\gamma_i}(z_i)`. The derivatives of the features are then products
of one-dimensional tables,

.. math::  \frac{\partial_z^\alpha F_\gamma}{\sqrt{\alpha!}} = w_{|\gamma|}\prod_i \frac{f^{(\alpha_i)}_{\gamma_i}(z_i)}{\sqrt{\alpha_i!}}
           =: A_{\alpha\gamma}, \qquad
           c_{\gamma\beta} = T_b[\Phi_{\gamma\beta}] = \sum_{\alpha_q, \alpha_v} A^q_{\alpha_q\gamma}\, J_{\alpha_q\alpha_v}\, A^v_{\alpha_v\beta},

two matrix products per state. The one-dimensional factors are

* Gaussian (the RBF in all inputs, the mechanical kernel in the positions),
  :math:`f_g(z) = z^g e^{-z^2/2}/\sqrt{g!}` at :math:`z = (y - c)/\ell`:
  :math:`\frac{d^a}{dz^a}\big(z^g e^{-z^2/2}\big) = e^{-z^2/2}\sum_{j \le \min(a, g)}\binom{a}{j}\frac{g!}{(g-j)!}z^{g-j}(-1)^{a-j}He_{a-j}(z)`
  (Leibniz; :math:`He` the probabilists' Hermite polynomials, :math:`\frac{d^k}{dz^k}e^{-z^2/2} = (-1)^k He_k(z) e^{-z^2/2}`);
* monomial (the mechanical kernel's velocity polynomial), :math:`f_g(z) = z^g/\sqrt{g!}` at :math:`z = y/\lambda`,
  :math:`w_k = \sqrt{d!/(d-k)!}`: :math:`\frac{d^a}{dz^a} z^g = \frac{g!}{(g-a)!} z^{g-a}`.

The same tables at another centre give :math:`T_b` applied to the kernel section of a jet functional at a reference
state :math:`x_r`, :math:`\sigma_f^{-2}T_r^y k(\cdot, y) = \sum c^{(r)}_{\gamma\beta}\Phi_{\gamma\beta}(\cdot\,; x_r)`
(exact: :math:`c^{(r)}` vanishes beyond the orders kept), as :math:`\sum_{\alpha} J_\alpha (A^q\, C^{(r)} A^{v\top})_\alpha`.
Everything is ordinary dense algebra on small tables; memory is :math:`O(B\,\binom{n+p}{p}\max(\binom{n+p}{p}, G_v))`.
"""

from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

import torch

__all__ = ["GaussianFactor", "MonomialFactor", "SplitLayout", "monomial_exponents", "index_of"]


def monomial_exponents(n: int, order: int) -> torch.Tensor:
    """The multi-indices of :math:`n` variables with :math:`|\\alpha| \\le` ``order``, graded (degree 0, 1, ...),
    in the order of :class:`learners.shadow.uncertainty.GaussianFeatures`: (count, n) long."""
    from .uncertainty import GaussianFeatures  # the one graded enumeration of the package

    return GaussianFeatures(n, order, gaussian=False).exponents


def index_of(exponents: torch.Tensor) -> Dict[Tuple[int, ...], int]:
    """Row of each multi-index in ``exponents``."""
    return {tuple(int(a) for a in row): i for i, row in enumerate(exponents)}


def _gaussian_table(z: torch.Tensor, amax: int, gmax: int) -> torch.Tensor:
    r""":math:`\frac{d^a}{dz^a}(z^g e^{-z^2/2})/\sqrt{a!\,g!}` at ``z`` (...,) -> (..., amax + 1, gmax + 1)."""
    he = [torch.ones_like(z), z]  # probabilists' Hermite He_k(z)
    for k in range(1, amax):
        he.append(z * he[k] - k * he[k - 1])
    pw = [torch.ones_like(z)]  # z^j (0^0 = 1: exact zeros of the higher powers at the centre)
    for _ in range(gmax):
        pw.append(pw[-1] * z)
    gauss = torch.exp(-0.5 * z * z)
    out = z.new_zeros(z.shape + (amax + 1, gmax + 1))
    for a in range(amax + 1):
        for g in range(gmax + 1):
            acc = torch.zeros_like(z)
            for j in range(min(a, g) + 1):
                acc = acc + (math.comb(a, j) * math.perm(g, j) * (-1) ** (a - j)) * pw[g - j] * he[a - j]
            out[..., a, g] = acc * gauss / math.sqrt(math.factorial(a) * math.factorial(g))
    return out


def _monomial_table(z: torch.Tensor, amax: int, gmax: int) -> torch.Tensor:
    r""":math:`\frac{d^a}{dz^a} z^g/\sqrt{a!\,g!}` at ``z`` (...,) -> (..., amax + 1, gmax + 1)."""
    pw = [torch.ones_like(z)]
    for _ in range(gmax):
        pw.append(pw[-1] * z)
    out = z.new_zeros(z.shape + (amax + 1, gmax + 1))
    for a in range(amax + 1):
        for g in range(a, gmax + 1):
            out[..., a, g] = (math.perm(g, a) / math.sqrt(math.factorial(a) * math.factorial(g))) * pw[g - a]
    return out


class _Factor:
    """One part (positions or velocities) of a split feature map: multi-indices ``exponents`` (G, n), weights (G,)."""

    exponents: torch.Tensor
    weights: torch.Tensor
    #: derivatives of order above this vanish identically (None: not known to)
    top: Optional[int] = None

    def coords(self, y: torch.Tensor, centres: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def _table1d(self, z: torch.Tensor, amax: int) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def directional(self, xb: torch.Tensor, y: torch.Tensor, W: torch.Tensor, alphas: torch.Tensor) -> dict:
        """The section at ``xb`` and its derivatives in ``y`` along ``W`` (:func:`_directional`)."""
        return _directional(lambda yy: self.section(xb, yy, alphas), y, W)

    def table(self, y: torch.Tensor, centres: torch.Tensor, alphas: torch.Tensor) -> torch.Tensor:
        r""":math:`A_{b\alpha\gamma} = \partial_z^\alpha F_\gamma(y_b; c_b)/\sqrt{\alpha!}` for the multi-indices
        ``alphas`` (A, n): (B, A, G)."""
        z = self.coords(y, centres)  # (B, n)
        t = self._table1d(z, int(alphas.max()) if alphas.numel() else 0)  # (B, n, amax + 1, gmax + 1)
        out = self.weights.expand(z.shape[0], alphas.shape[0], -1).clone()
        for i in range(z.shape[1]):
            out = out * t[:, i][:, alphas[:, i][:, None], self.exponents[:, i][None, :]]
        return out


class GaussianFactor(_Factor):
    r"""Gaussian features :math:`e^{-|z|^2/2} z^\gamma/\sqrt{\gamma!}`, :math:`|\gamma| \le` ``order``, of
    :math:`z = (y - c)/\ell` (``scales`` :math:`\ell` (n,))."""

    def __init__(self, scales: torch.Tensor, order: int):
        self.scales = scales
        self.exponents = monomial_exponents(scales.numel(), order)
        self.weights = torch.ones(self.exponents.shape[0], dtype=torch.float64, device=scales.device)
        self._gmax = order

    def coords(self, y, centres):
        return (y - centres) / self.scales

    def _table1d(self, z, amax):
        return _gaussian_table(z, amax, self._gmax)

    def section(self, xb, y, alphas):
        return _gaussian_section(xb, y, self.scales, alphas)

    def directional(self, xb, y, W, alphas):
        from .section_jets import gaussian_directional  # imports this module; closed form (its docstring)

        return gaussian_directional(xb, y, self.scales, alphas, W)


class MonomialFactor(_Factor):
    r"""The mechanical kernel's velocity features :math:`\psi_\beta(z) = \sqrt{d!/(d-|\beta|)!}\,z^\beta/\sqrt{\beta!}`,
    :math:`|\beta| \le d`, of :math:`z = y/\lambda` (no centre: the polynomial is global)."""

    def __init__(self, scales: torch.Tensor, degree: int):
        self.scales = scales
        self.exponents = monomial_exponents(scales.numel(), degree)
        deg = self.exponents.sum(-1)
        self.weights = torch.tensor([math.sqrt(math.perm(degree, int(k))) for k in deg], dtype=torch.float64,
                                    device=scales.device)
        self._gmax = self.top = degree

    def coords(self, y, centres):
        return y / self.scales

    def _table1d(self, z, amax):
        return _monomial_table(z, amax, self._gmax)

    def section(self, xb, y, alphas):
        return _polynomial_section(xb, y, self.scales, alphas, self._gmax)


class SplitLayout:
    r"""A feature map :math:`\Phi_m = F^q_{\gamma(m)} F^v_{\beta(m)}` (features ``m`` of the flat map, ``iq``/``iv`` (M,)
    their factor indices) and the jet coefficients of functionals of order ``order`` on :math:`\mathbb R^{2n}`."""

    def __init__(self, fq: _Factor, fv: _Factor, iq: torch.Tensor, iv: torch.Tensor, order: int):
        self.fq, self.fv, self.iq, self.iv, self.order = fq, fv, iq, iv, order
        n = fq.exponents.shape[1]
        self.n = n
        self.half = monomial_exponents(n, order)  # (S, n): the positions' (and the velocities') part of alpha
        pos = index_of(self.half)
        self.jets = monomial_exponents(2 * n, order)  # the jet columns' alpha (A, 2n)
        # indices on the CPU, as the multi-indices (they index tensors on any device)
        self.jq = torch.tensor([pos[tuple(int(a) for a in r[:n])] for r in self.jets], dtype=torch.long, device="cpu")
        self.jv = torch.tensor([pos[tuple(int(a) for a in r[n:])] for r in self.jets], dtype=torch.long, device="cpu")

    def _matrix(self, J: torch.Tensor) -> torch.Tensor:
        """Jet values (B, k, A) as matrices over (alpha_q, alpha_v): (B, k, S, S)."""
        S = self.half.shape[0]
        out = J.new_zeros(J.shape[:2] + (S, S))
        out[:, :, self.jq, self.jv] = J
        return out

    def _tables(self, x: torch.Tensor, centres: torch.Tensor):
        n = self.n
        return (self.fq.table(x[:, :n], centres[:, :n], self.half),
                self.fv.table(x[:, n:], centres[:, n:], self.half))

    def _products(self, x: torch.Tensor, F, width: int, entries: int, v_count: Optional[int] = None):
        r"""Per chunk of ``F``'s atoms: (atom set, slice, pairs) where the pairs ``(E, P)`` (B, P, S) of the position and
        velocity factors' scaled :math:`x`-derivatives at the rows' states, differentiated along the atoms'
        directions, sum (:math:`\sum_{pairs} E_{bps}P_{bpt}`) to :math:`\Lambda_p^y D^x_{(s,t)} k(x_b, y)`: with
        :math:`k = k_q k_v` and each direction on one factor (the four products for two directions), each factor a
        closed form (:func:`_gaussian_section`, :func:`_polynomial_section`) differentiated along the atom's directions
        (:meth:`_Factor.directional`: the Gaussian's in closed form, the polynomial's forward-mode, ``torch.func.jvp``).
        ``v_count``: the velocity factor's first ``v_count`` multi-indices only (those beyond vanish, :attr:`_Factor.top`)."""
        n, B, S = self.n, x.shape[0], self.half.shape[0]
        for m, A in F.atoms.items():
            step = max(1, entries // (B * width * S))
            for a in range(0, A.points.shape[0], step):
                sl = slice(a, a + step)
                y, W = A.points[sl], A.dirs[sl]
                parts = [f.directional(xx, y[:, lo:lo + n], W[:, :, lo:lo + n], al)
                         for f, xx, lo, al in ((self.fq, x[:, :n], 0, self.half), (self.fv, x[:, n:], n, self.half[:v_count]))]
                yield A, sl, list(_leibniz(m, *parts))

    def sections(self, J: torch.Tensor, x: torch.Tensor, F, entries: int = 2_000_000) -> torch.Tensor:
        r""":math:`T_{b,o}[\Lambda_i^y k(\cdot, y)]` for the functionals ``F`` (atoms of order <= 2), from the jet values
        ``J`` (B, k, A) at ``x`` (B, 2n): (B, k, F.count), as :math:`\sum_\alpha J_\alpha D^x_\alpha\Lambda_i^y k(x_b, y)`
        (:meth:`_products`)."""
        Jm = self._matrix(J)
        out = J.new_zeros(Jm.shape[0], Jm.shape[1], F.count)
        for A, sl, pairs in self._products(x, F, Jm.shape[1], entries):
            val = sum(((E[:, None] @ Jm) * P[:, None]).sum(-1) for E, P in pairs)  # (B, k, P): no (B, P, S, S) temporary
            out = out.index_add(2, A.owner[sl], val * A.coef[sl])
        return out

    def function_jet(self, x: torch.Tensor, atoms: dict, entries: int = 2_000_000) -> torch.Tensor:
        r"""The scaled derivatives :math:`D_\alpha f(x_b) = \partial_z^\alpha f(x_b)/\sqrt{\alpha!}`, :math:`|\alpha| \le p`,
        of :math:`f = \sum_a c_a \Lambda_a^y k(\cdot, y)` (``atoms``: order -> AtomSet, e.g. the posterior mean's
        without :math:`\sigma_f^2`) at ``x`` (B, 2n): (B, A), in the order of the jet columns. Its Taylor polynomial
        :math:`\sum_\alpha D_\alpha f(x_b)\, z^\alpha/\sqrt{\alpha!}` has the same jet of order :math:`p` at :math:`x_b`."""
        from .functionals import Functionals

        F = Functionals(x.shape[-1], 1, atoms)
        S = self.half.shape[0]
        out = x.new_zeros(x.shape[0], S, S)
        # graded: the rows of |alpha_q| = a meet the columns of |alpha_v| <= p - a only (the (s, t) the jet reads),
        # binom(2n+p, p) of the S^2 products (6,435 of 108,900 at n = 4, p = 7); the velocity factor's derivatives
        # beyond its top order (the mechanical kernel's degree) vanish: neither computed nor multiplied
        ends = torch.bincount(self.half.sum(-1), minlength=self.order + 1).cumsum(0).tolist()
        top = self.order if self.fv.top is None else min(self.order, self.fv.top)
        blocks = [(ends[a - 1] if a else 0, ends[a], ends[min(self.order - a, top)]) for a in range(self.order + 1)]
        for A, sl, pairs in self._products(x, F, 1, entries, ends[top]):
            for E, P in pairs:
                Et = (E * A.coef[sl][:, None]).transpose(1, 2)
                for lo, hi, width in blocks:
                    out[:, lo:hi, :width] += Et[:, lo:hi] @ P[:, :, :width]
        return out[:, self.jq, self.jv]

    def jet_columns(self, x: torch.Tensor):
        """The jet columns at the rows' states ``x``: :class:`~learners.shadow.uncertainty._Jets` of :attr:`order` in
        the factors' scales."""
        from .uncertainty import _Jets  # uncertainty imports this module

        return _Jets(x, torch.cat([self.fq.scales, self.fv.scales]), self.order)

    def chunk_rows(self, k: int) -> int:
        """States per pass of :func:`~learners.shadow.uncertainty.posterior_variance` for ``k`` outputs (its memory
        bounds :data:`~learners.shadow.uncertainty.PASS_ENTRIES` and :data:`~learners.shadow.uncertainty.TABLE_ENTRIES`)."""
        from .uncertainty import PASS_ENTRIES, TABLE_ENTRIES  # read at the call: uncertainty imports this module

        S, Gq, Gv = self.half.shape[0], self.fq.exponents.shape[0], self.fv.exponents.shape[0]
        table = S * (Gq + Gv) + k * (S * S + Gq * Gv + S * Gv)  # tables, jet matrices and coefficients, per state
        return max(1, min(PASS_ENTRIES // (self.jets.shape[0] + k), TABLE_ENTRIES // table))

    def coefficients(self, J: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        r"""Feature coefficients :math:`c_{b o m} = T_{b,o}[\Phi_m(\cdot\,; x_b)]` from the jet values ``J`` (B, k, A)
        at the states ``x`` (B, 2n): (B, k, M)."""
        Aq, Av = self._tables(x, x)
        C = Aq.transpose(1, 2)[:, None] @ self._matrix(J) @ Av[:, None]  # (B, k, Gq, Gv)
        return C[:, :, self.iq, self.iv]

    def apply_to_sections(self, J: torch.Tensor, x: torch.Tensor, centres: torch.Tensor, coef: torch.Tensor) -> torch.Tensor:
        r""":math:`T_{b,o}` (jet values ``J`` (B, k, A) at ``x``) applied to row ``b``'s function
        :math:`\sum_m c_{bm}\Phi_m(\cdot\,; r_b)` (``coef`` (B, M), ``centres`` :math:`r_b` (B, 2n)): (B, k)."""
        Aq, Av = self._tables(x, centres)
        C = coef.new_zeros(coef.shape[0], Aq.shape[2], Av.shape[2])
        C[:, self.iq, self.iv] = coef
        Dr = Aq @ C @ Av.transpose(1, 2)  # (B, S, S): the function's scaled derivatives at x_b
        return torch.einsum("bkst,bst->bk", self._matrix(J), Dr)


# --------------------------------------------------------------- kernel sections at the training functionals
def _hermite(z: torch.Tensor, top: int) -> list:
    """Probabilists' Hermite polynomials He_0..He_top at ``z``."""
    he = [torch.ones_like(z), z]
    for k in range(1, top):
        he.append(z * he[k] - k * he[k - 1])
    return he[:top + 1]


def _gaussian_section(xb: torch.Tensor, y: torch.Tensor, scales: torch.Tensor, alphas: torch.Tensor) -> torch.Tensor:
    r""":math:`\partial_z^\alpha e^{-|z|^2/2}/\sqrt{\alpha!}`, :math:`z = (x_b - y)/\ell`, i.e. the scaled derivatives in
    :math:`x` of the Gaussian factor of :math:`k(x, y)` at :math:`x_b` (B, n), for ``y`` (P, n): (B, P, S)."""
    z = (xb[:, None, :] - y[None]) / scales
    top = int(alphas.max()) if alphas.numel() else 0
    he = _hermite(z, top)
    sign = torch.tensor([(-1) ** a / math.sqrt(math.factorial(a)) for a in range(top + 1)], dtype=z.dtype, device=z.device)
    h = torch.stack(he, -1) * sign * torch.exp(-0.5 * z * z)[..., None]  # (B, P, n, top + 1)
    return _product_over_inputs(h, alphas)


def _product_over_inputs(h: torch.Tensor, alphas: torch.Tensor) -> torch.Tensor:
    r""":math:`\prod_i h_{..., i, \alpha_i}` for the multi-indices ``alphas`` (S, n): (..., S). For n > 2 the inputs are
    split in two halves, each half's product formed once per distinct half multi-index (e.g. 35 of the 210 at
    n = 6, order 4), and the two combined by one product per alpha: 2 full-width gathers and 1 product instead of
    n and n - 1 (the cost of the kernel sections at the training atoms, :meth:`SplitLayout.sections`). n <= 2: the
    plain product, in the same order as before (identical rounding)."""
    n = alphas.shape[1]
    if n <= 2:
        out = h[..., 0, alphas[:, 0]]
        for i in range(1, n):
            out = out * h[..., i, alphas[:, i]]
        return out
    k = n // 2
    (u1, inv1), (u2, inv2) = (torch.unique(a, dim=0, return_inverse=True) for a in (alphas[:, :k], alphas[:, k:]))
    return _product_over_inputs(h[..., :k, :], u1)[..., inv1] * _product_over_inputs(h[..., k:, :], u2)[..., inv2]


def _polynomial_section(xb: torch.Tensor, y: torch.Tensor, scales: torch.Tensor, alphas: torch.Tensor, d: int) -> torch.Tensor:
    r""":math:`\partial_{\tilde x}^\alpha (1 + \tilde x\cdot\tilde y)^d/\sqrt{\alpha!} = \frac{d!}{(d-|\alpha|)!}
    (1 + \tilde x\cdot\tilde y)^{d-|\alpha|}\tilde y^\alpha/\sqrt{\alpha!}` at :math:`x_b` (B, n), ``y`` (P, n): (B, P, S)."""
    yt = y / scales
    u = 1 + (xb / scales) @ yt.T  # (B, P)
    pw = [torch.ones_like(u)]
    for _ in range(d):
        pw.append(pw[-1] * u)
    pw = torch.stack(pw, -1)  # (B, P, d + 1)
    deg = alphas.sum(-1)
    const = torch.tensor([math.perm(d, int(k)) / math.sqrt(float(torch.lgamma(a.double() + 1).sum().exp())) for k, a in
                          zip(deg, alphas)], dtype=u.dtype, device=u.device)
    ypw = [torch.ones_like(yt)]  # powers by products: no pow's derivative 0 * 0^-1 at y = 0
    for _ in range(int(alphas.max())):
        ypw.append(ypw[-1] * yt)
    ypw = torch.stack(ypw, -1)  # (P, n, top + 1)
    mono = ypw[:, 0, alphas[:, 0]]
    for i in range(1, y.shape[1]):
        mono = mono * ypw[:, i, alphas[:, i]]
    return pw[:, :, (d - deg).clamp_min(0)] * (const * mono)[None]


def _directional(f, y: torch.Tensor, W: torch.Tensor) -> dict:
    """``f(y)`` and its derivatives along the directions ``W`` (P, m, n) (m <= 2), keyed by the set of directions."""
    from torch.func import jvp

    from integrators._environment import dynamo_imported

    dynamo_imported()  # jvp's first decomposition imports torch._dynamo, which writes os.environ (the caller's)
    m = W.shape[1]
    if m == 0:
        return {(): f(y)}
    if m == 1:
        v, d1 = jvp(f, (y,), (W[:, 0],))
        return {(): v, (0,): d1}
    g = lambda yy: jvp(f, (yy,), (W[:, 0],))  # noqa: E731 - (value, first derivative) as one function of y
    (v, d1), (d2, d12) = jvp(g, (y,), (W[:, 1],))
    return {(): v, (0,): d1, (1,): d2, (0, 1): d12}


def _leibniz(m: int, Eq: dict, Pv: dict):
    """The pairs (position factor's derivative, velocity factor's) whose products sum to the m-th derivative of the
    product (each direction on exactly one factor)."""
    full = tuple(range(m))
    for mask in range(1 << m):
        on_q = tuple(i for i in full if mask >> i & 1)
        on_v = tuple(i for i in full if not mask >> i & 1)
        yield Eq[on_q], Pv[on_v]
