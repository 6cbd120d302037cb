"""Command line.

``python -m bea derive --scheme S --order N --dim n [--inverse] [--format ...]``
    print a modified (or inverse modified) Lagrangian or modified equation.
``python -m bea demo [--out DIR] [--small] ...``
    Lagrangian Shadow Integration of the pendulum end to end (:mod:`learners.demo`).
``python -m bea sweep SPEC.toml [--out DIR] [--address ADDR] [--serial] [--resume]``
    an experiment grid, serially or on Ray (:mod:`pipelines.sweep`).

``demo`` and ``sweep`` need the ``integrators``, ``learners`` and ``pipelines`` packages, which depend on
``bea``; they are imported only when asked for, so that ``bea`` itself never imports them.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from .schemes import available_schemes


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bea", description="Variational backward error analysis.")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("derive", help="derive a modified (or inverse modified) Lagrangian or modified equation")
    d.add_argument("--scheme", default="midpoint", help=f"one of {', '.join(available_schemes())}, "
                   "or generalised_midpoint:ALPHA (default: midpoint)")
    d.add_argument("--order", type=int, default=2, help="highest power of h kept (default: 2)")
    d.add_argument("--dim", type=int, default=1, help="number of degrees of freedom n (default: 1)")
    what = d.add_mutually_exclusive_group()
    what.add_argument("--inverse", action="store_true", help="inverse modified Lagrangian")
    what.add_argument("--equation", action="store_true", help="modified equation q'' = F_h(q, q')")
    d.add_argument("--format", choices=("sympy", "latex", "torch"), default="sympy",
                   help="SymPy expressions, LaTeX, or the generated torch source (default: sympy)")
    d.add_argument("--no-cache", action="store_true", help="derive from scratch, ignoring the on-disk cache")
    # Listed here for ``bea --help``; its options belong to learners.demo, which parses them itself.
    sub.add_parser("demo", add_help=False, help="learn the pendulum from positions only, end to end "
                   "(python -m bea demo --help for its options)")
    w = sub.add_parser("sweep", help="run an experiment grid (TOML specification) serially or on Ray")
    w.add_argument("spec", help="the sweep specification (TOML; examples in sweeps/)")
    w.add_argument("--out", default=None, help="output folder (default: sweep-results/NAME)")
    w.add_argument("--address", default=None, help="join this Ray cluster (e.g. auto or HOST:6379); default: a local "
                   "Ray instance")
    w.add_argument("--serial", action="store_true", help="run in this process, without Ray (for debugging)")
    w.add_argument("--resume", action="store_true", help="keep the finished records in the output folder, run the rest")
    w.add_argument("--no-plots", action="store_true", help="write the tables only")
    w.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _sweep(args) -> int:
    """``bea sweep``: one line per outcome; errors as one line, exit 2; failed tasks exit 1."""
    if args.serial and args.address:
        print("bea sweep: error: --serial runs without Ray; drop --address or --serial", file=sys.stderr)
        return 2
    try:
        from pipelines.sweep import run  # lazily: bea never imports the layers above it at module level

        res = run(args.spec, out=args.out, address=args.address, serial=args.serial, resume=args.resume,
                  progress=False if args.no_progress else None, plots=not args.no_plots)
    except KeyboardInterrupt:
        print("bea sweep: interrupted; finished tasks are recorded, continue with --resume", file=sys.stderr)
        return 130
    except (ValueError, TypeError, OSError, ImportError, RuntimeError) as err:
        print(f"bea sweep: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    except Exception as err:  # Ray's own errors (cluster unreachable, ...) without a traceback
        print(f"bea sweep: error: {type(err).__name__}: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    print(res)
    for note in res.notes:
        print(f"note: {note}")
    for r in res.failed[:5]:
        print(f"failed: {r['origin']} {r['params']}: {r['error']['type']}: {r['error']['message'].splitlines()[0] if r['error']['message'] else ''}")
    if len(res.failed) > 5:
        print(f"failed: ... and {len(res.failed) - 5} more (see results.csv)")
    return 1 if res.failed else 0


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["demo"]:
        from learners.demo import main as demo_main

        return demo_main(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "sweep":
        return _sweep(args)
    from . import api

    kind = "inverse_modified_lagrangian" if args.inverse else "modified_equation" if args.equation else "modified_lagrangian"
    try:
        series = getattr(api, kind)(args.scheme, args.order, dim=args.dim, cache=not args.no_cache)
        if args.format == "sympy":
            print(series)
        elif args.format == "latex":
            print(series.latex())
        else:
            print(series.source, end="")
    except (ValueError, TypeError) as err:
        print(f"bea: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into head & co.
        sys.stderr.close()
        return 0
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
