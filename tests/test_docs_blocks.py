"""Every fenced ``python`` and ``bash`` block of README.md and docs/**/*.md runs as written, in a fresh process
and folder with an empty cache, and prints what the page shows (``# -> TEXT``), unless the block says on its
first lines why the suite does not run it (conventions: ``tests/doc_blocks.py``).

README Python blocks run one by one in ``tests/test_readme.py`` (with their time limits); here: the Python blocks
of each docs page, together in one process per page, and every bash block. A page whose blocks take minutes says
so (``# run by the suite with -m slow only: ...``) and runs with ``-m slow``.
"""

import pytest

import doc_blocks as D

ALL = [b for page in D.pages() for b in D.blocks(page)]
#: Python blocks of the docs pages, grouped by page (README's run in tests/test_readme.py)
PAGES = {}
for _b in ALL:
    if _b.lang == "python" and _b.page != "README.md" and not _b.not_run:
        PAGES.setdefault(_b.page, []).append(_b)
BASH = [b for b in ALL if b.lang == "bash" and not b.not_run]
#: seconds; a page or bash block that needs more is too long for the suite and must say so
TIMEOUT = 600


def _marks(group):
    return pytest.mark.slow if any(b.slow for b in group) else ()


def test_blocks_are_found_and_every_skip_gives_its_reason():
    assert len(ALL) >= 25 and {b.lang for b in ALL} == {"python", "bash"}
    for b in ALL:
        # a marker further down would not be seen by a reader before the code runs
        body = "\n".join(b.code.splitlines()[D.HEAD_LINES:])
        assert not D.NOT_RUN.search(body) and not D.SLOW.search(body), f"{b.name}: markers go on the first lines"
        assert not (b.not_run and b.expected), f"{b.name}: shows outputs but is not run, so they are not checked"


def test_the_output_check_itself():
    block = D.Block("x.md", 1, "python", "print(1)  # -> 1\nprint('a b')  # -> a ...\nprint(2.5e-3)  # -> 2.5e-...\n")
    assert block.expected == ["1", "a ...", "2.5e-..."]
    assert D.check_outputs(block, "1\na b\n0.0025\n") == ["2.5e-..."]
    assert D.check_outputs(block, "1\na b c\n2.5e-03\n") == []
    assert D.check_outputs(block, "a b\n1\n2.5e-3\n") == ["a ..."], "outputs must come in the order shown"


@pytest.mark.parametrize("page", [pytest.param(p, marks=_marks(g), id=p) for p, g in PAGES.items()])
def test_page_python_blocks_run_and_print_what_they_show(page, tmp_path):
    group = PAGES[page]
    r, outputs = D.run_python(group, tmp_path, TIMEOUT)
    assert r.returncode == 0, f"{page}: a Python block failed:\n{r.stderr[-3000:]}"
    assert not [line for line in r.stderr.splitlines() if "Warning:" in line], f"{page} warns:\n{r.stderr[-3000:]}"
    for block, printed in zip(group, outputs):
        missing = D.check_outputs(block, printed)
        assert not missing, f"{block.name}: shown {missing}, printed:\n{printed[-3000:]}"


@pytest.mark.parametrize("block", [pytest.param(b, marks=_marks([b]), id=f"{b.page}:{b.index}") for b in BASH])
def test_bash_blocks_run_and_print_what_they_show(block, tmp_path):
    r = D.run_bash(block, tmp_path, TIMEOUT)
    assert r.returncode == 0, f"{block.name} failed:\n{r.stdout[-1500:]}\n{r.stderr[-3000:]}"
    missing = D.check_outputs(block, r.stdout)
    assert not missing, f"{block.name}: shown {missing}, printed:\n{r.stdout[-3000:]}"
