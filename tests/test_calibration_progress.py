"""The pending energy calibrations (learners/shadow/calibration.py, ensure_energy_calibration) report their stages on a
bar that follows the model's ``progress=`` flag: a first std or a ``model.save`` ran for minutes with no line before
(Session 20: > 500 s at mass_chain4). Stub stages; the bar itself is integrators.progress.progress_bar (off a terminal:
a line at the start, then at most every 30 s)."""

import types

import pytest

from learners.shadow import calibration as C
from learners.shadow import identifiability


def _model(progress, count):
    gp = types.SimpleNamespace(require_dense=lambda: None, variance_scale=1.0,
                               train_functionals=types.SimpleNamespace(count=count))
    return types.SimpleNamespace(progress=progress, gp=gp, _pending_calibration=(None, None), history={}, _calibration={})


@pytest.fixture
def stages(monkeypatch):
    seen = []
    monkeypatch.setattr(C, "_conservation", lambda model, F, S: seen.append("conservation"))
    monkeypatch.setattr(C, "difference_calibration", lambda model: seen.append("differences"))
    monkeypatch.setattr(identifiability, "check_energy", lambda model, S: seen.append("checks"))
    return seen


@pytest.mark.parametrize("progress, count, shown", [(True, 10, True), (False, 10 ** 6, False), (None, 10, False),
                                                    (None, C.LONG_CALIBRATION, True)])
def test_stages_follow_the_progress_flag(stages, capsys, progress, count, shown):
    """progress=True: a bar whatever the size; False: none; None: from LONG_CALIBRATION training functionals. The stages
    run once each, in order, and the calibration is no longer pending."""
    m = _model(progress, count)
    C.ensure_energy_calibration(m)
    err = capsys.readouterr().err
    assert stages == ["conservation", "differences", "checks"] and m._pending_calibration is None
    assert ("energy calibration: conservation" in err) is shown, err
    assert ("energy calibration" in err) is shown


class _RecordingBar:
    """Stands in for integrators.progress.progress_bar's tqdm: records the stages named, the count and the close."""

    def __init__(self, total, desc, unit="it", show=None, long=True):
        self.n, self.names, self.closed = 0, [], False

    def update(self, k=1):
        self.n += k

    def set_description(self, name, refresh=True):
        self.names.append(name)

    def close(self):
        self.closed = True


def test_a_failing_stage_still_closes_the_bar(stages, monkeypatch):
    """A stage failing outside the caught errors (e.g. a KeyboardInterrupt) propagates, and the bar is completed and
    closed (a bar left open would keep its line on a terminal and tqdm's instance alive)."""
    import integrators.progress

    def interrupted(model):
        raise KeyboardInterrupt

    bars = []
    monkeypatch.setattr(integrators.progress, "progress_bar", lambda *a, **k: bars.append(_RecordingBar(*a, **k)) or bars[-1])
    monkeypatch.setattr(C, "difference_calibration", interrupted)
    with pytest.raises(KeyboardInterrupt):
        C.ensure_energy_calibration(_model(True, 10))
    (bar,) = bars
    assert bar.names == ["energy calibration: conservation", "energy calibration: differences"]
    assert bar.closed and bar.n == 3


@pytest.mark.parametrize("progress, shown", [(None, True), (False, False)])
def test_chunked_velocities_follow_the_progress_flag(capsys, progress, shown):
    """integrators.modified.velocities' bar over its chunks (long: more than two) is silenced by progress=False, which
    the models pass from their own flag (so a calibration of a progress=False model prints nothing)."""
    import torch

    from integrators import modified
    from integrators.variational import VariationalIntegrator

    def L(q, v):
        return 0.5 * (v ** 2).sum(-1) - 0.5 * (q ** 2).sum(-1)

    qs = torch.cos(0.1 * torch.arange(7, dtype=torch.float64))[:, None]
    v = modified.velocities(None, qs, 2, 0.1, chunk=2, integrator=VariationalIntegrator(L, 0.1), recovered=L,
                            progress=progress)
    assert v.shape == qs.shape and bool(torch.isfinite(v).all())
    assert ("velocities" in capsys.readouterr().err) is shown
