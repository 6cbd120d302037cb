"""identifiability.check_energy's choice of states and its failure paths, on a stand-in model (no fit: seconds).

The stand-in's energy is the exact one of three harmonic oscillators at the states it is given, with a constant std
``S``, so the recorded ratio has a closed form: ``S`` over the RMS of the trajectories' energy differences to the
reference's trajectory (each compared trajectory weighted equally by :func:`spread_picks`)."""

import math
import types
import warnings

import pytest
import torch

from learners.shadow import identifiability as I
from learners.shadow.held_states import midpoint_states, spread_picks
from learners.shadow.hyperparameters import IdentifiabilityWarning

OMEGA = torch.tensor([1.0, 1.3, 1.7], dtype=torch.float64)
H = 0.1
S = 2e-3  # the stand-in's std


def _trajectories(count: int, steps: int, seed: int = 0, energies: bool = False):
    """Exact motions of the oscillators (count, steps + 1, 3), each conserving its own energy sum(w^2 A^2) / 2
    (returned too with ``energies``)."""
    g = torch.Generator().manual_seed(seed)
    A = 0.2 + torch.rand(count, 1, 3, generator=g, dtype=torch.float64)
    phase = 2 * math.pi * torch.rand(count, 1, 3, generator=g, dtype=torch.float64)
    t = H * torch.arange(steps + 1, dtype=torch.float64)[None, :, None]
    T = A * torch.cos(OMEGA * t + phase)
    return (T, 0.5 * (OMEGA * A[:, 0]).pow(2).sum(-1)) if energies else T


def _energy(q, v):
    return 0.5 * (v.pow(2) + OMEGA.pow(2) * q.pow(2)).sum(-1)


def _model(mean_nan=False, calibration=("energy", "energy_differences"), truncation=0.5):
    def energy(order, return_std, reference):
        def at(q, v):
            mean = _energy(q, v) - _energy(*reference)
            return mean * (math.nan if mean_nan else 1.0), torch.full_like(mean, S)
        return at
    cal = {k: types.SimpleNamespace(truncation_ratio=truncation) for k in calibration}
    return types.SimpleNamespace(objective_used="positions", n=3, h=H, history={}, _calibration=cal,
                                 _from_standard=lambda x: x, energy=energy)


def test_states_come_from_every_held_back_trajectory():
    """8 long trajectories (60 steps): the ratio is S over the RMS of the 7 other trajectories' energy differences
    (the exact energies; the check's central-difference
    velocities are off by O(h^2 w^2 / 6) = 5e-3 relative at most: tolerance 2%); the first 41 midpoints in order (the
    selection before) all lie on one trajectory, whose energy is conserved, and gave a ratio above the limit (measured
    2.2e-3 now, 0.74 before)."""
    T, E = _trajectories(8, 60, energies=True)
    m = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("error", IdentifiabilityWarning)  # no warning: far below the limit
        I.check_energy(m, T)
    expect = S / float((E[1:] - E[0]).pow(2).mean().sqrt())
    assert m.history["energy_resolution"] == pytest.approx(expect, rel=2e-2)
    assert expect < I.ENERGY_LIMIT
    q, v = (x.reshape(-1, 3)[:I.ENERGY_STATES] for x in midpoint_states(T, H))
    before = S / float((_energy(q[1:], v[1:]) - _energy(q[0], v[0])).pow(2).mean().sqrt())
    assert before > 10 * I.ENERGY_LIMIT, before


def test_spread_picks_one_per_trajectory_first():
    t, j = spread_picks(8, 58, 41)
    assert t[:8].tolist() == list(range(8)) and j[:8].tolist() == [0] * 8
    assert torch.bincount(t).tolist() == [6] + [5] * 7 and sorted(set(j.tolist())) == [0, 11, 23, 34, 46, 57]
    t, j = spread_picks(50, 3, 41)
    assert len(set(t.tolist())) == 41 and t[0] == 0 and t[-1] == 49 and not j.any()
    assert spread_picks(3, 2, 41)[0].numel() == 6


def test_too_few_trajectories_are_not_judged():
    m = _model()
    I.check_energy(m, _trajectories(I.ENERGY_MIN_TRAJECTORIES - 1, 60))
    assert "energy_resolution" not in m.history
    assert "held-back trajectories 2, fewer than the 3" in m.history["energy_resolution_error"]


def test_a_non_finite_ratio_is_recorded_and_warned():
    m = _model(mean_nan=True)
    with pytest.warns(IdentifiabilityWarning, match="energy is not determined"):
        I.check_energy(m, _trajectories(8, 10))
    assert "energy_resolution" not in m.history and "non-finite" in m.history["energy_resolution_error"]


@pytest.mark.parametrize("calibration, truncation, says", [
    ((), None, ["uncalibrated", "more trajectories, or a smaller step h", "unknown"]),
    (("energy_differences",), None, ["calibrated std", "unknown"]),
    (("energy", "energy_differences"), 2.0, ["calibrated std", "truncation of mod_N dominates"]),
    (("energy", "energy_differences"), 0.5, ["calibrated std", "the GP's error dominates: more trajectories"])])
def test_the_warning_names_only_what_the_calibration_supports(monkeypatch, calibration, truncation, says):
    monkeypatch.setattr(I, "ENERGY_LIMIT", 0.0)
    m = _model(calibration=calibration, truncation=truncation)
    with pytest.warns(IdentifiabilityWarning, match="energy is poorly determined") as caught:
        I.check_energy(m, _trajectories(8, 10))
    text = str(caught[0].message)
    assert all(s in text for s in says), text
    assert ("uncalibrated" in text) == (not calibration)
