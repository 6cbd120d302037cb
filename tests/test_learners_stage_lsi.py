"""LSI with a stage scheme (learners/shadow/stage_lsi.py): Galerkin s = 2 on the pendulum at CI size.

The full comparison with the midpoint rule is ``benchmarks/lsi_stages.py`` (README, "Higher-order schemes").
"""

import pytest
import torch

import bea
import integrators
from bea.errors import UnsupportedSchemeError
from integrators import modified
from integrators.data import snapshots
from learners import InverseModifiedLagrangianGP
from learners.metrics import grid_states, level_set_error

H = 0.5
FAST = dict(iterations=8, max_train_functionals=400, progress=False)


@pytest.fixture(scope="module")
def pendulum():
    return integrators.systems.pendulum()


@pytest.fixture(scope="module")
def data(pendulum):
    return snapshots(pendulum, H, 30, 5, seed=0)


@pytest.fixture(scope="module")
def galerkin(data):
    return InverseModifiedLagrangianGP(H, "galerkin2", **FAST).fit(data)


def test_fixed_point_converges(galerkin):
    """Gauss-Newton on the DEL conditions from the midpoint fit: the largest DEL residual of Galerkin on the posterior
    mean over the data (standardised units) falls from the midpoint start's O(h^2) mismatch to a floor set by the
    solve's rounding (condition ~2e11). Measured on these 30 trajectories: 1.4e-2, 5.9e-5, 7.4e-6, 6.0e-6, 6.0e-6
    (4 iterations; 60 trajectories: 2.8e-2 to 2.9e-7 in 8). Bound: a factor 2e-3 (4.6x the measured 4.3e-4). It stops
    by itself before MAX_ITERATIONS (else an IdentifiabilityWarning, an error in the suite)."""
    its = galerkin.history["stage_iterations"]
    assert its[0]["max_del"] > 1e-3
    assert its[-1]["max_del"] < 2e-3 * its[0]["max_del"]
    assert 3 <= len(its) <= 13
    assert its[-1]["interior_change"] < 1e-4  # the interior points settled (measured 5e-6 data spreads)


def test_level_sets_beat_the_midpoint_rule(galerkin, data, pendulum):
    """Galerkin's L_inv differs from L by O(h^4), the midpoint rule's by O(h^2): the uncorrected energy H_rec[0] of
    Galerkin is as good as the midpoint rule's corrected ones. Measured (60 trajectories, 15 x 15 grid): midpoint
    H_rec[0] 1.2e-2, H_rec[2] 2.2e-3; Galerkin H_rec[0] 2.0e-3 (the GP's own error at this size). Bounds: a factor 3
    below the midpoint rule's H_rec[0], and within a factor 2 of its H_rec[2]."""
    mid = InverseModifiedLagrangianGP(H, **FAST).fit(data)
    states = grid_states(points=15)
    g0 = level_set_error(galerkin.energy(0), pendulum.energy, states=states)
    m0 = level_set_error(mid.energy(0), pendulum.energy, states=states)
    m2 = level_set_error(mid.energy(2), pendulum.energy, states=states)
    assert g0 < m0 / 3
    assert g0 < 2 * m2
    # mod_2 of Galerkin is the identity (its first correction is at h^4): the same level sets, to the rounding of the
    # closed-form jet (order 2) against autograd (order 0) (measured: 3e-8 relative)
    g2 = level_set_error(galerkin.energy(2), pendulum.energy, states=states)
    assert g2 == pytest.approx(g0, rel=1e-5)


def test_del_residual_std_at_data_and_prediction(galerkin, data):
    """The posterior of the linearised DEL functionals at the data: mean at the nugget floor, std finite and small."""
    mean, std = galerkin.del_residuals(data[:3])
    assert mean.shape == std.shape == (3 * 4, 1)
    assert float(mean.abs().max()) < 1e-4 and bool(torch.isfinite(std).all())
    q = galerkin.predict(torch.tensor([[0.3]]), torch.zeros(1, 1), 5, on_extrapolation="ignore")
    assert q.q.shape == (6, 1, 1) and bool(torch.isfinite(q.q).all())


def test_refusals():
    with pytest.raises(UnsupportedSchemeError):
        InverseModifiedLagrangianGP(H, "galerkin2", objective="positions", **FAST).fit(
            snapshots(integrators.systems.pendulum(), H, 10, 4, seed=1))


def test_galerkin3_recovered_lagrangian_has_no_correction_below_h6():
    """galerkin3 (order 6, constants in Q(sqrt 5), exact series since bea.radicals): its recovered Lagrangian to
    order 4 is L itself, the first correction being at h^6 -- exactly, not to rounding (the h^2 and h^4 coefficients
    are exact zeros in the field)."""
    L = lambda q, v: 0.5 * (v * v).sum(-1) + torch.cos(q).sum(-1)  # noqa: E731
    L.n = 1
    q = torch.tensor([[0.3], [1.1]], dtype=torch.float64)
    v = torch.tensor([[0.7], [-0.4]], dtype=torch.float64)
    R = modified.recovered_lagrangian(L, 4, H, bea.get_scheme("galerkin3"))
    assert torch.equal(R(q, v), L(q, v))


def test_linearised_del_functionals_match_the_del_residual_to_second_order():
    """The core of the method, without a GP: for a Lagrangian L0 the linearised functional l_b (interior points of L0,
    moving with b along its implicit-function derivative) applied to L0 is the DEL residual of the stage scheme on L0
    (to rounding), and applied to L0 + e dL it differs from the true DEL residual of L0 + e dL by O(e^2): the ratio of
    the differences at e and e/2 is 4 (measured 3.99: 3.7e-7 and 9.3e-8; bound 4 +- 0.2)."""
    from bea.stage_torch import stationary_value
    from learners.shadow.functionals import del_residual_functionals
    from learners.shadow.stage_lsi import LinearisedStages

    scheme = bea.get_scheme("galerkin2")
    h = 0.4
    L0 = lambda q, v: 0.5 * (v * v).sum(-1) + torch.cos(q).sum(-1)  # noqa: E731
    dL = lambda q, v: (q * q * v * v).sum(-1) + torch.sin(q).sum(-1) * v.sum(-1)  # noqa: E731
    x = torch.tensor([[0.1, 0.3], [0.2, -0.1], [0.5, 0.4]], dtype=torch.float64)
    triples = torch.stack([x[0], x[1], x[2]])[None].expand(2, 3, 2).clone()
    triples[1] = triples[1].flip(0)

    def del_true(L):
        a, b, c = triples[:, 0], triples[:, 1].clone().requires_grad_(True), triples[:, 2]
        val = stationary_value(L, a, b, h, scheme) + stationary_value(L, b, c, h, scheme)
        return torch.autograd.grad(val.sum(), b)[0].reshape(-1)

    F = del_residual_functionals(triples, h, LinearisedStages(scheme, L0))
    as_x = lambda L: (lambda z: L(z[..., :2], z[..., 2:]))  # noqa: E731
    assert torch.allclose(F.apply(as_x(L0)).detach(), del_true(L0), rtol=0, atol=1e-10)
    gaps = []
    for e in (1e-2, 5e-3):
        Le = lambda q, v, e=e: L0(q, v) + e * dL(q, v)  # noqa: E731
        gaps.append(float((F.apply(as_x(Le)) - del_true(Le)).detach().abs().max()))
    assert gaps[0] / gaps[1] == pytest.approx(4.0, abs=0.2), gaps
