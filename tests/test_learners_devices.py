"""Devices and dtypes in ``learners`` (issue 29, item 5): the three families -- the shadow GPs (RBF and
mechanical kernel, ``LagrangianGP``), ModLaNet and the neural baselines -- make every tensor where their data
are, in float64, and never from torch's process-wide defaults.

Two checks, each a tiny fit + predict per family:

* **Wrong defaults.** Under :func:`wrong_defaults` torch's default device is ``meta`` (tensors with no data)
  and its default dtype float32. A tensor the code makes without ``device=`` lands on ``meta`` and the first
  operation mixing it with the CPU data raises; one made without ``dtype=`` is float32 and drags results
  (or the C code's inputs) off float64. The data are CPU float64, so everything must come back CPU float64
  and *bit for bit* what the same calls give under the ordinary defaults (tolerance 0: the same operations
  on the same numbers). This exercises every tensor-creating line the runs reach, with no GPU.
* **Every available device** (``cpu`` always, ``cuda`` when present, parametrised and skipped with the
  reason otherwise): the results are on the data's device, float64, and equal to the CPU's to 1e-9
  (float64 everywhere; only the order of reductions differs on a GPU, ~1e-14 relative per solve, amplified by
  the GP's conditioning, ~1e8 at noise 1e-10, into ~1e-9 at most over a few integrator steps).

Models are ``nn.Module`` s: a neural model built with ``device=`` or moved with ``.to(device)`` runs there.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from integrators import systems
from integrators.data import snapshots
from learners.neural.options import TrainOptions

H = 0.1
PENDULUM = systems.pendulum()
GP_FIXED = dict(lengthscale=[1.8, 4.0], noise=1e-10, progress=False)  # fixed hyperparameters: no search

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")),
    pytest.param("mps", marks=pytest.mark.skip(reason="MPS has no float64, in which the learners compute")),
]


@contextlib.contextmanager
def wrong_defaults():
    """torch's default device ``meta`` and default dtype float32 for the block, restored after it."""
    device, dtype = torch.get_default_device(), torch.get_default_dtype()
    torch.set_default_device("meta")
    torch.set_default_dtype(torch.float32)
    try:
        yield
    finally:
        torch.set_default_device(device)
        torch.set_default_dtype(dtype)


def _data(device="cpu"):
    S = snapshots(PENDULUM, H, 6, 5, seed=0)
    q0 = torch.tensor([[0.3], [0.8]], dtype=torch.float64, device="cpu")
    v0 = torch.tensor([[0.0], [0.2]], dtype=torch.float64, device="cpu")
    return S.to(device), q0.to(device), v0.to(device)


# ------------------------------------------------------------------------------------------ the three families
def shadow_rbf(device):
    from learners import InverseModifiedLagrangianGP

    S, q0, v0 = _data(device)
    gp = InverseModifiedLagrangianGP(H, **GP_FIXED).fit(S)
    traj = gp.predict(q0, v0, 4, return_std=True, on_extrapolation="ignore")
    E, E_std = gp.energies(traj.q, return_std=True)
    return {"q": traj.q, "p": traj.p, "std": traj.std[1:-1], "energy": E, "energy_std": E_std,
            "residual": gp.del_residuals(S, return_std=False)}


def shadow_lagrangian_gp(device):
    from learners import LagrangianGP

    S, q0, v0 = _data(device)
    gp = LagrangianGP(H, **GP_FIXED).fit(S)
    traj = gp.predict(q0, v0, 4)
    return {"q": traj.q, "p": traj.p, "v": gp.velocities(traj.q)}


def shadow_mechanical(device, model=None):
    from learners import InverseModifiedLagrangianGP

    S, q0, v0 = _data(device)
    # built by the caller (outside wrong_defaults: a GPyTorch kernel template is made with the defaults, as any
    # nn.Module, and copied to the data's device by the fit); three evaluations of the hyperparameter search
    gp = (model or InverseModifiedLagrangianGP(H, kernel="mechanical", iterations=3, progress=False)).fit(S)
    traj = gp.predict(q0, v0, 3, return_std=True, on_extrapolation="ignore")
    return {"q": traj.q, "std": traj.std[1:-1]}


def modlanet(device):
    from learners import predict_positions, train
    from learners.modlanet import ModLaNet

    S, q0, v0 = _data(device)
    model = ModLaNet.pendulum_chain(1, transform="mlp", hidden=8, transform_hidden=4, device=device)
    train(model, S, loss="del", h=H, options=TrainOptions(epochs=2, patience=None, progress=False))
    return {"q": predict_positions(model, q0, v0, 3, H, order=0).q, "L": model(q0, v0)}


def neural(device):
    from learners import rollout_ode, rollout_variational, train
    from learners.neural.baselines import LNN, MLPBaseline

    S, q0, v0 = _data(device)
    lnn = LNN(1, 8, seed=0, device=device)
    train(lnn, S, loss="del", h=H, options=TrainOptions(epochs=2, patience=None, progress=False))
    rolled = rollout_variational(lnn, q0, v0, H, 3)
    mlp = MLPBaseline(1, 8, seed=0, device=device)
    times = H * torch.arange(4, dtype=torch.float64, device=q0.device)
    ode = rollout_ode(mlp, q0, v0, times)
    return {"q": rolled.q, "p": rolled.p, "v": rolled.v, "ode_q": ode.q, "ode_v": ode.v}


FAMILIES = {"shadow_rbf": shadow_rbf, "shadow_lagrangian_gp": shadow_lagrangian_gp, "modlanet": modlanet,
            "neural": neural}


def _check_place(out: dict, device, family: str) -> None:
    for name, x in out.items():
        assert x.device.type == torch.device(device).type, (family, name, x.device)
        assert x.dtype == torch.float64, (family, name, x.dtype)
        assert bool(torch.isfinite(x).all()), (family, name)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_no_tensor_from_the_global_defaults(family):
    want = FAMILIES[family]("cpu")
    with wrong_defaults():
        got = FAMILIES[family]("cpu")
    _check_place(got, "cpu", family)
    for name in want:
        assert torch.equal(got[name], want[name]), (family, name, float((got[name] - want[name]).abs().max()))


def test_the_mechanical_kernel_under_wrong_defaults():
    from learners import InverseModifiedLagrangianGP

    want = shadow_mechanical("cpu")
    model = InverseModifiedLagrangianGP(H, kernel="mechanical", iterations=3, progress=False)
    with wrong_defaults():
        got = shadow_mechanical("cpu", model)
    _check_place(got, "cpu", "mechanical")
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_the_harness_catches_a_tensor_made_from_the_defaults():
    """Not vacuous: under wrong_defaults a tensor made without device= meets the CPU data and fails, one made
    without dtype= is float32."""
    x = torch.ones(3, dtype=torch.float64, device="cpu")
    with wrong_defaults():
        with pytest.raises((RuntimeError, NotImplementedError)):
            float((x + torch.zeros(3, dtype=torch.float64)).sum())
        assert torch.zeros(3, device="cpu").dtype == torch.float32
    assert torch.get_default_device().type == "cpu" and torch.get_default_dtype() == torch.float64  # restored


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_fit_and_predict_on_every_device(family, device):
    got = FAMILIES[family](device)
    _check_place(got, device, family)
    if device != "cpu":
        want = FAMILIES[family]("cpu")
        for name in want:
            assert float((got[name].cpu() - want[name]).abs().max()) <= 1e-9, (family, name)


@pytest.mark.parametrize("device", DEVICES)
def test_a_neural_model_moves_with_to(device):
    """Built on the CPU, moved with .to(): the same network (the seed's draws are made on the CPU), run there."""
    from learners import rollout_variational
    from learners.neural.baselines import LNN

    _, q0, v0 = _data()
    here = LNN(1, 8, seed=0)
    moved = LNN(1, 8, seed=0).to(device)
    built = LNN(1, 8, seed=0, device=device)
    for m in (moved, built):
        assert all(p.device.type == torch.device(device).type and p.dtype == torch.float64 for p in m.parameters())
        assert all(torch.equal(a.cpu(), b) for a, b in zip(m.state_dict().values(), here.state_dict().values()))
    out = rollout_variational(moved, q0.to(device), v0.to(device), H, 3)
    _check_place({"q": out.q, "v": out.v}, device, "LNN.to")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["InverseModifiedLagrangianGP", "LagrangianGP"])
def test_a_fitted_gp_moves_with_to(kind, device):
    """``.to(device)`` moves the whole fitted state (posterior, data, units); predictions there equal those of
    the model before the move (exactly on the CPU, where the move rebuilds the same numbers; 1e-9 elsewhere, as
    above). A conversion to another dtype is refused: the models compute in float64."""
    import learners
    from bea.errors import BeaTypeError

    S, q0, v0 = _data()
    gp = getattr(learners, kind)(H, **GP_FIXED).fit(S)
    want = gp.predict(q0, v0, 4).q
    assert gp.to(device) is gp and gp.gp._beta.device.type == torch.device(device).type
    got = gp.predict(q0.to(device), v0.to(device), 4).q
    assert got.device.type == torch.device(device).type and got.dtype == torch.float64
    assert float((got.cpu() - want).abs().max()) <= (0.0 if device == "cpu" else 1e-9)
    with pytest.raises(BeaTypeError, match="float64"):
        gp.float()


def test_networks_are_built_on_the_cpu_whatever_the_defaults():
    """Without ``device=`` a network is made on the CPU in float64 (not on torch's default device or dtype), with
    the seed's weights: the same state as under the ordinary defaults, bit for bit."""
    from learners.modlanet import ModLaNet
    from learners.neural.baselines import HNN, LNN, MLPBaseline

    builders = {"LNN": lambda: LNN(2, 8, seed=1), "HNN": lambda: HNN(2, 8, seed=1),
                "MLPBaseline": lambda: MLPBaseline(2, 8, seed=1),
                "ModLaNet": lambda: ModLaNet.pendulum_chain(2, transform="mlp", hidden=8, transform_hidden=4, seed=1)}
    for name, build in builders.items():
        want = build().state_dict()
        with wrong_defaults():
            got = build().state_dict()
        for key, x in got.items():
            assert x.device.type == "cpu" and x.dtype == want[key].dtype, (name, key, x.device, x.dtype)
            assert torch.equal(x, want[key]), (name, key)
        assert all(x.dtype == torch.float64 for x in got.values() if x.is_floating_point()), name
