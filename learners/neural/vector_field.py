"""First-order models (HNN, MLPBaseline) fitted on their whole vector field by the shared acceleration-loss loop:
the adapter :class:`VectorFieldModel` and its data format :func:`vector_field_data`."""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import nn

from bea.errors import BeaTypeError, BeaValueError

from ..saving import SavableModule, recorded, register

__all__ = ["VectorFieldModel", "vector_field_data"]


@register
class VectorFieldModel(nn.Module, SavableModule):
    r"""Adapter that lets the shared acceleration-loss loop fit a *first-order* model on its whole
    vector field, as the paper trains HNN and its baseline: the loss
    :math:`\operatorname{mean}|(\hat{\dot q}, \hat{\dot p}) - (\dot q, \dot p)|^2` over the ``2n``
    components (the paper's ``L2_loss`` on ``time_derivative``).

    The adapter has ``n = 2 * model.n``; ``acceleration(z, z)`` with ``z = (q, p)`` (``(..., 2n)``; the
    second argument is ignored) returns ``torch.cat(model.time_derivative(q, p), -1)``. Build its data
    with :func:`vector_field_data`. It shares the wrapped model's parameters: train the adapter, roll
    out the model::

        train(VectorFieldModel(hnn), vector_field_data(q, p, v, pdot), loss="acceleration", ...)
    """

    @recorded
    def __init__(self, model: nn.Module):
        super().__init__()
        if not callable(getattr(model, "time_derivative", None)) or not isinstance(getattr(model, "n", None), int):
            raise BeaTypeError("VectorFieldModel needs a model with .n and .time_derivative(q, p) (HNN, MLPBaseline)")
        self.model = model
        self.n = 2 * model.n

    def acceleration(self, z, z_again=None, create_graph: Optional[bool] = None) -> torch.Tensor:
        z = torch.as_tensor(z, dtype=torch.float64)
        if z.dim() < 1 or z.shape[-1] != self.n:
            raise BeaValueError(f"z = (q, p) must have shape (..., {self.n}), got {tuple(z.shape)}")
        m = self.model.n
        dq, dp = self.model.time_derivative(z[..., :m], z[..., m:], create_graph=create_graph)
        return torch.cat([dq, dp], -1)


def vector_field_data(q, p, qdot, pdot) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(z, z, zdot)`` with ``z = (q, p)`` and ``zdot = (qdot, pdot)`` (each ``(N, 2n)``), the data format
    of :class:`VectorFieldModel` for the shared ``train(..., loss="acceleration")``."""
    parts = [torch.as_tensor(x, dtype=torch.float64) for x in (q, p, qdot, pdot)]
    if any(x.shape != parts[0].shape for x in parts) or parts[0].dim() < 1:
        raise BeaValueError(f"q, p, qdot and pdot must have the same shape (N, n), got {[tuple(x.shape) for x in parts]}")
    z = torch.cat(parts[:2], -1)
    return z, z, torch.cat(parts[2:], -1)
