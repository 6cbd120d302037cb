r"""Task kinds: what one grid point computes, its parameters, and their checks.

A :class:`Kind` names its parameters (:class:`Param`: a type hint for validation, a default or
:data:`REQUIRED`), checks their values (raising :class:`ParamError` naming the key), and runs one
task, ``run(params, seed) -> TaskOutput``. ``seed`` is derived from the parameters
(:func:`pipelines.sweep.records.derived_seed`); every random draw of a task comes from it.

Built-in kinds (:data:`KINDS`), each a thin call into the library:

``convergence``
    One error of :mod:`integrators.convergence` at one step size ``h``: ``experiment`` =
    ``"exact"`` (:func:`~integrators.convergence.discrete_vs_exact`), ``"modified_flow"``
    (:func:`~integrators.convergence.discrete_vs_modified_flow`), ``"inverse_modified"``
    (:func:`~integrators.convergence.inverse_modified_vs_exact`) or ``"energy_oscillation"``
    (:func:`~integrators.convergence.modified_energy_oscillation`), for a ``scheme``, correction order
    ``order`` (the truncation order; ``N`` before, deprecated), ``system`` and horizon ``T``. Metric ``error`` (max over grid times, trajectories and
    coordinates of :math:`|q_k - q(t_k)|`, or the oscillation amplitude of :math:`H_{mod}[\mathrm{order}]`).
    ``info.expected_order``: ``order + 2`` for symmetric schemes, ``order + 1`` otherwise (``exact``:
    2 or 1). The observed order is the slope of :math:`\log \text{error}` against :math:`\log h` over
    the tasks that differ only in ``h`` (:mod:`pipelines.sweep.report`).
``shadow``
    One run of :func:`pipelines.shadow_experiments.run` (LSI fit, prediction, identification, held-out
    residuals; LGP baselines if ``baselines``). Defaults: the configuration object named by
    ``preset`` (``PENDULUM_SMALL``, ...); any field of :class:`~pipelines.shadow_experiments.ExperimentConfig`
    may be set, except ``data_seed`` (derived) and ``progress``. ``seed`` is the replicate index.
    Metrics: the experiment's (``traj_lsi``, ``ls_rec2``, ``heldout_rms``, ...).
``modlanet``
    One run of :func:`pipelines.modlanet_experiments.run` from the preset ``small`` or ``full`` for
    ``system``; any field of :class:`~pipelines.modlanet_experiments.ModLaNetConfig` may be set except
    ``seed`` (derived from the parameters, ``seed`` there being the replicate index) and
    ``progress``. Metrics per model row, ``<model>.<metric>`` (``modlanet.mse_q``,
    ``modlanet.mse_E``, ``modlanet.paper_E``, ``hnn.mse_E``, ...), of the position-only variant
    and of the extension (``extension3.direct.mse_E``, ...).

Further kinds can be added with :func:`register` (their functions must be importable, or picklable
by value, on the Ray workers).

Modules: :mod:`pipelines.sweep.kinds` (what a kind is, the registry), :mod:`pipelines.sweep.convergence_kind`,
:mod:`pipelines.sweep.experiment_kinds` (``shadow``, ``modlanet``); importing this module registers the
built-in kinds, and its names are those of the three.
"""

from __future__ import annotations

# registration order is the order of KINDS: convergence, then shadow and modlanet
from .convergence_kind import CONVERGENCE_EXPERIMENTS, CONVERGENCE_SYSTEMS, expected_order
from . import experiment_kinds  # noqa: F401,E402  (registers shadow, modlanet)
from .kinds import KINDS, REQUIRED, Kind, Param, ParamError, TaskOutput, get_kind, kind_names, register

__all__ = ["Param", "Kind", "TaskOutput", "ParamError", "REQUIRED", "KINDS", "register", "get_kind", "kind_names",
           "CONVERGENCE_SYSTEMS", "CONVERGENCE_EXPERIMENTS", "expected_order"]
