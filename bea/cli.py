"""Command line.

``python -m bea derive --scheme S --order N --dim n [--inverse] [--format ...]``
    print a modified (or inverse modified) Lagrangian or modified equation.
``python -m bea demo [--out DIR] [--small] ...``
    Lagrangian Shadow Integration of the pendulum end to end (:mod:`learners.demo`).

``demo`` needs the ``integrators`` and ``learners`` packages, which depend on ``bea``; it is imported only
when asked for, so that ``bea`` itself never imports them.
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
    return p


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["demo"]:
        from learners.demo import main as demo_main

        return demo_main(argv[1:])
    args = _parser().parse_args(argv)
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
