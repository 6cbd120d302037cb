"""Uncertainty of recovered energies and velocities (learners.shadow.uncertainty) at CI size.

What is checked: the covariance algebra against the GP's own functional posterior where the quantity is
linear in L (order 0); the linearisation against finite differences of the nonlinear map along random
perturbations; calibration of energy differences on held-out states (pendulum and Henon-Heiles, N = 2
and 4); the std falling with the data and rising outside it.
"""

import math

import pytest
import torch

import bea
import integrators
from integrators.data import snapshots
from learners import InverseModifiedLagrangianGP
from energy_functionals import energy_functionals as _energy_functionals
from learners.shadow.functionals import Functionals
from learners.shadow.guards import IdentifiabilityWarning
from learners.shadow.uncertainty import GaussianFeatures, LinearisedQuantity, Reference, _Features, _linearise, _Sections

FAST = dict(iterations=8, max_train_functionals=400, progress=False)


@pytest.fixture(scope="module")
def pendulum():
    return integrators.systems.pendulum()


@pytest.fixture(scope="module")
def lsi(pendulum):
    return InverseModifiedLagrangianGP(0.5, **FAST).fit(snapshots(pendulum, 0.5, 60, 5, seed=0))


@pytest.fixture(scope="module")
def henon():
    system = integrators.systems.henon_heiles()
    model = InverseModifiedLagrangianGP(0.1, **FAST).fit(snapshots(system, 0.1, 60, 5, seed=1))
    return system, model


def test_linear_case_is_the_functional_posterior(henon):
    """H of L_inv itself (order 0) is linear in L: the features/jacobian route must reproduce the GP's
    functional posterior (atoms, FunctionalKernel) to rounding, with and without a reference state. The energy's
    variances carry their own calibration (learners/shadow/calibration.py): the functional posterior's (the DEL
    calibration) times model._variance_factor("energy_differences") (states given with their velocities)."""
    _, m = henon
    with pytest.warns(IdentifiabilityWarning, match="no more accurate than H_rec"):  # small data: the GP's error dominates
        m.calibration  # the energy calibration runs on first demand
    g = torch.Generator().manual_seed(1)
    q, v = 0.2 * torch.randn(7, 2, generator=g, dtype=torch.float64), 0.2 * torch.randn(7, 2, generator=g, dtype=torch.float64)
    qr, vr = torch.tensor([0.05, -0.1], dtype=torch.float64), torch.tensor([0.1, 0.2], dtype=torch.float64)
    x, xr = m._standard_state(q, v), m._standard_state(qr[None], vr[None])
    _, C = m.gp.functional_posterior(Functionals.cat([_energy_functionals(x, 2), _energy_functionals(xr, 2)]), full_cov=True)
    u4 = m._speed ** 4 * m._variance_factor("energy_differences")
    # the two routes (closed-form tables against kernel blocks) round differently, and differently with the thread
    # count: allow 1e-6 relative plus 1/10 of posterior_variance's rounding floor, kappa(R) eps times the prior
    # (measured with two threads: 1.4e-6 relative, 3e-5 of the floor; differences below: up to 0.024 of it)
    F = Functionals.cat([_energy_functionals(x, 2), _energy_functionals(xr, 2)])
    K0 = m.gp.variance_scale * m.gp.kernel.forward(F, F).detach()
    unit_floor = math.sqrt(m.gp.info.cond_estimate) * torch.finfo(torch.float64).eps * u4
    _, std = m.energy(0, return_std=True, truncation=False)(q, v)
    var = C.diagonal()[:7]
    assert bool(((std ** 2 - u4 * var).abs() <= 1e-6 * u4 * var + 0.1 * unit_floor * K0.diagonal()[:7]).all())
    _, std_d = m.energy(0, return_std=True, reference=(qr, vr), truncation=False)(q, v)
    var_d = C.diagonal()[:7] + C[7, 7] - 2 * C[:7, 7]
    prior_d = K0.diagonal()[:7] + K0[7, 7] - 2 * K0[:7, 7]
    assert bool(((std_d ** 2 - u4 * var_d).abs() <= 1e-6 * u4 * var_d + 0.1 * unit_floor * prior_d).all())


def test_gaussian_features_expand_the_kernel():
    """exp(-|s - t|^2/2) = sum_gamma phi_gamma(s) phi_gamma(t): truncated at order 12 for |s|, |t| <= 0.3 the
    remainder is below (0.09)^13/13! ~ 1e-24."""
    feats = GaussianFeatures(3, 12)
    assert len(feats) == math.comb(3 + 12, 12)
    g = torch.Generator().manual_seed(0)
    s, t = 0.3 * torch.rand(5, 3, generator=g, dtype=torch.float64), 0.3 * torch.rand(5, 3, generator=g, dtype=torch.float64)
    exact = torch.exp(-0.5 * ((s - t) ** 2).sum(-1))
    assert torch.allclose((feats(s) * feats(t)).sum(-1), exact, rtol=1e-14, atol=0)


def test_linearisation_matches_finite_differences(lsi):
    """At 50 states, the linear functional of H(mod_2 L) (the jacobian route) applied to 200 random
    perturbations dL per state (random combinations of the Gaussian features at the state, which span every
    jet of order <= p there, of relative size ~1e-4, about the posterior's) agrees with central differences of the nonlinear map,
    (Q[L + dL] - Q[L - dL]) / 2 (error O(dL^3) and rounding 1e-16/1e-4): pointwise to relative 1e-6 of the
    spread, and the spread over the 200 samples to 1e-6 (the issue asks for 20%)."""
    m = lsi
    g = torch.Generator().manual_seed(2)
    B, S = 50, 200
    q = 2 * torch.rand(B, 1, generator=g, dtype=torch.float64) - 1
    v = torch.rand(B, 1, generator=g, dtype=torch.float64) - 0.5
    x = m._standard_state(q, v)
    quantity, p = m._quantity("energy", 2), m._jet_order("energy", 2)
    ls = m.gp.kernel.base_kernel.lengthscale.detach().reshape(-1)
    feats = GaussianFeatures(2, p)
    cols = [_Features(x, ls, feats)]
    jac = _linearise(m.gp.mean, quantity, x, cols, 1)
    a = [1e-4 * torch.randn(B, S, c.size, generator=g, dtype=torch.float64) / math.sqrt(c.size) for c in cols]
    linear = sum(torch.einsum("bc,bsc->bs", J[:, 0, :], w) for J, w in zip(jac, a))  # (B, S)
    xs = x[:, None, :].expand(B, S, 2).reshape(B * S, 2)
    big = [_Features(xs, ls, feats)]
    flat = [w.reshape(B * S, -1) for w in a]

    def perturbed(sign):
        def L(qq, vv):
            xp = torch.cat([qq, vv], -1)
            return m.gp.mean(xp) + sign * sum((c(xp) * w).sum(-1) for c, w in zip(big, flat))
        return quantity(L, xs[:, :1], xs[:, 1:]).detach().reshape(B, S)

    fd = (perturbed(1.0) - perturbed(-1.0)) / 2
    spread = linear.std(1)
    assert bool((spread > 0).all())
    assert float(((fd - linear).abs() / spread[:, None]).max()) < 1e-6
    assert float((fd.std(1) / spread - 1).abs().max()) < 1e-6


def _pendulum_level_partners(system, q, v):
    """For each state, the state on the q axis (v = 0, same sign of q) with the same true energy."""
    E = system.energy(q, v)
    return torch.sign(q) * torch.arccos(-E)[:, None], torch.zeros_like(v)


@pytest.mark.parametrize("order", [2, 4])
def test_calibration_pendulum(lsi, pendulum, order):
    """50 held-out states in [-1, 1] x [-0.5, 0.5] (inside the data's box). In one dimension the data
    determine the energy only up to a monotone function G(H) (alternative Lagrangians: a cubic G fitted
    to the error of H_rec[2] against the true energy leaves 2e-5 of a 3e-3 error), so each state is
    compared with its partner of the same true energy on the q axis: the true difference is zero in every
    normalisation. Measured within 2 sigma: 100% (N = 2 and 4); the truncation term dominates at h = 0.5
    (z ~ 1), the GP part alone covers 2% (N = 2) and 60% (N = 4)."""
    g = torch.Generator().manual_seed(3)
    q = 2 * torch.rand(50, 1, generator=g, dtype=torch.float64) - 1
    v = torch.rand(50, 1, generator=g, dtype=torch.float64) - 0.5
    qs, vs = _pendulum_level_partners(pendulum, q, v)
    H = lsi.energy(order)
    diff = (H(q, v) - H(qs, vs)).detach()
    std = _difference_std(lsi, order, q, v, qs, vs)
    assert float((diff.abs() <= 2 * std).double().mean()) >= 0.9
    assert bool(torch.isfinite(std).all()) and bool((std > 0).all())


def _difference_std(m, order, q, v, qr, vr):
    """Std of H(q, v) - H(qr, vr) per row (a reference per row), GP part plus the truncation term."""
    from learners.shadow.recovery import next_order
    from learners.shadow.uncertainty import posterior_variance

    x, xr = m._standard_state(q, v), m._standard_state(qr, vr)
    G = LinearisedQuantity(m._quantity("energy", order), x, 1, m._jet_order("energy", order))
    var = m._speed ** 4 * posterior_variance(m.gp, G, Reference(xr))[:, 0, 0]
    H, Hn = m.energy(order), m.energy(next_order(order, m.scheme))
    trunc = (H(q, v) - H(qr, vr) - Hn(q, v) + Hn(qr, vr)).detach()
    return (var + trunc ** 2).sqrt()


def _normalisation_scale(m, system, h):
    """The true energy in the normalisation's units: the normalisation fixes tr d2L_inv/dv2 = n at its point
    x0, so the learned energy is s H_true with s = n / tr d2L_inv,true/dv2(x0) (the exact inverse modified
    Lagrangian, series to order 4: the h^6 term changes s by ~1e-6 at h = 0.1, against errors of 1e-4 relative)."""
    x0 = m.gp.train_functionals.atoms[2].points[-1]
    n = m.n
    q0, v0 = m._center + m._unit * x0[:n], m._speed * x0[n:]
    finv = bea.series_function("inverse_modified_lagrangian", "midpoint", 4, n)
    vv = v0[None].clone().requires_grad_(True)
    (gv,) = torch.autograd.grad(finv(system, q0[None], vv, h).sum(), vv, create_graph=True)
    tr = sum(torch.autograd.grad(gv[0, i], vv, retain_graph=True)[0][0, i] for i in range(n))
    return n / float(tr)


@pytest.mark.parametrize("order", [2, 4])
def test_calibration_henon_heiles(henon, order):
    """Henon-Heiles is not integrable: the energy is determined up to scale and constant. 50 held-out
    initial states of the data's box, differences to one reference state, against the true differences
    in the normalisation's units. Measured within 2 sigma: 100% (60 trajectories), 93% (120), 95% (200).
    At h = 0.1 the truncation term is negligible (4e-8 against errors of 1e-5) and costly at n = 2 (the
    next order's energies), so it is left out here."""
    system, m = henon
    _, (q0, v0) = snapshots(system, 0.1, 51, 1, seed=77, return_initial=True)
    q, v, qr, vr = q0[1:], v0[1:], q0[0], v0[0]
    mean, std = m.energy(order, return_std=True, reference=(qr, vr), truncation=False)(q, v)
    s = _normalisation_scale(m, system, 0.1)
    true = s * (system.energy(q, v) - system.energy(qr[None], vr[None]))
    assert float(((mean - true).abs() <= 2 * std).double().mean()) >= 0.9


def test_std_falls_with_data_and_rises_outside():
    """Henon-Heiles, fixed hyperparameters, so only the data change (GP part only): the mean std of energy
    differences to one reference at 30 held-out states falls at least 3x from 25 to 200 trajectories
    (measured 3.5e-4 -> 3.8e-6), and with velocities shifted 0.6 beyond the data's box it is at least 100x
    larger (measured 0.34). (On the pendulum the identifiable part of the energy, differences along level
    sets, is pinned below float64's rounding floor of this GP at both sizes, so it cannot show the fall.)"""
    system = integrators.systems.henon_heiles()
    _, (q0, v0) = snapshots(system, 0.1, 31, 1, seed=77, return_initial=True)
    q, v, ref = q0[1:], v0[1:], (q0[0], v0[0])
    means = []
    for T in (25, 200):
        m = InverseModifiedLagrangianGP(0.1, lengthscale=[0.6, 0.6, 0.6, 0.4], noise=1e-12).fit(snapshots(system, 0.1, T, 5, seed=0))
        _, std = m.energy(2, return_std=True, reference=ref, truncation=False)(q, v)
        means.append(float(std.mean()))
    assert means[0] >= 3 * means[1], means
    _, far = m.energy(2, return_std=True, reference=ref, truncation=False)(q, v + 0.6)
    assert float(far.mean()) >= 100 * means[1]


def test_velocities_and_energies_along_positions(lsi, pendulum):
    """Velocities and energies with std along a held-out trajectory: shapes, NaN off the std rows, and the
    true velocities within 2 sigma at >= 90% of the rows."""
    from integrators import reference_flow

    q0, v0 = torch.tensor([[0.4]], dtype=torch.float64), torch.tensor([[0.1]], dtype=torch.float64)
    flow = reference_flow(pendulum, q0, v0, 0.5 * torch.arange(41, dtype=torch.float64))
    q_ref, v_ref = flow.q, flow.v
    v, sv = lsi.velocities(q_ref, 2, return_std=True, std_every=2)
    assert v.shape == sv.shape == (41, 1, 1)
    assert bool(torch.isnan(sv[1::2]).all()) and bool(torch.isfinite(sv[::2]).all())
    assert float(((v - v_ref).abs()[::2] <= 2 * sv[::2]).double().mean()) >= 0.9
    E, sE = lsi.energies(q_ref, 2, return_std=True, std_every=4, reference_index=0)
    # at the reference row the difference is exactly zero and its std is only the rounding floor of the
    # posterior (sqrt(cond) * eps * prior): 1.7e-8 against a mean of 1.5e-5 in one CI run, so 1e-2, not 1e-3
    assert E.shape == sE.shape == (41, 1) and float(sE[0]) < 1e-2 * float(sE[4:].nanmean())
    with pytest.raises(ValueError, match="std_every"):
        lsi.velocities(q_ref, 2, return_std=True, std_every=0)
    with pytest.raises(ValueError, match="reference"):
        lsi.energies(q_ref, 2, reference_index=99)
    with pytest.raises(TypeError, match="reference"):
        lsi.energy(2, reference=torch.zeros(3))


def test_energies_reference_is_a_state_as_in_energy(lsi, pendulum):
    """reference= means one thing in energy() and energies() (issue 29): a state. Along positions, the energies
    minus H_rec at that state equal the energies minus energy(order)(q_ref, v_ref) to rounding; a time index is
    reference_index=, and the old reference=<int> still works for one release with a warning."""
    from integrators import reference_flow

    flow = reference_flow(pendulum, torch.tensor([[0.4]], dtype=torch.float64), torch.tensor([[0.1]], dtype=torch.float64),
                          0.5 * torch.arange(9, dtype=torch.float64))
    state = (torch.tensor([0.2], dtype=torch.float64), torch.tensor([0.3], dtype=torch.float64))
    E = lsi.energies(flow.q, 2)
    H_ref = lsi.energy(2)(state[0][None], state[1][None]).detach()
    assert float((lsi.energies(flow.q, 2, reference=state) - (E - H_ref)).abs().max()) <= 1e-12
    by_index = lsi.energies(flow.q, 2, reference_index=3)
    assert float((by_index - (E - E[3])).abs().max()) <= 1e-12 and float(by_index[3].abs().max()) == 0.0
    with pytest.warns(DeprecationWarning, match=r"energies\(reference=<time index>\) is deprecated.*reference_index=3"):
        old = lsi.energies(flow.q, 2, reference=3)
    assert torch.equal(old, by_index)
    with pytest.raises(ValueError, match="return_std"):
        lsi.energies(flow.q, 2, return_std=True, reference=state)
    with pytest.raises(ValueError, match="not both"):
        lsi.energies(flow.q, 2, reference=state, reference_index=0)
