r"""The posterior variance of a GP quantity resolved to its actual rounding, not to the worst case.

A posterior variance :math:`v = P - |R^{-1}k|^2` (:mod:`learners.shadow.gp`, :mod:`learners.shadow.uncertainty`) is
the difference of two numbers that agree to many digits where the data pin a quantity down. The worst case of the
triangular solve, :math:`\kappa(R)\,\epsilon P`, was the floor below which such variances counted as rounding noise;
with the mechanical kernel at 120 trajectories the variances of energy differences fell below it (0.23x in the
median) although they are resolved to 1e-5 relative (benchmarks/variance_floor.py), and every std built on them was
the floor's. :func:`resolved_variance` gives the variance with an a-posteriori bound that follows the cancellation
actually present (its docstring states it and why it suffices).
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch

__all__ = ["BOUND_ROWS", "FORMATION_OPS", "VARIANCE_RULE", "resolved_variance", "solve_with_bound", "factorisation_bound",
           "floored", "realised_share", "SHARE_QUANTILE", "SHARE_SAFETY", "SHARE_MIN_PAIRS"]


#: the rule by which posterior variances are computed and floored, saved with a model's calibration scales (which
#: were fitted to those variances): a file without it was saved under the old worst-case floor kappa(R) eps P
VARIANCE_RULE = "a-posteriori-1"

#: rounding steps allowed per entry of the prior variance and of the cross-covariances before they reach
#: :func:`solve_with_bound` (a kernel evaluation, a sum of a few terms, the difference to a reference): the ``c`` of
#: the formation term :math:`\gamma_c(\bar P + 2|\alpha|^\top \bar K)`
FORMATION_OPS = 16

#: :func:`realised_share`: the quantile of the measured moves over the worst case, the safety factor on it, and the
#: resolved pairs below which the worst case is kept
SHARE_QUANTILE, SHARE_SAFETY, SHARE_MIN_PAIRS = 0.9, 10.0, 10

#: rows of the Cholesky factor per block of :func:`solve_with_bound`'s |R| |V| (memory: this many rows times F, and
#: times the quantities C)
BOUND_ROWS = 1024


def solve_with_bound(R: torch.Tensor, K: torch.Tensor, prior: torch.Tensor, prior_scale: Optional[torch.Tensor] = None,
                     K_scale: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    r""":math:`V = R^{-1}K^\top` (F, C) for ``K`` (C, F), and the rounding bound (C,) of :math:`P - |V_c|^2` with
    :math:`P` = ``prior`` (C,) (:func:`resolved_variance`; ``prior_scale`` (C,) and ``K_scale`` (C, F): the absolute
    scales :math:`P` and ``K`` were formed from, default :math:`|P|` and ``K`` taken as exact)."""
    V = torch.linalg.solve_triangular(R, K.T, upper=False)
    alpha = torch.linalg.solve_triangular(R.T, V, upper=True)  # Theta^{-1} K: the posterior's weights
    Va, weighted = V.abs(), V.new_zeros(V.shape[1])
    for a in range(0, R.shape[0], BOUND_ROWS):  # |alpha|^T |R| |V| by row blocks; R's rows a..b end at column b
        b = min(a + BOUND_ROWS, R.shape[0])
        weighted += (alpha[a:b].abs() * (R[a:b, :b].abs() @ Va[:b])).sum(0)
    gamma = _gamma(R.shape[0])
    prior_scale = prior.abs() if prior_scale is None else prior_scale
    formation = _gamma(FORMATION_OPS) * prior_scale
    if K_scale is not None:
        formation = formation + 2 * _gamma(FORMATION_OPS) * (alpha.abs() * K_scale.T).sum(0)
    VV = (V * V).sum(0)
    d = R.diagonal().abs()
    second = 3 * gamma ** 2 * float(d.max() / d.min()) ** 2 * VV  # the second-order term, with an estimate of kappa(R)
    bound = gamma * (2 * weighted + VV) + second + formation
    return V, bound


def _gamma(m: int) -> float:
    r""":math:`\gamma_m = m\epsilon / (1 - m\epsilon)`, the bound on the relative rounding of a length-``m`` sum or
    a triangular solve of size ``m`` (Higham, *Accuracy and Stability of Numerical Algorithms*, 3.4 and 8.1)."""
    u = torch.finfo(torch.float64).eps / 2
    return m * u / (1 - m * u)


def resolved_variance(R: torch.Tensor, prior: torch.Tensor, K: torch.Tensor, prior_scale: Optional[torch.Tensor] = None,
                      K_scale: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""The posterior variance :math:`v = P - |R^{-1}k|^2` of ``B`` scalar quantities with prior variances ``prior``
    (B,) and cross-covariances ``K`` (B, F) with the training functionals (:math:`RR^\top` their covariance), and an
    a-posteriori bound on its rounding error (B,), both unscaled and unfloored.

    Where the data pin a quantity down, :math:`P` and :math:`|V|^2` agree to many digits, so the value rests on what
    limits the computed :math:`V = R^{-1}k`. The computed :math:`R` is the exact Cholesky factor of a covariance
    within :math:`\gamma_{F+1}|R||R^\top|` of the one formed (backward stability): ``v`` is the exact posterior variance
    of *that* GP, the same nearby GP whose posterior mean the model reports, so the factorisation adds no error to
    account for. The triangular solve is componentwise backward stable as well, :math:`(R + \Delta R)\hat V = k` with
    :math:`|\Delta R| \le \gamma_F |R|` (Higham, Thm 8.5), so to first order
    :math:`|\hat V|^2 - |V|^2 = -2\alpha^\top\Delta R\,\hat V` with :math:`\alpha = R^{-\top}\hat V` (the posterior's
    weights :math:`\Theta^{-1}k`), and

    .. math::  |\hat v - v| \le \gamma_F\,(2\,|\alpha|^\top |R|\,|\hat V| + |\hat V|^2)
               + \gamma_c\,(\bar P + 2\,|\alpha|^\top \bar K),

    plus the second-order term :math:`3\gamma_F^2\hat\kappa^2|\hat V|^2` (:math:`|R^{-1}\Delta R\,V|^2` and
    :math:`2V^\top(R^{-1}\Delta R)^2V`, each at most :math:`\gamma_F^2\kappa(R)^2|V|^2`), with :math:`\hat\kappa` the
    ratio of the largest to the smallest diagonal entry of :math:`R`, a cheap estimate from below of :math:`\kappa(R)`
    (at the mechanical kernel's condition 2.6e11 and :math:`F` = 1,450 at most ~2e-14 :math:`P`, far below the others
    wherever a variance is resolved). The second term is the rounding of the sum of squares, the third that of forming :math:`P` and :math:`k` (and of the
    final subtraction) from parts of absolute sizes :math:`\bar P` = ``prior_scale`` and :math:`\bar K` = ``K_scale``
    (:math:`c` = :data:`FORMATION_OPS`; default :math:`\bar P = |P|` and ``K`` taken as exact, as for a quantity
    whose :math:`k` is no difference: there the entries' relative rounding is of the order of the kernel's own in the
    Gram matrix, not amplified by cancellation). For a difference to a nearby reference,
    :math:`P = P_b + P_r - 2C` and :math:`k = k_b - k_r` cancel in their own right: the caller passes
    :math:`\bar P = |P_b| + |P_r| + 2|C|` and :math:`\bar K = |K_b| + |K_r|`, without which a reference 1e-3 away
    is off by 100x the bound. The bound assumes the triangular solves are substitutions (as on the CPU); a solver
    that inverts diagonal blocks (cuBLAS trsm) is only normwise backward stable. Unlike the worst case
    :math:`\kappa(R)\,\epsilon P`, this bound follows the cancellation actually present: on a 3-dof system with the
    mechanical kernel (1,450 functionals, condition 2.6e11) the variances of energy differences are 2e-11 of their
    prior, 0.2x that worst case, and this bound is 3.8% of them in the median, 7.6% at most (anharmonic3; duffing3 with the
    RBF kernel: 13% and 26%, RESULTS_identification.md); the plain solve agrees with one step of iterative
    refinement with an error-free residual to 3e-5 relative, and an eps-relative perturbation of :math:`R` or
    :math:`k` moves them by 1e-5 (benchmarks/variance_floor.py). Cost: one more triangular solve and one product
    with :math:`|R|` (in row blocks of :data:`BOUND_ROWS`)."""
    V, bound = solve_with_bound(R, K, prior, prior_scale, K_scale)
    return prior - (V * V).sum(0), bound


def factorisation_bound(R: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    r"""How far the posterior variances (C,) of :math:`V = R^{-1}k` (F, C) may move between the GP actually
    factorised and the one formed: :math:`\gamma_{F+1}\,|\alpha|^\top |R|\,|R^\top|\,|\alpha|
    = \gamma_{F+1}\,\big\||R|^\top|\alpha|\big\|^2` with :math:`\alpha = R^{-\top}V`, from the Cholesky
    factorisation's backward error :math:`|\Delta\Theta| \le \gamma_{F+1}|R||R^\top|` (Higham, Thm 10.3) and
    :math:`\delta v = \alpha^\top \Delta\Theta\,\alpha`. A variance alone needs no such term
    (:func:`resolved_variance`: it is exact for the GP factorised), but the difference of two variances from two
    factorisations does, as their nearby GPs differ."""
    alpha = torch.linalg.solve_triangular(R.T, V, upper=True).abs()
    Ra = sum(R[a:a + BOUND_ROWS].abs().T @ alpha[a:a + BOUND_ROWS] for a in range(0, R.shape[0], BOUND_ROWS))
    return _gamma(R.shape[0] + 1) * (Ra * Ra).sum(0)


def realised_share(v: torch.Tensor, bound: torch.Tensor, worst: torch.Tensor, v_other: torch.Tensor,
                   bound_other: torch.Tensor, worst_other: torch.Tensor) -> Tuple[float, int, str]:
    r"""An estimate of the share of :func:`factorisation_bound`'s worst case that factorising apart realises: the
    variances ``v`` (B,) of one posterior and ``v_other`` of the same GP factorised in another order (the functionals
    permuted; equal in exact arithmetic), each with its solve bound (:func:`solve_with_bound`) and its worst case
    ``worst`` (:func:`factorisation_bound`). Returns ``(share, pairs, reason)``: :data:`SHARE_SAFETY` times the
    :data:`SHARE_QUANTILE` quantile of :math:`|v' - v| / (f + f')` over the ``pairs`` that measure it -- both
    variances above twice their solve bounds (resolved), and :math:`f + f' > 2(b + b')` (so the solves' rounding,
    which the solve bounds cover, is at most half the numerator's scale) --, at most 1. Not a bound: one
    re-factorisation is one sample of each pair's rounding. Degenerate cases, named in ``reason``: fewer than
    :data:`SHARE_MIN_PAIRS` measuring pairs keep the worst case (1); a quantile of 0 (90% of the pairs moved by
    exactly 0) or not finite takes the largest finite ratio instead (times the safety factor), or 1 where none is
    positive and finite.

    Why measured: the worst case adds :math:`\gamma_{F+1}|\alpha|^\top|R||R^\top||\alpha|` with every sign aligned;
    the actual backward error of a Cholesky factorisation has entries of both signs, so :math:`\alpha^\top\Delta\Theta
    \alpha` cancels. On two_body_morse4 (element kernel, 2,415 functionals) the worst case was 6.8x the variance in the
    median while a re-factorisation moved it by 1.3e-5 of itself, and the guard dropped all 240 innovations
    (benchmarks/RESULTS_calibration.md, Sessions 15-16). Why those pairs only: a variance within or near its solve
    bound is rounding itself, and where :math:`f` is not above the solve bounds the move is the solves' (which the
    solve bounds cover rigorously), not the factorisation's. Session 15 tried 10x the largest relative move over all
    pairs and it kept nothing on two_body_morse4: that move (0.17 of the variance) was a pair at its solve bound
    (floored). On anharmonic3 (40 trajectories, 60 pairs, 6 permutations of the final GP) the largest move over
    :math:`f` was 270-470x the 90% quantile, set by one pair whose :math:`f` was 1/75 of its solve bound. Why a
    quantile times a safety factor, not the largest: the 90% quantile is stable across samples (0.0036-0.0050 over
    those 6 permutations) where the maximum is the tail, and 10x it covered the largest move of every other
    permutation there by 2x or more."""
    ok = (v > 2 * bound) & (v_other > 2 * bound_other) & (worst + worst_other > 2 * (bound + bound_other))
    pairs = int(ok.sum())
    if pairs < SHARE_MIN_PAIRS:
        return 1.0, pairs, f"fewer than {SHARE_MIN_PAIRS} measuring pairs: the worst case"
    ratio = (v_other - v).abs()[ok] / (worst + worst_other)[ok]
    q = float(torch.quantile(ratio, SHARE_QUANTILE))
    if math.isfinite(q) and q > 0:
        return min(1.0, SHARE_SAFETY * q), pairs, f"{SHARE_SAFETY:g} x the {SHARE_QUANTILE:g} quantile"
    finite = ratio[torch.isfinite(ratio)]
    top = float(finite.max()) if finite.numel() else float("nan")
    if math.isfinite(top) and top > 0:  # the quantile is 0 or not finite: the largest finite move instead
        return min(1.0, SHARE_SAFETY * top), pairs, f"quantile {q:g}: {SHARE_SAFETY:g} x the largest finite ratio"
    # nothing moved (or nothing finite): no evidence of how the rounding falls, since a permutation may leave the
    # arithmetic unchanged; so the worst case, not zero
    return 1.0, pairs, f"quantile {q:g} and no positive finite ratio: the worst case"


def floored(cov: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
    """The diagonal of ``cov`` (B, k, k) raised to its rounding ``bound`` (B, k) where below (:func:`resolved_variance`)."""
    d = torch.diagonal(cov, dim1=1, dim2=2)
    return cov + torch.diag_embed(torch.clamp(bound - d, min=0))
