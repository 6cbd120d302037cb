"""VariationalIntegrator.solve returns one type, a Trajectory (formerly Solution); the old tensor / tuple uses
still work, with a DeprecationWarning, for one release."""

import warnings

import pytest
import torch

from integrators import Trajectory, VariationalIntegrator, systems

PENDULUM = systems.pendulum()


@pytest.fixture(scope="module")
def run():
    vi = VariationalIntegrator(PENDULUM, 0.1, execution="eager")
    q0, v0 = torch.tensor([[0.3], [1.0]], dtype=torch.float64), torch.zeros(2, 1, dtype=torch.float64)
    return vi, q0, v0, vi.solve(q0, v0, 20)


def test_solution_fields_and_newton_statistics(run):
    vi, q0, v0, sol = run
    assert isinstance(sol, Trajectory) and sol.q.shape == (21, 2, 1) and sol.valid.shape == (21, 2)
    assert sol.valid.dtype == torch.bool and sol.all_valid and sol.steps == 20
    assert torch.equal(sol.q[0], q0)
    # eager path: one Newton solve per step, each at least one Jacobian evaluation
    assert sol.eager_steps == 20 and sol.compiled_steps == 0 and sol.execution == "eager"
    assert sol.newton_iterations >= 20
    assert "newton_iterations" in repr(sol) and "failed trajectories: 0" in repr(sol)
    # the same solution from solve_from_positions, starting at its first two rows
    again = vi.solve_from_positions(sol.q[0], sol.q[1], 20)
    assert isinstance(again, Trajectory) and float((again.q - sol.q).abs().max()) <= 1e-12


def test_mask_mode_returns_a_solution_with_invalid_rows():
    vi = VariationalIntegrator(PENDULUM, 0.1, max_step=0.5, execution="eager")
    # the second state needs a step longer than max_step: it is stopped after its first position
    sol = vi.solve(torch.tensor([[0.1], [0.1]]), torch.tensor([[0.0], [20.0]]), 5, on_failure="mask")
    assert sol.valid[:, 0].all() and sol.valid[:, 1].tolist() == [True] + [False] * 5
    assert bool(sol.q[~sol.valid].isnan().all()) and not sol.all_valid


def test_the_trajectory_carries_the_momenta_of_the_march(run):
    """``p`` is filled on every path by the step that computed it: p_0 = dL/dv(q0, qdot0) for solve, -D1 L_d(q0, q1)
    for solve_from_positions, then D2 L_d(q_j, q_{j+1}); each equals the recomputed discrete momenta to Newton's
    tolerance (xtol 1e-16, |p| ~ 1: a few ulps)."""
    vi, q0, v0, sol = run
    assert sol.p.shape == sol.q.shape and sol.p.dtype == torch.float64
    assert float((sol.p - vi.momenta(sol.q)).abs().max()) <= 1e-13
    assert float((sol.p[0] - v0).abs().max()) == 0.0  # the pendulum's dL/dv = v, computed, not recomputed from q
    again = vi.solve_from_positions(sol.q[0], sol.q[1], 20)
    assert float((again.p - sol.p).abs().max()) <= 1e-13 and float((again.p[-1] - again.p[0]).abs().max()) > 0.1
    masked = VariationalIntegrator(PENDULUM, 0.1, max_step=0.5, execution="eager").solve(
        torch.tensor([[0.1], [0.1]]), torch.tensor([[0.0], [20.0]]), 5, on_failure="mask")
    assert bool(masked.p[~masked.valid].isnan().all()) and bool(masked.p[masked.valid].isfinite().all())


def test_old_uses_warn_and_still_work(run):
    _, _, _, sol = run
    with pytest.warns(DeprecationWarning, match="traj.q, traj.valid"):
        q, valid = sol
    assert q is sol.q and valid is sol.valid
    with pytest.warns(DeprecationWarning, match="use traj.q"):
        assert sol.shape == (21, 2, 1)
    with pytest.warns(DeprecationWarning, match="use traj.q"):
        assert torch.equal(sol[-1], sol.q[-1])
    with pytest.warns(DeprecationWarning, match="use traj.q"):
        assert torch.equal(sol - sol.q, torch.zeros_like(sol.q))
    with pytest.warns(DeprecationWarning, match="use traj.q"):
        assert torch.equal(torch.abs(sol), sol.q.abs())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new API warns about nothing
        assert sol.q.shape == (21, 2, 1) and sol.valid.all()
    with pytest.raises(AttributeError, match="fields: q, valid"):
        sol.no_such_field
