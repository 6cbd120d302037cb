r"""Training loop for Lagrangian networks (ModLaNet and the neural baselines).

Losses: ``"acceleration"`` (the paper's) and ``"del"`` (positions only), defined in
:mod:`learners.neural.losses`. Prediction of position-trained models is in :mod:`learners.neural.prediction`;
its names (and the losses') are re-exported here, where they were defined before the split.

Optimisation: Adam, a cosine (default) or reduce-on-plateau schedule, shuffled mini-batches, a
validation split, early stopping with ``patience`` and restoration of the best state, a ``tqdm`` bar.
Randomness (split, shuffling) comes from a :class:`torch.Generator` seeded with ``seed``; torch's global
random state is not touched (model initialisation is seeded separately, see
:class:`~learners.modlanet.ModLaNet`). The model is left in ``eval()`` mode. Nor is the environment: torch
imports ``torch._dynamo`` the first time an optimiser is built, and that import writes
``TORCHINDUCTOR_CACHE_DIR`` into ``os.environ``; :func:`integrators._environment.environment_kept` undoes it.
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Union

import torch
from tqdm.auto import tqdm

import bea
from bea.errors import BeaError, BeaTypeError, BeaValueError
from bea.closed_form import midpoint_mod2

from integrators._environment import environment_kept as _environment_kept

from .._checks import as_tensor, check_finite, check_snapshots, check_step
from ..shadow.functionals import triples_from_snapshots
from .losses import acceleration_loss, del_loss, del_residual_values
from .options import AccelerationLoss, DELLoss, Loss, TrainOptions, legacy_options
from .prediction import inverse_lagrangian, predict_positions, recovered_energy, recovered_lagrangian

__all__ = ["train", "TrainResult", "TrainingDivergedError", "del_residual_values", "del_loss", "acceleration_loss", "recovered_lagrangian",
           "recovered_energy", "predict_positions", "midpoint_mod2", "inverse_lagrangian"]


class TrainingDivergedError(BeaError, FloatingPointError):
    """The training loss became NaN or infinite; the model is restored to its best state."""


def _h_before_scheme(h, scheme):
    """``(h, scheme)``; before issue 29 ``train`` took ``scheme`` before ``h``: a scheme in the place of ``h``
    (positional arguments in the old order) still works, with a DeprecationWarning."""
    if not isinstance(h, (str, bea.Scheme)):
        return h, scheme
    warnings.warn("train(model, data, loss, scheme, h) is deprecated and will be removed in the next release: h comes "
                  "before scheme now; pass them by keyword, train(..., h=..., scheme=...)", DeprecationWarning, stacklevel=3)
    return (None if isinstance(scheme, (str, bea.Scheme)) else scheme), h


@dataclass
class TrainResult:
    """History and outcome of :func:`train`. ``history["val"][0]`` / ``["train"][0]`` are the losses
    before the first step (epoch 0); entry ``k`` is after epoch ``k``."""

    loss: str
    history: Dict[str, List[float]] = field(default_factory=lambda: {"train": [], "val": [], "lr": []})
    best_epoch: int = 0
    best_val: float = math.inf
    epochs_run: int = 0
    stopped_early: bool = False
    seconds: float = 0.0
    n_train: int = 0
    n_val: int = 0

    @property
    def initial_val(self) -> float:
        return self.history["val"][0]

    @property
    def improvement(self) -> float:
        """Initial over best validation loss (``>= 1``; e.g. 10 for a tenfold decrease)."""
        return self.initial_val / self.best_val if self.best_val > 0 else math.inf

    def __repr__(self) -> str:
        return (f"TrainResult(loss={self.loss!r}, val {self.initial_val:.3e} -> {self.best_val:.3e} (best at epoch "
                f"{self.best_epoch} of {self.epochs_run}{', stopped early' if self.stopped_early else ''}), {self.seconds:.1f} s)")


# ---------------------------------------------------------------------------------------------- data
def _acceleration_data(data, n: Optional[int]):
    if hasattr(data, "q") and hasattr(data, "v") and hasattr(data, "a"):
        parts = (data.q, data.v, data.a)
    elif isinstance(data, (tuple, list)) and len(data) == 3:
        parts = tuple(data)
    else:
        raise BeaValueError("acceleration data must be a tuple (q, v, a) of tensors (N, n), or an object with .q, .v, .a "
                         "(e.g. learners.modlanet.data.AccelerationData)")
    q, v, a = (as_tensor(x, name) for x, name in zip(parts, ("q", "v", "a")))
    if not (q.shape == v.shape == a.shape) or q.dim() < 1:
        raise BeaValueError(f"q, v and a must have the same shape (N, n), got {tuple(q.shape)}, {tuple(v.shape)}, {tuple(a.shape)}")
    if q.dim() == 1:
        q, v, a = q[:, None], v[:, None], a[:, None]
    q, v, a = (x.reshape(-1, x.shape[-1]) for x in (q, v, a))
    if n is not None and q.shape[-1] != n:
        raise BeaValueError(f"dimension mismatch: the data have n={q.shape[-1]} coordinates, the model has n={n}")
    for x, name in ((q, "q"), (v, "v"), (a, "a")):
        check_finite(x, f"the training data {name}")
    return q, v, a


def _split(N: int, val_fraction: float, gen: torch.Generator):
    if not (isinstance(val_fraction, (int, float)) and 0 < val_fraction < 1):
        raise BeaValueError(f"val_fraction must be in (0, 1), got {val_fraction!r}")
    n_val = max(1, int(round(val_fraction * N)))
    if N - n_val < 1:
        raise BeaValueError(f"too little data for a validation split: {N} samples with val_fraction={val_fraction}")
    perm = torch.randperm(N, generator=gen, device="cpu")  # the CPU generator: the same split on every device
    return perm[n_val:], perm[:n_val]


# ---------------------------------------------------------------------------------------------- training
def train(model: torch.nn.Module, data, loss: Union[str, Loss] = "acceleration", h: Optional[float] = None,
          scheme: Union[str, "bea.Scheme"] = "midpoint", options: Optional[TrainOptions] = None, **legacy) -> TrainResult:
    r"""Train ``model`` on ``data`` with the acceleration loss or the position-only DEL loss
    (:mod:`learners.neural.losses`): the lower-level function under the estimators' ``fit``. The model's
    parameters are updated in place; the best state on the validation split is restored at the end.

    ``loss``: :class:`~learners.neural.options.AccelerationLoss` (``"acceleration"``, the default) or
    :class:`~learners.neural.options.DELLoss` (``"del"``, with its ``normalisation``, ``inverse_order`` and
    ``max_step``). ``data``: ``(q, v, a)`` (or an object with ``.q, .v, .a``) for the acceleration loss; snapshots
    ``(n_traj, n_steps + 1, n)`` (or an :class:`integrators.Trajectory`, time first) at step ``h`` for the DEL loss
    (then ``h`` is required; the split is over triples). ``options``: a
    :class:`~learners.neural.options.TrainOptions` (epochs, learning rate, schedule, early stopping...; default
    ``TrainOptions()``).

    ``DELLoss(inverse_order=N > 0)`` takes the model as the *true* Lagrangian and puts
    :math:`\mathrm{inv}_N(\text{model})` (:func:`inverse_lagrangian`) into the DEL residual, so that the structured
    model need not represent the scheme's :math:`O(h^2)` corrections (predict with
    ``predict_positions(..., inverse_order=N)``); it differentiates the model to fourth order, several times slower
    per step. ``DELLoss(max_step=...)`` keeps the triples whose half central difference
    :math:`\max_i |q_{j+1,i} - q_{j-1,i}|/2 \approx h|\dot q|_\infty` is at most ``max_step``: the truncation error of
    :math:`\mathrm{inv}_N` grows like :math:`(h\omega)^{N+2}`, so on fast triples even the true Lagrangian leaves a
    large DEL residual that biases the fit (on the double pendulum at the paper's speeds, ``h = 0.1``, the loss of
    :math:`\mathrm{inv}_2(L_{true})` is 0.25 on all triples and 1.9e-4 on those with ``max_step = 0.6``, 30% of them).

    The settings as separate keywords (``epochs=``, ``lr=``, ..., ``del_normalisation=``, ``inverse_order=``,
    ``max_step=``) are deprecated: they still work, with a DeprecationWarning, until the next release.
    """
    loss, opts = legacy_options(loss, options, legacy)
    _check_model(model)
    h, scheme = _h_before_scheme(h, scheme)
    gen = torch.Generator().manual_seed(int(opts.seed))
    if isinstance(loss, AccelerationLoss):
        tensors, batch_loss = _acceleration_objective(model, data)
    else:
        tensors, batch_loss = _del_objective(model, data, scheme, h, loss)
    tr_idx, val_idx = _split(tensors[0].shape[0], opts.val_fraction, gen)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise BeaValueError("the model has no trainable parameters")
    with _environment_kept():
        opt, sched = _optimiser(params, opts)

    def evaluate(idx) -> float:
        return _evaluate(model, batch_loss, idx, max(opts.batch_size, 1024))

    res = TrainResult(loss=loss.name, n_train=int(tr_idx.numel()), n_val=int(val_idx.numel()))
    with _environment_kept():
        _restoring_on_failure(model, res, lambda: _fit(model, res, batch_loss, evaluate, tr_idx, val_idx, opt, sched, params,
                                                       gen, opts))
    return res


def _restoring_on_failure(model, res: TrainResult, fit: Callable[[], None]) -> None:
    """Run ``fit``. Any failure (a diverging loss, an interrupt, an error in the model) leaves the model at its best
    state so far (``_fit`` keeps it in ``res._best_state``; the initial state before the first improvement), never at
    the values that failed."""
    res._best_state = copy.deepcopy(model.state_dict())
    try:
        fit()
    except BaseException as err:
        model.load_state_dict(res._best_state)
        model.eval()
        if isinstance(err, FloatingPointError):
            raise TrainingDivergedError(f"{err}. The model was restored to its best state (epoch {res.best_epoch}, validation "
                                     f"loss {res.best_val:.3e})") from None
        raise
    finally:
        del res._best_state


def _check_model(model) -> None:
    if not isinstance(model, torch.nn.Module):
        raise BeaTypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")


def _acceleration_objective(model, data):
    """The training tensors ``(q, v, a)`` and the loss of a batch of their indices."""
    if not callable(getattr(model, "acceleration", None)):
        raise BeaTypeError("the 'acceleration' loss needs a model with an .acceleration(q, v) method")
    tensors = _acceleration_data(data, getattr(model, "n", None))

    def batch_loss(idx):
        return acceleration_loss(model, *(t[idx] for t in tensors))
    return tensors, batch_loss


def _del_objective(model, data, scheme, h, loss: DELLoss):
    """The training triples ``(T,)`` and the loss of a batch of their indices."""
    if h is None:
        raise BeaValueError("the 'del' loss needs the sampling step h of the snapshots: train(..., loss='del', h=0.1)")
    h = check_step(h)
    sch = bea.get_scheme(scheme)
    S = check_snapshots(data, getattr(model, "n", None), "the training snapshots")
    T = _slow_triples(triples_from_snapshots(S), loss.max_step)
    target = inverse_lagrangian(model, loss.inverse_order, h, sch) if loss.inverse_order else model

    def batch_loss(idx):
        return del_loss(target, T[idx], h, sch, loss.normalisation)
    return (T,), batch_loss


def _slow_triples(T: torch.Tensor, max_step: Optional[float]) -> torch.Tensor:
    """The triples whose half central difference is at most ``max_step`` (all of them for ``None``)."""
    if max_step is None:
        return T
    if not (isinstance(max_step, (int, float)) and max_step > 0 and math.isfinite(max_step)):
        raise BeaValueError(f"max_step must be a positive number (a displacement per step), got {max_step!r}")
    keep = ((T[:, 2] - T[:, 0]).abs() / 2).amax(-1) <= max_step
    if int(keep.sum()) < 2:
        raise BeaValueError(f"max_step={max_step} keeps {int(keep.sum())} of {T.shape[0]} triples: the data move faster "
                         f"than that per step; raise max_step or sample with a smaller h")
    return T[keep]


def _optimiser(params, opts: TrainOptions):
    """Adam and the learning-rate schedule of ``opts`` (validated by :class:`TrainOptions`)."""
    opt = torch.optim.Adam(params, lr=opts.lr, weight_decay=opts.weight_decay)
    if opts.schedule == "cosine":
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=opts.epochs, eta_min=opts.lr / 100)
    elif opts.schedule == "plateau":
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=max(1, (opts.patience or 9) // 3))
    else:
        sched = None
    return opt, sched


def _evaluate(model, batch_loss, idx, chunk: int) -> float:
    """The mean loss over the indices ``idx``, in chunks, in eval() mode."""
    model.eval()
    total = 0.0
    for a in range(0, idx.numel(), chunk):
        part = idx[a:a + chunk]
        total += float(batch_loss(part).detach()) * part.numel()
    return total / idx.numel()


def _fit(model, res, batch_loss, evaluate, tr_idx, val_idx, opt, sched, params, gen, opts: TrainOptions):
    t0 = time.perf_counter()
    epochs, batch_size, patience, lr = opts.epochs, opts.batch_size, opts.patience, opts.lr
    best_state = res._best_state
    res.best_val = evaluate(val_idx)
    res.history["val"].append(res.best_val)
    res.history["train"].append(evaluate(tr_idx))
    res.history["lr"].append(lr)
    if not math.isfinite(res.best_val):
        raise BeaValueError(f"the initial validation loss is {res.best_val}: the model is not usable on these data "
                         f"(check the data scale or the model's initialisation)")
    since_best = 0
    # progress=None, the project default: a bar on a terminal, nothing in logs (tqdm disable=None)
    bar = tqdm(range(1, epochs + 1), disable=None if opts.progress is None else not opts.progress, desc=f"train ({res.loss})",
               unit="epoch", leave=False)
    for epoch in bar:
        model.train()
        order = tr_idx[torch.randperm(tr_idx.numel(), generator=gen, device="cpu")]
        total = 0.0
        for a in range(0, order.numel(), batch_size):
            idx = order[a:a + batch_size]
            opt.zero_grad(set_to_none=True)
            ell = batch_loss(idx)
            if not torch.isfinite(ell):
                raise TrainingDivergedError(f"the training loss became {float(ell.detach())} at epoch {epoch}; lower lr (now {lr}) "
                                         f"or set grad_clip")
            ell.backward()
            if opts.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(params, opts.grad_clip)
            opt.step()
            total += float(ell.detach()) * idx.numel()
        train_loss = total / order.numel()
        val = evaluate(val_idx)
        res.history["train"].append(train_loss)
        res.history["val"].append(val)
        res.history["lr"].append(opt.param_groups[0]["lr"])
        res.epochs_run = epoch
        if sched is not None:
            sched.step(val) if opts.schedule == "plateau" else sched.step()
        if val < res.best_val * (1 - opts.min_rel_improvement):
            res.best_val, res.best_epoch, since_best = val, epoch, 0
            best_state = res._best_state = copy.deepcopy(model.state_dict())
        else:
            since_best += 1
        bar.set_postfix(train=f"{train_loss:.3e}", val=f"{val:.3e}", best=f"{res.best_val:.3e}")
        if patience is not None and since_best >= patience:
            res.stopped_early = True
            break
    bar.close()
    model.load_state_dict(best_state)
    model.eval()
    res.seconds = time.perf_counter() - t0
