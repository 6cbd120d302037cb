"""The fenced code blocks of README.md and docs/**/*.md, as the tests run them (issue 25).

Conventions, visible on the rendered page because they are comment lines inside the block:

* ``# not run by the suite: REASON`` on the first lines of a block: the suite does not run it (it installs
  packages, starts a server, ...); the reason must be given.
* ``# run by the suite with -m slow only: REASON``: the block runs under ``-m slow`` only (it takes minutes).
* ``# under N s ...`` (README Python blocks): the wall-clock limit of the block (``tests/test_readme.py``).
* ``CODE  # -> TEXT``: TEXT is what the line prints; the suite compares it with the printed line, where ``...``
  stands for any text (so a shown output may give only the leading digits of a number).

Python blocks of one page run in one process, in page order, since they build on each other; bash blocks run
with ``bash -e`` in a fresh folder (holding links to ``sweeps/`` and ``notebooks/``, since the pages run their
commands from the repository root). Both get an empty cache (``$BEA_CACHE_DIR``), ``BEA_SMALL=1``, which blocks
that offer a reduced size read, and ``OMP_NUM_THREADS=1``, so that the suite degrades gracefully on a shared
machine (``docs/reliability.md``); shown outputs are rounded enough not to depend on it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```(python|bash)\n(.*?)^```", re.S | re.M)
NOT_RUN = re.compile(r"^#\s*not run by the suite:\s*(\S.*)$", re.I | re.M)
SLOW = re.compile(r"^#\s*run by the suite with -m slow only:\s*(\S.*)$", re.I | re.M)
SHOWN = re.compile(r"#\s*->\s*(.*?)\s*$")
#: a marker counts only among the first lines of a block, where a reader meets it before the code
HEAD_LINES = 3
#: printed before each Python block of a page, so that its output can be told from the others'
SENTINEL = "@@bea-doc-block {}@@"


@dataclass(frozen=True)
class Block:
    page: str      # path relative to the repository root
    index: int     # 1-based among the page's fenced blocks of its language
    lang: str      # "python" or "bash"
    code: str

    @property
    def head(self) -> str:
        return "\n".join(self.code.splitlines()[:HEAD_LINES])

    @property
    def not_run(self) -> Optional[str]:
        m = NOT_RUN.search(self.head)
        return m.group(1) if m else None

    @property
    def slow(self) -> Optional[str]:
        m = SLOW.search(self.head)
        return m.group(1) if m else None

    @property
    def expected(self) -> List[str]:
        """The outputs shown with ``# -> TEXT``, in order."""
        return [m.group(1) for line in self.code.splitlines() if (m := SHOWN.search(line))]

    @property
    def name(self) -> str:
        return f"{self.page} {self.lang} block {self.index}"


def pages() -> List[Path]:
    return [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))


def blocks(page: Path) -> List[Block]:
    text = page.read_text(encoding="utf-8")
    rel = page.relative_to(ROOT).as_posix()
    out, count = [], {"python": 0, "bash": 0}
    for m in FENCE.finditer(text):
        count[m.group(1)] += 1
        out.append(Block(rel, count[m.group(1)], m.group(1), m.group(2)))
    return out


def matches(expected: str, line: str) -> bool:
    """``line`` is what ``expected`` shows, ``...`` standing for any text."""
    pattern = ".*?".join(re.escape(part) for part in expected.split("..."))
    return re.fullmatch(pattern, line.strip()) is not None


def check_outputs(block: Block, printed: str) -> List[str]:
    """The shown outputs of ``block`` missing from ``printed``, in order (each after the previous match)."""
    lines, missing, at = printed.splitlines(), [], 0
    for want in block.expected:
        hit = next((i for i in range(at, len(lines)) if matches(want, lines[i])), None)
        if hit is None:
            missing.append(want)
        else:
            at = hit + 1
    return missing


def environment(tmp: Path) -> dict:
    """A new user's environment: this checkout importable, an empty cache, the reduced sizes, no display."""
    env = dict(os.environ, BEA_SMALL="1", BEA_CACHE_DIR=str(tmp / "cache"), MPLBACKEND="Agg", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env.pop("BEA_FULL", None)
    return env


def _link_inputs(tmp: Path) -> None:
    """The pages run their commands from the repository root: link the example inputs they name."""
    for name in ("sweeps", "notebooks"):
        if not (tmp / name).exists():
            (tmp / name).symlink_to(ROOT / name)


def run_python(group: List[Block], tmp: Path, timeout: float) -> Tuple[subprocess.CompletedProcess, List[str]]:
    """Run the Python blocks of one page in one fresh process; return the process and each block's output."""
    script = "\n".join(f"print({SENTINEL.format(b.index)!r}, flush=True)\n{b.code}" for b in group)
    _link_inputs(tmp)
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp, env=environment(tmp), capture_output=True, text=True,
                       timeout=timeout)
    parts = re.split(r"^@@bea-doc-block \d+@@$", r.stdout, flags=re.M)[1:]
    return r, parts


def run_bash(block: Block, tmp: Path, timeout: float) -> subprocess.CompletedProcess:
    """Run a bash block from a fresh folder holding links to the repository's example inputs."""
    _link_inputs(tmp)
    env = environment(tmp)
    # ``python3`` in a block is this interpreter, whatever PATH says
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.code], cwd=tmp, env=env, capture_output=True,
                          text=True, timeout=timeout)
