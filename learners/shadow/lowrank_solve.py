r"""A low-rank solve for many functionals: a pivoted Cholesky of :math:`\Theta` from m of its columns, and the
subset-of-regressors (DTC) posterior mean (opt-in: a model's ``final_solver=LowRankSolver(...)``, a
:class:`~learners.shadow.gp.FunctionalGP`'s ``solver``; issue 27).

*Why.* The exact solve (:class:`~learners.shadow.gp.FunctionalGP`) assembles all :math:`F^2` entries of
:math:`\Theta = \Lambda\Lambda^\top k` (each a mixed derivative of the kernel) and factors them in :math:`F^3/3`;
at :math:`F = 2\cdot 10^4` that is 3.2 GB and most of the time. A smooth kernel over nearby functionals has a
rapidly decaying spectrum, so a few columns carry the matrix.

*Pivoted Cholesky* (greedy, on the correlation scale). With :math:`d_i = \Theta_{ii}` and the residual diagonal
:math:`r_i = \Theta_{ii} - \sum_{k} L_{ik}^2`, the next pivot is :math:`p = \arg\max_i r_i / d_i` (the functional least
explained relative to its own prior variance: DEL residuals and normalisation functionals have different scales),
and :math:`L_{:,k} = (\Theta_{:,p} - L L_{p,:}^\top)/\sqrt{r_p}`. It stops when :math:`\max_i r_i/d_i \le`
``tol`` (every functional explained to that fraction of its variance: scale-free; default 1e-12, chosen by measurement;
it is not the nugget :math:`\sigma_n^2`, whose ratio :math:`\sigma_n^2/d_i` was 1e-13..5e-12 on Session 15's fits; the
posterior's ``info.extra["residual_over_noise"]`` records :math:`\sum_i r_i/\sigma_n^2`, the trace of
:math:`\Theta - LL^\top` in units of the nugget) or at ``max_rank`` columns (a :class:`LowRankWarning` gives the fraction
reached). Only the diagonal and the m pivot
columns :math:`\Theta(F, F_m)` are assembled (F m entries), in blocks of ``block`` candidates (the largest
:math:`r_i/d_i`; a candidate already explained by the block's earlier pivots, :math:`r_p/d_p \le` ``tol``, is
dropped). Then :math:`\Theta \approx LL^\top`, exact on the pivots' rows and columns, and
:math:`\Theta_{mm} = L_m L_m^\top` with :math:`L_m = L_{\text{pivots},:}` lower triangular.

*Mean* (subset of regressors): the mean is restricted to the span of the pivots' representers,
:math:`\bar L(x) = \sum_{j \in m} \alpha_j \Lambda_j^y k(x, y)`, with the weights of the regularised least squares

.. math::  \alpha = \arg\min_\alpha \|y - \Theta_{Fm}\alpha\|^2 + \sigma_n^2\,\alpha^\top\Theta_{mm}\alpha
           = (\sigma_n^2\Theta_{mm} + \Theta_{mF}\Theta_{Fm})^{-1}\Theta_{mF}\,y .

With :math:`\alpha = L_m^{-\top}\gamma` (:math:`\Theta_{Fm} = L L_m^\top`) this is
:math:`\gamma = \arg\min \|y - L\gamma\|^2 + \sigma_n^2\|\gamma\|^2`, solved through the triangular factor
:math:`R` of the QR of :math:`[L;\ \sigma_n I]` (:math:`R^\top R = L^\top L + \sigma_n^2 I`; stable where the
normal equations would square the condition) and one step of refinement. At m = F (every functional a pivot,
``tol=0``) it is the exact mean :math:`(\Theta + \sigma_n^2 I)^{-1}y`. Cost: F m entries of :math:`\Theta` and
:math:`O(F m^2)` arithmetic, memory F m.

*Std*: not derived. Every posterior (co)variance route of the project uses the dense factor; in this mode it is
refused with a :class:`~bea.errors.BeaValueError` naming the dense route (a model fitted with ``final_solver=None``;
``gp.solver = None`` and condition again).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Optional

import torch

from bea.errors import BeaValueError, BeaWarning

from .functionals import Functionals
from .guards import NonFiniteModelError, caller_level
from .kernels import FunctionalKernel

__all__ = ["LowRankSolver", "LowRankFactor", "LowRankPosterior", "LowRankWarning", "pivoted_cholesky", "DENSE_ROUTE"]

#: how a refusal names the exact route
DENSE_ROUTE = "the dense solve (a model fitted with final_solver=None, the default; gp.solver = None, then condition again)"


class LowRankWarning(BeaWarning):
    """The low-rank solve is short of the dense one: its pivoted Cholesky stopped at its rank cap above its tolerance
    (the mean is less accurate), or a check that needs the posterior std was skipped (predict's extrapolation check)."""


@dataclass
class LowRankFactor:
    r""":math:`\Theta \approx LL^\top`: ``L`` (F, m), ``pivots`` (m,) in the order chosen, ``residual`` (F,) the residual
    diagonal :math:`r_i`, ``diag`` (F,) :math:`\Theta_{ii}`."""

    L: torch.Tensor
    pivots: torch.Tensor
    residual: torch.Tensor
    diag: torch.Tensor

    @property
    def rank(self) -> int:
        return int(self.pivots.numel())

    @property
    def relative_residual(self) -> float:
        """:math:`\\max_i r_i / d_i` (the stopping criterion's value)."""
        return float((self.residual / self.diag).max()) if self.diag.numel() else 0.0


def pivoted_cholesky(kernel: FunctionalKernel, F: Functionals, tol: float, max_rank: int, block: int = 64,
                     trace: Optional[list] = None, noise: Optional[float] = None) -> LowRankFactor:
    r"""Greedy pivoted Cholesky of :math:`\Theta(F, F)` (module docstring) from its diagonal and pivot columns only.
    ``trace``: a list that receives :math:`\sum_i r_i` after every accepted pivot (for tests and benchmarks).
    ``noise`` :math:`\sigma_n^2` given: residuals on the nugget's scale, pivot :math:`\arg\max r_i`, stop at
    :math:`\max_i r_i \le` ``tol`` :math:`\sigma_n^2` (opt-in; the default scale is each :math:`d_i`).
    ``L`` grows by one block of columns at a time (memory F m, not F ``max_rank``)."""
    with torch.no_grad():
        d = kernel.diagonal(F).to(torch.float64)
        _require_finite(d, "diagonal Theta_ii", F.count)
        if bool((d <= 0).any()):
            raise BeaValueError("a functional has zero prior variance: it carries no information (drop it) -- "
                                f"{int((d <= 0).sum())} of {F.count}")
        cap = min(int(max_rank), F.count)
        L, r, piv = d.new_zeros(F.count, 0), d.clone(), []
        s = d if noise is None else torch.full_like(d, float(noise))  # the scale each residual is compared on
        while len(piv) < cap and float((r / s).max()) > tol:
            cand = torch.topk(r / s, min(block, cap - len(piv))).indices
            C = kernel.forward(F, F.subset(cand))  # (F, b): the candidates' columns
            _require_finite(C, "pivot columns Theta(F, F_m)", C.numel())
            k = len(piv)
            if k:
                C -= L[:, :k] @ L[cand, :k].T
            L = torch.cat([L[:, :k], L.new_zeros(F.count, cand.numel())], 1)  # room for this block's pivots only
            _accept_block(C, cand, L, r, s, piv, tol, trace)
        rel = float((r / s).max())
        if rel > tol:  # only the rank cap leaves the loop above tol (a non-positive pivot's residual is zeroed)
            warnings.warn(f"pivoted Cholesky stopped at its rank cap {cap} with max residual/variance {rel:.1e} > "
                          f"tol {tol:.1e}: the mean is less accurate -- raise max_rank, or use {DENSE_ROUTE}", LowRankWarning,
                          stacklevel=caller_level())
        m = len(piv)
        pivots = torch.tensor(piv, dtype=torch.long, device=d.device)
        return LowRankFactor(L if L.shape[1] == m else L[:, :m].clone(), pivots, r, d)


def _require_finite(x: torch.Tensor, what: str, of: int) -> None:
    """A NaN entry compares False with every threshold, so it would end the pivoting at rank 0 (a zero mean): refuse."""
    if not bool(torch.isfinite(x).all()):
        raise NonFiniteModelError(f"the low-rank solve's {what} has {int((~torch.isfinite(x)).sum())} non-finite "
                                  f"entries (of {of}): the kernel's hyperparameters or the data are not finite -- check "
                                  "them (the dense solve fails on the same matrix)")


def _accept_block(C: torch.Tensor, cand: torch.Tensor, L: torch.Tensor, r: torch.Tensor, d: torch.Tensor, piv: list,
                  tol: float, trace: Optional[list]) -> None:
    """Pivot the block's candidates one at a time, largest relative residual first, each column updated by the
    block's earlier pivots (``C`` is already updated by the earlier blocks'); ``L``, ``r``, ``piv`` in place."""
    left = list(range(cand.numel()))
    k0 = len(piv)
    while left:
        rel = torch.stack([r[cand[j]] / d[cand[j]] for j in left])
        j = left.pop(int(rel.argmax()))
        p = int(cand[j])
        if float(r[p] / d[p]) <= tol:
            break  # the rest are explained at least as well
        k = len(piv)
        col = C[:, j] - L[:, k0:k] @ L[p, k0:k] if k > k0 else C[:, j].clone()
        if piv:  # the earlier pivots' rows are reproduced: zero, not rounding (L_m exactly lower triangular)
            col[torch.tensor(piv, dtype=torch.long, device=col.device)] = 0.0
        pivot = float(col[p])
        if pivot <= 0.0:  # rounding: r[p] overstated what the column leaves; p is explained to rounding, go on
            r[p] = 0.0
            continue
        L[:, k] = col / pivot ** 0.5
        r -= L[:, k] ** 2
        r[p] = 0.0  # exact: the pivot's row is reproduced
        r.clamp_(min=0.0)
        piv.append(p)
        if trace is not None:
            trace.append(float(r.sum()))


@dataclass
class LowRankPosterior:
    r"""What the mean needs: the pivot ``functionals`` :math:`F_m`, their weights ``alpha``; and for a new right-hand
    side (``retarget``) the factor, :math:`L_m` and the QR factor ``R`` of :math:`[L; \sigma_n I]` at the ``noise``
    :math:`\sigma_n^2` it was made with (another noise needs a new ``R``: :meth:`FunctionalGP.retarget` solves again)."""

    factor: LowRankFactor
    R: torch.Tensor
    functionals: Functionals
    alpha: torch.Tensor
    noise: float

    def weights(self, y: torch.Tensor, noise: float) -> torch.Tensor:
        r""":math:`\alpha = L_m^{-\top}\gamma`, :math:`\gamma = (L^\top L + \sigma_n^2 I)^{-1}L^\top y` by the
        semi-normal equations with :math:`R` and one refinement step (module docstring)."""
        L, R = self.factor.L, self.R
        y = y.to(L.dtype)

        def normal(b: torch.Tensor) -> torch.Tensor:
            z = torch.linalg.solve_triangular(R.T, b[:, None], upper=False)
            return torch.linalg.solve_triangular(R, z, upper=True)[:, 0]

        gamma = normal(L.T @ y)
        gamma = gamma + normal(L.T @ (y - L @ gamma) - noise * gamma)
        Lm = L[self.factor.pivots]
        return torch.linalg.solve_triangular(Lm.T, gamma[:, None], upper=True)[:, 0]


@dataclass(frozen=True)
class LowRankSolver:
    r"""Opt-in solver of :class:`~learners.shadow.gp.FunctionalGP` (``gp.solver = LowRankSolver()``): pivoted Cholesky
    to ``tol`` (max residual / prior variance over the functionals) or ``max_rank`` columns, in blocks of ``block``
    candidates, then the subset-of-regressors mean (module docstring). No gradients in the hyperparameters; no std.
    The default ``tol`` 1e-12 (measured, not derived; not the nugget): the level-set errors equal the dense solve's
    (chain4 RBF at F = 2.5e3-1e4, chain10 element at 2.6e3); 1e-10 lost 6-9% on the element kernel, 1e-8 up to 20% on
    the RBF (benchmarks/RESULTS_element.md, Session 15). ``relative_to="noise"`` (opt-in): stop at
    :math:`\max_i r_i \le c\,\sigma_n^2` with :math:`c` = ``tol`` instead; :math:`E = \Theta - LL^\top` is positive
    semi-definite, so :math:`|E_{ij}| \le \sqrt{r_i r_j} \le c\,\sigma_n^2`: at :math:`c = 1` no functional's
    neglected prior (co)variance exceeds the noise variance the posterior already assumes."""

    tol: float = 1e-12
    max_rank: int = 4000
    block: int = 64
    #: "variance": stop at r_i <= tol d_i; "noise" (opt-in, benchmarked in Session 15): r_i <= tol sigma_n^2
    relative_to: str = "variance"

    def __post_init__(self):
        top = 1.0 if self.relative_to == "variance" else float("inf")
        if not (0.0 <= self.tol < top) or self.max_rank < 1 or self.block < 1 or self.relative_to not in ("variance", "noise"):
            raise BeaValueError(f"LowRankSolver needs 0 <= tol (< 1 relative to the variance), max_rank >= 1, block >= 1, "
                                f"relative_to 'variance' or 'noise'; got {self}")

    def solve(self, kernel: FunctionalKernel, F: Functionals, y: torch.Tensor, noise: float) -> LowRankPosterior:
        """The factor of ``F``'s covariance under ``kernel`` and the mean's weights for the values ``y``."""
        if torch.is_grad_enabled() and any(p.requires_grad for p in kernel.parameters()):
            raise BeaValueError("the low-rank solve is not differentiable in the hyperparameters: call it under "
                                f"torch.no_grad() (a fit's final solve), or use {DENSE_ROUTE}")
        if not noise > 0:  # the mean's QR of [L; sigma I] and residual_over_noise divide by it
            raise BeaValueError(f"the low-rank solve needs a positive noise variance, got {noise!r}: fit with noise > 0 "
                                f"(the model's default), or use {DENSE_ROUTE}")
        factor = pivoted_cholesky(kernel, F, self.tol, self.max_rank, self.block,
                                  noise=noise if self.relative_to == "noise" else None)
        with torch.no_grad():
            m = factor.rank
            aug = torch.cat([factor.L, (noise ** 0.5) * torch.eye(m, dtype=factor.L.dtype, device=factor.L.device)])
            R = torch.linalg.qr(aug, mode="r").R
            R = R * torch.sign(torch.diagonal(R))[:, None]  # positive diagonal (a Cholesky factor of R^T R)
            post = LowRankPosterior(factor, R, F.subset(factor.pivots), factor.L.new_zeros(0), noise)
            post.alpha = post.weights(y, noise)
        return post
