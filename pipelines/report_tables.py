"""Numbers in README.md and docs/ generated from the files that the code writes (issue 25).

A page marks a generated region::

    <!-- generated:NAME -->
    ...
    <!-- /generated -->

and :data:`SOURCES` says which file each ``NAME`` is rendered from: ``docs/data/demo.json`` is the
``results.json`` that ``python3 -m bea demo`` writes (copy it there with ``--demo PATH``), and
``docs/data/derive_cost.json`` what ``python3 benchmarks/derive_cost.py --json PATH`` writes.

    python3 -m pipelines.report_tables                  # rewrite every region from its source
    python3 -m pipelines.report_tables --check          # exit 1, naming page and number, where a page disagrees
    python3 -m pipelines.report_tables --demo bea-demo/results.json   # take a new demo run as the source first

The check compares each region with what its source renders: the text must be the same, and each number may
differ from the rendered one by at most half a unit of its last shown digit (``2.6e-6`` on the page agrees with a
source that renders ``2.61e-6``, ``4.20e-6`` does not). ``tests/test_report_tables.py`` runs it, and checks that
it fails when one number is edited by hand. Files are written atomically; nothing read is executed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from decimal import Decimal
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from bea.errors import BeaOSError, BeaValueError
from bea.files import atomic_write_text

from . import report_renderers as R

ROOT = Path(__file__).resolve().parent.parent
REGION = re.compile(r"(<!-- generated:([\w-]+) -->\n)(.*?)(<!-- /generated -->)", re.S)
NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")

#: region name -> (source file relative to the repository root, renderer of its parsed JSON)
SOURCES: Dict[str, Tuple[str, Callable[[dict], str]]] = {
    "demo-table": ("docs/data/demo.json", R.demo_table),
    "demo-cost": ("docs/data/demo.json", R.demo_cost),
    "derive-cost": ("docs/data/derive_cost.json", R.derive_cost_table),
}


def pages(root: Path = ROOT) -> List[Path]:
    return [root / "README.md"] + sorted((root / "docs").rglob("*.md"))


def render(name: str, root: Path = ROOT) -> str:
    """The text of region ``name`` from its source file (a clear error if either is unknown or unreadable)."""
    if name not in SOURCES:
        raise BeaValueError(f"unknown generated region {name!r}; known: {', '.join(sorted(SOURCES))} (pipelines/report_tables.py)")
    rel, renderer = SOURCES[name]
    try:
        data = json.loads((root / rel).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise BeaOSError(f"cannot read {rel}, the source of region {name!r}: {err}") from None
    text = renderer(data)
    return text if text.endswith("\n") else text + "\n"


def _value(token: str) -> Decimal:
    return Decimal(token.replace(",", ""))


def _half_unit(token: str) -> Decimal:
    """Half a unit of the last digit shown: the rounding a reader may assume."""
    mantissa, _, exponent = token.replace(",", "").lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return Decimal(5) * Decimal(10) ** (-decimals - 1 + (int(exponent) if exponent else 0))


def compare(shown: str, rendered: str) -> Optional[str]:
    """``None`` when ``shown`` agrees with ``rendered`` (same text; numbers within half a unit of the shown last
    digit), else the first disagreement."""
    a, b = NUMBER.split(shown), NUMBER.split(rendered)
    if a != b:
        line = next((x for x, y in zip(shown.splitlines(), rendered.splitlines()) if x != y), shown.splitlines()[-1:])
        return f"text differs: {line!r}"
    for x, y in zip(NUMBER.findall(shown), NUMBER.findall(rendered)):
        if abs(_value(x) - _value(y)) > _half_unit(x):
            return f"{x} on the page, {y} from the source"
    return None


def check(root: Path = ROOT) -> List[str]:
    """Every disagreement between a page's generated regions and their sources, as ``page: NAME: what``."""
    problems = []
    for page in pages(root):
        for m in REGION.finditer(page.read_text(encoding="utf-8")):
            bad = compare(m.group(3), render(m.group(2), root))
            if bad:
                problems.append(f"{page.relative_to(root).as_posix()}: {m.group(2)}: {bad}")
    return problems


def regenerate(root: Path = ROOT) -> List[str]:
    """Rewrite every generated region from its source; return the pages changed."""
    changed = []
    for page in pages(root):
        text = page.read_text(encoding="utf-8")
        new = REGION.sub(lambda m: m.group(1) + render(m.group(2), root) + m.group(4), text)
        if new != text:
            atomic_write_text(page, new)
            changed.append(page.relative_to(root).as_posix())
    return changed


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m pipelines.report_tables", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="report disagreements and exit 1, change nothing")
    ap.add_argument("--demo", metavar="RESULTS_JSON", help="first copy this results.json of `bea demo` to docs/data/demo.json")
    args = ap.parse_args(argv)
    try:
        if args.demo:
            text = Path(args.demo).read_text(encoding="utf-8")
            json.loads(text)  # a broken file must not replace the source
            atomic_write_text(ROOT / SOURCES["demo-table"][0], text)
        if args.check:
            problems = check()
            for p in problems:
                print(p, file=sys.stderr)
            return 1 if problems else 0
        for page in regenerate():
            print(f"rewrote {page}")
    except (OSError, ValueError, KeyError) as err:
        print(f"report_tables: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
