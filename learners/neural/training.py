r"""Training loop for Lagrangian networks (ModLaNet and the neural baselines), and prediction of
position-trained models with the variational integrator and :mod:`bea`.

Two losses (docs/theory/mechanics.md, docs/theory/modlanet.md):

``"acceleration"`` (the paper's)
    data :math:`(q, v, a)`, each ``(N, n)``; :math:`\ell = \operatorname{mean}\,|\hat a(q, v) - a|^2` with
    :math:`\hat a` = ``model.acceleration(q, v)`` (every model of the project exposes it).

``"del"`` (positions only, new here)
    data: snapshots ``(n_traj, n_steps + 1, n)`` at step ``h``, nothing else. The model is taken as the
    *inverse modified* Lagrangian :math:`L_{inv}` of ``scheme``: for each triple
    :math:`(q_{j-1}, q_j, q_{j+1})` the discrete Euler–Lagrange residual of the scheme's
    :math:`L_\Delta` (:func:`bea.get_scheme`, the same definition the integrators use)

    .. math::  r_j = D_2L_\Delta(q_{j-1}, q_j) + D_1L_\Delta(q_j, q_{j+1})
                   = \partial_{q_j}\big[L_\Delta(q_{j-1}, q_j) + L_\Delta(q_j, q_{j+1})\big]

    (autograd with ``create_graph``, so the loss is differentiable in the parameters) vanishes exactly
    when the scheme applied to the model reproduces the data. :math:`r_j = O(h)` (it is :math:`h` times a
    force), so it is divided by :math:`h`. Non-triviality: :math:`L \equiv 0`, or any
    :math:`sL` with :math:`s \to 0`, has :math:`r = 0`. ModLaNet's kinetic term is structural and one
    mass is fixed, so with given transforms the scale is pinned; a learned transform can still shrink
    (:math:`x \to \epsilon x` scales :math:`T` by :math:`\epsilon^2`). The default normalisation
    ``del_normalisation="momentum"`` divides by the mean squared discrete momentum
    :math:`p_j = D_2L_\Delta(q_{j-1}, q_j)` of the same batch,

    .. math::  \ell = \frac{\operatorname{mean}_j |r_j/h|^2}{\operatorname{mean}_j |p_j|^2},

    which is invariant under :math:`L \to sL`: no scale, of the masses or of a learned transform, can
    lower it, while :math:`L \equiv 0` is excluded by the structure. ``"h"`` uses the numerator alone.

Optimisation: Adam, a cosine (default) or reduce-on-plateau schedule, shuffled mini-batches, a
validation split, early stopping with ``patience`` and restoration of the best state, a ``tqdm`` bar.
Randomness (split, shuffling) comes from a :class:`torch.Generator` seeded with ``seed``; torch's global
random state is not touched (model initialisation is seeded separately, see
:class:`~learners.modlanet.ModLaNet`). The model is left in ``eval()`` mode.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Union

import torch
from tqdm.auto import tqdm

import bea
from bea.closed_form import midpoint_inv2, midpoint_mod2
from integrators import modified

from .._checks import as_tensor, check_finite, check_order, check_snapshots, check_step
from ..shadow.functionals import triples_from_snapshots

__all__ = ["train", "TrainResult", "del_residual_values", "del_loss", "acceleration_loss", "recovered_lagrangian",
           "recovered_energy", "predict_positions", "midpoint_mod2", "inverse_lagrangian"]

TorchLagrangian = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


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


# ---------------------------------------------------------------------------------------------- losses
def acceleration_loss(model, q: torch.Tensor, v: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    r""":math:`\operatorname{mean}|\hat a - a|^2` over the batch and the coordinates."""
    return (model.acceleration(q, v) - a).pow(2).mean()


def del_residual_values(lagrangian: TorchLagrangian, triples: torch.Tensor, h: float, scheme="midpoint"):
    r"""The *values* of the DEL residuals :math:`r_j` and discrete momenta :math:`p_j = D_2L_\Delta(q_{j-1}, q_j)` of ``lagrangian``
    at ``triples`` ``(B, 3, n)``; both ``(B, n)``, differentiable in the Lagrangian's parameters. (The DEL residuals
    as linear *functionals* of an unknown Lagrangian, for the GP, are :func:`learners.shadow.functionals.del_residuals`.)"""
    sch = bea.get_scheme(scheme)
    a, c = triples[:, 0], triples[:, 2]
    b = triples[:, 1].detach().clone().requires_grad_(True)
    L = lambda q, v: lagrangian(q.view_as(q), v.view_as(v))  # partial derivatives when v is computed from q
    with torch.enable_grad():
        (p,) = torch.autograd.grad(sch(L, a, b, h).sum(), b, create_graph=True)
        (m,) = torch.autograd.grad(sch(L, b, c, h).sum(), b, create_graph=True)
    return p + m, p


def del_loss(lagrangian: TorchLagrangian, triples: torch.Tensor, h: float, scheme="midpoint",
             normalisation: str = "momentum") -> torch.Tensor:
    r"""The ``"del"`` loss of the module docstring on a batch of triples."""
    r, p = del_residual_values(lagrangian, triples, h, scheme)
    num = (r / h).pow(2).sum(-1).mean()
    if normalisation == "h":
        return num
    return num / p.pow(2).sum(-1).mean()


# ---------------------------------------------------------------------------------------------- data
def _acceleration_data(data, n: Optional[int]):
    if hasattr(data, "q") and hasattr(data, "v") and hasattr(data, "a"):
        parts = (data.q, data.v, data.a)
    elif isinstance(data, (tuple, list)) and len(data) == 3:
        parts = tuple(data)
    else:
        raise ValueError("acceleration data must be a tuple (q, v, a) of tensors (N, n), or an object with .q, .v, .a "
                         "(e.g. learners.modlanet.data.AccelerationData)")
    q, v, a = (as_tensor(x, name) for x, name in zip(parts, ("q", "v", "a")))
    if not (q.shape == v.shape == a.shape) or q.dim() < 1:
        raise ValueError(f"q, v and a must have the same shape (N, n), got {tuple(q.shape)}, {tuple(v.shape)}, {tuple(a.shape)}")
    if q.dim() == 1:
        q, v, a = q[:, None], v[:, None], a[:, None]
    q, v, a = (x.reshape(-1, x.shape[-1]) for x in (q, v, a))
    if n is not None and q.shape[-1] != n:
        raise ValueError(f"dimension mismatch: the data have n={q.shape[-1]} coordinates, the model has n={n}")
    for x, name in ((q, "q"), (v, "v"), (a, "a")):
        check_finite(x, f"the training data {name}")
    return q, v, a


def _split(N: int, val_fraction: float, gen: torch.Generator):
    if not (isinstance(val_fraction, (int, float)) and 0 < val_fraction < 1):
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction!r}")
    n_val = max(1, int(round(val_fraction * N)))
    if N - n_val < 1:
        raise ValueError(f"too little data for a validation split: {N} samples with val_fraction={val_fraction}")
    perm = torch.randperm(N, generator=gen)
    return perm[n_val:], perm[:n_val]


def _check_positive_int(x, name):
    if isinstance(x, bool) or not isinstance(x, int) or x < 1:
        raise ValueError(f"{name} must be a positive integer, got {x!r}")
    return x


# ---------------------------------------------------------------------------------------------- training
def train(model: torch.nn.Module, data, loss: str = "acceleration", scheme: Union[str, "bea.Scheme"] = "midpoint",
          h: Optional[float] = None, epochs: int = 100, lr: float = 1e-3, batch_size: int = 256, val_fraction: float = 0.1,
          patience: Optional[int] = 20, seed: int = 0, progress: bool = True, schedule: Optional[str] = "cosine",
          weight_decay: float = 0.0, grad_clip: Optional[float] = None, del_normalisation: str = "momentum",
          min_rel_improvement: float = 1e-4, inverse_order: int = 0, max_step: Optional[float] = None) -> TrainResult:
    r"""Train ``model`` on ``data`` with the ``"acceleration"`` or the position-only ``"del"`` loss (module
    docstring). The model's parameters are updated in place; the best state on the validation split is
    restored at the end.

    ``data``: ``(q, v, a)`` (or an object with ``.q, .v, .a``) for ``"acceleration"``; snapshots
    ``(n_traj, n_steps + 1, n)`` at step ``h`` for ``"del"`` (then ``h`` is required; the split is over
    triples). ``schedule``: ``"cosine"`` (to ``lr/100`` at ``epochs``), ``"plateau"`` (halve after
    ``max(1, patience // 3)`` epochs without improvement) or ``None``. ``patience``: epochs without a
    relative improvement of the validation loss by ``min_rel_improvement`` before stopping (``None``:
    never stop early). ``grad_clip``: max gradient norm (``None``: no clipping).

    ``inverse_order`` (``"del"`` only): ``0`` (default) takes the model as :math:`L_{inv}` itself; ``N > 0``
    takes the model as the *true* Lagrangian and puts :math:`\mathrm{inv}_N(\text{model})`
    (:func:`inverse_lagrangian`) into the DEL residual, so that the structured model need not represent the
    scheme's :math:`O(h^2)` corrections (predict with ``predict_positions(..., inverse_order=N)``). This
    differentiates the model to fourth order: several times slower per step.

    ``max_step`` (``"del"`` only): keep the triples whose half central difference
    :math:`\max_i |q_{j+1,i} - q_{j-1,i}|/2 \approx h|\dot q|_\infty` is at most ``max_step`` (positions only, no
    velocities needed). The truncation error of :math:`\mathrm{inv}_N` grows like :math:`(h\omega)^{N+2}`, so on fast
    triples even the true Lagrangian leaves a large DEL residual that biases the fit: on the double pendulum at the
    paper's speeds (``h = 0.1``) the loss of :math:`\mathrm{inv}_2(L_{true})` is 0.25 on all triples and 1.9e-4 on those
    with ``max_step = 0.6`` (30% of them).
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    epochs = _check_positive_int(epochs, "epochs")
    batch_size = _check_positive_int(batch_size, "batch_size")
    if patience is not None:
        patience = _check_positive_int(patience, "patience")
    if not (isinstance(lr, (int, float)) and lr > 0 and math.isfinite(lr)):
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    if del_normalisation not in ("momentum", "h"):
        raise ValueError(f"del_normalisation must be 'momentum' or 'h', got {del_normalisation!r}")
    gen = torch.Generator().manual_seed(int(seed))
    n_model = getattr(model, "n", None)
    if loss == "acceleration":
        if not callable(getattr(model, "acceleration", None)):
            raise TypeError("the 'acceleration' loss needs a model with an .acceleration(q, v) method")
        tensors = _acceleration_data(data, n_model)

        def batch_loss(idx):
            return acceleration_loss(model, *(t[idx] for t in tensors))
    elif loss == "del":
        if h is None:
            raise ValueError("the 'del' loss needs the sampling step h of the snapshots: train(..., loss='del', h=0.1)")
        h = check_step(h)
        sch = bea.get_scheme(scheme)
        S = check_snapshots(data, n_model, "the training snapshots")
        T = triples_from_snapshots(S)
        if max_step is not None:
            if not (isinstance(max_step, (int, float)) and max_step > 0 and math.isfinite(max_step)):
                raise ValueError(f"max_step must be a positive number (a displacement per step), got {max_step!r}")
            keep = ((T[:, 2] - T[:, 0]).abs() / 2).amax(-1) <= max_step
            if int(keep.sum()) < 2:
                raise ValueError(f"max_step={max_step} keeps {int(keep.sum())} of {T.shape[0]} triples: the data move faster "
                                 f"than that per step; raise max_step or sample with a smaller h")
            T = T[keep]
        tensors = (T,)
        target = inverse_lagrangian(model, inverse_order, h, sch) if inverse_order else model

        def batch_loss(idx):
            return del_loss(target, tensors[0][idx], h, sch, del_normalisation)
    else:
        raise ValueError(f"loss must be 'acceleration' or 'del', got {loss!r}")

    N = tensors[0].shape[0]
    tr_idx, val_idx = _split(N, val_fraction, gen)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters")
    opt = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if schedule == "cosine":
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs, eta_min=lr / 100)
    elif schedule == "plateau":
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=max(1, (patience or 9) // 3))
    elif schedule is None:
        sched = None
    else:
        raise ValueError(f"schedule must be 'cosine', 'plateau' or None, got {schedule!r}")

    def evaluate(idx) -> float:
        model.eval()
        total, chunk = 0.0, max(batch_size, 1024)
        for a in range(0, idx.numel(), chunk):
            part = idx[a:a + chunk]
            total += float(batch_loss(part).detach()) * part.numel()
        return total / idx.numel()

    res = TrainResult(loss=loss, n_train=int(tr_idx.numel()), n_val=int(val_idx.numel()))
    # any failure (a diverging loss, an interrupt, an error in the model) leaves the model at its best state so
    # far (_fit keeps it in res._best_state; the initial state before the first improvement), never at the
    # values that failed
    res._best_state = copy.deepcopy(model.state_dict())
    try:
        _fit(model, res, batch_loss, evaluate, tr_idx, val_idx, opt, sched, schedule, params, epochs, batch_size, patience,
             grad_clip, min_rel_improvement, gen, progress, lr, loss)
    except BaseException as err:
        model.load_state_dict(res._best_state)
        model.eval()
        if isinstance(err, FloatingPointError):
            raise FloatingPointError(f"{err}. The model was restored to its best state (epoch {res.best_epoch}, validation "
                                     f"loss {res.best_val:.3e})") from None
        raise
    finally:
        del res._best_state
    return res


def _fit(model, res, batch_loss, evaluate, tr_idx, val_idx, opt, sched, schedule, params, epochs, batch_size, patience,
         grad_clip, min_rel_improvement, gen, progress, lr, loss):
    t0 = time.perf_counter()
    best_state = res._best_state
    res.best_val = evaluate(val_idx)
    res.history["val"].append(res.best_val)
    res.history["train"].append(evaluate(tr_idx))
    res.history["lr"].append(lr)
    if not math.isfinite(res.best_val):
        raise ValueError(f"the initial validation loss is {res.best_val}: the model is not usable on these data "
                         f"(check the data scale or the model's initialisation)")
    since_best = 0
    bar = tqdm(range(1, epochs + 1), disable=not progress, desc=f"train ({loss})", unit="epoch", leave=False)
    for epoch in bar:
        model.train()
        order = tr_idx[torch.randperm(tr_idx.numel(), generator=gen)]
        total = 0.0
        for a in range(0, order.numel(), batch_size):
            idx = order[a:a + batch_size]
            opt.zero_grad(set_to_none=True)
            ell = batch_loss(idx)
            if not torch.isfinite(ell):
                raise FloatingPointError(f"the training loss became {float(ell.detach())} at epoch {epoch}; lower lr (now {lr}) "
                                         f"or set grad_clip")
            ell.backward()
            if grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(params, grad_clip)
            opt.step()
            total += float(ell.detach()) * idx.numel()
        train_loss = total / order.numel()
        val = evaluate(val_idx)
        res.history["train"].append(train_loss)
        res.history["val"].append(val)
        res.history["lr"].append(opt.param_groups[0]["lr"])
        res.epochs_run = epoch
        if sched is not None:
            sched.step(val) if schedule == "plateau" else sched.step()
        if val < res.best_val * (1 - min_rel_improvement):
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


# ---------------------------------------------------------------------------------------------- prediction
# mod_N / inv_N of a model, its energy and predictions: one implementation, integrators.modified; these
# names are kept for the README and the notebooks (``method`` is accepted for compatibility: every value
# takes the dimension-free formula).
def _method(method: str) -> None:
    if method not in ("auto", "bea", "formula"):
        raise ValueError(f"method must be 'auto', 'bea' or 'formula', got {method!r}")


def recovered_lagrangian(model: TorchLagrangian, order: int = 2, h: float = 0.1, scheme="midpoint",
                         method: str = "auto") -> TorchLagrangian:
    r""":math:`L_{rec} = \mathrm{mod}_N(L_{inv})` for a model trained as :math:`L_{inv}` (``"del"`` loss) at step ``h``
    (:func:`integrators.modified.modified_lagrangian`). ``order=0`` returns the model itself."""
    _method(method)
    return modified.modified_lagrangian(model, order, check_step(h), scheme)


def inverse_lagrangian(model: TorchLagrangian, order: int = 2, h: float = 0.1, scheme="midpoint",
                       method: str = "auto") -> TorchLagrangian:
    r""":math:`L_{inv} = \mathrm{inv}_N(L)` for a model of the *true* Lagrangian (docs/theory/inverse.md)
    (:func:`integrators.modified.inverse_lagrangian`). ``order=0``: the model itself."""
    _method(method)
    return modified.inverse_lagrangian(model, order, check_step(h), scheme)


def recovered_energy(model: TorchLagrangian, order: int = 2, h: float = 0.1, scheme="midpoint",
                     method: str = "auto") -> TorchLagrangian:
    r"""The identified energy :math:`H_{rec}[N] = \partial_vL_{rec}\cdot v - L_{rec}` (:func:`recovered_lagrangian`)."""
    _method(method)
    return modified.recovered_energy(model, order, check_step(h), scheme)


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
                      on_failure: str = "raise", method: str = "auto", inverse_order: int = 0, **newton) -> torch.Tensor:
    r"""Positions ``(steps + 1, batch..., n)`` of a model trained as :math:`L_{inv}` (``"del"`` loss, step ``h``):
    the scheme's variational integrator on the model (:class:`integrators.VariationalIntegrator`) from
    ``(q0, qdot0)``, with the initial momentum :math:`p_0 = \partial_v\,\mathrm{mod}_N(\text{model})(q_0, \dot q_0)`
    (docs/theory/lsi.md; ``order=0``: the model's own momentum). ``newton``: options of the integrator (``xtol``,
    ``maxiter``, …); ``on_failure="mask"`` returns ``(q, valid)`` as the integrator does.

    ``inverse_order=N > 0``: for a model trained with ``train(..., inverse_order=N)`` (a model of the true
    :math:`L`): the scheme integrates :math:`\mathrm{inv}_N(\text{model})` and :math:`p_0 = \partial_v\text{model}`
    (``order`` is then ignored)."""
    _method(method)
    q0, qdot0 = as_tensor(q0, "q0"), as_tensor(qdot0, "qdot0")
    check_finite(q0, "q0")
    check_finite(qdot0, "qdot0")
    n = getattr(model, "n", None)
    if n is not None and (q0.shape[-1] != n or q0.shape != qdot0.shape):
        raise ValueError(f"dimension mismatch: q0 and qdot0 must have shape (batch..., {n}), got {tuple(q0.shape)} and "
                         f"{tuple(qdot0.shape)}")
    with _Frozen(model), torch.enable_grad():
        sol = modified.predict(model, q0, qdot0, steps, check_step(h), scheme, order, inverse_order=inverse_order,
                               on_failure=on_failure, **newton)
    return sol.q if on_failure == "raise" else (sol.q, sol.valid)
