"""The CI run's worker balance under ``pytest -n 2 --dist loadfile``, replayed from one run's per-test durations.

pytest-xdist 3.8's LoadScopeScheduling with tests/conftest.py's units and order: each worker gets one unit, then
another whenever at most ``refill`` of its tests are still pending (2 in pytest-xdist); a worker's finishing time is
the sum of its tests' setup + call + teardown durations. The wall of the run is the later worker's.

Usage (benchmarks/RESULTS_speed.md, Session 24)::

    python3 -m pytest -v -n 2 --dist loadfile --durations=0 -p no:randomly > run.log
    python3 -m pytest --collect-only -q -p no:randomly | grep :: > collected.txt
    python3 benchmarks/ci_schedule.py run.log collected.txt [tests/conftest.py]
"""

import importlib.util
import re
import sys
from collections import OrderedDict, defaultdict
from types import SimpleNamespace


def durations(path):
    """Seconds per test id (setup + call + teardown) from a pytest ``--durations=0`` report."""
    out = defaultdict(float)
    for line in open(path):
        m = re.match(r"\s*([0-9.]+)s (setup|call|teardown)\s+(\S+)", line)
        if m:
            out[m.group(3)] += float(m.group(1))
    return out


def replay(ids, seconds, unit_of, nodes=2, refill=2):
    """Each worker's busy seconds when the ids (in collection order) are handed out in units as pytest-xdist does."""
    queue = OrderedDict()
    for i in ids:
        queue.setdefault(unit_of(i), []).append(i)
    pending, clock = [[] for _ in range(nodes)], [0.0] * nodes

    def assign(k):
        pending[k].extend(queue.popitem(last=False)[1])

    for k in range(nodes):
        assign(k)
    for k in range(nodes):
        if queue and len(pending[k]) <= refill:
            assign(k)
    while any(pending):
        k = min((k for k in range(nodes) if pending[k]), key=lambda k: clock[k] + seconds.get(pending[k][0], 0.0))
        clock[k] += seconds.get(pending[k].pop(0), 0.0)
        if queue and len(pending[k]) <= refill:
            assign(k)
    return clock


def main(log, collected, conftest="tests/conftest.py"):
    spec = importlib.util.spec_from_file_location("ci_conftest", conftest)
    cf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cf)
    items = [SimpleNamespace(nodeid=line.strip()) for line in open(collected) if "::" in line]
    cf.pytest_collection_modifyitems(None, items)
    seconds = durations(log)
    for refill in (2, 0):
        clock = replay([it.nodeid for it in items], seconds, cf._work_unit, refill=refill)
        print(f"refill <= {refill}: workers {[round(c, 1) for c in clock]} s, wall {max(clock):.1f} s, "
              f"even split {sum(clock) / len(clock):.1f} s")


if __name__ == "__main__":
    main(*sys.argv[1:])
