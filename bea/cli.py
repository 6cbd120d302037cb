"""Command line.

``python -m bea derive --scheme S --order N --n n [--inverse] [--format ...] [--all-terms]``
    print a modified (or inverse modified) Lagrangian or modified equation (long coefficients shortened
    unless ``--all-terms``). A derivation that is not cached and expected to take more than 2 s is
    announced on stderr first, with the expected time (:mod:`bea.cost`) and the cache folder.
``python -m bea demo [--out DIR] [--small] ...``
    Lagrangian Shadow Integration of the pendulum end to end (:mod:`pipelines.demo`).
``python -m bea sweep SPEC.toml [--out DIR] [--address ADDR] [--serial] [--resume]``
    an experiment grid, serially or on Ray (:mod:`pipelines.sweep`).

``python -m bea --version``
    print the version.

``demo`` and ``sweep`` need the ``integrators``, ``learners`` and ``pipelines`` packages, which depend on
``bea``; they are imported only when asked for, so that ``bea`` itself never imports them. Its ``--out`` directory is checked (an existing
file, a path that cannot be created or written) before the demo starts.

Errors: every error from bad input (a :class:`bea.BeaError`, or a ``ValueError``/``TypeError``/``OSError``)
is printed as one line ``bea: error: ...`` on stderr, with exit status 2 and no traceback; an unexpected
exception (a bug) also gives one line, exit status 1, and its traceback with ``BEA_DEBUG=1``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, List, NoReturn, Optional, Union

from ._version import __version__
from .errors import BeaError, BeaValueError
from .series import MAX_TERMS

__all__ = ["main", "OneLineParser", "check_output_dir", "run_guarded"]

#: exit status for bad input (argparse uses 2 as well) and for anything unexpected
EXIT_USAGE = 2
EXIT_INTERNAL = 1


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a usage error on one line of stderr (no usage block), exit status 2; every
    parser of the command line (``bea``, ``bea demo``) is one."""

    def __init__(self, *args: Any, name: str = "bea", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.name = name  # the word before ": error:" (a pipeline's parser gives its module's name)

    def error(self, message: str) -> NoReturn:
        print(f"{self.name}: error: {' '.join(message.split())} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


class _OutError(BeaError, ValueError):
    """A bad ``--out`` for ``bea demo``."""


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="bea", description="Variational backward error analysis.")
    p.add_argument("--version", action="version", version=f"bea {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    d = sub.add_parser("derive", help="derive a modified (or inverse modified) Lagrangian or modified equation")
    d.add_argument("--scheme", default="midpoint", help="midpoint, trapezoidal or generalised_midpoint:ALPHA "
                   "(ALPHA in [0, 1] is required, e.g. generalised_midpoint:0.3; default: midpoint), or the name of a "
                   "scheme an installed package declares (entry-point group bea.schemes)")
    d.add_argument("--order", type=int, default=2, help="highest power of h kept (default: 2; at most 12)")
    d.add_argument("--n", type=int, default=None, help="write the result in components for n degrees of freedom "
                   "(at most 6); default: vector notation, valid for every n")
    d.add_argument("--dim", type=int, default=None, help="deprecated spelling of --n (removed in the next release)")
    what = d.add_mutually_exclusive_group()
    what.add_argument("--inverse", action="store_true", help="inverse modified Lagrangian")
    what.add_argument("--equation", action="store_true", help="modified equation q'' = F_h(q, q')")
    d.add_argument("--format", choices=("sympy", "latex", "torch"), default="sympy",
                   help="SymPy expressions, LaTeX, or the generated torch source (default: sympy)")
    d.add_argument("--no-cache", action="store_true", help="derive from scratch, ignoring the on-disk cache")
    d.add_argument("--allow-slow", action="store_true", help="start a derivation expected to take more than an hour "
                   "(refused otherwise, with the estimate)")
    d.add_argument("--all-terms", action="store_true", help=f"print every term (default: at most {MAX_TERMS} terms of "
                   "each coefficient, and how many are left out; high orders have millions of characters)")
    # Listed here for ``bea --help``; its options belong to pipelines.demo, which parses them itself.
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


def _demo_out(argv: List[str]) -> Optional[str]:
    """The ``--out`` directory of ``bea demo`` as typed (its default when not given), or ``None`` for ``--help``.
    A string, not a ``Path``: ``Path('')`` is ``.``, which would hide an empty ``--out``."""
    if any(a in ("-h", "--help") for a in argv):
        return None
    out = "bea-demo"  # pipelines.demo's default
    for i, a in enumerate(argv):
        if a == "--out" and i + 1 < len(argv):
            out = argv[i + 1]
        elif a.startswith("--out="):
            out = a.split("=", 1)[1]
    return out


def check_output_dir(out: Union[str, Path]) -> None:
    """Raise :class:`BeaError` unless ``out`` is, or can be created as, a writable directory. Cheap: it
    runs before minutes of work, so that a bad path fails at once rather than after the work."""
    if not str(out).strip():  # Path('') is '.': checked on the string
        raise _OutError("--out is empty: give a directory for the figures and results.json (e.g. --out bea-demo)")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise _OutError(f"--out {out} is an existing file; the demo writes a directory (figures and results.json): "
                        "choose a directory path")
    probe = out
    while not probe.exists():  # the nearest existing ancestor is where mkdir will start
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise _OutError(f"--out {out}: {probe} is a file, so the directory cannot be created; choose another path")
    try:  # the real test (os.access is wrong for root and on some file systems): create and remove a file
        fd, tmp = tempfile.mkstemp(dir=probe, prefix=".bea-write-test-")
        os.close(fd)
        os.unlink(tmp)
    except OSError as err:
        raise _OutError(f"--out {out} is not writable ({err.strerror or err} in {probe}); choose a writable directory") from None


def _announce(kind: str, scheme: str, order: int, n: Optional[int], cache: bool, allow_slow: bool = False) -> None:
    """Before a derivation that is not in the cache: one line on stderr with the expected time and the cache
    folder (a cold high-order derivation runs for minutes without output otherwise)."""
    from . import api, cache as _cache
    from .cost import check_affordable, describe, estimate

    sch = api._scheme(scheme)  # validates the scheme (one-line error) before anything else
    api._check_order(order, sch)
    if n is not None:
        api._check_n(n)
    where = _cache.cache_dir()
    key = api._cache_key(kind, sch, order, "any" if n is None else n) if cache else None
    if key is not None and _cache.entry_path(key, where, "trees" if n is None else "main").exists():
        return
    check_affordable(kind, order, n, allow_slow, scheme)  # beyond the limit: refused with the estimate, before the line
    seconds, basis = estimate(kind, order, n, scheme)
    if seconds is not None and seconds < 2:
        return
    span = "every n" if n is None else f"n = {n}"
    store = f"the result will be cached in {where}" if key is not None else "--no-cache: the result is not stored"
    print(f"bea: deriving the {kind.replace('_', ' ')} of {sch!r} to h^{order} for {span}; not cached yet, expect "
          f"{describe(seconds)} of CPU time ({basis}; longer on a busy machine); {store}", file=sys.stderr, flush=True)


#: library phrasing -> the command line's: the same messages reach Python users, who pass keywords and objects
_CLI_WORDS = {
    "max_terms=None shows all": "--all-terms shows all",
    " or pass a Scheme object": " (a scheme of your own needs Python: bea.CustomScheme)",
}


def _in_cli_terms(text: str) -> str:
    for python, cli in _CLI_WORDS.items():
        text = text.replace(python, cli)
    return text


def _fail(message: str, status: int, name: str = "bea") -> int:
    print(f"{name}: error: {_in_cli_terms(' '.join(str(message).split()))}", file=sys.stderr)
    return status


def _torch_source(series, kind: str, scheme: str, order: int) -> str:
    """What ``--format torch`` prints without ``--n``: a dimension-free series has no generated code (torch
    evaluates its trees for any n, ``bea.free.evaluate.TreeFunction``), so the source that builds the function,
    with its terms as comments."""
    terms = "\n".join(f"# {line}" for line in _in_cli_terms(series.text(MAX_TERMS)).splitlines())
    return (f"{terms}\n#\n# A dimension-free series has no generated torch code: torch evaluates its trees for any n\n"
            f"# (bea.free.evaluate.TreeFunction). This builds the function; --n N prints the generated code for n = N.\n"
            f"import bea\n\nf = bea.{kind}({scheme!r}, {order}).to_torch()   # f(L, q, v, h); q, v of shape (..., n)\n")


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return run_guarded(lambda: _main(argv))


def run_guarded(command: Callable[[], Any], name: str = "bea") -> int:
    """Run ``command()`` as a command line does: bad input (a :class:`BeaError`, ``ValueError``, ``TypeError``,
    ``OSError``, ...) becomes one line ``NAME: error: ...`` on stderr and exit status 2, a bug one line and status
    1 (the traceback with ``BEA_DEBUG=1``); an integer result is the exit status, anything else means 0. Shared by
    ``bea`` and the ``python -m pipelines.*`` entry points."""
    debug = bool(os.environ.get("BEA_DEBUG"))
    try:
        result = command()
        return result if isinstance(result, int) and not isinstance(result, bool) else 0
    except KeyboardInterrupt:
        return _fail("interrupted", 130, name)
    except BrokenPipeError:  # output piped into head & co.
        sys.stderr.close()
        return 0
    except SystemExit as exc:  # argparse: --help, --version, usage errors (already printed on one line)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
    except (BeaError, ValueError, TypeError, ArithmeticError, OSError, MemoryError, RecursionError) as err:
        if debug:
            raise
        return _fail(f"{err}" if isinstance(err, BeaError) else f"{type(err).__name__}: {err}", EXIT_USAGE, name)
    except Exception as err:  # noqa: BLE001 - a bug: one line still, the traceback on request
        if debug:
            raise
        return _fail(f"internal error ({type(err).__name__}: {err}); rerun with BEA_DEBUG=1 for the traceback and "
                     "please report it", EXIT_INTERNAL, name)


def _n_argument(args) -> Optional[int]:
    """``--n``, or its deprecated spelling ``--dim`` with a note on stderr (one release, then removed)."""
    if args.dim is None:
        return args.n
    if args.n is not None:
        raise BeaValueError("--dim is the deprecated spelling of --n; pass --n only")
    print("bea: warning: --dim is deprecated and will be removed in the next release; use --n", file=sys.stderr)
    return args.dim


def _main(argv: List[str]) -> int:
    if argv[:1] == ["demo"]:
        out = _demo_out(argv[1:])
        if out is not None:
            check_output_dir(out)
        try:
            from pipelines.demo import main as demo_main
        except ImportError as err:
            raise BeaError(f"bea demo needs the learners package ({err}); install the project with its extras") from None
        return demo_main(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "sweep":
        return _sweep(args)
    from . import api

    kind = "inverse_modified_lagrangian" if args.inverse else "modified_equation" if args.equation else "modified_lagrangian"
    n = _n_argument(args)
    _announce(kind, args.scheme, args.order, n, not args.no_cache, args.allow_slow)
    series = getattr(api, kind)(args.scheme, args.order, n=n, cache=not args.no_cache, allow_slow=args.allow_slow)
    max_terms = None if args.all_terms else MAX_TERMS
    if args.format == "sympy":
        print(_in_cli_terms(series.text(max_terms)))
    elif args.format == "latex":
        print(series.latex(max_terms))
    elif series.n is None:
        print(_torch_source(series, kind, args.scheme, args.order), end="")
    else:
        print(series.source, end="")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
