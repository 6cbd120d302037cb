"""One trajectory type (issue 29): every producer returns a Trajectory, every consumer takes it or the tensor.

Each producer x consumer pair runs with DeprecationWarning as an error (so neither side goes through a
deprecated form) and agrees with the consumer on the tensor (positions ``q``, or snapshots) to 1e-12. The
old return forms still work, with a DeprecationWarning that names the replacement.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from integrators import Trajectory, VariationalIntegrator, modified, systems
from integrators.data import snapshots
from learners import InverseModifiedLagrangianGP, LagrangianGP, predict_positions, rollout_ode, rollout_variational
from learners.metrics import max_trajectory_error
from learners.neural.metrics import mse_q

H, STEPS = 0.1, 8
PENDULUM = systems.pendulum()
Q0 = torch.tensor([[0.3], [0.8]], dtype=torch.float64)
V0 = torch.tensor([[0.0], [0.2]], dtype=torch.float64)
FAST = dict(lengthscale=[1.8, 4.0], noise=1e-10, progress=False)  # fixed hyperparameters: no search


def oscillator(q, v):
    return 0.5 * (v**2 - q**2).sum(-1)


@pytest.fixture(scope="module")
def gps():
    S = snapshots(PENDULUM, H, 12, 5, seed=0)
    return InverseModifiedLagrangianGP(H, **FAST).fit(S), LagrangianGP(H, **FAST).fit(S)


@pytest.fixture(scope="module")
def produced(gps):
    """name -> Trajectory, each made by one producer with the new API only."""
    lsi, lgp = gps
    vi = VariationalIntegrator(PENDULUM, H, execution="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        sol = vi.solve(Q0, V0, STEPS)
        out = {
            "solve": sol,
            "solve_from_positions": vi.solve_from_positions(sol.q[0], sol.q[1], STEPS),
            "modified.predict": modified.predict(oscillator, Q0, V0, STEPS, H, order=2),
            "predict_positions": predict_positions(oscillator, Q0, V0, STEPS, H, on_failure="mask"),
            "rollout_variational": rollout_variational(PENDULUM, Q0, V0, H, STEPS),
            "rollout_ode": rollout_ode(lambda q, v: -torch.sin(q), Q0, V0, H * torch.arange(STEPS + 1, dtype=torch.float64)),
            "lsi.predict": lsi.predict(Q0, V0, STEPS, on_extrapolation="ignore", return_std=True),
            "lgp.predict": lgp.predict(Q0, V0, STEPS),
            "from_snapshots": Trajectory.from_snapshots(snapshots(PENDULUM, H, 2, STEPS, seed=1), h=H),
        }
    return out


PRODUCERS = ["solve", "solve_from_positions", "modified.predict", "predict_positions", "rollout_variational", "rollout_ode",
             "lsi.predict", "lgp.predict", "from_snapshots"]


def _consumers(gps):
    lsi, _ = gps
    vi = VariationalIntegrator(PENDULUM, H, execution="eager")
    # consumer name -> (call on a Trajectory or a tensor, the tensor the Trajectory stands for)
    return {
        "vi.momenta": (vi.momenta, "q"),
        "vi.velocities": (vi.velocities, "q"),
        "vi.energies": (vi.energies, "q"),
        "modified.discrete_momenta": (lambda x: modified.discrete_momenta(oscillator, x, H), "q"),
        "modified.velocities": (lambda x: modified.velocities(oscillator, x, 2, H), "q"),
        "lsi.momenta": (lsi.momenta, "q"),
        "lsi.energies": (lambda x: lsi.energies(x, order=2), "q"),
        "lsi.del_residuals": (lambda x: lsi.del_residuals(x, return_std=False), "snapshots"),
        "max_trajectory_error": (lambda x: torch.tensor(max_trajectory_error(x, torch.zeros(STEPS + 1, 2, 1,
                                                                                          dtype=torch.float64))), "q"),
        "mse_q": (lambda x: mse_q(x, torch.zeros(STEPS + 1, 2, 1, dtype=torch.float64)), "q"),
    }


CONSUMERS = ["vi.momenta", "vi.velocities", "vi.energies", "modified.discrete_momenta", "modified.velocities",
             "lsi.momenta", "lsi.energies", "lsi.del_residuals", "max_trajectory_error", "mse_q"]


@pytest.mark.parametrize("producer", PRODUCERS)
def test_every_producer_returns_a_trajectory(produced, producer):
    traj = produced[producer]
    assert isinstance(traj, Trajectory)
    assert traj.q.shape == (STEPS + 1, 2, 1) and traj.q.dtype == torch.float64 and bool(traj.valid.all())
    assert traj.t is not None and float((traj.t - H * torch.arange(STEPS + 1)).abs().max()) <= 1e-15


@pytest.mark.parametrize("consumer", CONSUMERS)
def test_every_consumer_agrees_on_every_producer(gps, produced, consumer):
    call, layout = _consumers(gps)[consumer]
    for producer in PRODUCERS:
        traj = produced[producer]
        tensor = traj.q if layout == "q" else traj.q.transpose(0, 1)
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            got, want = call(traj), call(tensor)
        assert got.shape == want.shape, (producer, consumer)
        assert float((got - want).abs().max()) <= 1e-12, (producer, consumer)


def _momenta_of_the_integrated_lagrangian(gps):
    """producer -> the discrete momenta of the Lagrangian it integrated, recomputed from positions (the consumer path)."""
    lsi, lgp = gps
    vi = VariationalIntegrator(PENDULUM, H, execution="eager")
    of_oscillator = lambda q: modified.discrete_momenta(oscillator, q, H)  # noqa: E731
    return {"solve": vi.momenta, "solve_from_positions": vi.momenta, "rollout_variational": vi.momenta,
            "modified.predict": of_oscillator, "predict_positions": of_oscillator, "lsi.predict": lsi.momenta,
            # the GP without a public momenta(): its integrator's in the standardised units, mapped back (units.py)
            "lgp.predict": lambda q: lgp._speed * lgp._integrator_std().momenta(lgp._to_standard(q))}


@pytest.mark.parametrize("producer", PRODUCERS)
def test_the_integrating_producers_carry_their_momenta(gps, produced, producer):
    """Every producer that runs the variational integrator fills ``p`` with the momenta its march computed; they are
    the discrete momenta of the positions (the momenta consumers) to Newton's tolerance, far inside 1e-12 for |p| ~ 1.
    The flows and snapshots carry none (their momenta would need a Lagrangian they do not have)."""
    traj = produced[producer]
    recompute = _momenta_of_the_integrated_lagrangian(gps).get(producer)
    if recompute is None:
        assert traj.p is None
        return
    assert traj.p is not None and traj.p.shape == traj.q.shape and traj.p.dtype == torch.float64
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        want = recompute(traj.q)
    # p_0 is dL_rec/dv(q0, qdot0), the others D2 L_d(q_j, q_j+1) at the very positions the consumer reads: p_0 equals
    # -D1 L_d(q_0, q_1) up to the first step's residual, i.e. Newton's tolerance (xtol 1e-16 in the integrator: 5e-16
    # measured; 1e-10 in the GPs' predict: 5e-11), the later rows up to the rounding of two evaluations of one
    # function (0 measured for the systems; for the GP mean, whose coefficients are large at noise 1e-10, 9e-12)
    gp = producer in ("lsi.predict", "lgp.predict")
    first, rest = (1e-9, 1e-10) if gp else (1e-12, 1e-12)
    assert float((traj.p[0] - want[0]).abs().max()) <= first and float((traj.p[1:] - want[1:]).abs().max()) <= rest
    assert float(traj.p.abs().max()) > 0.1  # not vacuous: the momenta are of order one


def test_fields_layout_and_snapshots():
    S = snapshots(PENDULUM, H, 3, 4, seed=2)
    traj = Trajectory.from_snapshots(S, h=H, t0=1.0)
    assert traj.q.shape == (5, 3, 1) and torch.equal(traj.q[:, 1], S[1]) and torch.equal(traj.to_snapshots(), S)
    assert float((traj.t - (1.0 + H * torch.arange(5))).abs().max()) <= 1e-15
    assert traj.valid.shape == (5, 3) and traj.all_valid and traj.steps == 4
    S[2, 3] = float("nan")  # a stopped trajectory: not valid where it is NaN
    assert Trajectory.from_snapshots(S).valid[:, 2].tolist() == [True, True, True, False, True]
    with pytest.raises(ValueError, match=r"shape \(trajectory, time, n\)"):
        Trajectory.from_snapshots(S[0])
    with pytest.raises(ValueError, match="valid must be a bool tensor of shape"):
        Trajectory(traj.q, valid=torch.ones(5, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="std must have the shape of q"):
        Trajectory(traj.q, std=torch.ones(5, 3))
    with pytest.raises(ValueError, match="reshape the batch"):
        Trajectory(torch.zeros(5, 2, 3, 1)).to_snapshots()


def test_the_fit_consumes_a_trajectory(gps):
    """fit takes the snapshots or a Trajectory of them: the same model."""
    S = snapshots(PENDULUM, H, 12, 5, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        lgp = LagrangianGP(H, **FAST).fit(Trajectory.from_snapshots(S, h=H))
    q, v = torch.tensor([[0.2]], dtype=torch.float64), torch.tensor([[0.1]], dtype=torch.float64)
    assert float((lgp.recovered_lagrangian()(q, v) - gps[1].recovered_lagrangian()(q, v)).abs().max()) <= 1e-12


def test_old_return_forms_warn_and_still_work(produced):
    lsi_traj, rollout, masked = produced["lsi.predict"], produced["rollout_variational"], produced["predict_positions"]
    with pytest.warns(DeprecationWarning, match=r"\(q, std\).*use traj.q, traj.std"):
        q, std = lsi_traj
    assert q is lsi_traj.q and std is lsi_traj.std and bool(std[1:-1].isfinite().all())
    with pytest.warns(DeprecationWarning, match=r"\(q, v, valid\).*traj.v"):
        q, v, valid = rollout
    assert v is rollout.v and valid is rollout.valid
    with pytest.warns(DeprecationWarning, match=r"\(q, valid\)"):
        q, valid = masked
    with pytest.warns(DeprecationWarning, match="use traj.q"):  # the GP's predict returned the tensor q
        assert produced["lgp.predict"].shape == (STEPS + 1, 2, 1)
    with pytest.warns(DeprecationWarning, match="use traj.q"):
        assert torch.equal(produced["lgp.predict"][:, 0], produced["lgp.predict"].q[:, 0])
    with pytest.warns(DeprecationWarning, match="use traj.q"):
        assert len(list(iter(produced["lgp.predict"]))) == STEPS + 1  # iterated over time, as the tensor did
    with pytest.warns(DeprecationWarning, match="use traj.q"):
        assert np.array_equal(np.asarray(produced["lgp.predict"]), produced["lgp.predict"].q.numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert produced["lgp.predict"]  # truth is not a deprecated tensor use
    with pytest.warns(DeprecationWarning, match="use integrators.Trajectory"):
        from integrators import Solution
    assert Solution is Trajectory


def test_train_consumes_a_trajectory():
    """train's position-only loss takes the snapshots or a Trajectory of them: the same training, loss for loss."""
    from learners import train
    from learners.neural.options import TrainOptions
    from learners.neural.baselines import LNN

    S = snapshots(PENDULUM, H, 6, 5, seed=3)
    histories = []
    for data in (S, Trajectory.from_snapshots(S, h=H)):
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            res = train(LNN(1, 8, seed=0), data, loss="del", h=H, options=TrainOptions(epochs=2, patience=None, progress=False))
        histories.append(res.history["train"])
    assert len(histories[0]) == 3 and histories[0] == histories[1]  # the initial loss and two epochs


def test_the_flags_do_not_change_the_return_type(gps):
    """``on_failure`` and ``return_std`` choose what is computed, never the type: every value gives a Trajectory
    (``valid`` always, ``std`` exactly when asked for), and the old forms each value stood for (the tensor ``q``,
    ``(q, valid)``, ``(q, std)``) still work with a DeprecationWarning naming the field to use."""
    lsi, _ = gps
    vi = VariationalIntegrator(PENDULUM, H, execution="eager")
    runs = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for mode in ("raise", "mask"):
            runs["solve", mode] = vi.solve(Q0, V0, STEPS, on_failure=mode)
            runs["modified.predict", mode] = modified.predict(oscillator, Q0, V0, STEPS, H, order=2, on_failure=mode)
            runs["predict_positions", mode] = predict_positions(oscillator, Q0, V0, STEPS, H, on_failure=mode)
        for flag in (False, True):
            runs["lsi.predict", flag] = lsi.predict(Q0, V0, STEPS, on_extrapolation="ignore", return_std=flag)
    for (producer, flag), traj in runs.items():
        assert isinstance(traj, Trajectory) and traj.valid.shape == traj.q.shape[:-1], (producer, flag)
        assert (traj.std is not None) == (flag is True), (producer, flag)
        assert traj.p is not None and bool(traj.valid.all()), (producer, flag)
    # the two values of a flag give the same numbers
    for producer in ("solve", "modified.predict", "predict_positions"):
        assert torch.equal(runs[producer, "raise"].q, runs[producer, "mask"].q)
    assert torch.equal(runs["lsi.predict", False].q, runs["lsi.predict", True].q)
    with pytest.warns(DeprecationWarning, match="use traj.q"):  # on_failure="raise" returned the tensor q
        assert runs["predict_positions", "raise"][-1].shape == (2, 1)
    with pytest.warns(DeprecationWarning, match=r"\(q, valid\).*traj.valid"):
        _, valid = runs["predict_positions", "mask"]
    with pytest.warns(DeprecationWarning, match="use traj.q"):  # return_std=False returned the tensor q
        assert runs["lsi.predict", False].shape == (STEPS + 1, 2, 1)
    with pytest.warns(DeprecationWarning, match=r"traj.q, traj.std"):
        _, std = runs["lsi.predict", True]
