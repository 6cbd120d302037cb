"""A ModLaNet lowered to C (learners.modlanet.lowering) steps on the integrators' compiled path: its C gradient
and Hessian equal torch autograd, compiled and eager rollouts agree to 1e-12, weights changed after lowering
are used (never stale ones), and a model with parts that have no C form falls back to the eager path."""

import pytest
import torch

import integrators.variational as V
from integrators import VariationalIntegrator
from integrators.compiled import CompiledStepper, NotLowerable
from integrators.model_protocol import CompiledPathWarning
from learners import ModLaNet
from learners.modlanet.elements import CallableTransform, NewtonianPair, PotentialCell, UniformGravity
from learners.neural.mlp import MLP

import bea

MODELS = {
    # the paper's setting: learned periodic transform, learned one-body and pair cells (tanh)
    "chain-mlp": lambda: ModLaNet.pendulum_chain(2),
    "chain-rod-softplus": lambda: ModLaNet.pendulum_chain(2, transform="rod", lengths=[1.0, 0.7], activation="softplus",
                                                          hidden=20),
    "chain3-gravity": lambda: ModLaNet.pendulum_chain(3, transform="rod", potential=UniformGravity(9.8), hidden=12),
    "bodies-newton": lambda: ModLaNet.bodies(3, pair=NewtonianPair(1.0), hidden=12, seed=3),
}


def _double_pendulum():
    """Known rods, learned (random) energy cells: a regular Lagrangian whose motions stay bounded."""
    model = ModLaNet.pendulum_chain(2, transform="rod", hidden=24, seed=1)
    model.requires_grad_(False)
    return model


@pytest.mark.parametrize("name", sorted(MODELS))
def test_c_derivatives_equal_autograd(name):
    """Gradient and Hessian of L at 6 random states: the jets do the operations of the model in another order,
    so they differ by rounding: measured max |H_C - H_autograd| 7e-17 (chain-mlp, |H| <= 0.12) to 1.1e-14
    (chain3-gravity, |H| <= 28), i.e. below 4e-16 of the largest entry; 1e-12 absolute leaves a margin of 90."""
    model = MODELS[name]()
    n = model.n
    g = torch.Generator().manual_seed(0)
    x = torch.rand(6, 2 * n, generator=g, dtype=torch.float64) * 2 - 1
    if name.startswith("bodies"):  # bodies kept apart: the Newtonian pair is singular at contact
        x[:, :n] += torch.tensor([0.0, 0.0, 2.0, 0.0, 0.0, 2.0], dtype=torch.float64)
    stepper = CompiledStepper(model, 0.1, bea.get_scheme("midpoint"), n)
    gc, Hc = stepper.lagrangian_derivatives(x)

    def L(y):
        return model(y[:n], y[n:])

    ga = torch.stack([torch.func.grad(L)(y) for y in x]).detach()
    Ha = torch.stack([torch.func.hessian(L)(y) for y in x]).detach()
    assert float(Ha.abs().max()) > 0.1
    assert float((gc - ga).abs().max()) <= 1e-12
    assert float((Hc - Ha).abs().max()) <= 1e-12


@pytest.mark.parametrize("batch", [1, 3])
def test_rollout_compiled_equals_eager(batch):
    """Double pendulum, midpoint, h = 0.05, 100 steps: both paths iterate Newton to rounding level; the
    difference is accumulated rounding, measured 1.2e-14 (batch 1) and 1.4e-14 (batch 3). It grows
    exponentially with the steps (a double pendulum is chaotic: at h = 0.1, 0 up to step 5, 3e-17 at 10,
    7e-15 at 100, 3e-11 at 300), so the run is kept short enough for the 1e-12 of issue 13."""
    model = _double_pendulum()
    q0 = torch.tensor([[0.5, -0.3], [1.0, 0.2], [-0.4, 0.8]], dtype=torch.float64)[:batch]
    v0 = torch.tensor([[0.1, 0.2], [0.0, -0.5], [0.3, 0.0]], dtype=torch.float64)[:batch]
    vc = VariationalIntegrator(model, 0.05, execution="compiled")
    sc = vc.solve(q0, v0, 100)
    se = VariationalIntegrator(model, 0.05, execution="eager").solve(q0, v0, 100)
    assert sc.execution == "compiled" and se.execution == "eager"
    assert float((sc.q - se.q).abs().max()) <= 1e-12


def test_auto_leaves_large_batches_to_the_eager_path(monkeypatch):
    """Under execution="auto", batches up to AUTO_MAX_BATCH take the C loop, larger ones the eager path (batched
    torch is faster per trajectory there)."""
    from learners.modlanet import lowering

    monkeypatch.setattr(lowering, "AUTO_MAX_BATCH", 2)
    monkeypatch.setattr(V, "AUTO_MIN_WORK", 1)
    model = _double_pendulum()
    q0 = torch.tensor([[0.5, -0.3], [1.0, 0.2], [-0.4, 0.8]], dtype=torch.float64)
    vi = VariationalIntegrator(model, 0.05, execution="auto")
    assert vi.solve(q0[:2], torch.zeros(2, 2), 5).execution == "compiled"
    assert vi.solve(q0, torch.zeros(3, 2), 5).execution == "eager"
    assert VariationalIntegrator(model, 0.05, execution="compiled").solve(q0, torch.zeros(3, 2), 5).execution == "compiled"


def test_weights_changed_after_lowering_are_used():
    """An integrator built (and its C compiled) before the weights change -- training continued in place, or a
    state dict loaded -- steps the current model: equal to an eager run of the changed model to 1e-12, and
    unlike the run before the change."""
    model = _double_pendulum()
    q0, v0 = torch.tensor([[0.5, -0.3]], dtype=torch.float64), torch.tensor([[0.1, 0.2]], dtype=torch.float64)
    vi = VariationalIntegrator(model, 0.05, execution="compiled")
    before = vi.solve(q0, v0, 60).q
    with torch.no_grad():  # as an optimiser step does: in place
        for p in model.pair.parameters():
            p.mul_(1.5)
        model.c1.fill_(1.3)
    after = vi.solve(q0, v0, 60).q
    eager = VariationalIntegrator(model, 0.05, execution="eager").solve(q0, v0, 60).q
    assert float((after - before).abs().max()) > 1e-3
    assert float((after - eager).abs().max()) <= 1e-12
    other = _double_pendulum()
    other.load_state_dict({k: v * 0.9 if v.is_floating_point() else v for k, v in model.state_dict().items()})
    model.load_state_dict(other.state_dict())
    eager = VariationalIntegrator(model, 0.05, execution="eager").solve(q0, v0, 60).q
    assert float((vi.solve(q0, v0, 60).q - eager).abs().max()) <= 1e-12


def test_changed_structure_is_refused():
    model = _double_pendulum()
    vi = VariationalIntegrator(model, 0.05, execution="compiled")
    q0, v0 = torch.tensor([[0.5, -0.3]], dtype=torch.float64), torch.zeros(1, 2, dtype=torch.float64)
    vi.solve(q0, v0, 5)
    model.potential = None
    with pytest.raises(RuntimeError, match="structure .* changed"):
        vi.solve(q0, v0, 5)


def test_changed_constant_is_refused():
    """A known cell's constant (UniformGravity.g) is a literal of the traced C: changing it after the build is a
    change of structure (refused, not stepped with the old g), and a new integrator steps the new g as eager does."""
    from bea.errors import BeaRuntimeError

    model = ModLaNet.pendulum_chain(2, transform="rod", potential=UniformGravity(9.8), pair=None, learn_masses=False,
                                    learn_weights=False)
    q0, v0 = torch.tensor([[0.5, -0.3]], dtype=torch.float64), torch.zeros(1, 2, dtype=torch.float64)
    vi = VariationalIntegrator(model, 0.05, execution="compiled")
    before = vi.solve(q0, v0, 20).q
    model.potential.g = 4.9
    with pytest.raises(BeaRuntimeError):
        vi.solve(q0, v0, 20)
    after = VariationalIntegrator(model, 0.05, execution="compiled").solve(q0, v0, 20).q
    eager = VariationalIntegrator(model, 0.05, execution="eager").solve(q0, v0, 20).q
    assert float((after - before).abs().max()) > 1e-3  # the new g moves the trajectory
    assert float((after - eager).abs().max()) <= 1e-12  # and the new form is the changed model's (issue 13's 1e-12)


def test_estimator_settings_and_replaced_parameters():
    """The estimator's own settings (the training step h, the learn flags) are not part of the compiled form: changing
    them keeps a working integrator working, bit for bit. A parameter replaced by a new tensor object (same shape)
    is a change of structure: refused, not stepped with the traced tensor's old values."""
    from bea.errors import BeaRuntimeError

    model = ModLaNet.pendulum_chain(2, transform="rod", potential=UniformGravity(9.8), pair=None)
    q0, v0 = torch.tensor([[0.5, -0.3]], dtype=torch.float64), torch.zeros(1, 2, dtype=torch.float64)
    vi = VariationalIntegrator(model, 0.05, execution="compiled")
    before = vi.solve(q0, v0, 20).q
    model.h, model.learn_masses = 0.1, False
    assert torch.equal(vi.solve(q0, v0, 20).q, before)
    name, old = next((k, p) for k, p in model.named_parameters() if p.dim() == 0 or p.numel() == 1)
    owner = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
    setattr(owner, name.rpartition(".")[2], torch.nn.Parameter(old.detach() * 3.0))
    with pytest.raises(BeaRuntimeError):
        vi.solve(q0, v0, 20)


class _OwnPotential(PotentialCell):
    """A subclass overriding the computation: its C form would be its parent's."""

    def forward(self, x):
        return 2.0 * super().forward(x)


def _not_lowerable(kind):
    if kind == "subclass-cell":
        model = ModLaNet.pendulum_chain(2, transform="rod", hidden=12)
        model.potential = _OwnPotential(2, hidden=4).double()
        return model
    if kind == "activation-module":
        model = ModLaNet.pendulum_chain(2, transform="rod", hidden=12)
        cell = next(m for m in model.modules() if isinstance(m, MLP))
        cell.linears.append(torch.nn.Tanh())
        return model
    if kind == "callable-cell":
        return ModLaNet.pendulum_chain(2, transform="rod", potential=lambda x: 9.8 * x[..., 1], pair=None)
    if kind == "callable-transform":
        rod = CallableTransform(lambda q: torch.cat([torch.sin(q), -torch.cos(q)], -1), 1, 2)
        return ModLaNet.pendulum_chain(2, transform=rod, hidden=12)
    model = ModLaNet.pendulum_chain(2, transform="rod", hidden=12)
    return model.float()  # float32 parameters: the C form would compute something else


@pytest.mark.parametrize("kind", ["callable-cell", "callable-transform", "float32", "subclass-cell", "activation-module"])
def test_not_lowerable_falls_back_to_eager(kind, monkeypatch):
    """Parts without a C form raise NotLowerable; the integrator ("auto") then steps eagerly, with the same
    result as an explicit eager run, and execution="compiled" names the reason."""
    model = _not_lowerable(kind)
    with pytest.raises(NotLowerable):
        model.c_lagrangian()
    if kind in ("float32", "subclass-cell", "activation-module"):
        return
    q0, v0 = torch.tensor([[0.5, -0.3]], dtype=torch.float64), torch.tensor([[0.1, 0.2]], dtype=torch.float64)
    monkeypatch.setattr(V, "AUTO_MIN_WORK", 1)  # "auto" tries to compile even this short run
    with pytest.warns(CompiledPathWarning):  # auto says once why it steps eagerly
        sa = VariationalIntegrator(model, 0.05, execution="auto").solve(q0, v0, 30)
    se = VariationalIntegrator(model, 0.05, execution="eager").solve(q0, v0, 30)
    assert sa.execution == "eager" and torch.equal(sa.q, se.q)
    with pytest.raises(ValueError, match="no C form"):
        VariationalIntegrator(model, 0.05, execution="compiled").solve(q0, v0, 5)
