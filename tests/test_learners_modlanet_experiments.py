"""The ModLaNet experiments (pipelines.modlanet_experiments) at the reduced size: one run (~30 s on 2 cores) shared
by all checks. The numbers are deterministic (fixed seeds); the tolerances below leave a margin of at least ~2x
to the measured values, which are given next to each assertion."""

import math
from dataclasses import replace

import pytest

from pipelines import modlanet_experiments as mx
from learners.neural.baselines import parameter_count
from learners.neural.rollout import angles_mod_2pi, mse_q


@pytest.fixture(scope="module")
def res():
    return mx.run(mx.SMALL["double_pendulum"], log=lambda s: None)


def _row(res, name):
    return next(r for r in res["rows"] if r["model"] == name)


def test_acceleration_training_beats_untrained_model(res):
    ml = _row(res, "ModLaNet")
    initial, best = ml["train_val"]
    # measured: 4.36e2 -> 5.9 (74x) in 25 epochs; the acceptance bar is 10x
    assert initial / best >= 10


def test_modlanet_energy_error_below_baselines(res):
    ml = _row(res, "ModLaNet")
    assert ml["failed"] == 0 and math.isfinite(ml["mse_E"])
    # measured: ModLaNet MSE_E 1.47; light LNN 1.2e3 (1 of 6 failed), HNN 2.7e2, MLP 77 -- ModLaNet >= 50x lower.
    # Asserted with a 5x margin, as the paper's Table 2 ordering (ModLaNet's MSE_E far below every baseline's).
    for name in ("Light LNN", "HNN", "Baseline"):
        b = _row(res, name)
        assert not (b["mse_E"] < 10 * ml["mse_E"]), (name, b["mse_E"], ml["mse_E"])  # NaN (all failed) passes
        # the paper's statistic (a root of a mean square, see learners.neural.rollout.paper_statistic): measured ModLaNet 0.249,
        # light LNN 5.86, HNN 3.1, MLP 1.66 (>= 6.7x)
        assert not (b["paper_E"] < 3 * ml["paper_E"]), (name, b["paper_E"], ml["paper_E"])
    assert all(r["params"] > 0 for r in res["rows"])
    # per state, stat = sqrt(MSE_E / T) with T = 21 time points: the mean of the roots is at most the root of the mean
    T = round(mx.SMALL["double_pendulum"].t_rollout / mx.SMALL["double_pendulum"].dt_out) + 1
    assert 0 < ml["paper_E"] <= math.sqrt(ml["mse_E"] / T) * (1 + 1e-12)


def test_variational_rollout_agrees_with_rk4(res):
    # the same trained model, two integrators (RK4 at dt 0.0125, midpoint VI at h 0.025): both errors are dominated by
    # the model, not the integrator (measured 1.469 vs 1.455, MSE_q 0.7564 vs 0.7567)
    a, b = _row(res, "ModLaNet"), _row(res, "ModLaNet (variational)")
    assert b["failed"] == 0
    assert abs(a["mse_E"] - b["mse_E"]) <= 0.2 * a["mse_E"]
    assert abs(a["mse_q"] - b["mse_q"]) <= 0.2 * a["mse_q"]


def test_position_only_variant(res):
    po = res["position_only"]
    ml = _row(res, "ModLaNet")
    # trained from snapshots only: the DEL loss falls (measured 27 -> 0.61, 44x)
    assert po["train"].improvement >= 10
    # most rollouts complete (measured 4 of 6; the Legendre inversion of mod_2 fails along two); MSE_q finite and
    # within the acceptance's 3x of the acceleration-trained model (measured 1.32 vs 0.76, 1.75x)
    assert po["failed"] <= po["states"] // 2
    assert math.isfinite(po["mse_q"]) and math.isfinite(po["mse_E"])
    assert po["mse_q"] <= 3 * ml["mse_q"]
    # and far below the chance level: the exact trajectories compared with those of *other* initial states
    q_ref = res["reference"]["q"]
    chance = float(mse_q(q_ref, q_ref.roll(1, dims=1), positions=angles_mod_2pi))
    assert po["mse_q"] < 0.5 * chance  # measured chance level 5.3
    # identification: both level-set errors finite and small (a sine; measured 0.098 for N = 0, 0.122 for N = 2 --
    # at this size the model's own error, not the O(h^2) term that mod_2 removes, dominates)
    for N in (0, 2):
        assert 0 <= po["level_set"][N] < 0.3
    # mod_2 improves the identified energy along the prediction: the midpoint rule on L_inv conserves
    # H(mod_2 L_inv) up to O(h^4) but H(L_inv) only up to O(h^2), whatever the model's own error (variational BEA,
    # docs/theory/modified.md). Relative band (variation in time / spread over the states), measured 0.139 (N = 0) and
    # 0.0225 (N = 2), 6.2x; asserted 3x
    assert po["energy_band"][2] * 3 < po["energy_band"][0]


def test_position_only_with_inverse_order_identifies_the_lagrangian(res):
    # del_inverse_order = 2 (the full-size setting): the DEL loss sees inv_2(M) and M is a model of the true L,
    # rolled out with RK4 exactly like the acceleration-trained model -- from positions only
    from integrators import reference_flow

    cfg = replace(mx.SMALL["double_pendulum"], del_inverse_order=2)
    q0, v0 = mx._states(cfg, None, cfg.n_states, seed=cfg.seed + 1000)
    ts = mx._times(cfg.t_rollout, cfg.dt_out)
    flow = reference_flow(mx._system(cfg), q0, v0, ts)
    q_ref, v_ref = flow.q, flow.v
    po = mx._position_only(cfg, q0, v0, q_ref, v_ref, ts, mx._Clock(lambda s: None), lambda s: None)
    assert po["inverse_order"] == 2
    # measured DEL loss 21.6 -> 0.242 (89x) in 25 epochs
    assert po["train"].improvement >= 10
    rk, ml = po["rk4"], _row(res, "ModLaNet")
    # measured: position-only RK4 MSE_E 1.39, MSE_q 0.89 against the acceleration-trained 1.47, 0.76 (same
    # states, same RK4): within the acceptance's 3x (asserted), here even lower in MSE_E
    assert rk["failed"] == 0
    assert rk["mse_E"] <= 3 * ml["mse_E"] and rk["mse_q"] <= 3 * ml["mse_q"]
    # the same identified L with the midpoint rule (h = 0.025, p0 = dM/dv): the rollout error is the model's, not the
    # integrator's -- measured MSE_E VI_E vs RK4 RK_E
    vi = po["variational"]
    assert vi["failed"] == 0
    assert abs(vi["mse_E"] - rk["mse_E"]) <= 0.2 * rk["mse_E"]
    for N in (0, 2):  # measured 0.0842 / 0.0846
        assert 0 <= po["level_set"][N] < 0.3


def test_extension_bounded_and_finetuning_helps(res):
    (e,) = res["extension"]
    assert e["elements"] == 3
    d, f = e["direct"], e["finetuned"]
    # the extended model (no retraining) rolls out every state without blow-up; its largest energy deviation stays
    # of the order of the energies themselves (measured max |E(t) - E(0)| 44 vs mean |E| 27) -- bounded, not drifting
    assert d["failed"] == 0 and f["failed"] == 0
    assert d["max_energy_deviation"] < 5 * d["true_energy_scale"]
    # fine-tuning on 1/10 of the samples for 1/5 of the epochs lowers MSE_E (measured 160 -> 112), as in the paper
    assert f["mse_E"] < d["mse_E"]
    assert e["finetune"]["epochs"] == math.ceil(0.2 * mx.SMALL["double_pendulum"].epochs)


def test_table_has_paper_columns(res):
    t = mx.table(res)
    for s in ("paper params", "paper q", "paper E", "stat q", "stat E", "MSE_q", "MSE_E", "1.28", "0.046", "6.2k", "41.4k",
              "ModLaNet (positions, DEL)",
              "extension to 3 elements", "wall time"):
        assert s in t, s
    assert res["timings"]["total"] > 0 and "train modlanet" in res["timings"]


def test_full_size_parameter_counts():
    # the paper's ~6.2k / 5.6k parameters with the full-size settings
    assert parameter_count(mx._modlanet(mx.FULL["double_pendulum"])) == 5959
    assert parameter_count(mx._modlanet(mx.FULL["three_body"])) == 5606


def test_bad_config():
    with pytest.raises(ValueError, match="system"):
        mx.run(replace(mx.SMALL["double_pendulum"], system="triple_pendulum"), log=lambda s: None)
    with pytest.raises(ValueError, match="divide"):
        mx.run(replace(mx.SMALL["double_pendulum"], variational_h=0.03), log=lambda s: None)


def test_cli_stages_can_be_skipped(tmp_path, capsys):
    """The CLI's stage flags and --epochs on the three-body system: what is skipped is absent, the epochs are those
    given (2: the stages' plumbing is checked here, the trained numbers by the module's shared run), the file saved."""
    out = tmp_path / "r.pt"
    res = mx.main(["--small", "--system", "three_body", "--no-baselines", "--no-extension", "--no-progress",
                   "--epochs", "2", "--save", str(out)])
    assert [r["model"] for r in res["rows"]] == ["ModLaNet"] and "extension" not in res
    assert res["config"].epochs == res["config"].baseline_epochs == 2 and res["train"].epochs_run == 2
    assert out.exists() and "ModLaNet" in capsys.readouterr().out
