"""The README as a new user meets it: every Python block runs as written, in a fresh process and folder with an
empty cache, and within the time its first line states (``# under N s ...``).

Blocks that would take minutes at full size read ``BEA_SMALL=1`` (they say so), which this test sets; the tour
has no such switch and must finish in under a minute as written. The limits are wall-clock seconds on the CI
machine (2 cores, nothing else running); each block was measured well below its limit. Blocks allowed more
than a minute (the integrator, LSI and ModLaNet tours, about 2 minutes together) run with ``-m slow`` only,
to keep the default suite within the CI budget; the tour and the short blocks run always. A line's output shown
as ``# -> TEXT`` is compared with what it prints (``tests/doc_blocks.py``); the README's bash blocks run in
``tests/test_docs_blocks.py``.
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import doc_blocks

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```python\n(.*?)^```", README, re.S | re.M)
LIMIT = re.compile(r"^# under (\d+) s\b")


def test_blocks_state_their_time_and_the_tour_is_under_a_minute():
    assert len(BLOCKS) >= 4
    for i, block in enumerate(BLOCKS):
        assert LIMIT.match(block), f"README Python block {i + 1} must start with '# under N s ...', got {block.splitlines()[0]!r}"
    tour = BLOCKS[0]
    assert "BEA_SMALL" not in tour and int(LIMIT.match(tour).group(1)) <= 60


def test_readme_links_the_docs_site_and_how_to_serve_it():
    assert "mkdocs serve" in README and "docs/index.md" in README


def _limit(block: str) -> int:
    m = LIMIT.match(block)
    return int(m.group(1)) if m else 0


# blocks allowed more than a minute run with ``-m slow`` only: together they take minutes, beyond the CI budget
@pytest.mark.parametrize("index", [pytest.param(i, marks=pytest.mark.slow if _limit(b) > 60 else (), id=f"block{i + 1}")
                                   for i, b in enumerate(BLOCKS)])
def test_readme_block_runs_within_its_stated_time(index, tmp_path):
    code = BLOCKS[index]
    limit = int(LIMIT.match(code).group(1))
    env = dict(os.environ, BEA_SMALL="1", BEA_CACHE_DIR=str(tmp_path / "cache"), MPLBACKEND="Agg",
               PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env.pop("BEA_FULL", None)
    t0 = time.perf_counter()
    try:
        r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        pytest.fail(f"README Python block {index + 1} ran over its stated {limit} s")
    elapsed = time.perf_counter() - t0
    assert r.returncode == 0, f"README Python block {index + 1} failed:\n{r.stderr[-3000:]}"
    # the README uses only the current API: a deprecated call from the block (module __main__) would show here
    assert not [line for line in r.stderr.splitlines() if "Warning:" in line], f"README block {index + 1} warns:\n{r.stderr[-3000:]}"
    assert elapsed <= limit
    # what a line shows as ``# -> output`` is what it prints (tests/doc_blocks.py)
    missing = doc_blocks.check_outputs(doc_blocks.Block("README.md", index + 1, "python", code), r.stdout)
    assert not missing, f"README Python block {index + 1} shows {missing}; it printed:\n{r.stdout[-3000:]}"
