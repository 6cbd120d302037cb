"""Long steps report progress with a time estimate also when stderr is not a terminal (logs, pipes, CI)."""

import io
import time

import torch

import integrators.progress as P
from integrators import VariationalIntegrator, systems


class _Pipe(io.StringIO):
    def isatty(self):
        return False


def test_lines_off_a_terminal_with_count_and_time_left(monkeypatch):
    out = _Pipe()
    monkeypatch.setattr("sys.stderr", out)
    monkeypatch.setattr(P, "LOG_INTERVAL", 0.0)
    with P.progress_bar(4, "velocities", "state") as bar:
        for _ in range(4):
            time.sleep(0.01)
            bar.update(1)
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert lines[0].startswith("velocities:") and "0/4" in lines[0]      # what is coming, at once
    assert any("3/4" in line and "<" in line for line in lines)          # elapsed<left, tqdm's estimate


def test_short_runs_and_show_false_are_silent(monkeypatch):
    out = _Pipe()
    monkeypatch.setattr("sys.stderr", out)
    for kw in ({"long": False}, {"show": False}):
        with P.progress_bar(3, "x", **kw) as bar:
            bar.update(3)
    assert out.getvalue() == ""


def test_integrator_reports_long_runs_off_a_terminal(monkeypatch):
    out = _Pipe()
    monkeypatch.setattr("sys.stderr", out)
    monkeypatch.setattr("integrators.variational.PROGRESS_MIN_STEPS", 30)   # 2000 in use; kept short here
    vi = VariationalIntegrator(systems.pendulum(), h=0.1, execution="eager")
    q0 = torch.full((2, 1), 0.3, dtype=torch.float64)
    vi.solve(q0, torch.zeros_like(q0), 30)            # PROGRESS_MIN_STEPS steps: counts as long
    assert out.getvalue().startswith("integrating:") and "0/30" in out.getvalue()
    out.seek(0), out.truncate()
    vi.solve(q0, torch.zeros_like(q0), 29)            # short: silent
    assert out.getvalue() == ""


def test_lsi_velocities_in_chunks_report_progress_and_agree(monkeypatch):
    from learners import InverseModifiedLagrangianGP
    import integrators as I

    S = I.data.snapshots(systems.pendulum(), 0.5, n_traj=20, n_steps=3, seed=0)
    model = InverseModifiedLagrangianGP(0.5, iterations=8, max_train_functionals=400, progress=False).fit(S)
    q0 = torch.tensor([[0.3]], dtype=torch.float64)
    qs = model.predict(q0, torch.zeros_like(q0), steps=9)
    whole = model.velocities(qs, chunk=1000)
    out = _Pipe()
    monkeypatch.setattr("sys.stderr", out)
    assert model.velocities(qs, chunk=3).shape == whole.shape and out.getvalue() == ""  # the model's progress=False
    model.progress = None                             # the default: long runs are reported
    parts = model.velocities(qs, chunk=3)             # 10 states in chunks of 3: a "long" run, reported
    assert out.getvalue().startswith("velocities:") and "0/10" in out.getvalue()
    # the same Newton solves on other batches, hence other rounding: measured difference 3e-11 (at the velocity
    # near 0, where the recovered momentum's derivatives carry rounding noise of the GP mean); a chunking error
    # (a lost or shifted position) would be of the size of the velocities, 0.1-0.3
    assert torch.allclose(parts, whole, rtol=0, atol=1e-9)
