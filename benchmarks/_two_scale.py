r"""Two variance scales for the innovations of the distant-difference calibration: one for the final posterior, one
for the fold posteriors (issue 23, session 11, branch cal: measured by benchmarks/calibration_field.py, NOT adopted
by the library -- the innovations do not show the structure it assumes; benchmarks/RESULTS_identification.md).

:mod:`learners.shadow.difference_calibration` takes the innovations :math:`dz = m - m_k` of energy differences
between data states, under the final posterior (variance :math:`v`) and a fold posterior without some trajectories
(:math:`v_k > v`). With :math:`dz = e_k - e` (the errors of the two means) and :math:`\mathrm{Cov}(e, e_k) =
\mathrm{Var}(e)` (the final mean is the fold mean updated by the fold's data), a GP right up to ONE scale :math:`s` of
its variances gives :math:`\mathrm{Var}(dz) = s\,(v_k - v)`. If the true error falls with more data faster (or more
slowly) than the GP's variance, the final posterior's errors ask for a scale :math:`a` and the fold posteriors' for
another, :math:`b`:

.. math::
    \mathrm{Var}(dz) = \mathrm{Var}(e_k) - \mathrm{Var}(e) = b\,v_k - a\,v,

and the one-scale fit asks for :math:`b + (b - a)\,v/(v_k - v)` -- above both where :math:`a < b` (measured: 5.3x
the scale the held-out differences ask for on duffing3, 1.8x on anharmonic3; benchmarks/RESULTS_identification.md,
Session 10). The reported std is the final posterior's, so its scale is :math:`a`.

*The fit.* With :math:`\rho = a/b`, :math:`z = dz/\sqrt{v_k - \rho v}` has variance :math:`b` for every innovation.
The innovations are split at the median of :math:`r = v/v_k` into two halves; for each :math:`\rho` each half's scale
is the one that puts 90% of its :math:`|z|` below 1.645 (as :func:`~learners.shadow.calibration.scale_for`, here in
closed form: without a truncation term the quantile scales as :math:`1/\sqrt b`), and :math:`\hat\rho` is where the
two halves' scales agree (bisection on :math:`0 \le \rho < \min v_k/v`, the range where every variance is positive);
:math:`b` is then the scale of all innovations at :math:`\hat\rho`, and :math:`a = \hat\rho\, b`. Where one half asks
for more than the other over the whole range, :math:`\rho` sits at that end of the range.

*When it is used* (the fallback rule; a statistical test, no tuned constant): :math:`a` and :math:`b` are told apart
only through the spread of :math:`r` between the halves, and the quantiles of 60 pairs are noisy. So
:math:`\hat\rho` is bootstrapped (:data:`BOOTSTRAP` resamples of the pairs, each pair with all its folds, since one
pair's innovations share the final mean). Where the central :data:`LEVEL` interval of the bootstrap holds
:math:`\rho = 1`, the data do not reject one scale (the simpler, nested model), and the one-scale :math:`s` is
kept. Where it excludes 1, the :math:`\rho` used is the interval's end nearest 1 -- the least departure from one
scale that the data demand at that level, not the point estimate: a point estimate at the range's end
:math:`\rho = 0` (a std of zero) is what a noisy fit gives where :math:`a \ll b`, and the end nearest 1 never
moves the std further from the one-scale one than the data support -- with :math:`b` refitted on all innovations at
that :math:`\rho` and :math:`a = \rho\, b`. Too little spread of :math:`v/v_k` widens the interval until it holds
1: the one scale is kept there by the same rule. :data:`LEVEL` is the conventional 95%, set before any measurement.
Where the point estimate is at an end of the range (the halves' scales do not cross: no :math:`\rho` makes them
agree, and every resample ends there too, so the interval is that end's spread, not a confidence interval), the
two-scale model does not describe the innovations and the one scale is kept as well (measured on duffing3: the
upper half of :math:`v/v_k` asks for less than the lower one even at :math:`\rho = \min v_k/v`, the opposite of
:math:`a < b`; benchmarks/RESULTS_identification.md, Session 11).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Dict, Optional

import torch

from learners.shadow.calibration import TARGET_COVERAGE as _COVERAGE, TARGET_Z as _Z

__all__ = ["TwoScales", "two_scales", "BOOTSTRAP", "LEVEL"]

#: bootstrap resamples of the pairs for the interval of rho (a 2.5% quantile of 400 draws: ~10 draws beyond each end)
BOOTSTRAP = 400
#: central coverage of the bootstrap interval of rho that must exclude 1 and 0 (a conventional 5% test)
LEVEL = 0.95


@dataclass
class TwoScales:
    """The fit of :func:`two_scales`: ``a`` (final posterior) and ``b`` (fold posteriors) at the ``rho`` used (where
    ``used``; else at the point estimate ``estimate``), the bootstrap interval ``(low, high)`` of rho, the one scale
    ``s``, and whether ``a`` is used (``used``) or ``s`` is."""

    a: float
    b: float
    rho: float
    estimate: float
    low: float
    high: float
    s: float
    used: bool

    @property
    def scale(self) -> float:
        return self.a if self.used else self.s

    def as_dict(self) -> Dict[str, object]:
        return asdict(self)


def _scale(dz: torch.Tensor, var: torch.Tensor) -> float:
    """The scale with 90% of |dz| / sqrt(scale var) below 1.645 (closed form: no truncation term)."""
    return (float(torch.quantile(dz.abs() / var.sqrt(), _COVERAGE)) / _Z) ** 2


def _rho(dz: torch.Tensor, vk: torch.Tensor, v: torch.Tensor, high: torch.Tensor) -> float:
    """rho where the halves (``high``: the upper half of v / v_k) ask for the same scale (bisection; module docstring)."""
    top = float((vk / v).min())

    def excess(rho: float) -> float:  # grows with rho: the upper half's variances shrink faster
        w = vk - rho * v
        return math.log(_scale(dz[high], w[high])) - math.log(_scale(dz[~high], w[~high]))

    lo, hi = 0.0, top * (1 - 1e-9)
    if excess(lo) >= 0:
        return lo
    if excess(hi) <= 0:
        return hi
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if excess(mid) < 0 else (lo, mid)
    return 0.5 * (lo + hi)


def two_scales(dz: torch.Tensor, vk: torch.Tensor, v: torch.Tensor, pair: torch.Tensor, seed: int) -> Optional[TwoScales]:
    r"""The fit of the module docstring on finite innovations ``dz`` with fold and final raw variances ``vk``, ``v``
    (1-D, :math:`v_k > v > 0`), ``pair`` the pair each belongs to (for the bootstrap; generator seeded with
    ``seed``); None with fewer than 20 innovations; one scale (``used`` False) where fewer than 10 lie above the median
    of v/v_k or at or below it."""
    if dz.numel() < 20:
        return None
    r = v / vk
    high = r > r.median()
    s = _scale(dz, vk - v)
    if min(int(high.sum()), int((~high).sum())) < 10:  # no spread of v / v_k: a and b cannot be told apart
        return TwoScales(s, s, 1.0, float("nan"), float("nan"), float("nan"), s, False)
    rho = _rho(dz, vk, v, high)
    b = _scale(dz, vk - rho * v)  # at the point estimate
    members = [torch.nonzero(pair == p).flatten() for p in torch.unique(pair)]
    gen = torch.Generator().manual_seed(seed)
    boot = []
    for _ in range(BOOTSTRAP):
        pick = torch.randint(len(members), (len(members),), generator=gen).tolist()
        rows = torch.cat([members[i] for i in pick])
        hb = r[rows] > r[rows].median()
        if int(hb.sum()) < 2 or int((~hb).sum()) < 2:
            continue
        boot.append(_rho(dz[rows], vk[rows], v[rows], hb))
    t = torch.tensor(boot, dtype=torch.float64)
    low, up = (float(torch.quantile(t, q)) for q in ((1 - LEVEL) / 2, (1 + LEVEL) / 2))
    near = up if up < 1 else low  # the interval's end nearest 1 (used where the interval excludes 1)
    inside = 0 < rho < float((vk / v).min()) * (1 - 1e-6)  # a crossing of the halves' scales, not an end
    used = inside and (up < 1 or low > 1) and near > 0
    b_used = _scale(dz, vk - near * v) if used else b
    return TwoScales((near if used else rho) * b_used, b_used, near if used else rho, rho, low, up, s, used)


def _synthetic(a: float, b: float = 1.0, pairs: int = 200, folds: int = 5, seed: int = 0):
    """Gaussian innovations with Var(dz) = b v_k - a v: v ~ U(0.2, 1.2), v/v_k ~ U(0.2, 0.9) (the measured medians
    are 0.16-0.66), ``pairs`` x ``folds``, flattened with the pair index."""
    g = torch.Generator().manual_seed(seed)
    v = torch.rand(pairs, generator=g, dtype=torch.float64) + 0.2
    vk = v[None] / (0.2 + 0.7 * torch.rand(folds, pairs, generator=g, dtype=torch.float64))
    vv = v[None].expand(folds, pairs)
    dz = torch.randn(folds, pairs, generator=g, dtype=torch.float64) * (b * vk - a * vv).sqrt()
    return dz.reshape(-1), vk.reshape(-1), vv.reshape(-1).clone(), torch.arange(pairs).repeat(folds)


if __name__ == "__main__":  # the synthetic check of RESULTS_identification.md, Session 11
    for a_true in (0.2, 1.0):
        print(f"a = {a_true}, b = 1, 200 pairs x 5 folds:", two_scales(*_synthetic(a_true), seed=0))
