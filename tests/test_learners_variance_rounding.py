"""The a-posteriori rounding bound of posterior variances (learners/shadow/variance_rounding.py), against variances
computed in 60-digit arithmetic from the same Cholesky factor (the exact posterior of the GP with covariance R R^T,
which is what the model reports)."""

import pytest
import torch

from learners.shadow.variance_rounding import floored, resolved_variance

mpmath = pytest.importorskip("mpmath")

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


def _exact_difference(R: torch.Tensor, X: torch.Tensor, xs: torch.Tensor, xr: torch.Tensor, lengthscale: float):
    """Var(f(xs) - f(xr)) in 60 digits, the kernel entries evaluated there too (points and R taken as exact)."""
    with mpmath.workdps(60):
        ell2 = 2 * mpmath.mpf(lengthscale) ** 2

        def k(a, b):
            return mpmath.exp(-(mpmath.mpf(a) - mpmath.mpf(b)) ** 2 / ell2)

        Rm = [[mpmath.mpf(float(R[i, j])) for j in range(i + 1)] for i in range(R.shape[0])]
        out = []
        for a, b in zip(xs.tolist(), xr.tolist()):
            row = [k(a, x) - k(b, x) for x in X.tolist()]
            V = []
            for i, Ri in enumerate(Rm):
                V.append((row[i] - mpmath.fsum(Ri[j] * V[j] for j in range(i))) / Ri[i])
            out.append(float(2 - 2 * k(a, b) - mpmath.fsum(x * x for x in V)))
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("d", [5e-3, 1e-3])
def test_bound_covers_the_formation_of_a_difference_to_a_nearby_reference(d):
    """Var(f(x) - f(x + d)), formed as the reference path of learners/shadow/uncertainty.py does (P = P_b + P_r -
    2 cross, k = k_b - k_r): both cancel, so their rounding is relative to the parts. Without the formation scales
    the float64 value was off by 4.4x (d = 5e-3) and 146x (d = 1e-3) the bound; with them it is within it."""
    lengthscale = 0.4
    X = torch.linspace(0, 1, 40, dtype=torch.float64)
    xs = torch.linspace(0.0125, 0.9875, 40, dtype=torch.float64)
    xr = xs + d

    def k(a, b):
        return torch.exp(-(a[:, None] - b[None, :]) ** 2 / (2 * lengthscale ** 2))

    R = torch.linalg.cholesky(k(X, X) + 1e-12 * torch.eye(40, dtype=torch.float64))
    K_b, K_r = k(xs, X), k(xr, X)
    cross = torch.exp(-(xs - xr) ** 2 / (2 * lengthscale ** 2))
    one = torch.ones(40, dtype=torch.float64)
    v, bound = resolved_variance(R, 2 - 2 * cross, K_b - K_r, 2 + 2 * cross, K_b.abs() + K_r.abs())
    exact = _exact_difference(R, X, xs, xr, lengthscale)
    assert bool(((v - exact).abs() <= bound).all()), float(((v - exact).abs() / bound).max())
    # without the scales (the default) the bound does not cover it: the test can tell the two apart
    v0, bound0 = resolved_variance(R, one + one - 2 * cross, K_b - K_r)
    assert bool(((v0 - exact).abs() > bound0).any())


def test_the_weights_term_is_needed_and_tight():
    """Perturb R by the worst case of Higham Thm 8.5 for one quantity, dR = gamma_F sign(alpha V^T) o |R| (lower
    triangle): to first order the variance moves by 2 gamma_F |alpha|^T |R| |V|, the bound's main term. At points
    beyond the data (1.1, 1.3) the weights alpha = Theta^-1 k are large (57, 2.7e3) while |V| <= 1, so the move
    (60 digits, both sides; measured 0.997x and 0.999x the bound) must be within it and at least 0.3x it, which fails
    with alpha replaced by V in the bound (the move is then 200x and 6800x that bound) or its term dropped."""
    from learners.shadow.variance_rounding import _gamma

    R, _, _ = _gp(0.4, 1e-12)
    X = torch.linspace(0, 1, 40, dtype=torch.float64)
    K = torch.exp(-(torch.tensor([1.1, 1.3], dtype=torch.float64)[:, None] - X[None, :]) ** 2 / (2 * 0.4 ** 2))
    _, bound = resolved_variance(R, torch.ones(2, dtype=torch.float64), K)
    V = torch.linalg.solve_triangular(R, K.T, upper=False)
    alpha = torch.linalg.solve_triangular(R.T, V, upper=True)
    for c in range(2):
        dR = torch.tril(_gamma(40) * torch.sign(alpha[:, c:c + 1] * V[:, c][None, :]) * R.abs())
        move = (_exact(R + dR, K[c:c + 1]) - _exact(R, K[c:c + 1])).abs()[0]
        assert 0.3 * bound[c] <= move <= bound[c], float(move / bound[c])
        with_V = _gamma(40) * (2 * (V[:, c].abs() * (R.abs() @ V[:, c].abs())).sum() + (V[:, c] ** 2).sum())
        assert move > 3 * with_V, float(move / with_V)


def test_factorisation_term_covers_variances_of_two_factorisations():
    """Two posteriors factorised apart (the innovations guard, learners/shadow/difference_calibration.py): each
    variance is exact for its own nearby GP, so their difference carries both factorisations' backward errors.
    Perturb Theta by the worst case of the Cholesky bound, gamma_{F+1} sign(alpha alpha^T) o |R||R^T|: the 60-digit
    variances move by 0.94-0.95x factorisation_bound, which the solve bounds alone miss by 100x and 9,500x; with it
    the sum of both bounds covers the move (measured 0.49 of it)."""
    from learners.shadow.variance_rounding import _gamma, factorisation_bound, solve_with_bound

    X = torch.linspace(0, 1, 40, dtype=torch.float64)

    def k(a, b):
        return torch.exp(-(a[:, None] - b[None, :]) ** 2 / (2 * 0.4 ** 2))

    T = k(X, X) + 1e-12 * torch.eye(40, dtype=torch.float64)
    K, P = k(torch.tensor([1.1, 1.3], dtype=torch.float64), X), torch.ones(2, dtype=torch.float64)
    R1 = torch.linalg.cholesky(T)
    V1, b1 = solve_with_bound(R1, K, P)
    f1 = factorisation_bound(R1, V1)
    alpha = torch.linalg.solve_triangular(R1.T, V1, upper=True)
    for c in range(2):
        a = alpha[:, c]
        R2 = torch.linalg.cholesky(T + _gamma(41) * torch.sign(a[:, None] * a[None, :]) * (R1.abs() @ R1.abs().T))
        V2, b2 = solve_with_bound(R2, K[c:c + 1], P[c:c + 1])
        move = (_exact(R1, K[c:c + 1]) - _exact(R2, K[c:c + 1])).abs()[0]
        assert move > 10 * (b1[c] + b2[0]), float(move / (b1[c] + b2[0]))
        assert 0.5 * f1[c] <= move <= b1[c] + b2[0] + f1[c] + factorisation_bound(R2, V2)[0]


def test_bound_by_row_blocks_matches_one_block(monkeypatch):
    """|alpha|^T |R| |V| accumulated over row blocks of R (its triangle only) is the same sum as in one block: equal
    to the summation rounding (1e-15 relative), with blocks that do not divide F."""
    import learners.shadow.variance_rounding as VR

    R, P, K = _gp(0.4, 1e-12)
    v1, b1 = resolved_variance(R, P, K)
    monkeypatch.setattr(VR, "BOUND_ROWS", 7)
    v2, b2 = resolved_variance(R, P, K)
    assert torch.equal(v1, v2)
    assert float(((b1 - b2) / b1).abs().max()) <= 1e-15


def test_realised_share_degenerate_cases_are_explicit():
    """realised_share: 10x the 90% quantile of |v' - v| / (f + f') over the measuring pairs (v > 2b, v' > 2b',
    f + f' > 2(b + b')); with fewer than 10 such pairs the worst case (1); a quantile of 0 (>= 90% of the pairs
    moved by exactly 0) or NaN takes 10x the largest finite ratio, or 1 where none is positive; each with its count
    and reason. Ratios here are exact in binary (powers of 2), so the equalities are exact."""
    from learners.shadow.variance_rounding import realised_share

    B = 20
    v, b, f = torch.ones(B, dtype=torch.float64), torch.full((B,), 2.0 ** -20), torch.full((B,), 0.5)
    moves = torch.zeros(B, dtype=torch.float64)
    moves[:19] = 2.0 ** -10  # ratio 2^-10 (f + f' = 1) at 19 pairs: the 90% quantile
    moves[19] = 2.0 ** -4
    share, pairs, reason = realised_share(v, b, f, v + moves, b, f)
    assert (share, pairs) == (10 * 2.0 ** -10, B) and "quantile" in reason
    # the factorisation term not above twice the solve bounds: no measuring pair, the worst case
    assert realised_share(v, b, torch.full((B,), 2.0 ** -20), v + moves, b, torch.full((B,), 2.0 ** -20))[:2] == (1.0, 0)
    moves[:19] = 0.0  # 90% of the pairs move by exactly 0: the largest finite ratio (2^-4), not 0
    share, pairs, reason = realised_share(v, b, f, v + moves, b, f)
    assert share == 10 * 2.0 ** -4 and "largest" in reason, (share, reason)
    assert realised_share(v, b, f, v.clone(), b, f)[0] == 1.0  # nothing moved: no positive ratio, the worst case
    inf_f, inf_v = f.clone(), v + moves
    inf_f[:3], inf_v[:3] = float("inf"), float("inf")  # inf / inf: NaN ratios make the quantile NaN
    share, pairs, reason = realised_share(v, b, inf_f, inf_v, b, inf_f)
    assert share == 10 * 2.0 ** -4 and "nan" in reason, (share, pairs, reason)
