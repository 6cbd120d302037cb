r"""Modified and inverse modified Lagrangians of *any* torch model: apply, predict, energy, velocities.

The one implementation shared by every learner (the GP of :mod:`learners.shadow`, ModLaNet and the
neural baselines, any ``L(q, v)``; docs/theory/inverse.md, docs/theory/lsi.md):

* :func:`recovered_lagrangian` -- :math:`\mathrm{mod}_N(L)` truncated at :math:`h^N`, a torch callable: for a
  model learned as the inverse modified Lagrangian :math:`L_{inv}` of a scheme, the recovered Lagrangian
  :math:`L_{rec}` (named ``modified_lagrangian`` before, which :func:`bea.modified_lagrangian`, the series itself,
  is called too: deprecated here);
* :func:`inverse_lagrangian` -- :math:`\mathrm{inv}_N(L)`: the scheme applied to it reproduces the flow
  of :math:`L` to :math:`O(h^{N+1})`;
* :func:`recovered_energy` -- :math:`H_{rec}[N] = \partial_vL_{rec}\cdot v - L_{rec}`;
* :func:`predict` -- the scheme on the model from :math:`(q_0, \dot q_0)` with
  :math:`p_0 = \partial_v L_{rec}(q_0, \dot q_0)` (or, for a model of the true :math:`L`, the scheme on
  :math:`\mathrm{inv}_N(L)` with :math:`p_0 = \partial_v L`), a :class:`~integrators.Trajectory`;
* :func:`velocities`, :func:`energies` -- along positions: solve
  :math:`\partial_vL_{rec}(q_j, \dot q_j) = p_j` with :math:`p_j` the discrete momenta of the model, then
  :math:`H_{rec}[N](q_j, \dot q_j)`; in time chunks to bound memory.

Every formula is :func:`bea.series_function` (derived once, cached on disk), for any dimension and any
:mod:`bea` scheme; ``order = 0`` gives the model itself.
"""

from __future__ import annotations

from typing import Callable, Optional, Union

import torch

import bea
from bea.deprecation import renamed_attributes
from bea.errors import BeaTypeError, BeaValueError

from ._checks import as_float64, check_finite, check_order
from .progress import progress_bar
from .trajectory import Trajectory, positions
from .variational import VariationalIntegrator

__all__ = ["recovered_lagrangian", "inverse_lagrangian", "recovered_energy", "predict", "velocities", "energies",
           "momenta", "chunk_for"]

TorchLagrangian = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _series(kind: str, model: TorchLagrangian, order: int, h: float, scheme) -> TorchLagrangian:
    sch = bea.get_scheme(scheme)
    N = check_order(order, sch.symmetric)
    if not callable(model):
        raise BeaTypeError(f"model must be a callable Lagrangian L(q, v), got {type(model).__name__}")
    if N == 0:
        return model
    f = bea.series_function(kind, sch, N, getattr(model, "n", None))

    def L_series(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return f(model, q, v, h)

    L_series.order = N  # type: ignore[attr-defined]

    def c_lagrangian():
        # the compiled integrator path, for models with a Taylor form in C (else NotLowerable: eager)
        from .series_c import series_c_lagrangian

        return series_c_lagrangian(kind, N, h, sch, model)

    L_series.c_lagrangian = c_lagrangian  # type: ignore[attr-defined]
    return L_series


def recovered_lagrangian(model: TorchLagrangian, order: int, h: float, scheme: Union[str, "bea.Scheme"] = "midpoint"
                         ) -> TorchLagrangian:
    r""":math:`\mathrm{mod}_N(\text{model})` truncated at :math:`h^N` (``order`` = N), a torch callable."""
    return _series("modified_lagrangian", model, order, h, scheme)


def inverse_lagrangian(model: TorchLagrangian, order: int, h: float, scheme: Union[str, "bea.Scheme"] = "midpoint"
                       ) -> TorchLagrangian:
    r""":math:`\mathrm{inv}_N(\text{model})` truncated at :math:`h^N`, a torch callable."""
    return _series("inverse_modified_lagrangian", model, order, h, scheme)


def recovered_energy(model: TorchLagrangian, order: int, h: float, scheme: Union[str, "bea.Scheme"] = "midpoint"
                     ) -> TorchLagrangian:
    r""":math:`H_{rec}[N] = \partial_vL_{rec}\cdot v - L_{rec}` with :math:`L_{rec} = \mathrm{mod}_N(\text{model})`."""
    return bea.energy(recovered_lagrangian(model, order, h, scheme))


def predict(model: TorchLagrangian, q0, qdot0, steps: int, h: float, scheme: Union[str, "bea.Scheme"] = "midpoint",
            order: int = 2, *, inverse_order: int = 0, on_failure: str = "raise", progress: Optional[bool] = None,
            **newton) -> Trajectory:
    r"""Positions from ``(q0, qdot0)`` (shape ``(batch..., n)``) of a model learned as :math:`L_{inv}`: the
    scheme on the model with :math:`p_0 = \partial_v\,\mathrm{mod}_N(\text{model})(q_0, \dot q_0)`.
    ``inverse_order = N > 0``: a model of the true :math:`L`; the scheme integrates
    :math:`\mathrm{inv}_N(\text{model})` with :math:`p_0 = \partial_v\text{model}` (``order`` is then ignored).
    ``newton``: options of :class:`~integrators.VariationalIntegrator` (``xtol``, ``maxiter``, ``execution``...)."""
    if inverse_order:
        legendre, integrated = model, inverse_lagrangian(model, inverse_order, h, scheme)
    else:
        legendre, integrated = recovered_lagrangian(model, order, h, scheme), model
    integ = VariationalIntegrator(integrated, h, scheme, **newton)
    return integ.solve(q0, qdot0, steps, legendre=legendre, on_failure=on_failure, progress=progress)


def chunk_for(order: int) -> int:
    """Time steps per chunk: the nested derivatives of ``mod_N`` take ~12 MB per position above order 2."""
    return 1000 if order <= 2 else 200


def _integrator(model, h: float, scheme, integrator: Optional[VariationalIntegrator]) -> VariationalIntegrator:
    return integrator if integrator is not None else VariationalIntegrator(model, h, scheme)


def _positions(qs) -> torch.Tensor:
    qs = as_float64(positions(qs), "qs").detach()  # a Trajectory or its positions
    if qs.dim() < 2 or qs.shape[0] < 2:
        raise BeaValueError(f"qs must have shape (steps + 1, batch..., n) with at least two positions, got {tuple(qs.shape)}")
    check_finite(qs, "qs")
    return qs


def discrete_momenta(model: TorchLagrangian, qs, h: float, scheme="midpoint", chunk: int = 1000, *,
            integrator: Optional[VariationalIntegrator] = None) -> torch.Tensor:
    r"""Discrete momenta of the model along ``qs`` ``(steps + 1, batch..., n)``: :math:`p_0 = -D_1L_\Delta(q_0, q_1)`,
    :math:`p_j = D_2L_\Delta(q_{j-1}, q_j)`, in time chunks (``integrator``: one already built for the model)."""
    integ, qs = _integrator(model, h, scheme, integrator), _positions(qs)
    T1 = qs.shape[0]
    if T1 <= chunk:
        return integ.momenta(qs)
    parts = [integ.momenta(qs[:chunk])]
    for a in range(chunk, T1, chunk):
        b = min(a + chunk, T1)
        parts.append(integ.momenta(qs[a - 1:b])[1:])  # rows a..b-1: D2 L_d(q_(j-1), q_j)
    return torch.cat(parts)


def velocities(model: TorchLagrangian, qs, order: int, h: float, scheme="midpoint", chunk: Optional[int] = None, *,
               integrator: Optional[VariationalIntegrator] = None, recovered: Optional[TorchLagrangian] = None,
               momenta: Optional[torch.Tensor] = None, progress: Optional[bool] = None) -> torch.Tensor:
    r"""Velocities along ``qs``: solve :math:`\partial_vL_{rec}(q_j, \dot q_j) = p_j` (batched Newton), :math:`p_j` the
    discrete momenta of the model (or ``momenta`` if given), :math:`L_{rec} = \mathrm{mod}_N(\text{model})` (or
    ``recovered`` if given). ``progress``: a bar over the chunks (True always, False never, None beyond two chunks)."""
    integ, qs = _integrator(model, h, scheme, integrator), _positions(qs)
    L = recovered if recovered is not None else recovered_lagrangian(model, order, h, scheme)
    chunk = chunk or chunk_for(order)
    p = momenta if momenta is not None else discrete_momenta(model, qs, h, scheme, chunk, integrator=integ)
    T1 = qs.shape[0]
    if T1 <= chunk:
        return integ.velocities(qs, lagrangian=L, momenta=p)
    parts = []
    # a long computation (minutes for 10^4 states at order 4): report it, also off a terminal
    with progress_bar(T1, "velocities", "state", show=progress, long=T1 > 2 * chunk) as bar:
        for a in range(0, T1, chunk):
            b = min(a + chunk, T1)
            lo = a if b - a >= 2 else a - 1  # the velocity solver wants at least two positions
            v = integ.velocities(qs[lo:b], lagrangian=L, momenta=p[lo:b])
            parts.append(v[a - lo:])
            bar.update(b - a)
    return torch.cat(parts)


def energies(model: TorchLagrangian, qs, order: int, h: float, scheme="midpoint", chunk: Optional[int] = None, *,
             integrator: Optional[VariationalIntegrator] = None, recovered: Optional[TorchLagrangian] = None
             ) -> torch.Tensor:
    r""":math:`H_{rec}[N]` along ``qs`` with the velocities of :func:`velocities`; shape ``(steps + 1, batch...)``."""
    qs = _positions(qs)
    L = recovered if recovered is not None else recovered_lagrangian(model, order, h, scheme)
    chunk = chunk or chunk_for(order)
    v = velocities(model, qs, order, h, scheme, chunk, integrator=integrator, recovered=L)
    H = bea.energy(L)
    return torch.cat([H(qs[a:a + chunk], v[a:a + chunk]).detach() for a in range(0, qs.shape[0], chunk)])


#: the discrete momenta along positions (:func:`discrete_momenta`)
momenta = discrete_momenta

# bea.modified_lagrangian is the series; the torch callable of a model is recovered_lagrangian (issue 29)
__getattr__ = renamed_attributes(__name__, {"modified_lagrangian": "recovered_lagrangian"}, globals())
