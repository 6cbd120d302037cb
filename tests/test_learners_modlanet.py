"""ModLaNet (docs/theory/modlanet.md) at CI size: exact element energies reproduce the analytic Lagrangians and
reference accelerations, ``.extend`` reuses the cells, short trainings (acceleration loss and the
position-only DEL loss) lower the validation loss, gradients reach the cells, bad input is refused.

Tolerances: the exact-energy checks compare two float64 evaluations of the same formula
(SymPy/NumPy against torch autograd and a 2x2..8x8 linear solve), whose rounding is ~1e-14 relative
to accelerations of size <= ~100; 1e-10 (accelerations) and 1e-12 (Lagrangian values of size ~10)
leave a margin of >= 100x while any modelling error (a wrong sign, mass or length) is O(1).
"""

import math

import pytest
import torch

from integrators import systems
from integrators.reference import acceleration_function
from learners.modlanet import ModLaNet, check_parents
from learners.modlanet.data import (double_pendulum_data, n_body_snapshots, pendulum_chain_snapshots,
                                    three_body_data)
from learners.neural.options import DELLoss, TrainOptions
from learners.neural.training import predict_positions, recovered_lagrangian, train
from learners.modlanet.elements import AngleOnRod, CallableTransform, Identity, MLPTransform, NewtonianPair, UniformGravity

G_EARTH = 9.8


def true_chain(n):
    return ModLaNet.pendulum_chain(n, transform="rod", potential=UniformGravity(G_EARTH), pair=None, learn_masses=False,
                                   learn_weights=False)


def true_bodies(n):
    return ModLaNet.bodies(n, potential=None, pair=NewtonianPair(1.0), learn_masses=False, learn_weights=False)


def reference_acceleration(system, q, v):
    A, _ = acceleration_function(system)
    return torch.from_numpy(A(q.numpy(), v.numpy()))


def random_states(n, count, seed, qscale=3.0, vscale=2.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(count, n, generator=g) * 2 - 1) * qscale, (torch.rand(count, n, generator=g) * 2 - 1) * vscale


# ---------------------------------------------------------------------------------------------- exact energies
@pytest.mark.parametrize("n", [2, 3])
def test_true_pendulum_chain_reproduces_reference_accelerations(n):
    q, v = random_states(n, 200, seed=n)
    a = true_chain(n).acceleration(q, v)
    ref = reference_acceleration(systems.n_pendulum(n, g=G_EARTH), q, v)
    assert (a - ref).abs().max().item() < 1e-10


@pytest.mark.parametrize("n", [3, 4])
def test_true_bodies_reproduce_reference_accelerations(n):
    g = torch.Generator().manual_seed(10 + n)
    # positions on a ring of radius ~1.5 (no near-collisions), velocities O(1)
    ang = torch.arange(n) * 2 * math.pi / n
    base = torch.stack([1.5 * torch.cos(ang), 1.5 * torch.sin(ang)], -1).reshape(-1)
    q = base + 0.3 * torch.randn(100, 2 * n, generator=g)
    v = torch.randn(100, 2 * n, generator=g)
    a = true_bodies(n).acceleration(q, v)
    ref = reference_acceleration(systems.n_body([1] * n), q, v)
    assert (a - ref).abs().max().item() < 1e-10


@pytest.mark.parametrize("n", [3, 4])
def test_extend_equals_analytic_multi_pendulum_lagrangian(n):
    model = true_chain(2).extend(n)
    assert model.parents == [-1] + list(range(n - 1))
    q, v = random_states(n, 100, seed=20 + n)
    L = model(q, v)
    ref = systems.n_pendulum(n, g=G_EARTH)(q, v)
    assert (L - ref).abs().max().item() < 1e-12
    # and the energy T + U equals the analytic energy p.v - L
    assert (model.energy_at(q, v) - systems.n_pendulum(n, g=G_EARTH).energy(q, v)).abs().max().item() < 1e-12
    assert (model.energy()(q, v) - model.energy_at(q, v)).abs().max().item() < 1e-12  # p.v - L = T + U
    with pytest.warns(DeprecationWarning, match=r"energy\(q, v\) is deprecated.*energy_at"):
        assert torch.equal(model.energy(q, v), model.energy_at(q, v))


def test_extend_copies_cells_and_initialises_masses_from_the_mean():
    model = ModLaNet.bodies(3, hidden=8, masses=[1.0, 2.0, 3.0])
    big = model.extend(5)
    assert big.n == 10 and big.parents == [-1] * 5
    assert torch.allclose(big.masses, torch.tensor([1.0, 2.0, 3.0, 2.0, 2.0]), rtol=0, atol=1e-15)
    assert big.potential is not model.potential
    for p, p0 in zip(big.pair.parameters(), model.pair.parameters()):
        assert torch.equal(p, p0) and p is not p0
    # element cells shared: pair energy of bodies 0, 1 is the same function in both models
    x = torch.randn(4, 2, 2, dtype=torch.float64)
    assert torch.equal(big.pair(x[:, 0], x[:, 1]), model.pair(x[:, 0], x[:, 1]))


def test_model_plugs_into_bea_and_integrators():
    import bea
    from integrators import VariationalIntegrator

    model = ModLaNet.pendulum_chain(2, hidden=8, transform_hidden=6)
    q, v = random_states(2, 16, seed=3, qscale=1.0, vscale=0.5)
    # bea's generic autograd acceleration agrees with the model's own solve (same formula, ~1e-14)
    assert (bea.acceleration(model)(q, v) - model.acceleration(q, v)).abs().max().item() < 1e-10
    # H = p.v - L equals T + U (kinetic energy quadratic in v)
    assert (bea.energy(model)(q, v) - model.energy_at(q, v)).abs().max().item() < 1e-10
    # torch.func: per-sample momenta under vmap equal autograd's
    p_func = torch.func.vmap(torch.func.grad(lambda a, b: model(a, b), argnums=1))(q, v)
    assert (p_func - bea.momentum(model)(q, v)).abs().max().item() < 1e-12
    qs = VariationalIntegrator(model, 0.01, "midpoint").solve(q[:4] * 0.3, v[:4], steps=20).q
    assert qs.shape == (21, 4, 2) and torch.isfinite(qs).all()


def test_gradients_reach_every_cell_parameter():
    model = ModLaNet.pendulum_chain(2, hidden=8, transform_hidden=6)
    q, v = random_states(2, 32, seed=4)
    model.acceleration(q, v).pow(2).mean().backward()
    for name, p in model.named_parameters():
        if name.endswith("linears.2.bias") and not name.startswith("transform"):
            # the output bias of an energy cell adds a constant to L: no effect on the dynamics
            assert p.grad is None or p.grad.abs().max().item() == 0.0
            continue
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().max().item() > 0, name


def test_parameter_counts_match_the_seed():
    # seed Table 2: 6.2k (double pendulum), 5.6k (three-body)
    assert sum(p.numel() for p in ModLaNet.pendulum_chain(2).parameters()) == 5959
    assert sum(p.numel() for p in ModLaNet.bodies(3).parameters()) == 5606


def test_generic_callable_transform_uses_jvp():
    rod = CallableTransform(lambda th: torch.cat([torch.sin(th), -torch.cos(th)], -1), 1, 2)
    model = ModLaNet([-1, 0], rod, potential=UniformGravity(G_EARTH), pair=None, learn_masses=False, learn_weights=False)
    q, v = random_states(2, 50, seed=5)
    ref = reference_acceleration(systems.n_pendulum(2, g=G_EARTH), q, v)
    assert (model.acceleration(q, v) - ref).abs().max().item() < 1e-10


def test_mlp_transform_velocity_is_the_time_derivative():
    t = MLPTransform(1, 2, hidden=7, periodic=True, generator=torch.Generator().manual_seed(0))
    q, v = random_states(1, 10, seed=6)
    x, xdot = t.tangent(q, v)
    eps = 1e-6
    fd = (t(q + eps * v) - t(q - eps * v)) / (2 * eps)
    assert (xdot - fd).abs().max().item() < 1e-8  # central difference error O(eps^2) plus rounding 1e-16/eps
    assert (t(q + 2 * math.pi) - x).abs().max().item() < 1e-12  # periodic in the angle


def test_seeded_construction_is_deterministic_and_leaves_global_rng_alone():
    state = torch.random.get_rng_state()
    a, b = ModLaNet.pendulum_chain(2, seed=3), ModLaNet.pendulum_chain(2, seed=3)
    assert torch.equal(torch.random.get_rng_state(), state)
    for p, r in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, r)


# ---------------------------------------------------------------------------------------------- bad input
def test_bad_parent_lists():
    with pytest.raises(ValueError, match="cycle"):
        check_parents([1, 2, 0])
    with pytest.raises(ValueError, match="cycle"):
        ModLaNet([-1, 2, 1], Identity(2))
    with pytest.raises(ValueError, match="out of range"):
        ModLaNet([-1, 5], Identity(2))
    with pytest.raises(ValueError, match="own parent"):
        ModLaNet([0], Identity(2))
    with pytest.raises(ValueError, match="empty"):
        ModLaNet([], Identity(2))
    assert check_parents([2, -1, 1]) == [1, 2, 0]


def test_dimension_mismatch():
    with pytest.raises(ValueError, match="dimension mismatch"):
        ModLaNet([-1, 0], AngleOnRod(1.0), space_dim=3)
    model = ModLaNet.bodies(3, hidden=4)
    with pytest.raises(ValueError, match="dimension mismatch"):
        model(torch.zeros(5, 4), torch.zeros(5, 4))
    with pytest.raises(ValueError, match="one transform per element"):
        ModLaNet([-1, 0], [AngleOnRod(1.0)])


def test_non_finite_states_and_singular_mass():
    model = true_chain(2)
    q, v = random_states(2, 4, seed=7)
    q[2, 1] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        model.acceleration(q, v)
    # a transform with zero Jacobian makes the kinetic energy vanish: singular mass matrix
    flat = CallableTransform(lambda th: torch.zeros(*th.shape[:-1], 2, dtype=th.dtype) + 0 * th, 1, 2)
    dead = ModLaNet([-1, 0], flat, potential=UniformGravity(G_EARTH), pair=None)
    with pytest.raises(ValueError, match="singular mass matrix"):
        dead.acceleration(*random_states(2, 4, seed=8))


# ---------------------------------------------------------------------------------------------- data
def test_data_are_exact_flows_and_deterministic():
    d = double_pendulum_data(n_traj=3, t_max=1.0, max_velocity=3.0, seed=5)
    assert d.q.shape == (33, 2) and int(d.traj.max()) == 2  # 3 trajectories x (10 + 1) samples
    # accelerations are the analytic EL accelerations of the sampled states (same formula, rounding only)
    ref = reference_acceleration(systems.n_pendulum(2, g=G_EARTH), d.q, d.v)
    assert (d.a - ref).abs().max().item() < 1e-10
    # the exact flow conserves energy: DOP853 at 1e-13 tolerances keeps |dE| below 1e-8 over 1 s (measured ~1e-11)
    E = d.energy.reshape(3, 11)
    assert (E - E[:, :1]).abs().max().item() < 1e-8
    again = double_pendulum_data(n_traj=3, t_max=1.0, max_velocity=3.0, seed=5)
    assert torch.equal(d.q, again.q) and torch.equal(d.a, again.a)
    assert len(double_pendulum_data(n_samples=15, t_max=1.0, max_velocity=3.0)) == 15
    b = three_body_data(n_traj=2, t_max=0.5)
    assert b.q.shape == (22, 6)
    E = b.energy.reshape(2, 11)
    assert (E - E[:, :1]).abs().max().item() < 1e-8


def test_snapshot_shapes():
    S = pendulum_chain_snapshots(3, n_traj=2, n_steps=5, h=0.1, max_velocity=1.0)
    assert S.shape == (2, 6, 3)
    S = n_body_snapshots(4, n_traj=2, n_steps=5, h=0.1)
    assert S.shape == (2, 6, 8)


# ---------------------------------------------------------------------------------------------- training
@pytest.fixture(scope="module")
def accel_data():
    # 20 trajectories x 21 samples = 420 (the seed's 10k at full size)
    return double_pendulum_data(n_traj=20, t_max=2.0, max_velocity=3.0, seed=1)


@pytest.fixture(scope="module")
def snapshot_data():
    return pendulum_chain_snapshots(2, n_traj=20, n_steps=20, h=0.1, max_velocity=1.5, angle_range=(-1.5, 1.5), seed=2,
                                    return_initial=True)


def test_acceleration_training_lowers_validation_loss(accel_data):
    model = ModLaNet.pendulum_chain(2, hidden=16, transform_hidden=8)  # learned transform, as in the seed
    res = train(model, accel_data, 
                options=TrainOptions(epochs=25, lr=1e-2, batch_size=64, patience=None, progress=False))
    # measured: 5.95e3 -> 1.1e1 (~500x) in 25 epochs; the acceptance bar is 10x
    assert res.improvement >= 10
    assert res.history["val"][res.best_epoch] == res.best_val and len(res.history["val"]) == 26
    assert not model.training


def test_del_training_from_positions_lowers_validation_loss(snapshot_data):
    S, _ = snapshot_data
    model = ModLaNet.pendulum_chain(2, hidden=16, transform_hidden=8)
    res = train(model, S, loss="del", h=0.1, 
                options=TrainOptions(epochs=25, lr=1e-2, batch_size=64, patience=None, progress=False))
    # measured: 1.9e1 -> 4.9e-2 (~380x); the acceptance bar is 10x
    assert res.improvement >= 10
    q0, v0 = (x[:3] * 0.5 for x in snapshot_data[1])
    qs = predict_positions(model, q0, v0, steps=5, h=0.1, order=2).q
    assert qs.shape == (6, 3, 2) and torch.isfinite(qs).all()


def test_training_is_reproducible_and_stops_early(accel_data):
    small = accel_data.subset(slice(0, 100))
    runs = []
    state = torch.random.get_rng_state()
    for _ in range(2):
        model = ModLaNet.pendulum_chain(2, transform="rod", hidden=6)
        runs.append(train(model, small, options=TrainOptions(epochs=4, lr=1e-2, batch_size=32, progress=False)).history["val"])
    assert runs[0] == runs[1]
    assert torch.equal(torch.random.get_rng_state(), state)  # split and shuffling use their own generator
    model = ModLaNet.pendulum_chain(2, transform="rod", hidden=6)
    # nothing moves:
    res = train(model, small, options=TrainOptions(epochs=50, lr=1e-12, batch_size=32, patience=2, progress=False))
    assert res.stopped_early and res.epochs_run == 2


def test_exact_model_as_inverse_lagrangian_prediction_and_recovered_energy(snapshot_data):
    from integrators import VariationalIntegrator, reference_flow

    true = true_chain(2)
    q0, v0 = (x[:4] for x in snapshot_data[1])
    h = 0.05
    qs = predict_positions(true, q0, v0, steps=40, h=h, order=0).q
    ref = reference_flow(systems.n_pendulum(2, g=G_EARTH), q0, v0, h * torch.arange(41)).q
    # midpoint's global O(h^2) error over 2 s: measured 0.043 rad
    assert (qs - ref).abs().max().item() < 0.1
    # variational BEA: the discrete motion conserves the energy of mod_2(L) better than that of L
    # (O(h^4) against O(h^2) fluctuations; measured 0.078 against 0.58, a factor 7.5)
    integ = VariationalIntegrator(true, h, "midpoint")
    drift = [(lambda E: (E - E[0]).abs().max().item())(integ.energies(qs, lagrangian=recovered_lagrangian(true, N, h)))
             for N in (0, 2)]
    assert drift[1] * 4 < drift[0]


def test_training_bad_input(accel_data, snapshot_data):
    model = ModLaNet.pendulum_chain(2, transform="rod", hidden=4)
    q, v, a = accel_data.q[:50].clone(), accel_data.v[:50], accel_data.a[:50]
    q[7, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        train(model, (q, v, a), options=TrainOptions(epochs=1, progress=False))
    with pytest.raises(ValueError, match="dimension mismatch"):
        train(ModLaNet.pendulum_chain(3, transform="rod", hidden=4), accel_data, options=TrainOptions(epochs=1, progress=False))
    with pytest.raises(ValueError, match="needs the sampling step h"):
        train(model, snapshot_data[0], loss="del", options=TrainOptions(epochs=1, progress=False))
    S = snapshot_data[0].clone()
    S[0, 3, 1] = float("inf")
    with pytest.raises(ValueError, match="non-finite"):
        train(model, S, loss="del", h=0.1, options=TrainOptions(epochs=1, progress=False))
    with pytest.raises(ValueError, match="loss must be"):
        train(model, accel_data, loss="energy", options=TrainOptions(epochs=1, progress=False))


def test_train_accepts_any_model_with_an_acceleration(accel_data):
    # the same loop trains the neural baselines (learners.neural.baselines), e.g. a small LNN
    from learners.neural.baselines import LNN

    small = accel_data.subset(slice(0, 100))
    res = train(LNN(2, width=8, seed=0), small, options=TrainOptions(epochs=2, lr=1e-3, batch_size=50, progress=False))
    assert len(res.history["val"]) == 3 and all(math.isfinite(x) for x in res.history["val"])


def test_closed_form_midpoint_mod2_matches_bea_and_scales_to_three_bodies():
    import bea

    model = ModLaNet.pendulum_chain(2, hidden=8, transform_hidden=6)
    q, v = random_states(2, 20, seed=9, qscale=1.0, vscale=3.0)
    h = 0.3
    generic = recovered_lagrangian(model, 2, h, method="bea")  # bea's generated generic formula
    closed = recovered_lagrangian(model, 2, h, method="formula")  # L + h^2/24 (A'MA - v'L_qq v)
    # two evaluations of the same h^2 term (~1e-3 here); rounding ~1e-16
    assert (generic(q, v) - closed(q, v)).abs().max().item() < 1e-12
    assert (bea.momentum(generic)(q, v) - bea.momentum(closed)(q, v)).abs().max().item() < 1e-12
    assert (closed(q, v) - model(q, v)).abs().max().item() > 1e-6  # the correction is really there
    # n = 6 (three bodies): the closed form is used automatically; bea's generic n = 6 derivation takes > 10 min
    bodies = ModLaNet.bodies(3, hidden=8)
    qb = torch.tensor([[1.0, 0.0, -0.5, 0.9, -0.5, -0.9]])
    vb = torch.tensor([[0.0, 0.6, -0.5, -0.3, 0.5, -0.3]])
    qs = predict_positions(bodies, qb, vb, steps=3, h=0.1, order=2).q
    assert qs.shape == (4, 1, 6) and torch.isfinite(qs).all()


def test_inverse_order_puts_inv2_of_the_true_lagrangian_into_the_del_residual(snapshot_data):
    from learners.shadow.functionals import triples_from_snapshots
    from learners.neural.training import del_loss, inverse_lagrangian

    S, (q0, v0) = snapshot_data
    true = true_chain(2)
    T = triples_from_snapshots(S)
    plain = float(del_loss(true, T, 0.1).detach())
    inv2 = float(del_loss(inverse_lagrangian(true, 2, 0.1), T, 0.1).detach())
    # DEL residual of the exact motion: O(h^2) relative for L, O(h^4) for inv_2(L); measured 4.6e-2 and 1.8e-4
    assert inv2 * 50 < plain
    # closed form = bea's generic inverse modified Lagrangian (n = 2)
    q, v = random_states(2, 10, seed=11, qscale=1.0, vscale=1.5)
    gen, closed = inverse_lagrangian(true, 2, 0.1, method="bea"), inverse_lagrangian(true, 2, 0.1, method="formula")
    assert (gen(q, v) - closed(q, v)).abs().max().item() < 1e-12
    # the scheme on inv_2(L) with p0 = dL/dv follows the data (exact flow) to O(h^4) locally: measured 0.011 rad in 2 s
    qs = predict_positions(true, q0[:3], v0[:3], steps=20, h=0.1, inverse_order=2).q
    assert (qs - S[:3].transpose(0, 1)).abs().max().item() < 0.05
    # a short training with the inverse-order DEL loss runs and lowers the loss
    model = ModLaNet.pendulum_chain(2, transform="rod", hidden=8)
    res = train(model, S[:6], loss=DELLoss(inverse_order=2), h=0.1,
                options=TrainOptions(epochs=3, lr=1e-2, batch_size=64, patience=None, progress=False))
    assert res.best_val < res.initial_val


def test_max_step_keeps_the_slow_triples_only(snapshot_data):
    from learners.shadow.functionals import triples_from_snapshots

    S, _ = snapshot_data
    T = triples_from_snapshots(S)
    half = ((T[:, 2] - T[:, 0]).abs() / 2).amax(-1)
    cut = float(half.median())
    model = ModLaNet.pendulum_chain(2, transform="rod", hidden=8)
    res = train(model, S, loss=DELLoss(max_step=cut), h=0.1,
                options=TrainOptions(epochs=1, lr=1e-3, batch_size=64, patience=None, progress=False))
    assert res.n_train + res.n_val == int((half <= cut).sum()) < T.shape[0]
    with pytest.raises(ValueError, match="keeps 0 of"):
        train(model, S, loss=DELLoss(max_step=1e-9), h=0.1, options=TrainOptions(epochs=1, progress=False))
    with pytest.raises(ValueError, match="max_step must be a positive number"):
        train(model, S, loss=DELLoss(max_step=-1.0), h=0.1, options=TrainOptions(epochs=1, progress=False))


def test_the_frame_dimension_is_space_dim_and_dim_still_works_with_a_warning():
    """ModLaNet frame dimension is space_dim (issue 29: dim is n, the number of coordinates, elsewhere);
    dim= keeps working for one release with a DeprecationWarning, and builds the same model."""
    new = ModLaNet.bodies(2, space_dim=3, hidden=4, seed=1)
    with pytest.warns(DeprecationWarning, match=r"bodies\(dim=...\) is deprecated.*use space_dim="):
        old = ModLaNet.bodies(2, dim=3, hidden=4, seed=1)
    assert new.space_dim == old.space_dim == 3 and new.n == 6
    q = torch.linspace(-1, 1, 12, dtype=torch.float64).reshape(2, 6)
    assert torch.equal(new(q, 0.5 * q), old(q, 0.5 * q))
    with pytest.warns(DeprecationWarning, match="use ModLaNet.space_dim"):
        assert new.dim == 3
