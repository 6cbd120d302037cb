"""The rollout helpers of learners.neural create their tensors where they are told (issue 14, item 4):
``random_initial_states`` takes ``device=``/``dtype=``, ``pendulum_positions`` follows its input.

Runs once per available device (the ``device`` fixture of tests/conftest.py). The draws are made in
float64 on the CPU and only then moved, so the states agree with the CPU's exactly (a copy, no
arithmetic); float32 is the rounding of the same numbers."""

import math

import torch

from learners.neural.initial_states import random_initial_states
from learners.neural.metrics import pendulum_positions


def test_random_initial_states_on_a_device(device):
    want = random_initial_states("double_pendulum", 6, seed=3)
    for system in ("double_pendulum", "three_body"):
        ref = random_initial_states(system, 6, seed=3)
        for dtype in (torch.float64, torch.float32):
            got = random_initial_states(system, 6, seed=3, device=device, dtype=dtype)
            for g, r in zip(got, ref):
                assert g.device.type == torch.device(device).type and g.dtype == dtype
                assert torch.equal(g.cpu(), r.to(dtype))
    assert all(t.dtype == torch.float64 and t.device.type == "cpu" for t in want)


def test_pendulum_positions_follow_the_angles(device):
    theta = torch.tensor([[0.0, math.pi / 2]], dtype=torch.float64, device=device)
    xy = pendulum_positions(theta, lengths=[1.0, 2.0])
    assert xy.device == theta.device and xy.dtype == theta.dtype
    # bob 1 straight down at (0, -1); bob 2 two units to its right: exact in float64 but for cos(pi/2) ~ 6e-17
    torch.testing.assert_close(xy.cpu(), torch.tensor([[0.0, -1.0, 2.0, -1.0]], dtype=torch.float64), rtol=0, atol=1e-15)
