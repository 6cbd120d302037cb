"""The suite's own work order under pytest-xdist (tests/conftest.py): units and their order, which decide how long
the CI run takes on two workers, never a result."""

from types import SimpleNamespace

import pytest

from tests import conftest


def test_each_notebook_execution_is_a_unit_and_other_tests_go_by_file():
    run = "tests/test_notebooks.py::test_notebook_executes[06_identification.ipynb]"
    assert conftest._work_unit(run) == run
    assert conftest._work_unit("tests/test_notebooks.py::test_every_script_has_a_notebook") == "tests/test_notebooks.py"
    assert conftest._work_unit("tests/test_x.py::TestA::test_b[1]") == "tests/test_x.py"


def test_the_longest_units_are_collected_first_and_the_rest_keep_their_order():
    ids = ["tests/test_a.py::test_1", "tests/test_learners_rotation.py::test_r",
           "tests/test_notebooks.py::test_notebook_executes[07_elements.ipynb]", "tests/test_a.py::test_2",
           "tests/test_notebooks.py::test_notebook_executes[06_identification.ipynb]", "tests/test_b.py::test_3"]
    items = [SimpleNamespace(nodeid=i) for i in ids]
    conftest.pytest_collection_modifyitems(None, items)
    assert [it.nodeid for it in items] == [ids[4], ids[1], ids[2], ids[0], ids[3], ids[5]]
    assert len(set(conftest.LONGEST_FIRST)) == len(conftest.LONGEST_FIRST)


def test_the_scheduler_keeps_the_collection_order_and_splits_the_notebooks():
    pytest.importorskip("xdist")
    option = SimpleNamespace(loadscopereorder=True)
    config = SimpleNamespace(getvalue=lambda name: "loadfile", option=option)
    sched = conftest.pytest_xdist_make_scheduler(config, None)
    assert option.loadscopereorder is False  # pytest-xdist >= 3.8 reads it when it forms the queue
    run = "tests/test_notebooks.py::test_notebook_executes[07_elements.ipynb]"
    assert sched._split_scope(run) == run and sched._split_scope("tests/test_a.py::test_1") == "tests/test_a.py"
    other = SimpleNamespace(getvalue=lambda name: "load", option=SimpleNamespace(loadscopereorder=True))
    assert conftest.pytest_xdist_make_scheduler(other, None) is None  # other modes: pytest-xdist's own
