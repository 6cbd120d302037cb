"""Generated numbers in README.md and docs/ agree with the files the code wrote (``pipelines.report_tables``), and
the check itself catches a number edited by hand. The cost model behind ``bea derive``'s estimates is within 2x of
the measured times (``docs/data/derive_cost.json``, ``benchmarks/derive_cost.py``). Under a second."""

import json
import shutil

import pytest

from bea.errors import BeaValueError

from pipelines import report_renderers, report_tables as RT


def test_every_page_agrees_with_its_sources():
    assert not RT.check(), "\n".join(RT.check()) + "\nrun: python3 -m pipelines.report_tables"


def test_the_pages_have_the_generated_regions():
    found = {(p.relative_to(RT.ROOT).as_posix(), m.group(2)) for p in RT.pages() for m in RT.REGION.finditer(p.read_text())}
    assert {("README.md", "demo-table"), ("README.md", "demo-cost"), ("docs/results/shadow.md", "demo-table"),
            ("docs/howto/derive.md", "derive-cost")} <= found


def test_compare_within_half_a_unit_of_the_last_shown_digit():
    assert RT.compare("| 2.61e-6 | 0.0112 |\n", "| 2.61e-6 | 0.0112 |\n") is None
    assert RT.compare("| 2.6e-6 |\n", "| 2.61e-6 |\n") is None            # fewer digits shown: rounding allowed
    assert RT.compare("| 4.20e-6 |\n", "| 2.61e-6 |\n") == "4.20e-6 on the page, 2.61e-6 from the source"
    assert RT.compare("| 2.62e-6 |\n", "| 2.61e-6 |\n") is not None       # 1e-8 > half a unit (5e-9)
    assert RT.compare("| 10,000 steps |\n", "| 1,000 steps |\n") is not None
    assert RT.compare("| LGP, 1,000 steps |\n", "| LSI, 1,000 steps |\n").startswith("text differs")


@pytest.fixture
def copy_root(tmp_path):
    shutil.copy(RT.ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(RT.ROOT / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("*.png", "figures"))
    return tmp_path


def test_the_check_fails_when_one_number_is_edited_by_hand(copy_root):
    assert RT.check(copy_root) == []
    readme = copy_root / "README.md"
    text = readme.read_text()
    region = RT.REGION.search(text, text.index("<!-- generated:demo-table -->"))
    shown = RT.NUMBER.findall(region.group(3))
    # the LSI trajectory error, edited to the number that the README showed before it was generated
    target = next(x for x in shown if "e-" in x)
    edited = region.group(3).replace(target, "4.20e-6" if target != "4.20e-6" else "2.61e-6", 1)
    readme.write_text(text[:region.start(3)] + edited + text[region.end(3):])
    problems = RT.check(copy_root)
    assert len(problems) == 1 and problems[0].startswith("README.md: demo-table:") and target in problems[0]
    # regenerating repairs it
    assert RT.regenerate(copy_root) == ["README.md"] and RT.check(copy_root) == []


def test_the_check_fails_when_the_source_changes(copy_root):
    src = copy_root / "docs" / "data" / "demo.json"
    data = json.loads(src.read_text())
    data["metrics"]["ls_rec4"] *= 1.5
    src.write_text(json.dumps(data))
    problems = RT.check(copy_root)
    assert {p.split(":")[0] for p in problems} == {"README.md", "docs/results/shadow.md"}


def test_unknown_region_and_missing_source_are_clear_errors(copy_root):
    with pytest.raises(BeaValueError, match="unknown generated region 'nope'"):
        RT.render("nope", copy_root)
    (copy_root / "docs" / "data" / "demo.json").unlink()
    with pytest.raises(OSError, match="docs/data/demo.json, the source of region 'demo-table'"):
        RT.render("demo-table", copy_root)


def test_cost_model_within_2x_of_every_measured_derivation():
    data = json.loads((RT.ROOT / "docs" / "data" / "derive_cost.json").read_text())
    rows = report_renderers.cost_rows(data)
    measured = [r for r in rows if r["measured"] is not None]
    # the acceptance of issue 25: orders 2-8, n = 1, 2, 3 and dimension-free, both kinds the CLI derives
    assert {r["order"] for r in measured} == {2, 4, 6, 8} and {r["dim"] for r in measured} >= {None, 1, 2, 3}
    for r in measured:
        ratio = r["measured"] / r["predicted"]
        assert 0.5 <= ratio <= 2.0, f"{r['kind']} n={r['dim']} order {r['order']}: measured/predicted = {ratio:.2f}"
    for r in rows:
        if r["measured"] is None:  # not run: the model must say it is long, and the table why
            assert r["predicted"] is None or r["predicted"] > 300, r


@pytest.mark.slow
def test_the_demo_reproduces_its_recorded_numbers(tmp_path):
    """``bea demo`` today gives the numbers of ``docs/data/demo.json`` (about two minutes on 2 cores). With one
    torch thread, as recorded, the run is deterministic up to the order of BLAS sums, and 5% allows for another
    machine's BLAS in every metric but the 10,000-step trajectory error: the posterior mean's terms cancel by seven
    to nine orders, so that error follows the order of its sums (README: 1.3e-6 to 5e-6 for algebraically equal
    evaluations of one fitted mean; one thread on an AMD EPYC gives 4.31e-6 against the recorded 3.44e-6, ratio
    1.25, where the level sets agree to 1e-4 and vel_rec4, the next most sensitive, to 3.6%; two threads gave 2.61e-6,
    ratio 0.76). It is held to a factor 2 of the record, which still fails the errors that matter (the paper's
    4.9e-4, or an order lost)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, OMP_NUM_THREADS="1", BEA_CACHE_DIR=str(tmp_path / "cache"), MPLBACKEND="Agg",
               PYTHONPATH=os.pathsep.join([str(RT.ROOT), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "bea", "demo", "--no-figures", "--quiet", "--out", str(tmp_path / "out")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    now = json.loads((tmp_path / "out" / "results.json").read_text())["metrics"]
    recorded = json.loads((RT.ROOT / "docs" / "data" / "demo.json").read_text())["metrics"]
    for key in ("ls_inv", "ls_rec2", "ls_rec4", "band_rec2", "band_rec4", "vel_rec2", "vel_rec4"):
        assert now[key] == pytest.approx(recorded[key], rel=0.05), key
    assert 0.5 <= now["traj_lsi"] / recorded["traj_lsi"] <= 2.0, (now["traj_lsi"], recorded["traj_lsi"])
