r"""Prediction with position-trained Lagrangian networks (a model trained as :math:`L_{inv}` with the ``"del"``
loss of :mod:`learners.neural.losses`): the recovered Lagrangian and energy, and positions from the
variational integrator (docs/theory/inverse.md, docs/theory/lsi.md).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Optional

import torch

from integrators import Trajectory, modified

from bea.errors import BeaValueError

from .._checks import as_tensor, check_finite, check_step
from .losses import TorchLagrangian

__all__ = ["recovered_lagrangian", "recovered_energy", "inverse_lagrangian", "predict_positions"]


# mod_N / inv_N of a model, its energy and predictions: one implementation, integrators.modified; these
# names are kept for the README and the notebooks (``method`` is accepted for compatibility: every value
# takes the dimension-free formula).
def _method(method: str) -> None:
    if method not in ("auto", "bea", "formula"):
        raise BeaValueError(f"method must be 'auto', 'bea' or 'formula', got {method!r}")


def _step(h, name: str) -> float:
    """The step ``h``; omitted, it was silently 0.1 before issue 29 (wrong for a model trained at another step):
    for one release it still is, with a DeprecationWarning."""
    if h is None:
        warnings.warn(f"{name}() without h is deprecated and will be an error in the next release: the step defaults to "
                      "0.1, which is wrong for a model trained at another step; pass h=", DeprecationWarning, stacklevel=3)
        return 0.1
    return check_step(h)


def recovered_lagrangian(model: TorchLagrangian, order: int = 2, h: Optional[float] = None, scheme="midpoint",
                         method: str = "auto") -> TorchLagrangian:
    r""":math:`L_{rec} = \mathrm{mod}_N(L_{inv})` for a model trained as :math:`L_{inv}` (``"del"`` loss) at step ``h``
    (:func:`integrators.modified.recovered_lagrangian`). ``order=0`` returns the model itself."""
    _method(method)
    return modified.recovered_lagrangian(model, order, _step(h, "recovered_lagrangian"), scheme)


def inverse_lagrangian(model: TorchLagrangian, order: int = 2, h: Optional[float] = None, scheme="midpoint",
                       method: str = "auto") -> TorchLagrangian:
    r""":math:`L_{inv} = \mathrm{inv}_N(L)` for a model of the *true* Lagrangian (docs/theory/inverse.md)
    (:func:`integrators.modified.inverse_lagrangian`). ``order=0``: the model itself."""
    _method(method)
    return modified.inverse_lagrangian(model, order, _step(h, "inverse_lagrangian"), scheme)


def recovered_energy(model: TorchLagrangian, order: int = 2, h: Optional[float] = None, scheme="midpoint",
                     method: str = "auto") -> TorchLagrangian:
    r"""The identified energy :math:`H_{rec}[N] = \partial_vL_{rec}\cdot v - L_{rec}` (:func:`recovered_lagrangian`)."""
    _method(method)
    return modified.recovered_energy(model, order, _step(h, "recovered_energy"), scheme)


class _Frozen:
    """Parameters temporarily without ``requires_grad`` (no parameter graphs while integrating), model in eval()."""

    def __init__(self, model):
        self.model = model

    def __enter__(self):
        self.flags = [(p, p.requires_grad) for p in self.model.parameters()] if isinstance(self.model, torch.nn.Module) else []
        self.mode = getattr(self.model, "training", None)
        for p, _ in self.flags:
            p.requires_grad_(False)
        if self.mode is not None:
            self.model.eval()
        return self.model

    def __exit__(self, *exc):
        for p, f in self.flags:
            p.requires_grad_(f)
        if self.mode is not None:
            self.model.train(self.mode)
        return False


def predict_positions(model: TorchLagrangian, q0, qdot0, steps: int, h: float, scheme="midpoint", order: int = 2,
                      on_failure: str = "raise", method: str = "auto", inverse_order: int = 0, **newton) -> Trajectory:
    r"""A :class:`~integrators.Trajectory` (positions ``q``, ``(steps + 1, batch..., n)``, ``valid``, times ``t``) of a model trained as :math:`L_{inv}` (``"del"`` loss, step ``h``):
    the scheme's variational integrator on the model (:class:`integrators.VariationalIntegrator`) from
    ``(q0, qdot0)``, with the initial momentum :math:`p_0 = \partial_v\,\mathrm{mod}_N(\text{model})(q_0, \dot q_0)`
    (docs/theory/lsi.md; ``order=0``: the model's own momentum). ``newton``: options of the integrator (``xtol``,
    ``maxiter``, …); ``on_failure="mask"`` stops a failed trajectory and marks it in ``valid`` as the integrator does.

    ``inverse_order=N > 0``: for a model trained with ``train(..., inverse_order=N)`` (a model of the true
    :math:`L`): the scheme integrates :math:`\mathrm{inv}_N(\text{model})` and :math:`p_0 = \partial_v\text{model}`
    (``order`` is then ignored)."""
    _method(method)
    q0, qdot0 = as_tensor(q0, "q0"), as_tensor(qdot0, "qdot0")
    check_finite(q0, "q0")
    check_finite(qdot0, "qdot0")
    n = getattr(model, "n", None)
    if n is not None and (q0.shape[-1] != n or q0.shape != qdot0.shape):
        raise BeaValueError(f"dimension mismatch: q0 and qdot0 must have shape (batch..., {n}), got {tuple(q0.shape)} and "
                         f"{tuple(qdot0.shape)}")
    with _Frozen(model), torch.enable_grad():
        sol = modified.predict(model, q0, qdot0, steps, check_step(h), scheme, order, inverse_order=inverse_order,
                               on_failure=on_failure, **newton)
    # legacy: acts as the tensor q (on_failure="raise") or unpacks as (q, valid) as before (deprecated)
    mask = on_failure != "raise"
    return dataclasses.replace(sol, legacy=("q", "valid") if mask else None, legacy_tuple=mask)
