"""Notebooks: stored executed (figures visible when browsed), in step with their scripts, and runnable top to
bottom from a clean checkout.

``notebooks/build.py`` regenerates them. The cell check is cheap (it runs the make scripts, which only build
cells); each notebook is executed once, as before.
"""

import importlib.util
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NAMES = {"01": "01_correction_formulas.ipynb", "02": "02_convergence_orders.ipynb", "03": "03_pendulum_shadow.ipynb",
         "04": "04_henon_heiles.ipynb", "05": "05_modlanet.ipynb",
         "06": "06_identification.ipynb", "07": "07_elements.ipynb"}


def _build_module():
    spec = importlib.util.spec_from_file_location("notebooks_build", NOTEBOOKS / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cells(nb):
    return [(c.cell_type, c.source) for c in nb.cells]


def test_every_script_has_a_notebook():
    assert set(_build_module().scripts()) == set(NAMES)


@pytest.mark.parametrize("key", sorted(NAMES))
def test_stored_notebook_matches_its_script_and_has_outputs(key):
    build = _build_module()
    generated, path = build.generate(build.scripts()[key])
    assert path.name == NAMES[key]
    stored = nbformat.read(NOTEBOOKS / NAMES[key], as_version=4)
    assert _cells(stored) == _cells(generated), (
        f"{NAMES[key]} differs from notebooks/make_{key}.py: run `python3 notebooks/build.py {key}`")
    # cell ids come from the content, so a rebuild of unchanged cells rewrites none of them (issue 25)
    assert [c.id for c in stored.cells] == [c.id for c in generated.cells] == [
        c.id for c in build.generate(build.scripts()[key])[0].cells]
    code = [c for c in stored.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), f"{NAMES[key]} is stored unexecuted: run notebooks/build.py"
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    shows = sum(c.source.count("plt.show()") for c in code)
    figures = sum("image/png" in o.get("data", {}) for c in code for o in c.outputs)
    assert figures >= shows > 0 or key == "01" and figures >= 1, f"{NAMES[key]}: {figures} stored figures for {shows} plt.show()"


@pytest.mark.parametrize("name", sorted(NAMES.values()))
def test_notebook_executes(name, tmp_path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    # the notebooks use only the current API (a deprecated call shows as a DeprecationWarning on the cell's stderr)
    warned = [o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "stream" and "DeprecationWarning" in o.get("text", "")]
    assert not warned, warned


def test_stable_ids_change_only_the_edited_cell_and_keep_repeats_distinct():
    build = _build_module()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("a"), nbformat.v4.new_code_cell("x = 1"),
                                         nbformat.v4.new_code_cell("x = 1")])
    build.stable_ids(nb)
    ids = [c.id for c in nb.cells]
    assert len(set(ids)) == 3 and ids[2] == ids[1] + "-2"
    nb.cells[0].source = "b"
    build.stable_ids(nb)
    assert [c.id for c in nb.cells][1:] == ids[1:] and nb.cells[0].id != ids[0]
    nbformat.validate(nb)
