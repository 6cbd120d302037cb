r"""Experiment sweeps: grids of convergence studies, LSI fits and ModLaNet trainings, serially or on Ray.

>>> from pipelines.sweep import run
>>> res = run("sweeps/convergence.toml", out="results/orders")            # local Ray instance
>>> res = run("sweeps/convergence.toml", out="results/orders", serial=True)  # in this process
>>> res = run(spec, address="auto", resume=True)                           # a Ray cluster; skip finished tasks
>>> res.slopes                                                             # observed orders per (scheme, order, system)

Command line: ``python -m bea sweep SPEC.toml [--out DIR] [--address ADDR] [--serial] [--resume]``.

Modules, one job each: :mod:`~pipelines.sweep.spec` (TOML, validation), :mod:`~pipelines.sweep.tasks`
(task kinds calling the library: :mod:`~pipelines.sweep.kinds`, :mod:`~pipelines.sweep.convergence_kind`,
:mod:`~pipelines.sweep.experiment_kinds`), :mod:`~pipelines.sweep.records` (one checksummed JSON record per
task, atomic), :mod:`~pipelines.sweep.execute` (serial and Ray execution), :mod:`~pipelines.sweep.report`
(CSV tables, plots), :mod:`~pipelines.sweep.api` (:func:`run`). Ray is imported only when a sweep runs on it.
"""

from bea.errors import BeaError

from .api import OutputExists, SweepResults, run
from .spec import Spec, SpecError, Task, load
from .tasks import Kind, Param, ParamError, TaskOutput, kind_names, register

__all__ = ["BeaError", "run", "SweepResults", "OutputExists", "load", "Spec", "SpecError", "Task", "Kind", "Param", "ParamError",
           "TaskOutput", "register", "kind_names"]
