"""The first energy std of an element-kernel fit (its lazy energy calibrations) with the Gaussian sections' directional
derivatives in closed form (learners/shadow/section_jets.py, Session 19) against the forward-mode route they replaced
(feature_jets._directional over _gaussian_section, torch.func.jvp), each on a copy of one fit, in one process: CPU
seconds (time.process_time) of the first ``energy(2, return_std=True, reference=0)``, and the largest relative
differences of the energies, stds (20 states, with and without the truncation term) and ``model.calibration`` values
from the jvp route's. A third run, the jvp route with every section component multiplied by (1 + 1e-15 N(0, 1)),
shows how much of that difference any rounding-level change makes. Case: notebook 07's planar two-body system at
CI size (40 trajectories x 6 snapshots, h = 0.2, ElementKernel.bodies(2, 2)).

    OMP_NUM_THREADS=1 python3 benchmarks/element_std_directional.py [--modes closed,jvp,jvp+noise]
"""

import argparse
import copy
import warnings

import torch

from benchmarks.first_std_cost import _fit, first_std
from learners.shadow import element_uncertainty as EU
from learners.shadow import feature_jets as FJ

CLOSED = (EU.gaussian_directional, FJ.GaussianFactor.directional)


def _jvp(xb, y, scales, alphas, W, noise):
    d = FJ._directional(lambda yy: FJ._gaussian_section(xb, yy, scales, alphas), y, W)
    return {k: t * (1 + noise * torch.randn_like(t)) for k, t in d.items()} if noise else d


def _route(mode):
    if mode == "closed":
        EU.gaussian_directional, FJ.GaussianFactor.directional = CLOSED
        return
    noise = 1e-15 if mode == "jvp+noise" else 0.0
    EU.gaussian_directional = lambda xb, y, s, al, W: _jvp(xb, y, s, al, W, noise)
    FJ.GaussianFactor.directional = lambda self, xb, y, W, al: _jvp(xb, y, self.scales, al, W, noise)


def _run(model, mode):
    _route(mode)
    m = copy.deepcopy(model)
    seconds, E, sd, sd_gp = first_std(m)
    cal = [c.as_dict()[f] for _, c in sorted(m.calibration.items()) for f in ("scale", "rms_z", "coverage")]
    _route("closed")
    return seconds, E, sd, sd_gp, torch.tensor(cal, dtype=torch.float64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="closed,jvp,jvp+noise")
    args = ap.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, fit_s = _fit()
        runs = {mode: _run(model, mode) for mode in args.modes.split(",")}
    print(f"fit {fit_s:.1f} s CPU")
    head = f"{'route':<11}{'first std s':>12}{'energies':>11}{'stds':>11}{'GP stds':>11}{'calibration':>13}"
    print(head + "  (max rel. diff. to jvp)")
    ref = runs.get("jvp")
    for mode, (s, *vals) in runs.items():
        diffs = ["" if ref is None else f"{float(((a - b).abs() / b.abs().clamp_min(1e-300)).max()):.1e}"
                 for a, b in zip(vals, ref[1:])]
        print(f"{mode:<11}{s:>12.1f}" + "".join(f"{d:>11}" for d in diffs[:3]) + f"{diffs[3]:>13}")


if __name__ == "__main__":
    main()
