"""Fit SYSTEM at SEED with library defaults (the acceptance's data) and save it to OUT (systems_.py)."""
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from systems_ import OUT, systems  # noqa: E402
from integrators.data import snapshots  # noqa: E402
from learners import InverseModifiedLagrangianGP  # noqa: E402

name, seed = sys.argv[1], int(sys.argv[2])
mk, h, T = systems[name]
data = snapshots(mk(), h, T, 5, seed=seed)
c = time.process_time()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    m = InverseModifiedLagrangianGP(h, progress=False).fit(data)
    print("fit cpu", time.process_time() - c, flush=True)
    m.save(f"{OUT}/{name}_{seed}.pt")
print("saved cpu", time.process_time() - c, {k: v.scale for k, v in m.calibration.items()})
