"""The estimator form of the networks (issue 29): Model(..., h=, scheme=, loss=, options=).fit(data).predict(...),
energy/energies as the GPs mean them, and the options objects (TrainOptions, the losses, the GP objectives).

fit must be exactly train with the configured loss and options, and predict exactly predict_positions / rollout_ode
with the step and orders the loss implies: the same operations in the same order, so the comparisons are to 1e-12
(bit-identical in practice; the tolerance leaves room for nothing but a different summation order)."""

import dataclasses
import warnings

import pytest
import torch

import bea
from integrators import Trajectory, modified
from learners import HNN, LNN, InverseModifiedLagrangianGP, LagrangianGP, MLPBaseline, ModLaNet, predict_positions, train
from learners.modlanet.data import double_pendulum_data, pendulum_chain_snapshots
from learners.neural.baselines import VectorFieldModel, canonical_data, vector_field_data
from learners.neural.options import AccelerationLoss, DELLoss, TrainOptions, get_loss
from learners.neural.rollout import rollout_ode
from learners.saving import decode, encode
from learners.shadow.objectives import MLL, Auto, Positions

H = 0.1
OPTS = TrainOptions(epochs=3, lr=1e-2, batch_size=8, patience=None, progress=False)  # measured: DEL loss 15.5 -> 1.2
Q0 = torch.tensor([[0.5, -0.3], [0.2, 0.1]], dtype=torch.float64)
V0 = torch.tensor([[0.0, 0.1], [-0.2, 0.0]], dtype=torch.float64)


@pytest.fixture(scope="module")
def snapshots():
    return pendulum_chain_snapshots(2, n_traj=4, n_steps=10, h=H, max_velocity=2.0)


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def _close(a, b, tol=1e-12):
    return float((a - b).detach().abs().max()) <= tol


def test_modlanet_fit_predict_is_train_then_predict_positions(snapshots):
    est = ModLaNet.pendulum_chain(2, h=H, loss="del", options=OPTS)
    assert est.fit(snapshots) is est
    ref = ModLaNet.pendulum_chain(2)
    res = train(ref, snapshots, "del", h=H, options=OPTS)
    assert _same(est, ref) and est.train_result.history == res.history
    assert res.best_val < res.initial_val / 2  # training moved the model: the comparison is not of two initial states
    traj = est.predict(Q0, V0, 8)
    want = predict_positions(ref, Q0, V0, 8, h=H, order=2)
    assert isinstance(traj, Trajectory) and traj.q.shape == (9, 2, 2) and _close(traj.q, want.q)
    assert _close(traj.t, H * torch.arange(9, dtype=torch.float64))
    # energy: H_rec[2] = energy of mod_2(model), a callable as the GPs'; energies along the prediction
    Hrec = modified.recovered_energy(ref, 2, H, "midpoint")
    assert _close(est.energy(order=2)(Q0, V0), Hrec(Q0, V0))
    assert _close(est.energy(2)(Q0, V0), Hrec(Q0, V0))  # the order positionally, as the GPs take it
    with pytest.raises(bea.BeaTypeError):
        est.energy(Q0)
    assert _close(est.energies(traj), modified.energies(ref, want.q, 2, H, "midpoint"))
    assert _close(est.velocities(traj, order=0), modified.velocities(ref, want.q, 0, H, "midpoint"))
    # the model's own energy at states is energy_at; the old state form energy(q, v) warns and agrees
    assert _close(est.energy_at(Q0, V0), bea.energy(est)(Q0, V0))
    with pytest.warns(DeprecationWarning, match=r"energy\(q, v\) is deprecated.*energy_at"):
        assert _close(est.energy(Q0, V0), est.energy_at(Q0, V0))


def test_modlanet_of_the_true_lagrangian(snapshots):
    """DELLoss(inverse_order=2): the model is L itself; the scheme integrates inv_2(model), energy is the model's.
    (fit = train is checked above; one training here, the slow one: it differentiates the model to fourth order.)"""
    loss = DELLoss(inverse_order=2, max_step=0.5)
    opts = dataclasses.replace(OPTS, epochs=1)
    est = ModLaNet.pendulum_chain(2, transform="rod", hidden=8, h=H, loss=loss, options=opts).fit(snapshots[:1])
    assert est.train_result.n_train + est.train_result.n_val < 9  # max_step reached train: some triples were dropped
    traj = est.predict(Q0, V0, 5)
    assert _close(traj.q, predict_positions(est, Q0, V0, 5, h=H, inverse_order=2).q)
    assert not _close(traj.q, predict_positions(est, Q0, V0, 5, h=H, order=0).q, 1e-9)  # not the scheme on the model
    H_true = bea.energy(est)(Q0, V0)
    for order in (0, 2, 4):  # mod_N inv_N L = L to the truncation order: the model's own energy at every order
        assert _close(est.energy(order=order)(Q0, V0), H_true)


def test_lnn_acceleration_fit_predict():
    data = double_pendulum_data(n_traj=4, t_max=3.0)
    opts = dataclasses.replace(OPTS, batch_size=32)  # measured: validation loss 2.5e3 -> 1.5e3
    est = LNN(2, width=16, seed=1, h=0.05, options=opts).fit(data)
    ref = LNN(2, width=16, seed=1)
    train(ref, data, options=opts)
    assert _same(est, ref) and isinstance(est.loss, AccelerationLoss) and not _same(est, LNN(2, width=16, seed=1))
    traj = est.predict(Q0, V0, 6)
    assert _close(traj.q, predict_positions(ref, Q0, V0, 6, h=0.05, order=0).q)  # the scheme on the model, p0 = dL/dv
    assert _close(est.energy()(Q0, V0), bea.energy(ref)(Q0, V0))


def test_hnn_and_baseline_fit_predict():
    data = double_pendulum_data(n_traj=2, t_max=2.0)
    L = ModLaNet.pendulum_chain(2, transform="rod", potential=None, pair=None)  # any Lagrangian gives canonical data
    p, pdot = canonical_data(L, data.q, data.v)
    est = HNN(2, width=8, seed=0, h=0.05, options=OPTS).fit((data.q, p, data.v, pdot))
    ref = HNN(2, width=8, seed=0)
    train(VectorFieldModel(ref), vector_field_data(data.q, p, data.v, pdot), options=OPTS)
    assert _same(est, ref) and not _same(est, HNN(2, width=8, seed=0))  # trained, identically
    traj = est.predict(Q0, V0, 4)
    want = rollout_ode(ref, Q0, V0, 0.05 * torch.arange(5, dtype=torch.float64))
    assert _close(traj.q, want.q) and _close(traj.p, want.p) and traj.v is None
    mlp = MLPBaseline(2, width=8, seed=0, h=0.05, options=OPTS).fit(data)
    assert mlp.train_result.epochs_run == 3 and _close(mlp.predict(Q0, V0, 4).q,
                                                        rollout_ode(mlp, Q0, V0, 0.05 * torch.arange(5, dtype=torch.float64)).q)
    with pytest.raises(bea.BeaRuntimeError):
        est.energy()
    with pytest.raises(bea.BeaValueError):
        MLPBaseline(2, loss="del", h=0.1)  # not a Lagrangian: no DEL loss


def test_estimator_configuration_errors(snapshots):
    with pytest.raises(bea.BeaValueError):
        ModLaNet.pendulum_chain(2, loss="del").fit(snapshots)  # the DEL loss needs h
    plain = ModLaNet.pendulum_chain(2)
    with pytest.raises(bea.BeaValueError):
        plain.predict(Q0, V0, 3)  # predict needs h
    assert _close(plain.energy()(Q0, V0), bea.energy(plain)(Q0, V0))  # the energy of a model of L does not
    with pytest.raises(bea.BeaValueError):
        ModLaNet.pendulum_chain(2, loss="del").energy()  # that of a model of L_inv does: mod_N depends on h
    with pytest.raises(bea.BeaTypeError):
        LNN(2, width=8, options={"epochs": 3})
    with pytest.raises(bea.BeaValueError):
        LNN(2, width=8, loss="energy")
    with pytest.raises(bea.BeaValueError):
        LNN(2, width=8, h=-0.1)
    with pytest.raises(bea.BeaValueError):
        LNN(2, width=8, scheme="no-such-scheme")


def test_estimator_saved_and_loaded(snapshots, tmp_path):
    est = ModLaNet.pendulum_chain(2, h=H, loss=DELLoss(max_step=0.9), options=OPTS).fit(snapshots)
    back = ModLaNet.load(est.save(tmp_path / "m.pt"))
    assert _same(est, back) and back.loss == est.loss and back.options == OPTS and back.h == H
    assert torch.equal(back.predict(Q0, V0, 4).q, est.predict(Q0, V0, 4).q)
    ext = est.extend(3)  # a new model from the same networks keeps the configuration
    assert (ext.h, ext.loss, ext.options) == (H, est.loss, OPTS)


def test_train_keywords_deprecated_but_equal(snapshots):
    with pytest.warns(DeprecationWarning) as rec:
        old = train(ModLaNet.pendulum_chain(2), snapshots, loss="del", h=H, epochs=3, lr=1e-2, batch_size=8, patience=None,
                    progress=False, max_step=0.9)
    message = str(rec[0].message)
    assert "TrainOptions(" in message and "DELLoss(max_step" in message  # names the replacement
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = train(ModLaNet.pendulum_chain(2), snapshots, DELLoss(max_step=0.9), h=H, options=OPTS)
    assert old.history == new.history and old.n_train == new.n_train
    with pytest.raises(bea.BeaTypeError):
        train(ModLaNet.pendulum_chain(2), snapshots, "del", h=H, options=OPTS, epoch=3)  # a misspelt setting


def test_options_objects():
    assert get_loss("del") == DELLoss() and get_loss("acceleration") == AccelerationLoss()
    with pytest.raises(bea.BeaTypeError):
        get_loss(3)
    for bad in (dict(epochs=0), dict(lr=-1.0), dict(val_fraction=1.0), dict(schedule="linear"), dict(patience=0),
                dict(grad_clip=float("nan"))):
        with pytest.raises(bea.BeaValueError):
            TrainOptions(**bad)
    for bad in (dict(normalisation="mass"), dict(inverse_order=-1), dict(max_step=0.0)):
        with pytest.raises(bea.BeaValueError):
            DELLoss(**bad)
    with pytest.raises(dataclasses.FrozenInstanceError):
        OPTS.epochs = 3
    assert decode(encode(DELLoss(inverse_order=2), "loss")) == DELLoss(inverse_order=2)


def test_objective_objects():
    """The string names the object's defaults; the object's parameters change what 'auto' resolves to."""
    assert InverseModifiedLagrangianGP(H).objective == Auto() == InverseModifiedLagrangianGP(H, objective="auto").objective
    assert InverseModifiedLagrangianGP(H, objective="mll").objective == MLL()
    default, early = InverseModifiedLagrangianGP(H), InverseModifiedLagrangianGP(H, objective=Auto(positions_from=2))
    assert [default._resolved_objective(n) for n in (1, 2, 3)] == ["mll", "mll", "positions"]
    assert [early._resolved_objective(n) for n in (1, 2, 3)] == ["mll", "positions", "positions"]
    assert LagrangianGP(H, objective=Auto(positions_from=1))._resolved_objective(3) == "mll"  # it has no positions objective
    with pytest.raises(bea.BeaValueError):
        LagrangianGP(H, objective=Positions())
    with pytest.raises(bea.BeaValueError):
        Auto(positions_from=0)
    with pytest.raises(bea.BeaTypeError):
        InverseModifiedLagrangianGP(H, objective=1)
    assert decode(encode(Auto(positions_from=4, fallback=False), "objective")) == Auto(4, False)


def test_namespaces_hold_the_flat_names():
    """Every flat name of learners is the same object in its family's namespace; ModLaNet's elements are reachable
    from learners.modlanet without a re-export list patched into the model module."""
    import learners
    import learners.modlanet as modlanet
    import learners.neural as neural
    import learners.shadow as shadow
    from learners.modlanet import elements, model

    rooms = (shadow, modlanet, neural)
    homeless = [name for name in learners.__all__
                if not any(getattr(room, name, None) is getattr(learners, name) for room in rooms)]
    # the error and warning roots are bea's, and the model-file error belongs to learners.saving, beside the families
    assert set(homeless) <= {"BeaError", "BeaWarning", "NotRegularError", "ModelFileError"}, homeless
    assert modlanet.AngleOnRod is elements.AngleOnRod and "AngleOnRod" in modlanet.__all__
    assert model.__all__ == ["ModLaNet", "check_parents"]
    for room in rooms:
        assert all(hasattr(room, name) for name in room.__all__)
