"""Saving and loading fitted models (issue 14, item 3): a loaded model predicts the same numbers without
refitting, per class; files of another class, version or format are refused with ModelFileError."""

import pytest
import torch

import integrators as I
from learners import HNN, LNN, InverseModifiedLagrangianGP, LagrangianGP, MLPBaseline, ModLaNet, VectorFieldModel
from learners.modlanet.elements import CallableTransform, UniformGravity
from learners.saving import FORMAT, ModelFileError

PENDULUM = I.systems.pendulum()
# the loaded posterior is the saved one, bit for bit; 1e-14 leaves room for nothing but rounding
TOL = 1e-14


@pytest.fixture(scope="module")
def snapshots():
    return I.data.snapshots(PENDULUM, 0.5, n_traj=12, n_steps=4, seed=0)


def _max_diff(a, b):
    return float((a - b).detach().abs().max())


@pytest.mark.parametrize("cls", [InverseModifiedLagrangianGP, LagrangianGP])
def test_gp_models_round_trip_without_refitting(cls, snapshots, tmp_path, monkeypatch):
    model = cls(h=0.5, lengthscale=1.0, noise=1e-10, progress=False).fit(snapshots)
    path = model.save(tmp_path / "model.pt")
    # a refit would go through the hyperparameter set-up and the Cholesky solve: forbid both
    from learners.shadow import gp as gp_module
    monkeypatch.setattr(gp_module.FunctionalGP, "condition", lambda *a, **k: pytest.fail("load refitted the GP"))
    loaded = cls.load(path)
    q, v = torch.randn(7, 1, dtype=torch.float64), torch.randn(7, 1, dtype=torch.float64)
    assert _max_diff(loaded.lagrangian(q, v), model.lagrangian(q, v)) <= TOL
    q0, v0 = torch.tensor([[0.3]], dtype=torch.float64), torch.tensor([[0.1]], dtype=torch.float64)
    kw = {"on_extrapolation": "ignore"} if cls is InverseModifiedLagrangianGP else {}
    a, b = model.predict(q0, v0, 20, **kw).q, loaded.predict(q0, v0, 20, **kw).q
    assert _max_diff(a, b) <= TOL
    assert _max_diff(loaded.variance(q, v), model.variance(q, v)) <= TOL
    if cls is InverseModifiedLagrangianGP:
        assert _max_diff(loaded.energy(2)(q, v), model.energy(2)(q, v)) <= TOL
        assert loaded.data_level() == model.data_level()


def _states(n, B=6):
    g = torch.Generator().manual_seed(1)
    return torch.randn(B, n, generator=g, dtype=torch.float64), torch.randn(B, n, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("make", [
    lambda: ModLaNet.pendulum_chain(2, hidden=8, seed=3),
    lambda: ModLaNet.pendulum_chain(2, transform="rod", lengths=[1.0, 0.5], potential=UniformGravity(9.8), pair=None),
    lambda: ModLaNet.bodies(3, hidden=6),
    lambda: LNN(2, 8, seed=1),
    lambda: HNN(2, 8, seed=1),
    lambda: MLPBaseline(2, 8, seed=1),
    lambda: VectorFieldModel(HNN(2, 8, seed=2)),
], ids=["modlanet-mlp", "modlanet-rod", "modlanet-bodies", "lnn", "hnn", "mlp", "vector-field"])
def test_neural_models_round_trip(make, tmp_path):
    model = make()
    with torch.no_grad():  # a trained state, not the initial one: the file must carry the weights
        for p in model.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel()), dtype=p.dtype))
    loaded = type(model).load(model.save(tmp_path / "m.pt"))
    assert type(loaded) is type(model)
    q, v = _states(model.n)
    if isinstance(model, VectorFieldModel):  # its input is z = (q, p), n = 2 n_q
        assert _max_diff(loaded.acceleration(q), model.acceleration(q)) <= TOL
    else:
        assert _max_diff(loaded.acceleration(q, v), model.acceleration(q, v)) <= TOL


def test_other_class_version_or_format_is_refused(snapshots, tmp_path):
    path = LNN(2, 8, seed=1).save(tmp_path / "lnn.pt")
    with pytest.raises(ModelFileError, match="holds a LNN, not a HNN; load it with LNN.load"):
        HNN.load(path)
    torch.save({"format": FORMAT, "version": 99, "class": "LNN", "config": {}, "state": {}}, tmp_path / "v99.pt")
    with pytest.raises(ModelFileError, match="version 99"):
        LNN.load(tmp_path / "v99.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    with pytest.raises(ModelFileError, match="not a model file"):
        LNN.load(tmp_path / "junk.pt")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(ModelFileError, match="not a model file"):
        LNN.load(tmp_path / "other.pt")
    with pytest.raises(RuntimeError, match="not fitted"):
        InverseModifiedLagrangianGP(h=0.5).save(tmp_path / "unfitted.pt")
    # a component a file cannot describe (an arbitrary callable) is refused when saving, not when loading
    model = ModLaNet([-1], CallableTransform(lambda q: torch.cat([q, q], -1), 1, 2), hidden=4)
    with pytest.raises(ModelFileError, match="CallableTransform"):
        model.save(tmp_path / "callable.pt")
    assert not (tmp_path / "callable.pt").exists()


def test_calibration_saved_before_the_variance_rule_warns_on_load(snapshots, tmp_path, monkeypatch):
    """A state saved before the a-posteriori rounding bound has calibration scales fitted to floored variances and no
    variance-rule tag: restoring it keeps them (the held-back data are not saved) but says so, naming the refit; a
    file saved now carries the tag and loads silently."""
    from learners import StaleCalibrationWarning
    from learners.shadow.calibration import Calibration
    from learners.shadow.persist import fitted_state, restore
    from learners.shadow.variance_rounding import VARIANCE_RULE

    model = InverseModifiedLagrangianGP(h=0.5, lengthscale=1.0, noise=1e-10, progress=False).fit(snapshots)
    model._calibration["del"] = Calibration(2.5, 1.0, 0.95, 40)  # 12 trajectories hold none back: as if calibrated
    loaded = InverseModifiedLagrangianGP.load(model.save(tmp_path / "model.pt"))  # silent: warnings are errors here
    assert loaded.calibration["del"].scale == 2.5
    state = fitted_state(model)
    assert state["subclass"]["variance_rule"] == VARIANCE_RULE
    del state["subclass"]["variance_rule"]
    old = InverseModifiedLagrangianGP(h=0.5, lengthscale=1.0, noise=1e-10, progress=False)
    with pytest.warns(StaleCalibrationWarning, match="refit"):
        restore(old, state)
    assert old.calibration["del"].scale == 2.5
    # through the public load, at whatever depth the library reaches it, the warning names the line that called load
    import learners.shadow.lsi as lsi

    tagged = lsi.calibration_state
    monkeypatch.setattr(lsi, "calibration_state", lambda m: {k: v for k, v in tagged(m).items() if k != "variance_rule"})
    path = model.save(tmp_path / "untagged.pt")  # written as before the tag (checksummed: the file is not edited)
    with pytest.warns(StaleCalibrationWarning) as record:
        InverseModifiedLagrangianGP.load(path)
    assert [w.filename for w in record.list] == [__file__]
