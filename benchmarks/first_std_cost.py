"""The first energy std of an element-kernel fit (its lazy energy calibrations), one process per run, for before/after
pairs across trees (run it with ``PYTHONPATH`` at each tree in turn): CPU seconds (time.process_time) of the fit and
of the first ``energy(2, return_std=True, reference=0)``, and the numbers it reports (energies and stds at 20 states,
with and without the truncation term, and ``model.calibration``) saved for ``--compare``. ``--noise 1e-15``
multiplies every Gaussian section component of the jvp route by (1 + noise N(0, 1)) (the rounding-level change
against which a route's moves are judged, benchmarks/RESULTS_calibration.md, Session 19); ``--route jvp`` takes the
forward-mode sections in a tree that has the closed form; ``--autograd-pass N`` sets the element energies' states a
pass (the same numbers grouped otherwise: how far a route's own rounding moves what it reports). Case: notebook 07's
planar two-body system at CI size (40 trajectories x 6 snapshots, h = 0.2, ElementKernel.bodies(2, 2)).

    OMP_NUM_THREADS=1 PYTHONPATH=<tree> python3 benchmarks/first_std_cost.py --save out.pt [--route jvp] [--noise 1e-15]
    python3 benchmarks/first_std_cost.py --compare ref.pt other.pt ...
"""

import argparse
import time
import warnings

import sympy
import torch


def _fit():
    import integrators
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP
    from learners.shadow import ElementKernel

    q_ = sympy.symbols("x1 y1 x2 y2", real=True)
    v_ = sympy.symbols("u1 w1 u2 w2", real=True)
    r2 = (q_[0] - q_[2]) ** 2 + (q_[1] - q_[3]) ** 2 + sympy.Rational(1, 2)
    V = -1 / (2 * sympy.sqrt(r2)) + sum(x ** 2 for x in q_) / 8
    system = integrators.systems.from_sympy(sum(x ** 2 for x in v_) / 2 - V, q_, v_, "bodies2",
                                            domain=[(-0.8, 0.8)] * 4 + [(-0.4, 0.4)] * 4)
    t = time.process_time()
    model = InverseModifiedLagrangianGP(0.2, kernel=ElementKernel.bodies(2, 2), progress=False)
    model.fit(snapshots(system, 0.2, 40, 5, seed=0))
    return model, time.process_time() - t


def _states():
    """The reference state (zero) and the 20 states (q, v) at which the first std is asked."""
    zero = torch.zeros(4, dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    q = 0.5 * torch.rand(20, 4, generator=g, dtype=torch.float64) - 0.25
    v = 0.3 * torch.rand(20, 4, generator=g, dtype=torch.float64) - 0.15
    return zero, q, v


def first_std(model):
    """CPU seconds of the model's first energy std (N = 2, reference 0), its energies, stds and GP-only stds at
    :func:`_states`."""
    zero, q, v = _states()
    t = time.process_time()
    H = model.energy(2, return_std=True, reference=(zero, zero))
    seconds = time.process_time() - t
    E, sd = H(q, v)
    _, sd_gp = model.energy(2, return_std=True, reference=(zero, zero), truncation=False)(q, v)
    return seconds, E, sd, sd_gp


def _jvp_route(noise: float) -> None:
    """The forward-mode sections (main's route before Session 21), optionally with relative noise on each component."""
    from learners.shadow import element_uncertainty as EU
    from learners.shadow import feature_jets as FJ

    jvp = FJ._directional

    def directional(f, y, W):
        d = jvp(f, y, W)
        return {k: t * (1 + noise * torch.randn_like(t)) for k, t in d.items()} if noise else d

    def section(xb, y, scales, alphas, W):
        return directional(lambda yy: FJ._gaussian_section(xb, yy, scales, alphas), y, W)

    FJ._directional = EU._directional = directional
    if hasattr(EU, "gaussian_directional"):  # a tree with the closed form: route its two callers back to jvp
        EU.gaussian_directional = section
        FJ.GaussianFactor.directional = lambda self, xb, y, W, al: section(xb, y, self.scales, al, W)


def _run(args) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, fit_s = _fit()
        if args.route == "jvp" or args.noise:
            _jvp_route(args.noise)
        if args.autograd_pass:  # the element energies' states a pass (the old route's own rounding, another grouping)
            print(f"autograd pass {model._autograd_chunk()} -> {args.autograd_pass} states")
            model._autograd_chunk = lambda: args.autograd_pass
        seconds, E, sd, sd_gp = first_std(model)
    cal = {k: c.as_dict() for k, c in model.calibration.items()}
    print(f"fit {fit_s:.1f} s CPU, first std {seconds:.1f} s CPU")
    torch.save({"E": E, "sd": sd, "sd_gp": sd_gp, "cal": cal, "seconds": seconds, "fit": fit_s}, args.save)


def _compare(paths) -> None:
    runs = [torch.load(p) for p in paths]
    ref = runs[0]
    keys = sorted((k, f) for k in ref["cal"] for f in ("scale", "rms_z", "truncation_ratio") if ref["cal"][k][f] is not None)
    print(f"{'run':<40}{'first std s':>12}{'energies':>11}{'stds':>11}{'GP stds':>11}{'calibration':>13}  (max rel. "
          f"diff. to {paths[0]})")
    for p, r in zip(paths, runs):
        d = [float(((r[x] - ref[x]).abs() / ref[x].abs().clamp_min(1e-300)).max()) for x in ("E", "sd", "sd_gp")]
        c = max(abs(r["cal"][k][f] - ref["cal"][k][f]) / abs(ref["cal"][k][f]) for k, f in keys)
        print(f"{p:<40}{r['seconds']:>12.1f}" + "".join(f"{x:>11.1e}" for x in d) + f"{c:>13.1e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--save")
    ap.add_argument("--route", choices=("default", "jvp"), default="default")
    ap.add_argument("--noise", type=float, default=0.0)
    ap.add_argument("--autograd-pass", type=int, default=0, help="states per element autograd pass (0: the model's)")
    ap.add_argument("--compare", nargs="+")
    args = ap.parse_args()
    _compare(args.compare) if args.compare else _run(args)


if __name__ == "__main__":
    main()
