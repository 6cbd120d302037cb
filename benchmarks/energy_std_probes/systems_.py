"""Shared by the probes (session 25, branch widestd15; benchmarks/RESULTS_calibration.md): the acceptance runner's
systems, and OUT, the folder for fitted models and probe files (ENERGY_STD_PROBES, default /tmp/energy_std_probes).
Run every probe from the worktree root with PYTHONPATH=$PWD OMP_NUM_THREADS=1:
``fit.py S SEED`` (fit with library defaults, save: the save runs the calibrations), then on the saved model
``probe2.py S SEED`` (held-out truth vs the innovations, per fold, one and two folds out), ``orth.py S:SEED ...``
(the innovations' orthogonality to the final error at the held-out states), ``cov.py S:SEED ...`` (the 40
differences' posterior covariance and the acceptance statistics' spread under a calibrated std), ``bins.py S ...``
(the data pairs' innovation scale by the pairs' speed and distance), ``eval.py S:SEED ...`` (a speed-dependent scale)."""
import os
import sys

sys.path.insert(0, "benchmarks")
import identification_acceptance as IA  # noqa: E402
import tests.test_learners_shadow_auto as A  # noqa: E402
from _systems12 import NEW12  # noqa: E402
from _systems23 import NEW23  # noqa: E402
from _systems24 import NEW24  # noqa: E402
from _systems24b import NEW24B  # noqa: E402
from _systems25w import NEW25W  # noqa: E402

systems = {mk.__name__: (mk, h, T) for mk, h, T in A.SYSTEMS + A.UNTUNED + IA.UNTUNED + NEW12 + NEW23 + NEW24 + NEW24B
           + NEW25W}
OUT = os.environ.get("ENERGY_STD_PROBES", "/tmp/energy_std_probes")
os.makedirs(OUT, exist_ok=True)
