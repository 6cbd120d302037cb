"""Rollouts (learners.neural.rollout.rollout_variational) take the integrators' compiled path where the
Lagrangian lowers to C (SymPy systems, the GP posterior mean) and agree with the eager path to 1e-12;
a Lagrangian without a C form (a ModLaNet with a plain-callable cell, any torch closure) rolls out eagerly
under the default ``execution="auto"`` (ModLaNets that lower: tests/test_learners_modlanet_compiled.py)."""

import pytest
import torch

import integrators
import integrators.variational as V
from learners import ModLaNet
from learners.modlanet.elements import AngleOnRod
from learners.neural.rollout import rollout_variational


def _rollout(L, q0, v0, steps, mode, monkeypatch, h=0.05):
    monkeypatch.setattr(V, "DEFAULT_EXECUTION", mode)
    traj = rollout_variational(L, q0, v0, h, steps, velocities=False)
    return traj.q, traj.v, traj.valid


@pytest.mark.parametrize("system", ["pendulum", "kepler"])
def test_rollout_compiled_equals_eager(system, monkeypatch):
    """Midpoint steps (h = 0.05) for three initial conditions: measured max |q_compiled - q_eager|
    below 2.3e-13 (pendulum; measured at 2,000 steps), 5e-13 (Kepler, 300 steps). Both paths iterate Newton to rounding
    level; the differences are rounding, accumulated by the dynamics: about 1.7e-15 per step on Kepler
    (1e-12 after 600 steps), and near the pendulum's separatrix far more ((q, v) = (-2, 1): 9e-12 after
    2,000 steps), so the sizes here keep the accumulated rounding below the 1e-12 of issue 13."""
    if system == "pendulum":
        L = integrators.systems.pendulum()
        q0, v0 = torch.tensor([[0.3], [1.0], [-1.0]]), torch.tensor([[0.0], [0.5], [0.3]])
    else:
        L = integrators.systems.kepler()
        q0 = torch.tensor([[1.0, 0.0], [0.0, 1.1], [-0.9, 0.0]])
        v0 = torch.tensor([[0.0, 1.0], [-0.95, 0.0], [0.0, -1.1]])
    steps = 250 if system == "pendulum" else 150
    qc, _, okc = _rollout(L, q0, v0, steps, "compiled", monkeypatch)
    qe, _, oke = _rollout(L, q0, v0, steps, "eager", monkeypatch)
    assert bool(okc.all()) and bool(oke.all())
    assert float((qc - qe).abs().max()) <= 1e-12


def test_rollout_of_a_modlanet_falls_back_to_eager(monkeypatch):
    """A ModLaNet with a potential given as a plain callable has no C form: under "auto" the rollout runs
    eagerly (and equals an explicit eager run); forcing "compiled" raises a ValueError that names the way out."""
    model = ModLaNet.pendulum_chain(1, transform="rod", potential=lambda x: 9.8 * x[..., 1], pair=None,
                                    learn_masses=False, learn_weights=False)
    assert isinstance(model.element_transform(0), AngleOnRod)
    q0, v0 = torch.tensor([[0.3]]), torch.zeros(1, 1)
    qa, _, _ = _rollout(model, q0, v0, 100, "auto", monkeypatch)
    qe, _, _ = _rollout(model, q0, v0, 100, "eager", monkeypatch)
    assert torch.equal(qa, qe)
    with pytest.raises(ValueError, match="execution='auto' or 'eager'"):
        _rollout(model, q0, v0, 100, "compiled", monkeypatch)
