"""Closed-form feature coefficients of jet functionals (learners/shadow/feature_jets.py) against the autograd
routes they replace, at CI size (n = 2, both kernels).

The old routes linearised the recovered quantity with every feature of the kernel (the mechanical kernel's
binom(n+p, p) binom(n+d, d)) and every training functional's kernel section as basis functions; the new one
linearises with binom(2n+p, p) monomials and applies closed-form tables. Same mathematics, so the pieces agree to
rounding; the posterior variance is prior minus |R^-1 K|^2, which cancels many digits where the data pin the
energy down, so there the two agree to the rounding of the prior (a few eps times it) and elsewhere to 1e-10.
"""

import warnings

import pytest
import torch

import integrators
from integrators.data import snapshots
from learners import InverseModifiedLagrangianGP
from learners.shadow import uncertainty as U

FAST = dict(iterations=6, max_train_functionals=200, progress=False)
EPS = torch.finfo(torch.float64).eps


@pytest.fixture(scope="module", params=["rbf", "mechanical"])
def model(request):
    system = integrators.systems.henon_heiles()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = InverseModifiedLagrangianGP(0.1, kernel=request.param, **FAST).fit(snapshots(system, 0.1, 30, 5, seed=1))
    g = torch.Generator().manual_seed(7)
    q = 0.3 * torch.randn(6, 2, generator=g, dtype=torch.float64)
    v = 0.3 * torch.randn(6, 2, generator=g, dtype=torch.float64)
    q[-1] = 3.0  # one state far outside the data: little cancellation in its variance
    return m, m._standard_state(q, v)


def _old_pieces(m, G):
    """Feature coefficients and cross-covariances by the autograd routes (features and kernel sections as columns)."""
    base, s2 = U._kernel(m.gp)
    feats = U._feature_map(base, G.x.shape[-1], G.p)
    c, K = U._linearise(m.gp.mean, G.quantity, G.x, [U._Features(G.x, feats), U._Sections(m.gp, m.gp.train_functionals)], 1)
    return c, K, s2


@pytest.mark.parametrize("order", [2, 4])
def test_closed_form_pieces_match_autograd(model, order):
    """Feature coefficients c (the prior's s2 c c^T) and cross-covariances K with the training functionals: equal to the
    autograd routes to 1e-13 of their largest entry (sums of a few hundred terms of size <= 1: measured <= 8e-16)."""
    m, x = model
    x = x[:3]  # (the old routes cost seconds per state)
    G = U.LinearisedQuantity(m._quantity("energy", order), x, 1, m._jet_order("energy", order))
    c_old, K_old, s2 = _old_pieces(m, G)
    layout = U._feature_map(U._kernel(m.gp)[0], x.shape[-1], G.p).split()
    prior, K, J, c, _ = U._jet_and_atoms(m.gp, G, x, None, layout, s2)
    assert float((c - c_old).abs().max()) <= 1e-13 * float(c_old.abs().max())
    assert float((K - K_old).abs().max()) <= 1e-13 * float(K_old.abs().max())
    # the reference row's kernel section applied by tables = the old features-in-the-linearisation route
    cross = layout.apply_to_sections(J, x, x.flip(0), c.flip(0)[:, 0])[:, 0]
    feats = U._feature_map(U._kernel(m.gp)[0], x.shape[-1], G.p)
    (old,) = U._linearise(m.gp.mean, G.quantity, x, [_RowFunction(x.flip(0), c_old.flip(0)[:, 0], feats)], 1)
    assert float((cross - old[:, 0, 0]).abs().max()) <= 1e-13 * float(old.abs().max())


class _RowFunction(U._Columns):
    """Row b's explicit function sum_m c_bm Phi_m(x; r_b), evaluated (the replaced route)."""

    def __init__(self, centres, coef, fmap):
        self.centres, self.coef, self.fmap, self.size = centres, coef, fmap, 1

    def __call__(self, xp):
        return (self.fmap(xp, self.centres) * self.coef).sum(-1, keepdim=True)


def test_variance_matches_the_feature_route(model):
    """posterior_variance (no reference) against prior - |R^-1 K|^2 from the autograd pieces (the K route: this checks
    the feature route's numbers, not the rounding bound, which tests/test_learners_variance_rounding.py checks): within
    1e-10 relative plus the rounding bound posterior_variance raises variances to (variance_rounding.resolved_variance,
    computed here for the old pieces; where the data pin the energy down the variance is ~1e-10 of the prior). The
    far state's variance (no cancellation) agrees to 1e-10 relative."""
    from learners.shadow.variance_rounding import resolved_variance

    m, x = model
    G = U.LinearisedQuantity(m._quantity("energy", 4), x, 1, m._jet_order("energy", 4))
    c_old, K_old, s2 = _old_pieces(m, G)
    prior_old = s2 * (c_old[:, 0] ** 2).sum(-1)
    var_old, bound = resolved_variance(m.gp._chol, prior_old, K_old[:, 0])
    var = U.posterior_variance(m.gp, G)[:, 0, 0] / m.gp.variance_scale
    assert bool(((var - torch.maximum(var_old, bound)).abs() <= 1e-10 * var_old.abs() + bound).all())
    assert float((var[-1] / var_old[-1] - 1).abs()) <= 1e-10
    assert float(var_old[-1] / prior_old[-1]) > 1e-3  # the far state is really uncancelled


@pytest.mark.parametrize("order", [2, 4])
def test_quantity_on_the_mean_jet(model, order):
    """H(mod_N of the mean) evaluated on the mean's Taylor polynomial at each state equals the autograd value through
    the training atoms to 1e-8 relative: both round the mean's atom sum, whose terms are ~1e5 times the result here
    (s2 sum |c_a| ~ 1e5 against values ~ 0.1, so ~1e-11 absolute: measured 6e-10 relative at n = 3)."""
    m, x = model
    quantity = m._quantity("energy", order)
    new = U.on_mean_jet(m.gp, quantity, x, m._jet_order("energy", order))[:, 0]
    old = quantity(m._lagrangian_std, x[:, :2], x[:, 2:]).detach()
    assert float(((new - old).abs() / old.abs().clamp_min(1e-3)).max()) <= 1e-8


def test_jet_order_is_n_plus_one(model):
    """The energy of mod_N depends on derivatives of L of order N + 1 (N = 0, 2, 4): the structure the truncation term
    relies on for its next order (p(N') = p(N) + N' - N, learners/shadow/recovery.py)."""
    m, _ = model
    assert [m._jet_order("energy", N) for N in (0, 2, 4)] == [1, 3, 5]


@pytest.mark.parametrize("n", [3, 6])
def test_gaussian_section_in_halves(n):
    """The kernel section's Gaussian factor at n > 2 (the product over inputs formed in two halves): equal to the
    product of its one-dimensional sections (the plain route) to 4 eps relative -- the same n factors multiplied in
    another order -- and, at alpha = e_0, to the closed form d/dz_0 e^{-|z|^2/2} = -z_0 e^{-|z|^2/2}."""
    from learners.shadow.feature_jets import _gaussian_section, monomial_exponents

    g = torch.Generator().manual_seed(3)
    xb, y = torch.randn(4, n, generator=g, dtype=torch.float64), torch.randn(7, n, generator=g, dtype=torch.float64)
    scales = 0.5 + torch.rand(n, generator=g, dtype=torch.float64)
    alphas = monomial_exponents(n, 4)
    out = _gaussian_section(xb, y, scales, alphas)
    plain = torch.ones_like(out)
    for i in range(n):
        plain = plain * _gaussian_section(xb[:, i:i + 1], y[:, i:i + 1], scales[i:i + 1], alphas[:, i:i + 1])
    assert float(((out - plain).abs() / plain.abs().clamp_min(1e-300)).max()) <= 4 * EPS * n
    z = (xb[:, None] - y[None]) / scales
    e0 = [tuple(int(a) for a in r) for r in alphas].index((1,) + (0,) * (n - 1))
    exact = -z[..., 0] * torch.exp(-0.5 * (z * z).sum(-1))
    assert torch.allclose(out[..., e0], exact, rtol=1e-14, atol=0)
