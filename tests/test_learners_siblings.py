"""Siblings agree (issue 29): LagrangianGP is called as InverseModifiedLagrangianGP is -- the same ``order``
default, ``energy(..., return_std=True, reference=state)``, ``energies`` with ``reference`` (a state) and
``reference_index`` (a time index), ``predict(..., on_extrapolation=)``.

The numbers: LGP learns L itself, so its energy at every order is that of its posterior mean; the energy is linear
in L, so its std must be the GP's functional posterior of the energy functionals (atoms) to rounding, with and
without a reference state (the covariance of the two values accounted for).
"""

import pytest
import torch

import integrators
from integrators.data import snapshots
from learners import ExtrapolationError, ExtrapolationWarning, LagrangianGP
from energy_functionals import energy_functionals as _energy_functionals
from learners.shadow.functionals import Functionals

FAST = dict(iterations=4, max_train_functionals=150, progress=False)


@pytest.fixture(scope="module")
def lgp():
    return LagrangianGP(0.2, **FAST).fit(snapshots(integrators.systems.pendulum(), 0.2, 12, 6, seed=0))


def test_the_order_default_is_the_same_and_means_the_learned_lagrangian(lgp):
    q = torch.tensor([[0.1], [-0.3]], dtype=torch.float64)
    v = torch.tensor([[0.2], [0.05]], dtype=torch.float64)
    H0, H2 = lgp.energy(0)(q, v), lgp.energy()(q, v)
    assert torch.equal(H0, H2)
    # every order is the learned L: the same bits (each a snapshot of the fit, learners.shadow.handles, not the method)
    L2, L4, L = lgp.recovered_lagrangian()(q, v), lgp.recovered_lagrangian(4)(q, v), lgp.lagrangian(q, v)
    assert torch.equal(L2, L4) and torch.equal(L2, L)
    with pytest.raises(ValueError, match="order"):
        lgp.energy(1)  # the midpoint rule is symmetric: odd orders are refused, as by LSI


def test_energy_std_is_the_functional_posterior(lgp):
    # off the data (which lie within |q| <~ 1): there the posterior variance is far above its rounding floor
    # (sqrt(cond) eps prior, learners.shadow.uncertainty), which dominates on the data at this tiny size
    g = torch.Generator().manual_seed(2)
    q, v = 1.5 + 0.3 * torch.randn(5, 1, generator=g, dtype=torch.float64), 1.5 + 0.3 * torch.randn(5, 1, generator=g, dtype=torch.float64)
    qr, vr = torch.tensor([0.05], dtype=torch.float64), torch.tensor([0.1], dtype=torch.float64)
    x, xr = lgp._standard_state(q, v), lgp._standard_state(qr[None], vr[None])
    _, C = lgp.gp.functional_posterior(Functionals.cat([_energy_functionals(x, 1), _energy_functionals(xr, 1)]),
                                       full_cov=True)
    u4 = lgp._speed ** 4 * lgp._variance_factor("energy_differences")
    mean, std = lgp.energy(2, return_std=True)(q, v)
    assert torch.equal(mean, lgp.energy()(q, v).detach())
    assert torch.allclose(std ** 2, u4 * C.diagonal()[:5], rtol=1e-6, atol=0)
    mean_d, std_d = lgp.energy(2, return_std=True, reference=(qr, vr))(q, v)
    assert float((mean_d - (mean - lgp.energy()(qr[None], vr[None]).detach())).abs().max()) <= 1e-12
    assert torch.allclose(std_d ** 2, u4 * (C.diagonal()[:5] + C[5, 5] - 2 * C[:5, 5]), rtol=1e-6, atol=0)


def test_energies_along_positions_with_both_references(lgp):
    traj = lgp.predict([[0.3], [-0.2]], [[0.0], [0.1]], 8)
    E = lgp.energies(traj)
    v = lgp.velocities(traj)
    assert E.shape == (9, 2) and float((E - lgp.energy()(traj.q, v).detach()).abs().max()) <= 1e-12
    state = (torch.tensor([0.1], dtype=torch.float64), torch.tensor([0.2], dtype=torch.float64))
    H_ref = lgp.energy()(state[0][None], state[1][None]).detach()
    assert float((lgp.energies(traj, reference=state) - (E - H_ref)).abs().max()) <= 1e-12
    assert float((lgp.energies(traj, reference_index=2) - (E - E[2])).abs().max()) <= 1e-12
    with pytest.warns(DeprecationWarning, match="reference_index=2"):
        assert torch.equal(lgp.energies(traj, reference=2), lgp.energies(traj, reference_index=2))


def test_predict_takes_on_extrapolation(lgp, monkeypatch):
    """LGP's test is the runaway one (a position beyond RUNAWAY_FACTOR data spreads); a learned L far from its data
    loses its mass matrix before a start gets that far, so the data's region is shrunk here to make an ordinary
    prediction count as leaving it."""
    monkeypatch.setattr(lgp, "_region", (torch.zeros(1, dtype=torch.float64), 1e-4))
    far = ([[0.3]], [[0.0]])
    with pytest.warns(ExtrapolationWarning, match="leaves the data"):
        lgp.predict(*far, 3)
    with pytest.raises(ExtrapolationError, match="leaves the data"):
        lgp.predict(*far, 3, on_extrapolation="raise")
    quiet = lgp.predict(*far, 3, on_extrapolation="ignore")
    assert quiet.q.shape == (4, 1, 1)
    with pytest.raises(ValueError, match="on_extrapolation"):
        lgp.predict([[0.3]], [[0.0]], 3, on_extrapolation="maybe")
