"""The layers import one way, ``bea <- integrators <- learners <- pipelines`` (issue 14, acceptance).

Checked on the source with :mod:`ast`, so every import counts, also one inside a function. The one
allowed edge upwards: the command line (``bea/cli.py``) dispatches to :mod:`pipelines` -- lazily, inside a
function, so ``import bea`` never loads the layers above it.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["bea", "integrators", "learners", "pipelines"]
CLI = Path("bea/cli.py")


def imports(path: Path):
    """``(top-level package, line, at module level)`` for every import in ``path``; relative imports stay in
    their own package and are skipped."""
    tree = ast.parse(path.read_text(), filename=str(path))
    nested = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
              for n in ast.walk(f)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            yield name.split(".")[0], node.lineno, id(node) not in nested


def edges():
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            for target, line, top in imports(path):
                if target in LAYERS:
                    yield path.relative_to(ROOT), layer, target, line, top


def test_the_checker_sees_the_files_and_their_imports():
    # a guard against a vacuous pass: the walk finds the packages and the known downward edges
    found = list(edges())
    assert {(layer, target) for _, layer, target, _, _ in found} >= {("integrators", "bea"), ("learners", "integrators"),
                                                                      ("learners", "bea"), ("pipelines", "learners")}
    assert (CLI, "bea", "pipelines") in {(p, layer, target) for p, layer, target, _, _ in found}


def test_no_layer_imports_one_above_it():
    upward = []
    for path, layer, target, line, top in edges():
        if LAYERS.index(target) <= LAYERS.index(layer):
            continue
        if path == CLI and target == "pipelines" and not top:
            continue  # the CLI's lazy dispatch, the one allowed upward edge
        upward.append(f"{path}:{line} imports {target}{'' if not top else ' at module level'}")
    assert not upward, "imports against the layering bea <- integrators <- learners <- pipelines:\n" + "\n".join(upward)


@pytest.mark.parametrize("source, expected", [
    ("import learners\n", [("learners", 1, True)]),
    ("def f():\n    from pipelines.demo import main\n", [("pipelines", 2, False)]),
    ("from . import x\nfrom .y import z\n", []),
])
def test_imports_parses_absolute_and_lazy_imports(tmp_path, source, expected):
    f = tmp_path / "m.py"
    f.write_text(source)
    assert list(imports(f)) == expected
