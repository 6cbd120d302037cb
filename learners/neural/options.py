r"""What :func:`~learners.neural.training.train` and the estimators' ``fit`` take besides the model and the data:
the loss (:class:`AccelerationLoss`, :class:`DELLoss`; the strings ``"acceleration"`` and ``"del"`` name their
defaults) and the optimisation settings (:class:`TrainOptions`). Frozen dataclasses (:mod:`learners.options`):
``dataclasses.replace(opts, epochs=300)`` derives a variant.

The losses themselves are defined in :mod:`learners.neural.losses`; the step ``h`` and the ``scheme`` of a DEL
loss are not options of the loss but of the model's data (the sampling step), given to ``train``/the estimator.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Optional, Tuple, Union

from bea.errors import BeaTypeError, BeaValueError

from ..options import Options, from_name

__all__ = ["Loss", "AccelerationLoss", "DELLoss", "TrainOptions", "get_loss", "legacy_options"]


def _positive_int(x, name: str) -> None:
    if isinstance(x, bool) or not isinstance(x, int) or x < 1:
        raise BeaValueError(f"{name} must be a positive integer, got {x!r}")


def _positive(x, name: str, allow_none: bool = False) -> None:
    if x is None and allow_none:
        return
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not (x > 0 and math.isfinite(x)):
        raise BeaValueError(f"{name} must be a positive number{' or None' if allow_none else ''}, got {x!r}")


@dataclass(frozen=True)
class Loss(Options):
    """Base class; ``name`` is the string that stands for the class's defaults."""

    name: ClassVar[str] = ""


@dataclass(frozen=True)
class AccelerationLoss(Loss):
    r"""The paper's loss: mean squared error of :math:`\ddot q` from the Euler--Lagrange equations of the model
    against measured accelerations; data ``(q, v, a)``."""

    name: ClassVar[str] = "acceleration"


@dataclass(frozen=True)
class DELLoss(Loss):
    r"""The positions-only loss: the discrete Euler--Lagrange residual of the model (as :math:`L_{inv}`) on the
    triples of snapshots at step ``h`` (:func:`learners.neural.losses.del_loss`).

    ``normalisation``: ``"momentum"`` (divide by the mean squared discrete momentum, so that the trivial
    Lagrangian is no minimum) or ``"h"`` (by :math:`h^2`). ``inverse_order = N > 0``: the model is the *true*
    Lagrangian and :math:`\mathrm{inv}_N(\text{model})` enters the residual. ``max_step``: keep the triples whose
    half central difference is at most this (slow triples; ``None``: all). See
    :func:`~learners.neural.training.train`."""

    normalisation: str = "momentum"
    inverse_order: int = 0
    max_step: Optional[float] = None
    name: ClassVar[str] = "del"

    def __post_init__(self):
        if self.normalisation not in ("momentum", "h"):
            raise BeaValueError(f"the DEL loss's normalisation must be 'momentum' or 'h', got {self.normalisation!r}")
        if isinstance(self.inverse_order, bool) or not isinstance(self.inverse_order, int) or self.inverse_order < 0:
            raise BeaValueError(f"inverse_order must be an integer >= 0, got {self.inverse_order!r}")
        if self.max_step is not None and not (isinstance(self.max_step, (int, float)) and not isinstance(self.max_step, bool)
                                              and self.max_step > 0 and math.isfinite(self.max_step)):
            raise BeaValueError(f"max_step must be a positive number (a displacement per step), got {self.max_step!r}")


def get_loss(spec: Union[str, Loss]) -> Loss:
    """The :class:`Loss` that ``spec`` (a loss or its name) stands for."""
    return from_name(spec, {"acceleration": AccelerationLoss, "del": DELLoss}, "loss")


@dataclass(frozen=True)
class TrainOptions(Options):
    r"""Settings of the optimisation (Adam, shuffled mini-batches, a validation split, early stopping).

    ``epochs``, ``lr``, ``batch_size``, ``weight_decay``: Adam's. ``val_fraction``: the share of the samples (or
    triples) held back for validation. ``schedule``: ``"cosine"`` (to ``lr/100`` at ``epochs``), ``"plateau"``
    (halve after ``max(1, patience // 3)`` epochs without improvement) or ``None``. ``patience``: epochs without a
    relative improvement of the validation loss by ``min_rel_improvement`` before stopping (``None``: never stop
    early). ``grad_clip``: the largest gradient norm (``None``: no clipping). ``seed``: the split and the
    shuffling (a generator of their own; torch's global random state is not touched). ``progress``: a ``tqdm``
    bar (``None``, the project's default: on a terminal only)."""

    epochs: int = 100
    lr: float = 1e-3
    batch_size: int = 256
    val_fraction: float = 0.1
    patience: Optional[int] = 20
    seed: int = 0
    progress: Optional[bool] = None
    schedule: Optional[str] = "cosine"
    weight_decay: float = 0.0
    grad_clip: Optional[float] = None
    min_rel_improvement: float = 1e-4

    def __post_init__(self):
        _positive_int(self.epochs, "epochs")
        _positive_int(self.batch_size, "batch_size")
        if self.patience is not None:
            _positive_int(self.patience, "patience")
        _positive(self.lr, "lr")
        _positive(self.grad_clip, "grad_clip", allow_none=True)
        if not (isinstance(self.val_fraction, (int, float)) and 0 < self.val_fraction < 1):
            raise BeaValueError(f"val_fraction must be in (0, 1), got {self.val_fraction!r}")
        if self.schedule not in ("cosine", "plateau", None):
            raise BeaValueError(f"schedule must be 'cosine', 'plateau' or None, got {self.schedule!r}")
        if not (isinstance(self.weight_decay, (int, float)) and self.weight_decay >= 0):
            raise BeaValueError(f"weight_decay must be a number >= 0, got {self.weight_decay!r}")


#: train()'s keywords before the options objects (issue 29), for DELLoss: its field names
_LOSS_KEYS = {"del_normalisation": "normalisation", "inverse_order": "inverse_order", "max_step": "max_step"}


def legacy_options(loss: Union[str, Loss], options: Optional[TrainOptions], legacy: Dict[str, Any]
                   ) -> Tuple[Loss, TrainOptions]:
    """``(loss, options)`` as objects, with the settings still given as separate keywords (``epochs=...``,
    ``del_normalisation=...``: deprecated, with a DeprecationWarning naming the replacement) folded in. Keywords
    that are neither raise :class:`~bea.errors.BeaTypeError`; for the acceleration loss the DEL keywords are
    ignored, as they were."""
    loss = get_loss(loss)
    if options is None:
        options = TrainOptions()
    elif not isinstance(options, TrainOptions):
        raise BeaTypeError(f"options must be a learners.TrainOptions, got {type(options).__name__} (settings such as epochs "
                           f"go into it: options=TrainOptions(epochs=...))")
    if not legacy:
        return loss, options
    train_keys = {f.name for f in dataclasses.fields(TrainOptions)}
    unknown = sorted(set(legacy) - train_keys - set(_LOSS_KEYS))
    if unknown:
        raise BeaTypeError(f"train() got unexpected keyword arguments {', '.join(unknown)}; the settings are fields of "
                           f"TrainOptions ({', '.join(sorted(train_keys))}) or of the loss, "
                           f"DELLoss({', '.join(_LOSS_KEYS.values())})")
    opts = {k: v for k, v in legacy.items() if k in train_keys}
    loss_opts = {_LOSS_KEYS[k]: v for k, v in legacy.items() if k in _LOSS_KEYS}
    shown = ", ".join(f"{k}=..." for k in opts)
    hint = [f"options=TrainOptions({shown})"] if opts else []
    hint += [f"loss=DELLoss({', '.join(f'{k}=...' for k in loss_opts)})"] if loss_opts else []
    warnings.warn(f"train(..., {', '.join(f'{k}=...' for k in legacy)}) is deprecated and will be removed in the next "
                  f"release; pass {' and '.join(hint)}", DeprecationWarning, stacklevel=3)
    if isinstance(loss, DELLoss) and loss_opts:
        loss = dataclasses.replace(loss, **loss_opts)
    return loss, dataclasses.replace(options, **opts)
