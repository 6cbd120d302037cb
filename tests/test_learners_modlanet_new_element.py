"""A ModLaNet element added in one class (issue 28: an element is its own file plus at most one more): a transform
and an energy cell defined here, in a test module, with the decorator ``traceable`` (the transform with its velocity
map by hand, as every traced transform of the package has) take the compiled path, whose C is their traced forward,
and step equal to the eager path. The decorator adds to a process-wide set: each test restores it
(fixture ``restore_traceable``)."""

import pytest
import torch

from bea.errors import BeaRuntimeError, BeaTypeError
from integrators import VariationalIntegrator
from learners import ModLaNet
from learners.modlanet.elements import TRACEABLE, Transform, UniformGravity, traceable


@pytest.fixture
def restore_traceable():
    """The classes a test decorates leave TRACEABLE with the test (other tests see the package's set)."""
    saved = set(TRACEABLE)
    yield
    TRACEABLE.intersection_update(saved)
    assert TRACEABLE == saved


class AngleOnEllipse(Transform):
    r"""A bead on an elliptic wire: :math:`\theta \mapsto (a\sin\theta, -b\cos\theta)`."""

    def __init__(self, a: float, b: float):
        super().__init__()
        self.in_dim, self.out_dim = 1, 2
        self.register_buffer("axes", torch.tensor([a, b], dtype=torch.float64))

    def forward(self, q):
        th = q[..., 0]
        return self.axes * torch.stack([torch.sin(th), -torch.cos(th)], -1)

    def tangent(self, q, qdot):
        # by hand, as the package's transforms do: the default torch.func.jvp is not traced (its layout checks)
        th, w = q[..., 0], qdot[..., 0]
        s, c = torch.sin(th), torch.cos(th)
        return self.axes * torch.stack([s, -c], -1), self.axes * (w[..., None] * torch.stack([c, s], -1))


def test_an_element_defined_in_one_class_runs_compiled_equal_to_eager_over_300_steps(restore_traceable):
    """One bead under gravity, midpoint, h = 0.05, 300 steps (small swings have period 2 pi a / sqrt(g b) = 2.6, so
    about 5 periods; the bead released at 1.2 passes q < -1 within its first period): both paths iterate Newton to
    rounding level; a one-degree-of-freedom motion is not chaotic, so their difference is accumulated rounding,
    growing about linearly in the steps (measured 6.3e-14 at 1,000 steps in q of size 1.2; 1e-12 is issue 28's bound
    for every front-end)."""
    ellipse = traceable(AngleOnEllipse)  # the decorator, applied inside the test so that the fixture undoes it
    model = ModLaNet.pendulum_chain(1, transform=ellipse(1.0, 0.6), potential=UniformGravity(9.8), pair=None,
                                    learn_masses=False, learn_weights=False)
    q0 = torch.tensor([[1.2], [-0.4]], dtype=torch.float64)
    v0 = torch.tensor([[0.0], [0.5]], dtype=torch.float64)
    sc = VariationalIntegrator(model, 0.05, execution="compiled").solve(q0, v0, 300)
    se = VariationalIntegrator(model, 0.05, execution="eager").solve(q0, v0, 300)
    assert sc.execution == "compiled" and se.execution == "eager"
    assert float(se.q.min()) < -1.0  # the bead released at 1.2 swings to the other side (a still one would agree trivially)
    assert float((sc.q - se.q).abs().max()) <= 1e-12


def _spring(anharmonic: bool) -> type:
    r"""A spring cell class named ``Spring`` (as a notebook cell edited and re-run defines it): :math:`U_1(x) =
    \tfrac k2 |x|^2`, plus :math:`\tfrac k4 |x|^4` if ``anharmonic``; ``k`` a float (no tensor tells the two apart)."""

    @traceable
    class Spring(torch.nn.Module):
        def __init__(self, k: float):
            super().__init__()
            self.k = k

        def forward(self, x):
            r2 = (x * x).sum(-1)
            return 0.5 * self.k * r2 + (0.25 * self.k * r2 * r2 if anharmonic else 0.0)

    return Spring


def test_a_cell_class_redefined_under_its_name_is_compiled_anew_equal_to_eager(restore_traceable):
    """A decorated energy cell, and the per-model cache of traced forms keyed on the class object: ``Spring`` (harmonic)
    is compiled, then replaced on the same model by another class of the same name and settings (anharmonic). The
    second compiled solve must trace the new class: keyed on the name it reused the harmonic C (a difference of order
    1 from eager). One free body in the plane, k = 4, midpoint, h = 0.05, 200 steps (period of small oscillations
    pi, so about 3 periods; amplitude 1, where the quartic term is as large as the quadratic); 1e-12 as above
    (a non-chaotic motion: rounding only)."""
    harmonic, anharmonic = _spring(False), _spring(True)
    assert harmonic.__name__ == anharmonic.__name__ and harmonic is not anharmonic
    model = ModLaNet.bodies(1, potential=harmonic(4.0), pair=None, learn_masses=False, learn_weights=False)
    q0 = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    v0 = torch.tensor([[0.0, 0.8]], dtype=torch.float64)
    VariationalIntegrator(model, 0.05, execution="compiled").solve(q0, v0, 1)  # caches the harmonic form
    model.potential = anharmonic(4.0)
    sc = VariationalIntegrator(model, 0.05, execution="compiled").solve(q0, v0, 200)
    se = VariationalIntegrator(model, 0.05, execution="eager").solve(q0, v0, 200)
    assert sc.execution == "compiled"
    assert float((se.q - q0).abs().max()) > 0.5  # it moves (two resting solves would agree trivially)
    assert float((sc.q - se.q).abs().max()) <= 1e-12


def test_a_transform_with_the_default_tangent_is_refused_at_decoration(restore_traceable):
    """torch.func.jvp (Transform.tangent's default) is not traced; the decorator says so at once, naming the fix."""

    class Parabola(Transform):
        def forward(self, q):
            return torch.stack([q[..., 0], q[..., 0] ** 2], -1)

    with pytest.raises(BeaTypeError, match="write tangent by hand"):
        traceable(Parabola)
    assert Parabola not in TRACEABLE


def test_a_tensor_attribute_replaced_after_compiling_is_not_stepped_with_its_old_values(restore_traceable):
    """A decorated cell holding its constant as a plain tensor attribute (not a buffer): the compiled form reads that
    tensor object, so replacing it by a new one must retrace (a new integrator) or refuse (the old one) -- it was stepped
    with the old values, 2.0 away from eager. A harmonic spring, k 4 -> 1 by a new tensor; 100 steps, 1e-12 as above."""

    @traceable
    class TensorSpring(torch.nn.Module):
        def __init__(self, k: float):
            super().__init__()
            self.k = torch.tensor(k, dtype=torch.float64)

        def forward(self, x):
            return 0.5 * self.k * (x * x).sum(-1)

    model = ModLaNet.bodies(1, potential=TensorSpring(4.0), pair=None, learn_masses=False, learn_weights=False)
    q0 = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    v0 = torch.tensor([[0.0, 0.8]], dtype=torch.float64)
    old = VariationalIntegrator(model, 0.05, execution="compiled")
    old.solve(q0, v0, 1)
    model.potential.k = torch.tensor(1.0, dtype=torch.float64)
    sc = VariationalIntegrator(model, 0.05, execution="compiled").solve(q0, v0, 100)
    se = VariationalIntegrator(model, 0.05, execution="eager").solve(q0, v0, 100)
    assert sc.execution == "compiled" and float((se.q - q0).abs().max()) > 0.5
    assert float((sc.q - se.q).abs().max()) <= 1e-12
    with pytest.raises(BeaRuntimeError, match="changed after it was compiled"):
        old.solve(q0, v0, 5)


def test_traceable_refuses_what_is_not_a_module_class():
    """The decorator takes an nn.Module class; anything else is a typed error naming what it got (nothing is added)."""
    before = set(TRACEABLE)
    for thing in (lambda x: x, torch.nn.Linear(1, 1), int):
        with pytest.raises(BeaTypeError, match="nn.Module class"):
            traceable(thing)
    assert TRACEABLE == before


def test_a_tensor_in_a_list_attribute_replaced_after_compiling_is_compiled_anew(restore_traceable):
    """As above, the tensor held in a list attribute: compared by ``repr`` (rounded to 4 digits), k 4.01 -> 4.01004 kept
    the plan and the old form (3.9e-5 from eager); by identity the new integrator retraces. 100 steps, 1e-12."""

    @traceable
    class ListSpring(torch.nn.Module):
        def __init__(self, k: float):
            super().__init__()
            self.ks = [torch.tensor(k, dtype=torch.float64)]

        def forward(self, x):
            return 0.5 * self.ks[0] * (x * x).sum(-1)

    model = ModLaNet.bodies(1, potential=ListSpring(4.01), pair=None, learn_masses=False, learn_weights=False)
    q0 = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    v0 = torch.tensor([[0.0, 0.8]], dtype=torch.float64)
    VariationalIntegrator(model, 0.05, execution="compiled").solve(q0, v0, 1)
    model.potential.ks[0] = torch.tensor(4.01004, dtype=torch.float64)
    sc = VariationalIntegrator(model, 0.05, execution="compiled").solve(q0, v0, 100)
    se = VariationalIntegrator(model, 0.05, execution="eager").solve(q0, v0, 100)
    assert sc.execution == "compiled"
    assert float((sc.q - se.q).abs().max()) <= 1e-12
