"""The a-posteriori rounding bound of posterior variances (learners/shadow/variance_rounding.py), against variances
computed in 60-digit arithmetic from the same Cholesky factor (the exact posterior of the GP with covariance R R^T,
which is what the model reports)."""

import mpmath
import pytest
import torch

from learners.shadow.variance_rounding import floored, resolved_variance

EPS = torch.finfo(torch.float64).eps


def _gp(lengthscale: float, noise: float):
    """A 1-D RBF GP on 40 points of [0, 1] and point values at 40 states between them (prior variance 1): the data
    pin every value down to ~1e-13 of the prior, and the Gram matrix is ill-conditioned (condition ~1e12)."""
    X = torch.linspace(0, 1, 40, dtype=torch.float64)
    xs = torch.linspace(0.0125, 0.9875, 40, dtype=torch.float64)

    def k(a, b):
        return torch.exp(-(a[:, None] - b[None, :]) ** 2 / (2 * lengthscale ** 2))

    R = torch.linalg.cholesky(k(X, X) + noise * torch.eye(40, dtype=torch.float64))
    return R, torch.ones(40, dtype=torch.float64), k(xs, X)


def _exact(R: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
    """1 - |R^-1 k|^2 by forward substitution in 60 digits, per row of K (float64 entries taken as exact)."""
    with mpmath.workdps(60):
        Rm = [[mpmath.mpf(float(R[i, j])) for j in range(i + 1)] for i in range(R.shape[0])]
        out = []
        for row in K.tolist():
            V = []
            for i, Ri in enumerate(Rm):
                V.append((mpmath.mpf(row[i]) - mpmath.fsum(Ri[j] * V[j] for j in range(i))) / Ri[i])
            out.append(float(1 - mpmath.fsum(x * x for x in V)))
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("lengthscale, noise, resolved", [(0.4, 1e-12, True), (0.3, 1e-14, False)])
def test_bound_covers_the_rounding(lengthscale, noise, resolved):
    """The float64 variance is within its bound of the 60-digit one (measured: <= 0.018 of the bound in both cases).
    Resolved case: every variance is 100x below the old worst-case floor kappa(R) eps P (so the old computation
    reported the floor), yet the bound is <= 0.1 of it (measured 0.09; relative error 1e-3). Unresolved case (a
    nugget of 1e-14): some variances are below their bound, which the floor then reports (never below the truth by
    more than the bound)."""
    R, P, K = _gp(lengthscale, noise)
    v, bound = resolved_variance(R, P, K)
    exact = _exact(R, K)
    assert bool(((v - exact).abs() <= bound).all()), float(((v - exact).abs() / bound).max())
    old_floor = float(R.diagonal().max() / R.diagonal().min()) * EPS * P
    if resolved:
        assert bool((exact * 10 < old_floor).all())
        assert bool((bound <= 0.1 * exact).all()), float((bound / exact).max())
    else:
        assert bool((bound > v).any())
        reported = floored(v[:, None, None], bound[:, None])[:, 0, 0]
        assert bool((reported >= exact - bound).all()) and bool((reported >= bound).all())


def test_floored_raises_only_the_diagonal_below_its_bound():
    cov = torch.tensor([[[1e-3, 2e-4], [2e-4, -1e-20]]], dtype=torch.float64)
    out = floored(cov, torch.tensor([[1e-10, 1e-12]], dtype=torch.float64))
    assert torch.equal(out, torch.tensor([[[1e-3, 2e-4], [2e-4, 1e-12]]], dtype=torch.float64))
