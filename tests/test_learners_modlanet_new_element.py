"""A ModLaNet element added in one class (issue 28: an element is its own file plus at most one more): a transform
defined here, in a test module, with the decorator ``traceable`` (and its velocity map by hand, as every traced
transform of the package has) takes the compiled path, whose C is its traced
forward, and steps equal to the eager path."""

import torch

from integrators import VariationalIntegrator
from learners import ModLaNet
from learners.modlanet.elements import Transform, UniformGravity, traceable


@traceable
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


def test_an_element_defined_in_one_class_runs_compiled_equal_to_eager_over_1000_steps():
    """One bead under gravity, midpoint, h = 0.05, 1,000 steps (small swings have period 2 pi a / sqrt(g b) = 2.6,
    so about 20 periods): both paths iterate Newton to rounding level; a one-degree-of-freedom motion is not chaotic, so their
    difference is accumulated rounding, growing about linearly in the steps (measured 6.3e-14 at 1,000 steps in q of
    size 1.2; 1e-12 is issue 28's bound for every front-end)."""
    model = ModLaNet.pendulum_chain(1, transform=AngleOnEllipse(1.0, 0.6), potential=UniformGravity(9.8), pair=None,
                                    learn_masses=False, learn_weights=False)
    q0 = torch.tensor([[1.2], [-0.4]], dtype=torch.float64)
    v0 = torch.tensor([[0.0], [0.5]], dtype=torch.float64)
    sc = VariationalIntegrator(model, 0.05, execution="compiled").solve(q0, v0, 1000)
    se = VariationalIntegrator(model, 0.05, execution="eager").solve(q0, v0, 1000)
    assert sc.execution == "compiled" and se.execution == "eager"
    assert float(se.q.min()) < -1.0  # the bead released at 1.2 swings to the other side (a still one would agree trivially)
    assert float((sc.q - se.q).abs().max()) <= 1e-12
