"""The conservation score of a fit along held-out trajectories (benchmarks/_conservation_score.py): unchanged by the
energy's unit and constant, no win for a flat energy, and it tells a fit's own system from another one."""

import math

import pytest
import torch

import integrators as I
from learners import InverseModifiedLagrangianGP
from benchmarks._conservation_score import conservation_score, score_of_energies


def test_score_is_unit_free_and_a_flat_energy_cannot_win():
    """Energies ``(steps + 1, J)``: 40 trajectories at levels 0..1 with wiggles of std 1e-3 along each score about
    log(1e-6 * 5/6 / 0.087) = -11.5 (measured -11.64), asserted below -10; ``a E + b`` scores the same (rounding:
    1e-9); the same wiggles on a flat energy (every trajectory at one level) score about 1.4 (module docstring;
    measured 2.05), asserted above 0.5, so it loses to any fit that tells the trajectories apart; a
    non-finite or constant energy scores +inf."""
    g = torch.Generator().manual_seed(0)
    levels = torch.linspace(0.0, 1.0, 40, dtype=torch.float64)
    wiggle = 1e-3 * torch.randn(6, 40, generator=g, dtype=torch.float64)
    good = levels + wiggle
    assert score_of_energies(good) < -10
    assert score_of_energies(7.0 * good - 3.0) == pytest.approx(score_of_energies(good), abs=1e-9)
    flat = 5.0 + wiggle
    assert score_of_energies(flat) > 0.5
    bad = good.clone()
    bad[2, 3] = float("nan")
    assert score_of_energies(bad) == math.inf
    assert score_of_energies(torch.ones(6, 40, dtype=torch.float64)) == math.inf


def test_score_tells_a_fits_own_system_from_another():
    """Pendulum (g = 1), h = 0.3, 12 trajectories of 4 steps in [-1, 1]^2, lengthscale 1 (a fraction of a second):
    H_rec[2] and H_rec[4] along 8 held-out trajectories of the same pendulum score -16.48 / -16.79, along the same
    initial states of a pendulum with g = 1.5 (not conserved by the fit) -4.56 / -4.56. Asserted: below -15 and above
    -6 (margins of 1.5 or more, factors of about 2 in the std along a trajectory)."""
    h, box = 0.3, [(-1.0, 1.0)] * 2
    data = I.data.snapshots(I.systems.pendulum(), h, n_traj=12, n_steps=4, seed=0, domain=box)
    model = InverseModifiedLagrangianGP(h, lengthscale=1.0, noise=1e-10, progress=False).fit(data)
    own = I.data.snapshots(I.systems.pendulum(), h, n_traj=8, n_steps=4, seed=1, domain=box).transpose(0, 1)
    other = I.data.snapshots(I.systems.pendulum(g=1.5), h, n_traj=8, n_steps=4, seed=1, domain=box).transpose(0, 1)
    for N in (2, 4):
        assert conservation_score(model, own, N) < -15, N
        assert conservation_score(model, other, N) > -6, N
