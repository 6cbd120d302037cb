"""Regenerate every notebook from its script and store it executed, with outputs, at CI size.

    python3 notebooks/build.py            # all of them, seven today (about 12 minutes on 2 cores)
    python3 notebooks/build.py 03 05      # some of them
    python3 notebooks/build.py --no-execute   # cells only (outputs dropped), e.g. to review a diff quickly

Each ``notebooks/make_NN.py`` defines the cells (a script keeps the notebook's diff reviewable). This command
builds the notebook from it, executes it top to bottom in a fresh kernel (working directory: a temporary
folder, so that nothing lands in the repository; matplotlib's inline backend, so that figures are stored),
and writes it atomically. ``BEA_FULL`` is removed from the kernel's environment: stored notebooks are the
reduced size that the tests run; set ``BEA_FULL=1`` and open a notebook in Jupyter for the full size.

The figures of the stored notebooks are also written to ``docs/figures/notebooks/NN_k.png`` for the
documentation site. ``tests/test_notebooks.py`` fails when a stored notebook's cells differ from what its
script produces, so edit the script and rerun this command. Cell ids are derived from the cells' content
(:func:`stable_ids`), so rebuilding an unchanged notebook leaves its file unchanged apart from outputs that
differ between runs (timings, addresses).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import runpy
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List
from unittest import mock

import nbformat

HERE = Path(__file__).resolve().parent
FIGURES = HERE.parent / "docs" / "figures" / "notebooks"
#: seconds one cell may run before the build gives up
CELL_TIMEOUT = 1800


def scripts() -> Dict[str, Path]:
    """``{"01": notebooks/make_01.py, ...}``."""
    return {p.stem.split("_", 1)[1]: p for p in sorted(HERE.glob("make_[0-9][0-9].py"))}


def generate(script: Path):
    """The notebook that ``script`` defines (a ``NotebookNode`` without outputs) and the path it names;
    nothing is written."""
    captured = {}

    def capture(nb, path, *args, **kwargs):
        captured["nb"], captured["path"] = nb, Path(path)

    with mock.patch.object(nbformat, "write", capture):
        runpy.run_path(str(script), run_name="__main__")
    if "nb" not in captured:
        raise RuntimeError(f"{script.name} did not produce a notebook (it must end with nbformat.write(nb, path))")
    stable_ids(captured["nb"])
    return captured["nb"], captured["path"]


def stable_ids(nb) -> None:
    """Give every cell an id derived from its type and source (nbformat draws random ones, so each rebuild
    rewrote every id: a diff of dozens of lines for identical content). A repeated cell gets ``-2``, ``-3``, ...;
    editing one cell changes that cell's id only."""
    seen: Dict[str, int] = {}
    for cell in nb.cells:
        base = hashlib.sha256(f"{cell.cell_type}\0{cell.source}".encode()).hexdigest()[:12]
        seen[base] = seen.get(base, 0) + 1
        cell["id"] = base if seen[base] == 1 else f"{base}-{seen[base]}"


def _kernel_env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "BEA_FULL"}
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    # the repository first on the kernel's path, so that the notebooks use this checkout
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def execute(nb) -> None:
    """Run ``nb`` in place in a fresh kernel (see the module docstring)."""
    from nbclient import NotebookClient

    with tempfile.TemporaryDirectory() as tmp, mock.patch.dict(os.environ, _kernel_env(), clear=True):
        NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3", record_timing=False,
                       resources={"metadata": {"path": tmp}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    if errors:
        raise RuntimeError(f"a cell raised {errors[0].get('ename')}: {errors[0].get('evalue')}")


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o666 & ~mask)  # mkstemp's 0600 would make the stored files private
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def export_figures(key: str, nb) -> List[Path]:
    """Write the PNG outputs of ``nb`` as ``docs/figures/notebooks/{key}_{k}.png`` (k from 1), replacing
    the previous ones of this notebook."""
    FIGURES.mkdir(parents=True, exist_ok=True)
    for old in FIGURES.glob(f"{key}_*.png"):
        old.unlink()
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []) if cell.cell_type == "code" else []:
            png = o.get("data", {}).get("image/png")
            if png:
                path = FIGURES / f"{key}_{len(out) + 1}.png"
                _atomic_write(path, base64.b64decode(png))
                out.append(path)
    return out


def build(key: str, run: bool = True) -> Path:
    nb, path = generate(scripts()[key])
    if run:
        t0 = time.perf_counter()
        execute(nb)
        figures = export_figures(key, nb)
        print(f"{path.name}: executed in {time.perf_counter() - t0:.0f} s, {len(figures)} figures", flush=True)
    _atomic_write(path, nbformat.writes(nb).encode() + b"\n")
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 notebooks/build.py", description=__doc__.split("\n\n")[0])
    p.add_argument("which", nargs="*", help="notebook numbers (default: all), e.g. 03")
    p.add_argument("--no-execute", action="store_true", help="write the cells only, without outputs")
    args = p.parse_args(argv)
    known = scripts()
    unknown = [k for k in args.which if k not in known]
    if unknown:
        print(f"build.py: error: no notebooks/make_{unknown[0]}.py; choose among {', '.join(known)}", file=sys.stderr)
        return 2
    for key in args.which or list(known):
        try:
            build(key, run=not args.no_execute)
        except Exception as err:  # noqa: BLE001 - one line per failing notebook, then stop
            print(f"build.py: error: notebook {key}: {type(err).__name__}: {err}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
