"""Identification from positions at n = 4 (issue 16, acceptance): the order-4 gain at CI size.

The FPU-beta chain of 4 masses (pipelines.identification.CI: 200 x 5 snapshots at h = 0.5, lengthscale fixed):
level-set errors of H_rec[N] at 8 Halton states inside the data's box (the energy's gradient through mod_4 at
n = 4 is autograd: about 2 s a state). Measured on these 8 states: H_rec[2] 0.0140, H_rec[4] 0.0101; on the 40 of
the CI experiment: H_rec[0] 0.047, H_rec[2] 0.017, H_rec[4] 0.0092. The order-4 term removes the h^4 part of the
error of H_rec[2] and leaves the GP's own; asserted: strictly below, with a margin of 15% (measured 27%).
About 40 s on an idle 2-core machine (80 s at load 5).
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
    assert ls["ls4"] < 0.85 * ls["ls2"], ls
    assert ls["ls2"] < 0.05, ls  # the corrected energy is identified at all (uncorrected: 0.047)


@pytest.mark.slow
def test_chain_experiment_ci_size():
    """The whole chain experiment at CI size (about 4 minutes): the order-4 gain on 40 states (measured 0.0474 /
    0.0171 / 0.0092), and held-out calibration of N = 2 (GP part, variances calibrated on fresh trajectories, plus
    the first omitted term). Measured 0.77 of 30 states within 2 sigma: below the 0.9 that issue 16 asks for the
    pendulum and Henon-Heiles (met there, tests/test_learners_uncertainty.py); here the errors are heavy-tailed
    (a few states at 5-7 sigma). Asserted: at least 0.6, so that a collapse of the variances (0.0 before they were
    calibrated) shows."""
    m, timings, series, _ = ident.run_chain(ident.CI, log=None)
    assert m["ls4"] < m["ls2"] < m["ls0"], m
    assert m["calib2"] >= 0.6, m
    assert series["E2"].shape[0] == ident.CI.steps + 1
