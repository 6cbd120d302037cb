"""Lagrangian Shadow Integration at CI size: LSI against the LGP baselines, held-out DEL residuals,
uncertainty, the harmonic oscillator's closed form, n = 2, another scheme, and bad input.

Sizes are small (60 pendulum trajectories instead of the reference's 400); the full-size numbers are
measured by ``benchmarks/shadow.py`` and the notebook ``03_pendulum_shadow``.
"""

import math

import pytest
import torch

import bea
import integrators
from integrators import reference_flow
from integrators.data import snapshots
from learners import InverseModifiedLagrangianGP, LagrangianGP, MassNormalisation, VertexNormalisation
from learners.metrics import calibration, grid_states, level_set_error, max_trajectory_error

H = 0.5
FAST = dict(iterations=8, max_train_functionals=400, progress=False)


@pytest.fixture(scope="module")
def pendulum():
    return integrators.systems.pendulum()


@pytest.fixture(scope="module")
def data(pendulum):
    return snapshots(pendulum, H, 60, 5, seed=0)


@pytest.fixture(scope="module")
def heldout(pendulum):
    return snapshots(pendulum, H, 30, 5, seed=11)


@pytest.fixture(scope="module")
def lsi(data):
    return InverseModifiedLagrangianGP(H, **FAST).fit(data)


@pytest.fixture(scope="module")
def reference(pendulum):
    q0, v0 = torch.tensor([[0.3]]), torch.zeros(1, 1)
    flow = reference_flow(pendulum, q0, v0, H * torch.arange(201, dtype=torch.float64))
    q, v = flow.q, flow.v
    return q0, v0, q, v


@pytest.mark.parametrize("baseline", ["seed-epsilon", "learned"])
def test_lsi_beats_lgp(lsi, data, pendulum, reference, baseline):
    """Same 60 trajectories. LGP learns the exact L from finite differences and then integrates it with
    the midpoint rule, whose O(h^2) frequency error (about h^2/12 ~ 2% at h = 0.5) accumulates to a phase
    error of order one within 200 steps; LSI's L_inv compensates it. Level sets on a 15 x 15 grid of
    [-1.2, 1.2] x [-0.6, 0.6]: measured LSI (H_rec[2]) 2.2e-3, LGP 8.2e-3 with either hyperparameters."""
    kw = {"epsilon": 5.0} if baseline == "seed-epsilon" else FAST
    lgp = LagrangianGP(H, **kw).fit(data)
    q0, v0, q_ref, _ = reference
    e_lsi = max_trajectory_error(lsi.predict(q0, v0, 200), q_ref)
    e_lgp = max_trajectory_error(lgp.predict(q0, v0, 200), q_ref)
    assert e_lsi < 2e-4  # measured 2.8e-5
    assert e_lgp > 0.1  # measured 0.59
    states = grid_states(points=15)
    ls_lsi = level_set_error(lsi.energy(2), pendulum.energy, states=states)
    ls_lgp = level_set_error(lgp.energy(), pendulum.energy, states=states)
    assert ls_lsi < 4e-3
    assert ls_lsi < 0.5 * ls_lgp


def test_heldout_del_residuals(lsi, heldout):
    """DEL residuals of the posterior mean on 30 held-out trajectories (120 triples; momenta are O(1)):
    measured median 3e-7, RMS 7e-4, max 7e-3 (the largest where held-out orbits leave the data's box).
    Tolerances: median <= 1e-5, RMS <= 2e-3. Calibration (variances scaled on 12 held-back training
    trajectories to 95.4% within 2 sigma): measured 0.86 here (0.89-0.99 on 400 held-out residuals for
    60-400 training trajectories); required >= 0.8."""
    r, s = lsi.del_residuals(heldout)
    assert r.shape == (120, 1) and s.shape == (120, 1)
    assert float(r.abs().median()) <= 1e-5
    assert float(r.pow(2).mean().sqrt()) <= 2e-3
    assert calibration(r, s) >= 0.8
    # the posterior mean of the residual at training triples is at the nugget level
    r_train = lsi.del_residuals(lsi.snapshots, return_std=False)
    assert float(r_train.abs().max()) < 1e-6


def test_uncertainty_shrinks_with_data_and_grows_away_from_it(pendulum, heldout):
    """Fixed hyperparameters, so only the data change: the mean posterior std of held-out DEL residuals
    falls with 20 -> 60 -> 180 trajectories, and is much larger on orbits with velocities outside the
    data's box than on orbits inside it."""
    stds = []
    for n_traj in (20, 60, 180):
        m = InverseModifiedLagrangianGP(H, lengthscale=[1.8, 4.0], noise=1e-12).fit(snapshots(pendulum, H, n_traj, 5, seed=0))
        _, s = m.del_residuals(heldout)
        stds.append(float(s.mean()))
    assert stds[0] > 2 * stds[1] > 4 * stds[2], stds
    far = snapshots(pendulum, H, 20, 5, domain=[(-0.5, 0.5), (2.4, 2.8)], seed=3)
    _, s_far = m.del_residuals(far)
    _, s_near = m.del_residuals(heldout)
    assert float(s_far.mean()) > 10 * float(s_near.mean())


def test_harmonic_oscillator_recovered_frequency():
    """Exact midpoint-free data of q'' = -w^2 q (w = 1.3, h = 0.2): the recovered Lagrangian mod_4(L_inv)
    has EL acceleration -w^2 q; its frequency is within 1e-4 relative (measured 6e-7)."""
    from scipy.stats import qmc

    w, h = 1.3, 0.2
    u = torch.from_numpy(qmc.Halton(2, scramble=False).random(61)[1:])
    amp, phase = 0.2 + 0.8 * u[:, 0], 2 * math.pi * u[:, 1]
    t = h * torch.arange(6, dtype=torch.float64)
    S = (amp[:, None] * torch.cos(w * t[None, :] + phase[:, None]))[..., None]
    m = InverseModifiedLagrangianGP(h, progress=False).fit(S)
    q = torch.tensor([[0.1], [0.3], [-0.2]])
    v = torch.tensor([[0.2], [0.0], [-0.1]])
    for order in (2, 4):
        acc = bea.acceleration(m.recovered_lagrangian(order))(q, v).detach()
        w_rec = (-acc / q).sqrt()
        # mod_N is exact to O(h^(N+2)): (wh)^4/1000 ~ 5e-8 for N = 2, far below the tolerance
        assert float(((w_rec - w) / w).abs().max()) < 1e-4


def test_two_degrees_of_freedom_batched(tmp_path):
    """Henon-Heiles (n = 2, h = 0.1): 80 trajectories x 5 steps; batched prediction of three initial
    conditions over 100 steps against the exact flow (measured max error 1.5e-5); velocities from mod_2."""
    hh = integrators.systems.henon_heiles()
    S = snapshots(hh, 0.1, 80, 5, seed=0)
    m = InverseModifiedLagrangianGP(0.1, progress=False).fit(S)
    q0 = torch.tensor([[0.1, -0.1], [0.0, 0.1], [-0.1, 0.05]])
    v0 = torch.tensor([[0.1, 0.15], [0.1, 0.0], [0.0, -0.1]])
    qs = m.predict(q0, v0, 100).q
    assert qs.shape == (101, 3, 2)
    flow = reference_flow(hh, q0, v0, 0.1 * torch.arange(101, dtype=torch.float64))
    q_ref, v_ref = flow.q, flow.v
    assert max_trajectory_error(qs, q_ref) < 1e-4
    v = m.velocities(qs, order=2)
    assert v.shape == qs.shape
    assert float((v - v_ref).abs().max()) < 1e-3
    H2 = m.energy(2)(qs[:, 0], v[:, 0]).detach()
    assert float(H2.max() - H2.min()) < 1e-5


def test_trapezoidal_and_other_options(data, pendulum, reference):
    """Any bea scheme: the trapezoidal rule's L_inv predicts as well; the seed's vertex normalisation and
    the held-out objective work too."""
    q0, v0, q_ref, _ = reference
    m = InverseModifiedLagrangianGP(H, scheme="trapezoidal", **FAST).fit(data)
    assert max_trajectory_error(m.predict(q0, v0, 200), q_ref) < 5e-4
    m = InverseModifiedLagrangianGP(H, normalisation=VertexNormalisation(), objective="heldout", **FAST).fit(data)
    assert max_trajectory_error(m.predict(q0, v0, 200), q_ref) < 5e-3
    assert m.hyperparameters["noise"] > 0
    m = InverseModifiedLagrangianGP(H, epsilon=5.0, normalisation=MassNormalisation(c=2.0)).fit(data)
    assert m.hyperparameters["lengthscale"] == pytest.approx([5 / math.sqrt(2)] * 2)
    assert max_trajectory_error(m.predict(q0, v0, 200), q_ref) < 5e-3


def test_identification_outputs(lsi, reference):
    q0, v0, q_ref, v_ref = reference
    qs = lsi.predict(q0, v0, 200)
    v = lsi.velocities(qs, order=2)
    assert float((v - v_ref).abs().max()) < 1e-3
    E = lsi.energies(qs, order=2)
    assert E.shape == (201, 1)
    assert float(E.max() - E.min()) < 1e-4
    var = lsi.variance(torch.zeros(3, 1), torch.zeros(3, 1))
    assert var.shape == (3,) and bool((var >= 0).all())
    info = lsi.conditioning
    assert info.size == lsi.snapshots.shape[0] * 4 + 3 and info.cond_estimate > 1
    with pytest.raises(ValueError, match="even"):
        lsi.recovered_lagrangian(3)


@pytest.mark.parametrize("bad,err,match", [
    (torch.zeros(6, 1), ValueError, "n_traj"),  # 2-D
    (torch.zeros(3, 2, 1), ValueError, "at least 3 positions"),
    (torch.full((3, 6, 1), float("nan")), ValueError, "non-finite"),
    ("not data", TypeError, "real numbers"),
    (torch.zeros(3, 6, 1, dtype=torch.bool), TypeError, "real numbers"),
])
def test_bad_snapshots(bad, err, match):
    with pytest.raises(err, match=match):
        InverseModifiedLagrangianGP(H).fit(bad)


def test_bad_arguments(lsi):
    with pytest.raises(ValueError):
        InverseModifiedLagrangianGP(-0.1)
    with pytest.raises(TypeError):
        InverseModifiedLagrangianGP("0.1")
    with pytest.raises(ValueError, match="objective"):
        InverseModifiedLagrangianGP(H, objective="loo")
    with pytest.raises(ValueError, match="normalisation"):
        InverseModifiedLagrangianGP(H, normalisation="cube")
    with pytest.raises(ValueError, match="either|not both"):
        InverseModifiedLagrangianGP(H, lengthscale=1.0, epsilon=2.0)
    with pytest.raises(RuntimeError, match="fit"):
        InverseModifiedLagrangianGP(H).predict(torch.zeros(1, 1), torch.zeros(1, 1), 3)
    with pytest.raises(ValueError, match="shape"):
        lsi.predict(torch.zeros(1, 2), torch.zeros(1, 2), 3)
    with pytest.raises(ValueError, match="shape"):
        lsi.lagrangian(torch.zeros(3, 1), torch.zeros(2, 1))
    with pytest.raises(ValueError, match="n=2"):
        lsi.del_residuals(torch.zeros(2, 5, 2))
    with pytest.raises(ValueError):
        LagrangianGP(H).fit_states(torch.zeros(3, 1), torch.zeros(3, 1), torch.zeros(2, 1))


def test_float64_whatever_the_default_dtype(data):
    """The models compute in float64 even if the caller's default dtype is float32."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        m = InverseModifiedLagrangianGP(H, **FAST).fit(data[:20].float())
        qs = m.predict([[0.3]], [[0.0]], 10).q
        assert qs.dtype == torch.float64 and torch.get_default_dtype() == torch.float32
        assert m.lagrangian(torch.zeros(2, 1, requires_grad=True), torch.zeros(2, 1)).dtype == torch.float64
    finally:
        torch.set_default_dtype(before)
