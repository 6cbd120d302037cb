"""Issue 27's acceptance harness: one model fitted on position snapshots of one system, measured as the issue asks --
order-4 gain in level-set error, calibration of held-out energy differences, trajectory error against the exact flow
over 200 steps, fit CPU seconds and peak RSS. One markdown row per run (the side-by-side table of
benchmarks/RESULTS_element.md).

Systems (benchmarks/_element_systems.py): the FPU-beta chain with fixed ends, ``chain10`` (acceptance), ``chain6``
(its extension's source), ``chain4``; softened planar bodies in a weak harmonic trap, ``bodies4`` (n = 8,
acceptance), ``bodies3`` (n = 6), ``bodies2``. Data: ``--trajectories`` trajectories of ``--steps`` steps (default 5:
6 snapshots each) of the exact flow (:func:`integrators.data.snapshots`, scrambled Halton initial states in the
system's box, ``--seed``), at the system's ``h``. Metrics: benchmarks/_element_metrics.py.

Models (``--model``):

* ``full``: ``InverseModifiedLagrangianGP(h)``, the library defaults (today's GP over the whole state);
* ``element``: the same GP with branch elem's element-structured kernel (``learners.shadow.ElementKernel.chain(n,
  ends="fixed")`` / ``.bodies(count, 2)``); where that does not import, one line says so and nothing runs;
* ``modlanet``: ModLaNet from positions (docs/howto/modlanet.md): ``ModLaNet.bodies(count, d)`` trained with
  ``DELLoss(inverse_order=2)`` (the model is the true L, inv_2 of it enters the DEL residual), ``--epochs`` of
  Adam; ``energy(N)`` is then the model's own energy at every N (no order-4 gain, no std: no calibration). For the
  chain it is ``bodies(n, 1)``: one shared on-site cell and one shared pair cell over *all* pairs, which cannot
  represent nearest-neighbour springs with fixed ends -- a structural mismatch, measured as such.

``--extend-from SMALL``: fit on the smaller system SMALL of the same kind (same h, box, seed), then evaluate on
``--system``: for ``modlanet`` through ``ModLaNet.extend``, for ``element`` through the fitted model's
``extend(structure)`` (:mod:`learners.shadow.element_extension`). Not meaningful for ``full``: its kernel lives on the
whole 2n-dimensional state, so a fit on n = 6 says nothing at n = 10 (one line says so). Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/element_acceptance.py --system bodies4 --trajectories 100
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/element_acceptance.py --system chain10 --trajectories 200 --no-std
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/element_acceptance.py --system bodies4 --model modlanet --epochs 200
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/element_acceptance.py --system chain10 --model element --extend-from chain6

``--no-std`` skips the calibration (the std's first demand costs several times the fit at n >= 6); ``--std-orders 2``
calibrates N = 2 only (at n = 10 the N = 4 std's first demand passed 12 min CPU, benchmarks/RESULTS_element.md).
"""

from __future__ import annotations

import argparse
import math
import resource
import time
import warnings

try:  # run as a script (python3 benchmarks/element_acceptance.py) or imported as benchmarks.element_acceptance
    from benchmarks import _element_metrics as M
    from benchmarks._element_systems import SYSTEMS, element_kernel
except ImportError:  # pragma: no cover - the script's own directory on sys.path
    import _element_metrics as M
    from _element_systems import SYSTEMS, element_kernel

HEADER = ("| system | model | fitted on | traj | seed | fit cpu s | peak RSS MiB | ls0 | ls2 | ls4 | gain | dE2 | rms z2 | 2σ2 "
          "| mean abs z2 | dE4 | rms z4 | 2σ4 | mean abs z4 | traj err (max of 3) |")


def _arguments(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=sorted(SYSTEMS), required=True)
    ap.add_argument("--model", choices=("full", "element", "modlanet"), default="full")
    ap.add_argument("--trajectories", type=int, default=200, help="trajectories of the data (issue 27: 100-200)")
    ap.add_argument("--steps", type=int, default=5, help="steps per trajectory (5: 6 snapshots)")
    ap.add_argument("--seed", type=int, default=0, help="data seed")
    ap.add_argument("--extend-from", choices=sorted(SYSTEMS), default=None,
                    help="fit on this smaller system of the same kind, evaluate on --system (element, modlanet)")
    ap.add_argument("--no-std", action="store_true", help="no calibration (level sets and trajectories only)")
    ap.add_argument("--std-orders", type=int, nargs="+", default=[2, 4],
                    help="orders of the calibration (at n = 10 the N = 4 std's first demand passed 12 min CPU)")
    ap.add_argument("--points", type=int, default=40, help="level-set states")
    ap.add_argument("--rollout-steps", type=int, default=200, help="steps of the trajectory error")
    ap.add_argument("--epochs", type=int, default=100, help="ModLaNet's training epochs")
    ap.add_argument("--window", type=int, default=None,
                    help="element chains: also windows of this many bonds (ElementKernel.chain(n, window=w); default none)")
    ap.add_argument("--source-level-sets", action="store_true",
                    help="with --extend-from: also the level sets of the fit on its own system, before the extension")
    ap.add_argument("--triples", action="store_true",
                    help="element bodies: also the triple group (ElementKernel.bodies(c, 2, triples=True); default off)")
    args = ap.parse_args(argv)
    if args.triples and args.extend_from is not None:  # refused up front: check_extension would refuse after the fit
        ap.error("--triples with --extend-from: a fit with the triple group cannot be extended to another count of "
                 "bodies (learners.shadow.element_extension.check_extension); fit --system directly")
    if args.source_level_sets and args.extend_from is None:
        ap.error("--source-level-sets: only with --extend-from (the fit's own system is --system otherwise)")
    return args


def _not_available(args):
    """A line saying why this run cannot be made here, or None."""
    if args.extend_from is not None:
        small, large = SYSTEMS[args.extend_from], SYSTEMS[args.system]
        if small[2] != large[2] or small[3] >= large[3]:
            return f"--extend-from {args.extend_from}: not a smaller system of the same kind as {args.system}"
        if args.model == "full":
            return ("--extend-from with --model full: not meaningful (the full GP's kernel lives on the whole 2n-dimensional "
                    "state; a fit on one n cannot be evaluated at another) -- use element or modlanet")
    if args.window is not None and SYSTEMS[args.system][2] != "chain":
        return "--window: only for chains (windows of consecutive bonds)"
    if args.triples and SYSTEMS[args.system][2] != "bodies":
        return "--triples: only for bodies (triples of bodies)"
    if args.model == "element":
        try:
            element_kernel(SYSTEMS[args.system][2], SYSTEMS[args.system][3])
        except ImportError:
            return "--model element: learners.shadow.ElementKernel is not available in this checkout"
    return None


def _fit(args, name):
    """The model of ``args.model`` fitted on the data of system ``name``; ``(model, cpu seconds)``."""
    from integrators.data import snapshots

    make, h, kind, size = SYSTEMS[name]
    system = make()
    data = snapshots(system, h, args.trajectories, args.steps, seed=args.seed)
    c = time.process_time()
    if args.model == "modlanet":
        model = _modlanet(kind, size, h, args.epochs, args.seed).fit(data)
    else:
        from learners import InverseModifiedLagrangianGP

        kw = {} if args.model == "full" else {"kernel": element_kernel(kind, size, args.window, args.triples)}
        model = InverseModifiedLagrangianGP(h, progress=False, **kw).fit(data)
    return model, time.process_time() - c


def _modlanet(kind: str, size: int, h: float, epochs: int, seed: int):
    """ModLaNet from positions (module docstring): free elements in the plane (bodies) or on a line (the chain's
    masses), the DEL loss on inv_2 of the model."""
    from learners import ModLaNet
    from learners.neural import DELLoss, TrainOptions

    space = 2 if kind == "bodies" else 1
    return ModLaNet.bodies(size, space, h=h, loss=DELLoss(inverse_order=2), seed=seed,
                           options=TrainOptions(epochs=epochs, seed=seed, progress=False))


def _extended(model, name: str, kind: str, size: int, window=None, triples: bool = False):
    """The fitted model carried to ``size`` elements: ``ModLaNet.extend(size)``; the element GP's ``extend`` of the
    larger system's structure (:func:`element_kernel`, with the fit's ``window`` and ``triples`` options: the same
    groups, matched by name; the correction an independent prior there)."""
    extend = getattr(model, "extend", None)
    if extend is None:
        return None
    if name == "modlanet":
        return extend(size)
    return extend(element_kernel(kind, size, window, triples))


def _peak_rss_mib() -> float:
    """The process's peak resident set so far, MiB (Linux reports ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(model, system, h: float, *, orders=(0, 2, 4), points: int = 40, std: bool = True, rollout_steps: int = 200,
            gp: bool = True, std_orders=(2, 4)) -> dict:
    """Every metric of one fitted model on ``system`` (benchmarks/_element_metrics.py): ``ls{N}``, ``gain``, ``cal{N}``
    (a :class:`~benchmarks._element_metrics.Calibration`, with ``std`` and ``gp``), ``traj`` (per initial state)."""
    c = time.process_time()
    out = {f"ls{N}": e for N, e in M.level_set_errors(model, system, orders, points).items()}
    out["gain"] = out["ls2"] / out["ls4"] if gp and "ls4" in out else float("nan")
    print(f"    level sets: {time.process_time() - c:.0f} s CPU; " + ", ".join(f"ls{N} {out[f'ls{N}']:.4f}" for N in orders)
          + f", gain {out['gain']:.2f}", flush=True)
    if std:  # without a std (ModLaNet) the relative error only, of its one energy (the same at every N)
        for N in std_orders if gp else (2,):
            c = time.process_time()
            out[f"cal{N}"] = M.calibration(model, system, N, std=gp)
            print(f"    held-out differences N = {N}: {out[f'cal{N}']}; {time.process_time() - c:.0f} s CPU (the std's first "
                  f"demand calibrates it), peak RSS {_peak_rss_mib():.0f} MiB", flush=True)
    c = time.process_time()
    opts = {"on_extrapolation": "ignore"} if gp else {}
    try:
        out["traj"] = M.trajectory_errors(model, system, h, rollout_steps, **opts)
    except (ArithmeticError, RuntimeError, ValueError) as err:  # a rollout that fails (Newton, a singular step) reads inf
        print(f"    trajectory: the rollout failed ({type(err).__name__}: {str(err)[:120]})")
        out["traj"] = None
    print(f"    trajectories: {time.process_time() - c:.0f} s CPU", flush=True)
    return out


def row(name: str, model_name: str, fitted_on: str, args, cpu_s: float, peak: float, m: dict) -> str:
    """The markdown row of one run (:data:`HEADER`)."""
    cells = [name, model_name, fitted_on, str(args.trajectories), str(args.seed), f"{cpu_s:.0f}", f"{peak:.0f}"]
    cells += [f"{m.get(f'ls{N}', math.nan):.4f}" for N in (0, 2, 4)] + [f"{m['gain']:.2f}"]
    for N in (2, 4):
        c = m.get(f"cal{N}")
        cells += [f"{c.rel:.2e}"] + [f"{x:.2f}" if math.isfinite(x) else "-" for x in (c.rms_z, c.within2, c.mean_abs_z)] \
            if c else ["-"] * 4
    t = m["traj"]
    cells.append("failed" if t is None else f"{float(t.max()):.3g}")
    return "| " + " | ".join(cells) + " |"


def main(argv=None) -> None:
    args = _arguments(argv)
    why = _not_available(args)
    if why is not None:
        print(why)
        return
    make, h, kind, size = SYSTEMS[args.system]
    source = args.extend_from or args.system
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, cpu_s = _fit(args, source)
        print(f"fitted {args.model} on {source} ({args.trajectories} x {args.steps + 1} snapshots, h = {h}, seed {args.seed}): "
              f"{cpu_s:.0f} s CPU, peak RSS {_peak_rss_mib():.0f} MiB", flush=True)
        if args.model == "element":
            print("    scales", {k: f"{v:.3g}" for k, v in model.hyperparameters["lengthscale"].items()}, flush=True)
        if args.extend_from is not None and args.source_level_sets:
            c, ls = time.process_time(), M.level_set_errors(model, SYSTEMS[source][0](), (0, 2, 4), args.points)
            print(f"    on {source} itself: ls0 {ls[0]:.4f} ls2 {ls[2]:.4f} ls4 {ls[4]:.4f} gain {ls[2] / ls[4]:.2f} "
                  f"({time.process_time() - c:.0f} s CPU)", flush=True)
        if args.extend_from is not None:
            model = _extended(model, args.model, kind, size, args.window, args.triples)
            if model is None:
                print(f"--extend-from: the fitted {args.model} model has no extend(); the extension is not available")
                return
        c = time.process_time()
        m = measure(model, make(), h, points=args.points, std=not args.no_std, rollout_steps=args.rollout_steps,
                    gp=args.model != "modlanet", std_orders=args.std_orders)
        print(f"    metrics: {time.process_time() - c:.0f} s CPU; trajectory errors per initial state "
              f"{[round(float(x), 4) for x in m['traj']] if m['traj'] is not None else 'failed'}")
    print(HEADER)
    print(row(args.system, args.model, source, args, cpu_s, _peak_rss_mib(), m), flush=True)
    from bea.errors import BeaWarning

    for text in dict.fromkeys(f"{type(w.message).__name__}: {w.message}" for w in caught if issubclass(w.category, BeaWarning)):
        print(f"    warning: {text[:300]}")


if __name__ == "__main__":
    main()
