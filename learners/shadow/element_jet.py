r"""Every partial derivative of an element kernel's posterior mean up to an order, at given states: the jet table of
:class:`~learners.shadow.taylor_jet.MeanTaylorJet` for the :class:`~learners.shadow.element_kernel.ElementKernel`.

The mean is :math:`f(x) = \sigma_f^2\big(\sum_g s_g^2\sum_e F_g(w_e(x)) + s_c^2 F_c(x)\big)`, :math:`w_e(x) = P_e x + b_e`
(:math:`P_e` (k, D), the scaled map of ``ElementKernel._projected``). Per group,
:meth:`~learners.shadow.element_uncertainty._Group.function_jet` gives :math:`D_\beta F_g(w_{b,e}) =
\partial^\beta F_g(w_{b,e})/\sqrt{\beta!}`, :math:`|\beta| \le K`, so that around the state :math:`x_b`, with
:math:`\delta = x - x_b` and :math:`m_\beta(w) = w^\beta/\sqrt{\beta!}`,

.. math::  F_g(w_e(x_b + \delta)) = \sum_{|\beta| \le K} D_\beta F_g(w_{b,e})\, m_\beta(P_e\delta) + O(|\delta|^{K+1}).

A polynomial's derivatives at its centre are its coefficients: :math:`m_\beta(P_e\delta) = \sum_{|\alpha| = |\beta|}
T_{e,\beta\alpha}\,\delta^\alpha` (homogeneous of degree :math:`|\beta|`), so

.. math::  \partial_x^\alpha f(x_b) = \alpha!\,\sigma_f^2 \sum_g s_g^2 \sum_{e,\beta} D_\beta F_g(w_{b,e})\,
           T_{e,\beta\alpha} \;+\; \sigma_f^2 s_c^2\, D_\alpha F_c(x_b)\,\frac{\sqrt{\alpha!}}{s^\alpha}

(the correction's scaled derivatives in :math:`z = (x - x_b)/s`, as :class:`~learners.shadow.taylor_jet.MeanTaylorJet`
reads the RBF's). :math:`T_e` depends on the instance's map alone, not on the state: it is built once per order, degree
by degree -- :math:`m_\beta = m_{\beta - \epsilon_i}\,(P_e\delta)_i/\sqrt{\beta_i}`, and multiplying by
:math:`(P_e\delta)_i = \sum_j P_{e,ij}\delta_j` moves each coefficient of :math:`\delta^\alpha` to :math:`\delta^{\alpha +
\epsilon_j}` -- and stored per degree (:math:`\binom{k+d-1}{d}\times\binom{D+d-1}{d}` per instance and degree :math:`d`).

Why: a quantity of :math:`\mathrm{mod}_N` at a state depends on :math:`\bar L` only through this jet. Nested autograd
on the mean's Taylor polynomial (:meth:`~learners.shadow.element_uncertainty.ElementLayout.taylor_mean`) keeps each
intermediate tensor of :math:`\mathrm{mod}_6`'s energy as wide as the polynomial (the instances' monomials and the
correction's 6,435 at :math:`n = 4`, order 7); on the table (:class:`~learners.shadow.taylor_jet.SharedJetLagrangian`)
they are one entry wide (issue 23: 49% of the first energy std at magnetic4 was that autograd). The values are the
Taylor polynomial's: the same jet, differentiated exactly (equal to rounding; tests/test_element_uncertainty.py).
"""

from __future__ import annotations

import math
from typing import Dict, List, Tuple

import torch

from .element_uncertainty import ElementLayout
from .taylor_jet import ATOM_ENTRIES, TAYLOR_TABLE_ENTRIES, split_factor
from .uncertainty import GaussianFeatures

__all__ = ["ElementTaylorJet", "COMPOSE_ENTRIES"]

#: most entries of the maps :math:`T_e` of one order (all groups, instances and degrees; ~0.2 GB): above, the table is
#: not built and :func:`~learners.shadow.element_uncertainty.on_mean` keeps the Taylor polynomial. 2.5 M at
#: ``bodies(2, 2, identical=False)``, n = 4, order 7 (three groups of 1, 1 and 2 instances, 330
#: monomials each, 6,435 columns: ``_entries``); 16.3 M for ``bodies(4, 2)``'s 12 pair instances at n = 8, order 5;
#: 417 M at order 7, which keeps the polynomial
COMPOSE_ENTRIES = 25_000_000


def _entries(layout: ElementLayout, D: int) -> int:
    """The entries of the maps :math:`T_e` of ``layout``'s order (all groups, instances, degrees)."""
    return sum(g.m * math.comb(g.k + d - 1, d) * math.comb(D + d - 1, d) for g in layout.groups for d in range(g.p + 1))


def _maps(group, alpha: torch.Tensor) -> List[torch.Tensor]:
    r"""Per degree :math:`d`, :math:`T_{e,\beta\alpha}` (m, monomials of degree d, columns of degree d): the coefficient of
    :math:`\delta^\alpha` in :math:`m_\beta(P_e\delta)`, :math:`P_e` the group's scaled map of instance ``e``; ``alpha``:
    the graded columns (A, D)."""
    P = group.Mt.transpose(1, 2)  # (m, k, D): w_e = P_e x + b_e
    D, deg = alpha.shape[1], alpha.sum(-1)
    starts = [0] + torch.bincount(deg, minlength=group.p + 1).cumsum(0).tolist()
    rows = alpha.tolist()
    index = {tuple(a): i for i, a in enumerate(rows)}  # alpha + e_j by lookup: no integer key that overflows at large D
    plus = torch.tensor([[index.get(tuple(a[:j] + [a[j] + 1] + a[j + 1:]), -1) for j in range(D)] for a in rows])
    out = [P.new_ones(group.m, 1, 1)]
    for d in range(1, group.p + 1):
        lo, hi = starts[d - 1], starts[d]  # the columns of degree d - 1
        up = plus[lo:hi] - starts[d]  # (columns of degree d - 1, D): alpha + e_j among the columns of degree d
        up, par, var = (i.to(P.device) for i in (up, group.mono._parents[d - 1], group.mono._vars[d - 1]))
        beta = group.mono.exponents[group.mono.degree == d].to(P.device)
        scale = 1 / beta.gather(1, var[:, None])[:, 0].to(P.dtype).sqrt()  # m_beta = m_parent w_var / sqrt(beta_var)
        prev = out[-1][:, par]  # (m, n_beta, columns of degree d - 1)
        new = P.new_zeros(group.m, len(par), starts[d + 1] - starts[d])
        for j in range(D):
            w = P[:, var, j] * scale  # (m, n_beta): the coefficient of delta_j in w_var, scaled
            new.index_add_(2, up[:, j], prev * w[..., None])
        out.append(new)
    return out


class ElementTaylorJet:
    r"""The jet of ``gp``'s element posterior mean (inputs ``D``, standardised coordinates) in the interface of
    :class:`~learners.shadow.taylor_jet.MeanTaylorJet`: ``self(X, K)`` is :math:`\partial^\alpha f` at the states ``X``
    (B, D) for :math:`|\alpha| \le K`, (B, columns) in the order of :meth:`columns` (module docstring). The posterior
    (atoms, hyperparameters) is read when built: build a new one after a refit."""

    def __init__(self, gp, D: int):
        self.base, self.s2 = gp.kernel.base_kernel, gp.kernel.outputscale.detach()
        self.atoms, self.D = gp._mean_atoms, int(D)
        self._orders: Dict[int, tuple] = {}
        self._layouts: Dict[int, ElementLayout] = {}

    def fits(self, K: int) -> bool:
        """Whether the maps of order ``K`` stay within :data:`COMPOSE_ENTRIES` (else the caller keeps the Taylor
        polynomial)."""
        return _entries(self._layout(K), self.D) <= COMPOSE_ENTRIES

    def _layout(self, K: int) -> ElementLayout:
        if K not in self._layouts:
            self._layouts[K] = ElementLayout(self.base, self.D, K)
        return self._layouts[K]

    def _order(self, K: int):
        """The layout of order ``K``, the columns, :math:`\alpha!`, the correction's factor and each group's maps."""
        if K not in self._orders:
            with torch.no_grad():
                layout = self._layout(K)
                alpha = GaussianFeatures(self.D, K, gaussian=False).exponents
                log_fact = torch.lgamma(alpha.double() + 1).sum(-1).to(self.s2.device)
                corr = split_factor(layout.corr, alpha) if layout.corr is not None and layout.corr_atoms else None
                maps = [_maps(g, alpha) for g in layout.groups]
            self._orders[K] = (layout, alpha, torch.exp(log_fact), corr, maps)
        return self._orders[K]

    def columns(self, K: int) -> List[Tuple[int, ...]]:
        """The multi-indices of the table's columns (graded)."""
        return [tuple(int(a) for a in row) for row in self._order(K)[1]]

    def __call__(self, X: torch.Tensor, K: int) -> torch.Tensor:
        layout, alpha, fact, corr, maps = self._order(K)
        # per state: the table's row, and the correction's (S, S) product as MeanTaylorJet's where there is one
        S = math.comb(self.D // 2 + K, K) if corr is not None else 0
        chunk = max(1, TAYLOR_TABLE_ENTRIES // (S * S + alpha.shape[0]))
        out = X.new_empty(X.shape[0], alpha.shape[0])  # filled in place: no second copy of the table
        for a in range(0, X.shape[0], chunk):
            out[a:a + chunk] = self._rows(X[a:a + chunk], layout, alpha, fact, corr, maps)
        return out

    def _rows(self, X, layout, alpha, fact, corr, maps) -> torch.Tensor:
        deg = alpha.sum(-1)
        ends = [0] + torch.bincount(deg, minlength=layout.order + 1).cumsum(0).tolist()
        out = X.new_zeros(X.shape[0], alpha.shape[0])
        for g, T in zip(layout.groups, maps):
            c = g.var * g.function_jet(X, self.atoms)  # (B, m, M), graded in beta as T
            b_ends = [0] + torch.bincount(g.mono.degree, minlength=g.p + 1).cumsum(0).tolist()
            for d, Td in enumerate(T):
                out[:, ends[d]:ends[d + 1]] += torch.einsum("bem,ema->ba", c[:, :, b_ends[d]:b_ends[d + 1]], Td)
        out = out * fact
        if corr is not None:
            out = out + layout.corr_var * layout.corr.function_jet(X, self.atoms, ATOM_ENTRIES) * corr
        return self.s2 * out
