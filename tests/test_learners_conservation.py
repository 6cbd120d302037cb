"""The conservation score of a fit along held-out trajectories (learners/shadow/conservation.py): unchanged by the
energy's unit and constant, no win for a flat energy, and it tells a fit's own system from another one."""

import math

import pytest
import torch

import integrators as I
from learners import InverseModifiedLagrangianGP
from learners.shadow.conservation import conservation_score, score_of_energies


def test_score_is_unit_free_and_a_flat_energy_cannot_win():
    """Energies ``(steps + 1, J)``: trajectories at distinct levels with small wiggles along each score log(1e-6 /
    var of the levels); ``a E + b`` scores the same (rounding: 1e-9); the same wiggles on a flat energy (every
    trajectory at one level) score about log 5 (independent wiggles: the mean variance along 6 snapshots is 5/6 of theirs,
    the variance of 6-snapshot means 1/6; measured 2.21 on 40 trajectories), asserted above 0.5; a
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
    H_rec[2] and H_rec[4] along 8 held-out trajectories of the same pendulum score -11.80 / -11.87, along the same
    initial states of a pendulum with g = 1.5 (not conserved by the fit) -4.03 / -4.03. Asserted: below -10.5 and above
    -5.5 (margins of 1.3 and 1.5, factors of about 2 in the wiggle's std)."""
    h, box = 0.3, [(-1.0, 1.0)] * 2
    data = I.data.snapshots(I.systems.pendulum(), h, n_traj=12, n_steps=4, seed=0, domain=box)
    model = InverseModifiedLagrangianGP(h, lengthscale=1.0, noise=1e-10, progress=False).fit(data)
    own = I.data.snapshots(I.systems.pendulum(), h, n_traj=8, n_steps=4, seed=1, domain=box).transpose(0, 1)
    other = I.data.snapshots(I.systems.pendulum(g=1.5), h, n_traj=8, n_steps=4, seed=1, domain=box).transpose(0, 1)
    for N in (2, 4):
        assert conservation_score(model, own, N) < -10.5, N
        assert conservation_score(model, other, N) > -5.5, N
