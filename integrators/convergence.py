r"""Convergence studies: global errors against exact and modified flows, and observed orders.

The experiments of docs/theory/orders.md, for any :class:`~integrators.systems.System` and :mod:`bea` scheme.
Each returns one error per step size; :func:`observed_order` fits the slope of
:math:`\log(\text{error})` against :math:`\log h` by least squares.

* :func:`discrete_vs_exact` -- the scheme on ``L`` from :math:`(q_0, \dot q_0)` against the exact
  flow of ``L``: order 2 for symmetric schemes (1 for :math:`\alpha \neq \tfrac12`).
* :func:`discrete_vs_modified_flow` -- the scheme on ``L`` against the exact flow of
  :math:`EL(L_{mod}[N])`, the discrete solution started on that flow, :math:`q_0 = q_{mod}(0)`,
  :math:`q_1 = q_{mod}(h)`: error :math:`O(h^{N+1})`, i.e. :math:`O(h^{N+2})` for symmetric schemes
  (only even ``N`` there).
* :func:`inverse_modified_vs_exact` -- the scheme on :math:`L_{inv}[N]` against the exact flow of
  ``L``, started on it (from two exact positions, or from :math:`(q_0, \dot q_0)` with the initial
  momentum of ``L``): same orders.
* :func:`modified_energy_oscillation` -- :math:`H_{mod}[N]` along the discrete solution of ``L``
  (velocities from the momenta of :math:`L_{mod}[N]`): oscillation amplitude :math:`O(h^{N+2})`
  (symmetric schemes).

Errors are the maximum over all grid times in ``[0, T]``, all trajectories and all coordinates of
:math:`|q_k - q(t_k)|`.

``system`` is a :class:`~integrators.systems.System` (a SymPy Lagrangian) or any torch Lagrangian
``L(q, v)``, of any dimension. ``formula="generic"`` (the default) applies :mod:`bea`'s dimension-free
series to it by autograd (:func:`bea.series_function`: any ``n``, the route a learned Lagrangian takes);
``formula="concrete"`` uses the SymPy derivation for the system (a ``SymbolicLagrangian``; the component
engine, practical for ``n <= 2``). The exact flow of :math:`EL(L_{mod}[N])` in the generic case is the
Chebyshev collocation flow (:func:`integrators.collocation.collocation_flow`, companion ``L``): one flow
for all step sizes, :math:`L_{mod}` taking its ``h`` per trajectory.
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence

import numpy as np
import torch

import bea
from bea.deprecation import h_before_scheme, renamed
from bea.errors import BeaTypeError, BeaValueError

from .collocation import collocation_flow
from .reference import reference_flow
from .symbolic import SymbolicLagrangian
from .variational import VariationalIntegrator

__all__ = [
    "observed_order",
    "series_lagrangian",
    "torch_series",
    "discrete_vs_exact",
    "discrete_vs_modified_flow",
    "modified_flows",
    "inverse_modified_vs_exact",
    "modified_energy_oscillation",
]

KINDS = ("modified_lagrangian", "inverse_modified_lagrangian")


def observed_order(hs: Sequence[float], errors: Sequence[float]) -> float:
    r"""Least-squares slope of :math:`\log(\text{error})` against :math:`\log h`."""
    hs, errors = np.asarray(hs, dtype=float), np.asarray(errors, dtype=float)
    if hs.shape != errors.shape or hs.ndim != 1 or hs.size < 2:
        raise BeaValueError(f"need at least two step sizes and one error per step size, got {hs.shape} and {errors.shape}")
    if np.any(hs <= 0) or np.any(~(errors > 0)) or not np.all(np.isfinite(errors)):
        raise BeaValueError(f"step sizes and errors must be positive and finite to fit a slope; errors = {errors}")
    return float(np.polyfit(np.log(hs), np.log(errors), 1)[0])


@renamed(N="order")
def series_lagrangian(system: SymbolicLagrangian, scheme, order: int, kind: str = "modified_lagrangian") -> SymbolicLagrangian:
    r""":math:`L_{mod}[N]` or :math:`L_{inv}[N]` of a symbolic Lagrangian as a
    :class:`~integrators.symbolic.SymbolicLagrangian` with the parameter ``h`` (bind it with
    ``.bind(h=...)``), from :mod:`bea`'s concrete derivation."""
    N = order  # the truncation order, N in the formulas
    if kind not in KINDS:
        raise BeaValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if not isinstance(system, SymbolicLagrangian):
        raise BeaTypeError("series_lagrangian needs a symbolic Lagrangian (a System or SymbolicLagrangian)")
    series = getattr(bea, kind)(scheme, N, lagrangian=system.expr, q=list(system.q), v=list(system.v))
    return SymbolicLagrangian(series.expr, system.q, system.v, params=(series.h,), name=f"{kind}[{N}]({system.name})")


@renamed(N="order")
@h_before_scheme("system", "scheme", "order", "kind", "h", "formula")
def torch_series(system: Callable, order: int, kind: str, h: float, scheme, formula: str = "generic") -> Callable:
    r"""A torch Lagrangian for :math:`L_{mod}[N]` or :math:`L_{inv}[N]` at step ``h``.

    ``formula="generic"``: :mod:`bea`'s generic formula applied to the torch Lagrangian ``system``
    (derivatives by autograd -- the route a learned Lagrangian takes); ``"concrete"``: the SymPy
    derivation for ``system`` (a :class:`~integrators.symbolic.SymbolicLagrangian`), compiled."""
    N = order  # the truncation order, N in the formulas
    if kind not in KINDS:
        raise BeaValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if formula == "concrete":
        return series_lagrangian(system, scheme, N, kind).bind(h=h)
    if formula != "generic":
        raise BeaValueError(f"formula must be 'generic' or 'concrete', got {formula!r}")
    f = bea.series_function(kind, scheme, N, getattr(system, "n", None))

    def L(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return f(system, q, v, h)

    return L


def _steps(T: float, h: float) -> int:
    steps = int(round(T / h))
    if steps < 2 or abs(steps * h - T) > 1e-9 * T:
        raise BeaValueError(f"T={T} must be a multiple (>= 2) of every step size h; h={h} is not")
    return steps


def _err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


def discrete_vs_exact(system, scheme, hs: Sequence[float], T: float, q0, qdot0, reference_options: Optional[dict] = None,
                      **integrator_options) -> List[float]:
    """Global error of the scheme on ``system`` from ``(q0, qdot0)`` against the exact flow of ``system``
    (:func:`~integrators.reference_flow` with ``reference_options``, e.g. ``{"method": "taylor"}``)."""
    errors = []
    for h in hs:
        steps = _steps(T, h)
        qs = VariationalIntegrator(system, h, scheme, **integrator_options).solve(q0, qdot0, steps).q
        qe = reference_flow(system, q0, qdot0, h * np.arange(steps + 1), **(reference_options or {})).q
        errors.append(_err(qs, qe))
    return errors


@renamed(N="order")
def discrete_vs_modified_flow(system, scheme, order: int, hs: Sequence[float], T: float, q0, qdot0, formula: str = "generic",
                              reference_options: Optional[dict] = None, **integrator_options) -> List[float]:
    r"""Global error of the scheme on ``system`` against the exact flow of :math:`EL(L_{mod}[N])` from
    ``(q0, qdot0)``; the discrete solution starts from the first two positions of that flow.
    ``reference_options``: keywords for :func:`~integrators.reference_flow` (concrete formula, e.g.
    ``{"method": "taylor"}``) or :func:`~integrators.collocation.collocation_flow` (generic formula)."""
    N = order  # the truncation order, N in the formulas
    if formula == "concrete":
        Lmod = series_lagrangian(system, scheme, N, "modified_lagrangian")
        flows = [reference_flow(Lmod.bind(h=h), q0, qdot0, h * np.arange(_steps(T, h) + 1), **(reference_options or {})).q
                 for h in hs]
    elif formula == "generic":
        flows = modified_flows(system, scheme, N, hs, T, q0, qdot0, **(reference_options or {}))
    else:
        raise BeaValueError(f"formula must be 'generic' or 'concrete', got {formula!r}")
    errors = []
    for h, qm in zip(hs, flows):
        vi = VariationalIntegrator(system, h, scheme, **integrator_options)
        qs = vi.solve_from_positions(qm[0], qm[1], qm.shape[0] - 1).q
        errors.append(_err(qs, qm))
    return errors


@renamed(N="order")
def modified_flows(system, scheme, order: int, hs: Sequence[float], T: float, q0, qdot0, **options) -> List[torch.Tensor]:
    r"""Positions of the exact flow of :math:`EL(L_{mod}[N])` (generic formula applied to the torch
    Lagrangian ``system``) from ``(q0, qdot0)`` at the grid times :math:`kh \le T` of every ``h`` in
    ``hs``: one tensor ``(T/h + 1, batch..., n)`` per step size. One collocation flow for all step
    sizes (``h`` per trajectory), the companion ``system`` steering its Newton iteration; ``options``
    go to :func:`~integrators.collocation.collocation_flow`."""
    N = order  # the truncation order, N in the formulas
    q0, qdot0 = torch.as_tensor(q0, dtype=torch.float64), torch.as_tensor(qdot0, dtype=torch.float64)
    if q0.shape != qdot0.shape or q0.dim() == 0:
        raise BeaValueError(f"q0 and qdot0 must have one shape (batch..., n), got {tuple(q0.shape)} and {tuple(qdot0.shape)}")
    batch, n = q0.shape[:-1], q0.shape[-1]
    B, H = int(np.prod(batch, dtype=np.int64)), len(hs)
    grids = [h * np.arange(_steps(T, h) + 1) for h in hs]
    times = np.unique(np.round(np.concatenate(grids), 12))
    f = bea.series_function("modified_lagrangian", scheme, N, n)
    h_per_trajectory = torch.tensor([float(h) for h in hs], dtype=torch.float64).repeat_interleave(B)

    def Lmod(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:  # q: (..., H * B, n), h broadcast over the leading axes
        return f(system, q, v, h_per_trajectory)

    qs = collocation_flow(Lmod, q0.reshape(1, B, n).expand(H, B, n).reshape(H * B, n),
                          qdot0.reshape(1, B, n).expand(H, B, n).reshape(H * B, n), times, near=system, **options).q
    qs = qs.reshape(len(times), H, *batch, n)
    return [qs[np.searchsorted(times, np.round(g, 12)), i] for i, g in enumerate(grids)]


@renamed(N="order")
def inverse_modified_vs_exact(system, scheme, order: int, hs: Sequence[float], T: float, q0, qdot0,
                              formula: str = "generic", start: str = "positions", reference_options: Optional[dict] = None,
                              **integrator_options) -> List[float]:
    r"""Global error of the scheme on :math:`L_{inv}[N]` against the exact flow of ``system`` from
    ``(q0, qdot0)``. ``start="positions"``: from the exact :math:`q(0), q(h)`; ``start="momentum"``:
    from :math:`(q_0, \dot q_0)` with :math:`p_0 = \partial L/\partial v(q_0, \dot q_0)` of the true
    ``L`` (``legendre=``), as when predicting with a learned :math:`L_{inv}`. ``reference_options``: keywords for
    :func:`~integrators.reference_flow` (e.g. ``{"method": "taylor"}``)."""
    N = order  # the truncation order, N in the formulas
    if start not in ("positions", "momentum"):
        raise BeaValueError(f"start must be 'positions' or 'momentum', got {start!r}")
    errors = []
    for h in hs:
        steps = _steps(T, h)
        qe = reference_flow(system, q0, qdot0, h * np.arange(steps + 1), **(reference_options or {})).q
        Linv = torch_series(system, N, "inverse_modified_lagrangian", h, scheme, formula)
        vi = VariationalIntegrator(Linv, h, scheme, **integrator_options)
        if start == "positions":
            qs = vi.solve_from_positions(qe[0], qe[1], steps).q
        else:
            qs = vi.solve(q0, qdot0, steps, legendre=system).q
        errors.append(_err(qs, qe))
    return errors


@renamed(N="order")
def modified_energy_oscillation(system: SymbolicLagrangian, scheme, order: int, hs: Sequence[float], T: float, q0, qdot0,
                                **integrator_options) -> List[float]:
    r"""Oscillation amplitude (max - min over the run, max over trajectories) of
    :math:`H_{mod}[N]` along the discrete solution of ``system`` from ``(q0, qdot0)``; the
    velocities solve :math:`\partial L_{mod}/\partial v(q_j, \dot q_j) = p_j` with the discrete momenta."""
    N = order  # the truncation order, N in the formulas
    Lmod = series_lagrangian(system, scheme, N, "modified_lagrangian")
    amplitudes = []
    for h in hs:
        steps = _steps(T, h)
        Lh = Lmod.bind(h=h)
        vi = VariationalIntegrator(system, h, scheme, **integrator_options)
        qs = vi.solve(q0, qdot0, steps).q
        v = vi.velocities(qs, lagrangian=Lh)
        H = Lh.energy(qs, v)
        amplitudes.append(float((H.amax(0) - H.amin(0)).max()))
    return amplitudes
