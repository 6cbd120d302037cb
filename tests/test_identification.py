"""Identification from positions at n = 4 (issue 16, acceptance): the order-4 gain at CI size.

The FPU-beta chain of 4 masses (pipelines.identification.CI: 200 x 5 snapshots at h = 0.45, lengthscales fixed at
those the "positions" objective selects): level-set errors of H_rec[N] at 8 Halton states inside the data's box.
Measured on these 8 states: H_rec[0] 0.0272, H_rec[2] 0.0068, H_rec[4] 0.0030 (gain 2.2); on the 40 of the CI
experiment: 0.0405 / 0.0091 / 0.0029 (gain 3.1). With the exact inverse modified Lagrangian (no GP) the gain on
that box is at most about 4 at this h (0.0159 / 0.0056 at h = 0.5, 0.0052 / 0.0010 at h = 0.4). Asserted: H_rec[4]
below H_rec[2] by at least 1.6x on 8 states (measured 2.2x) and 2.5x on 40 (measured 3.1x): margins of ~25%
against the scatter of so few states.
"""

import pytest

from pipelines import identification as ident


@pytest.fixture(scope="module")
def chain():
    cfg = ident.CI
    system = ident.chain_system(cfg)
    return cfg, system, ident.fit_chain(cfg, system, {}, calibrate=False)  # means only


def test_order_4_beats_order_2_at_n_4(chain):
    cfg, system, lsi = chain
    ls = ident.level_set_errors(cfg, lsi, system, (2, 4), 8)
    assert ls["ls4"] < ls["ls2"] / 1.6, ls
    assert ls["ls2"] < 0.012, ls  # the corrected energy is identified at all (uncorrected: 0.027)


@pytest.mark.slow
def test_chain_experiment_ci_size():
    """The whole chain experiment at CI size (about 30 s): the order-4 gain on 40 states (measured 0.0405 /
    0.0091 / 0.0029), and held-out calibration of N = 2 (GP part, variances calibrated on fresh trajectories, plus
    the first omitted term). Measured 0.83 of 30 states within 2 sigma: below the 0.9 that issue 16 asks for the
    pendulum and Henon-Heiles (met there, tests/test_learners_uncertainty.py); here the errors are heavy-tailed.
    Asserted: at least 0.6, so that a collapse of the variances (0.0 before they were calibrated) shows."""
    m, timings, series, _ = ident.run_chain(ident.CI, log=None)
    assert m["ls4"] < m["ls2"] / 2.5 and m["ls2"] < m["ls0"], m
    assert m["calib2"] >= 0.6, m
    assert series["E2"].shape[0] == ident.CI.steps + 1


@pytest.mark.slow
def test_default_fit_keeps_chain_6_on_fpu6():
    """Issue 23 (Sessions 10 and 14): the library's default fit (``kernel="auto"``, nothing chosen) on the FPU chain of
    6 masses at h = 0.35, seed 0, 200 trajectories of 5 steps (the data of benchmarks/identification_default.py; a
    few minutes of CPU). Among the default kernels degree 4 is ahead of degree 2 by 1.16 and of the RBF by 0.03 in the
    refined held-out error and is chosen (measured gain 2.64 on the 40 level-set states, 0.0036 / 0.0013, against 1.84
    with the RBF and 0.95 with degree 2; benchmarks/RESULTS_identification.md, Session 10); since Session 14 the element
    structures are scored after that choice and chain(6), the chain's own structure, replaces it (as at h = 0.45, gain
    3.71, and h = 0.3). Asserted: degree 4 on the record of the default kernels' choice, chain(6) kept, gain > 2.3 (13%
    below degree 4's measurement and above both other default kernels' gains by 0.46 or more)."""
    from dataclasses import replace

    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP

    cfg = replace(ident.CI, chain_n=6, h=0.35, lengthscale=None, q0=(0.0,) * 6, qdot0=(0.0,) * 6)
    system = ident.chain_system(cfg)
    data = snapshots(system, cfg.h, cfg.n_traj, cfg.n_steps, domain=[(-cfg.amplitude, cfg.amplitude)] * 12, seed=0)
    model = InverseModifiedLagrangianGP(cfg.h, progress=False).fit(data)
    assert model.history["mechanical_kept"] == 4, model.history["normalisation_values"]
    assert model.kernel_structure == ("chain", 6, "fixed") and model.kernel_degree is None, model.history["structures"]
    ls = ident.level_set_errors(cfg, model, system, (2, 4), cfg.level_points)
    assert ls["ls2"] / ls["ls4"] > 2.3, ls
