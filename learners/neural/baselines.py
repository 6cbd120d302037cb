r"""The seed's neural baselines for ModLaNet (docs/theory/modlanet.md, paper Table 2): LNN, HNN and a plain MLP.

All three are float64 ``nn.Module``\ s with ``.acceleration(q, v)`` (shape ``(..., n)`` in and out,
batched over the leading dimensions), so the shared acceleration-loss training loop
(``learners.neural.training.train(model, data, loss="acceleration")``) and the rollouts of
:mod:`learners.neural.rollout` treat them exactly like :class:`learners.ModLaNet`. Each also has
``.time_derivative(q, v) -> (qdot, vdot)``, the first-order vector field that a rollout integrates.

* :class:`LNN` (Cranmer et al. 2020): one MLP :math:`L_\theta(q, v)`; the acceleration is the
  Euler--Lagrange solve (paper eq. 4)

  .. math:: \ddot q = \Big(\frac{\partial^2 L}{\partial v^2}\Big)^{-1}
            \Big(\frac{\partial L}{\partial q} - \frac{\partial^2 L}{\partial v\,\partial q}\,\dot q\Big),

  see :func:`euler_lagrange_acceleration`.
* :class:`HNN` (Greydanus et al. 2019): one MLP :math:`H_\theta(q, p)`;
  :math:`\dot q = \partial H/\partial p`, :math:`\dot p = -\partial H/\partial q`. The paper trains it on
  *canonical* data, :math:`p = \partial L/\partial v` of the true Lagrangian, with the L2 loss on the
  whole vector field :math:`(\dot q, \dot p)` (``field_type="solenoidal"``); :func:`canonical_data` makes
  such data from ``(q, v)``. ``.momentum_rate(q, p)`` is :math:`\dot p` (``.acceleration(q, v)``, the shared
  interface, is it at :math:`p := v`); to fit both halves, as the
  seed, train :class:`VectorFieldModel` (``hnn``) on :func:`vector_field_data` -- with the
  :math:`\dot p` half alone :math:`\partial H/\partial p` stays untrained and a rollout is meaningless.
* :class:`MLPBaseline`: the paper's "baseline", a three-layer MLP for the evolution function, either
  :math:`(q, v) \mapsto \ddot q` (``output="acceleration"``, paper eq. 1) or, as in the paper's code,
  :math:`(q, p) \mapsto (\dot q, \dot p)` (``output="vector_field"``).

``wrap_angles=True`` feeds :math:`q \bmod 2\pi` to the network, as the paper does for the pendulum
(its data and rollouts apply ``x % (2 pi)``); rollouts keep the unwrapped angles.

Devices: the models are ``nn.Module`` s in float64 and move with ``.to(device)``; ``device=`` builds one there
(the initial weights are drawn on the CPU from the seed, then moved, so a seed gives the same network on every
device). Training and rollouts follow the data's device.

The MLP is the paper's: ``Linear(d_in, w) -> act -> Linear(w, w) -> act -> Linear(w, d_out, bias=False)``,
so :func:`parameter_count` is :math:`w(d_{in} + 2) + w^2 + w\,d_{out}`. :data:`PAPER_WIDTHS` holds the
paper's widths and :func:`paper_baseline` builds them; the counts are listed in :data:`PAPER_PARAMETERS`.
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Tuple, Union

import torch
from torch import nn

from bea.autodiff import check_regular
from bea.deprecation import renamed
from bea.errors import BeaTypeError, BeaValueError
from integrators._checks import check_states

from .estimator import FieldEstimator, LagrangianEstimator
from .mlp import MLP, positive_int
from .vector_field import VectorFieldModel, vector_field_data
from ..saving import SavableModule, recorded, register

__all__ = ["MLP", "LNN", "HNN", "MLPBaseline", "euler_lagrange_acceleration", "canonical_data", "VectorFieldModel",
           "vector_field_data", "parameter_count", "paper_baseline", "PAPER_WIDTHS", "PAPER_PARAMETERS"]

#: hidden widths of the paper's code (YupuLu/ModLaNets, experiment-*/data file names): the full and
#: the "light" versions, per system
PAPER_WIDTHS = {
    "double_pendulum": {"lnn": 600, "hnn": 200, "baseline": 200, "light": 75},
    "three_body": {"lnn": 600, "hnn": 200, "baseline": 200, "light": 70},
}

#: parameter counts as printed in the paper's Table 2 (for comparison with :func:`parameter_count`)
PAPER_PARAMETERS = {
    "double_pendulum": {"modlanet": 6200, "light_lnn": 6200, "light_hnn": 6200, "lnn": 364200, "hnn": 43200, "baseline": 41400},
    "three_body": {"modlanet": 5600, "light_lnn": 5600, "light_hnn": 5600, "lnn": 364200, "hnn": 43200, "baseline": 43000},
}

# ---------------------------------------------------------------------------------------------- checks
def _state(q, v, n: int, names=("q", "v")) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(q, v)`` as float64 tensors of one shape ``(..., n)`` with finite entries, else ``ValueError``."""
    return check_states(q, v, n, names, mismatch=f"the model has n={n}")


def _wrap(q: torch.Tensor, wrap: bool) -> torch.Tensor:
    # the paper feeds angles modulo 2 pi to its networks (x % (2 pi)); derivative 1 almost everywhere
    return torch.remainder(q, 2 * math.pi) if wrap else q


def _leaf(x: torch.Tensor) -> torch.Tensor:
    # a separate graph node per argument (partial derivatives), attached to the caller's graph if any
    return x.view_as(x) if x.requires_grad else x.detach().requires_grad_(True)


def _paper_mlp(d_in: int, d_out: int, width: int, activation: str, init: str, seed: Optional[int], device=None) -> MLP:
    r"""The paper's three-layer MLP, :math:`x \mapsto W_3\,\sigma(W_2\,\sigma(W_1 x + b_1) + b_2)` (no bias in the
    last layer), ``init="xavier"`` (HNN, baseline) or ``"lnn"``; ``seed`` makes the weights reproducible."""
    if init not in ("xavier", "lnn"):
        raise BeaValueError(f"init must be 'xavier' or 'lnn', got {init!r}")
    return MLP(d_in, d_out, width, 2, activation, init, bias_out=False, seed=seed, device=device)


def parameter_count(model: nn.Module) -> int:
    """Number of trainable scalars of ``model`` (the paper's ``count_parameters``)."""
    if not isinstance(model, nn.Module):
        raise BeaTypeError(f"parameter_count needs an nn.Module, got {type(model).__name__}")
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# ---------------------------------------------------------------------------------------------- EL solve
def euler_lagrange_acceleration(lagrangian: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], q: torch.Tensor,
                                v: torch.Tensor, *, create_graph: bool = False, regularisation: float = 0.0,
                                singular: str = "raise") -> torch.Tensor:
    r"""The Euler--Lagrange acceleration of a torch Lagrangian ``L(q, v)`` (batched, result ``(...)``):

    .. math:: \ddot q = (M + \epsilon I)^{-1}\big(\partial_q L - L_{vq}\, v\big), \qquad
              M_{ij} = \frac{\partial^2 L}{\partial v_i \partial v_j},\quad
              (L_{vq})_{ij} = \frac{\partial^2 L}{\partial v_i \partial q_j},

    from :math:`\tfrac{d}{dt}\partial_v L = \partial_q L` expanded by the chain rule (paper eq. 3--4).
    All derivatives come from autograd: one gradient, then one row of the Hessian per coordinate
    (``n`` further backward passes over the whole batch, valid because ``L`` is pointwise over it).

    ``create_graph=True`` keeps the graph so that a loss on the result can be differentiated with
    respect to the parameters of ``L`` (training); otherwise the result is detached.
    ``regularisation`` :math:`\epsilon \ge 0` is added to the diagonal of ``M`` (0: none). Where ``M``
    is singular (smallest singular value below ``1e-12`` of the largest, or not finite),
    ``singular="raise"`` raises ``ValueError``; ``singular="nan"`` returns NaN at those points (a
    rollout then marks the trajectory as failed, as the paper reports for LNN).
    """
    if singular not in ("raise", "nan"):
        raise BeaValueError(f"singular must be 'raise' or 'nan', got {singular!r}")
    if not (regularisation >= 0 and math.isfinite(regularisation)):
        raise BeaValueError(f"regularisation must be a finite number >= 0, got {regularisation}")
    n = q.shape[-1]
    with torch.enable_grad():
        qq, vv = _leaf(q), _leaf(v)
        L = lagrangian(qq, vv)
        if not isinstance(L, torch.Tensor) or L.shape != q.shape[:-1]:
            got = tuple(L.shape) if isinstance(L, torch.Tensor) else type(L).__name__
            raise BeaValueError(f"the Lagrangian must return one value per state, shape {tuple(q.shape[:-1])}, got {got}")
        gq, gv = torch.autograd.grad(L.sum(), (qq, vv), create_graph=True, allow_unused=True)
        if gv is None:
            raise BeaValueError("the Lagrangian does not depend on the velocities: d^2L/dv^2 = 0, no acceleration is defined")
        if gq is None:
            gq = torch.zeros_like(qq)
        M, Lvq = _velocity_hessian_rows(gv, qq, vv, create_graph)
        if not create_graph:
            gq = gq.detach()
        rhs = gq - (Lvq @ vv.detach().unsqueeze(-1) if not create_graph else Lvq @ vv.unsqueeze(-1)).squeeze(-1)
        if regularisation:
            M = M + regularisation * torch.eye(n, dtype=M.dtype, device=M.device)
        bad = None
        if singular == "raise":
            check_regular(M)
        else:
            M, bad = _singular_to_identity(M)
        a = torch.linalg.solve(M, rhs.unsqueeze(-1)).squeeze(-1)
        if bad is not None and bool(bad.any()):
            a = torch.where(bad[..., None], torch.full_like(a, float("nan")), a)
    return a if create_graph else a.detach()


def _velocity_hessian_rows(gv: torch.Tensor, qq: torch.Tensor, vv: torch.Tensor, create_graph: bool
                           ) -> Tuple[torch.Tensor, torch.Tensor]:
    """``M[..., i, j] = d^2 L / dv_i dv_j`` and ``Lvq[..., i, j] = d^2 L / dv_i dq_j``, each ``(..., n, n)``, from the
    velocity gradient ``gv`` (built with ``create_graph``): one backward pass per row."""
    rows_vv, rows_vq = [], []
    for i in range(vv.shape[-1]):
        dq, dv = torch.autograd.grad(gv[..., i].sum(), (qq, vv), create_graph=create_graph, retain_graph=True,
                                     allow_unused=True)
        rows_vq.append(torch.zeros_like(qq) if dq is None else dq)
        rows_vv.append(torch.zeros_like(vv) if dv is None else dv)
    return torch.stack(rows_vv, -2), torch.stack(rows_vq, -2)


def _singular_to_identity(M: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``M`` with its singular matrices (smallest singular value below 1e-12 of the largest, or not finite)
    replaced by the identity, so that one solve serves the batch, and the mask of those (``bad``)."""
    n = M.shape[-1]
    with torch.no_grad():
        s = torch.linalg.svdvals(M)
        bad = ~(s[..., -1] > 1e-12 * s[..., 0]) | ~torch.isfinite(s[..., 0])
    if bool(bad.any()):
        M = torch.where(bad[..., None, None], torch.eye(n, dtype=M.dtype, device=M.device), M)
    return M, bad


def _create_graph(create_graph: Optional[bool]) -> bool:
    # default: keep the graph exactly when gradients are being recorded (training), not in rollouts
    return torch.is_grad_enabled() if create_graph is None else bool(create_graph)


# ---------------------------------------------------------------------------------------------- LNN
@register
class LNN(nn.Module, SavableModule, LagrangianEstimator):
    r"""Lagrangian neural network: one MLP :math:`L_\theta(q, v)` on :math:`\mathbb R^{2n}`
    (seed: width 600, softplus, the LNN initialisation; 364.2k parameters for the double pendulum).

    ``forward(q, v) -> L`` of shape ``(...)``; ``acceleration(q, v)`` is the Euler--Lagrange solve of
    :func:`euler_lagrange_acceleration` (``create_graph`` defaults to whether autograd is recording,
    so the same call trains and rolls out). ``regularisation`` and ``singular`` are passed on; the
    default raises ``ValueError`` on a singular Hessian :math:`\partial^2 L/\partial v^2`. ``h``, ``scheme``,
    ``loss``, ``options``: the estimator form, ``fit``/``predict``/``energy`` (:mod:`learners.neural.estimator`).
    """

    @recorded
    def __init__(self, n: int, width: int = 600, activation: str = "softplus", init: str = "lnn", *,
                 regularisation: float = 0.0, singular: str = "raise", wrap_angles: bool = False, seed: Optional[int] = None,
                 h: Optional[float] = None, scheme="midpoint", loss="acceleration", options=None,
                 device: Union[str, torch.device, None] = None):
        super().__init__()
        self._configure(h, scheme, loss, options)
        self.n = positive_int(n, "n")
        self.wrap_angles = bool(wrap_angles)
        self.net = _paper_mlp(2 * self.n, 1, width, activation, init, seed, device)
        self.regularisation = float(regularisation)
        self.singular = singular

    def forward(self, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if q.shape[-1:] != (self.n,) or v.shape != q.shape:
            raise BeaValueError(f"q and v must both have shape (..., {self.n}), got {tuple(q.shape)} and {tuple(v.shape)}")
        return self.net(torch.cat([_wrap(q, self.wrap_angles), v], -1)).squeeze(-1)

    def acceleration(self, q, v, create_graph: Optional[bool] = None) -> torch.Tensor:
        q, v = _state(q, v, self.n)
        return euler_lagrange_acceleration(self, q, v, create_graph=_create_graph(create_graph),
                                           regularisation=self.regularisation, singular=self.singular)

    def time_derivative(self, q, v, create_graph: Optional[bool] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        r""":math:`(\dot q, \dot v) = (v, \ddot q(q, v))`."""
        a = self.acceleration(q, v, create_graph)
        return torch.as_tensor(v, dtype=torch.float64, device=a.device), a


# ---------------------------------------------------------------------------------------------- HNN
@register
class HNN(nn.Module, SavableModule, FieldEstimator):
    r"""Hamiltonian neural network: an MLP on :math:`(q, p) \in \mathbb R^{2n}` with ``n_outputs``
    outputs, the last of which is :math:`H_\theta(q, p)`; the vector field is the symplectic gradient

    .. math:: \dot q = \partial H/\partial p, \qquad \dot p = -\partial H/\partial q.

    The paper's code (after Greydanus et al.) has two outputs and, with ``field_type="solenoidal"``,
    uses only the second as the Hamiltonian; ``n_outputs=2`` keeps its parameter count (the unused
    first output gets zero gradients). Width 200, tanh, Xavier initialisation.

    Coordinates: the paper trains the HNN on canonical data (true momenta :math:`p = \partial L/\partial v`,
    :func:`canonical_data`), with the loss on both halves of :meth:`time_derivative`. Data without
    momenta can be fed with :math:`p := v` (``momenta="velocity"``, a convention only: then
    ``acceleration`` is :math:`-\partial H/\partial q` at :math:`p = v`, exact when the mass matrix is
    the identity). Either way ``acceleration(q, v)`` returns :math:`\dot p` at :math:`p := v`, so the shared
    acceleration loss trains it on the :math:`\dot p` half only; the paper's loss on both halves is
    ``train(VectorFieldModel(hnn), vector_field_data(q, p, qdot, pdot))``, or ``fit((q, p, qdot, pdot))`` (the estimator
    form with ``h``, ``options``: :class:`~learners.neural.estimator.FieldEstimator`).
    """

    @recorded
    def __init__(self, n: int, width: int = 200, activation: str = "tanh", init: str = "xavier", *,
                 n_outputs: int = 2, momenta: str = "canonical", wrap_angles: bool = False, seed: Optional[int] = None,
                 h: Optional[float] = None, scheme="midpoint", loss="acceleration", options=None,
                 device: Union[str, torch.device, None] = None):
        super().__init__()
        self._configure(h, scheme, loss, options)
        if momenta not in ("canonical", "velocity"):
            raise BeaValueError(f"momenta must be 'canonical' (p = dL/dv of the true Lagrangian) or 'velocity' (p := v), "
                             f"got {momenta!r}")
        self.n = positive_int(n, "n")
        self.momenta = momenta
        self.wrap_angles = bool(wrap_angles)
        self.net = _paper_mlp(2 * self.n, positive_int(n_outputs, "n_outputs"), width, activation, init, seed, device)

    def forward(self, q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """The Hamiltonian :math:`H(q, p)`, shape ``(...)``."""
        if q.shape[-1:] != (self.n,) or p.shape != q.shape:
            raise BeaValueError(f"q and p must both have shape (..., {self.n}), got {tuple(q.shape)} and {tuple(p.shape)}")
        return self.net(torch.cat([_wrap(q, self.wrap_angles), p], -1))[..., -1]

    def time_derivative(self, q, p, create_graph: Optional[bool] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        r""":math:`(\partial H/\partial p, -\partial H/\partial q)`, each of shape ``(..., n)``."""
        q, p = _state(q, p, self.n, ("q", "p"))
        cg = _create_graph(create_graph)
        with torch.enable_grad():
            qq, pp = _leaf(q), _leaf(p)
            H = self(qq, pp)
            gq, gp = torch.autograd.grad(H.sum(), (qq, pp), create_graph=cg, allow_unused=True)
        gq = torch.zeros_like(q) if gq is None else gq
        gp = torch.zeros_like(p) if gp is None else gp
        return (gp, -gq) if cg else (gp.detach(), -gq.detach())

    def momentum_rate(self, q, p, create_graph: Optional[bool] = None) -> torch.Tensor:
        r""":math:`\dot p = -\partial H/\partial q` at canonical ``(q, p)``, shape ``(..., n)``."""
        return self.time_derivative(q, p, create_graph)[1]

    @renamed(p="v")
    def acceleration(self, q, v, create_graph: Optional[bool] = None) -> torch.Tensor:
        r"""The acceleration interface that every model shares, ``(q, v)``: :meth:`momentum_rate` at :math:`p := v`,
        the acceleration model of ``momenta="velocity"``. For canonical ``(q, p)`` call :meth:`momentum_rate`."""
        return self.momentum_rate(q, v, create_graph)


# ---------------------------------------------------------------------------------------------- baseline
@register
class MLPBaseline(nn.Module, SavableModule, FieldEstimator):
    r"""The paper's "baseline": a three-layer MLP for the evolution function (width 200, tanh, Xavier).

    ``output="acceleration"``: :math:`(q, v) \mapsto \ddot q` (paper eq. 1), ``time_derivative`` is
    :math:`(v, \ddot q)`. ``output="vector_field"`` (the paper's code: the HNN network with
    ``baseline=True`` on canonical data): :math:`(q, p) \mapsto (\dot q, \dot p)`, ``acceleration``
    returns the second half. ``h``, ``options``: the estimator form (:class:`~learners.neural.estimator.FieldEstimator`).
    """

    @recorded
    def __init__(self, n: int, width: int = 200, activation: str = "tanh", init: str = "xavier", *,
                 output: str = "acceleration", wrap_angles: bool = False, seed: Optional[int] = None,
                 h: Optional[float] = None, scheme="midpoint", loss="acceleration", options=None,
                 device: Union[str, torch.device, None] = None):
        super().__init__()
        self._configure(h, scheme, loss, options)
        if output not in ("acceleration", "vector_field"):
            raise BeaValueError(f"output must be 'acceleration' or 'vector_field', got {output!r}")
        self.n = positive_int(n, "n")
        self.output = output
        self.wrap_angles = bool(wrap_angles)
        self.net = _paper_mlp(2 * self.n, self.n if output == "acceleration" else 2 * self.n, width, activation, init, seed,
                              device)

    def forward(self, q, v) -> torch.Tensor:
        q, v = _state(q, v, self.n)
        return self.net(torch.cat([_wrap(q, self.wrap_angles), v], -1))

    def acceleration(self, q, v, create_graph: Optional[bool] = None) -> torch.Tensor:
        out = self(q, v)
        return out if self.output == "acceleration" else out[..., self.n:]

    def time_derivative(self, q, v, create_graph: Optional[bool] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        out = self(q, v)
        if self.output == "acceleration":
            return torch.as_tensor(v, dtype=torch.float64, device=out.device), out
        return out[..., : self.n], out[..., self.n:]


# ---------------------------------------------------------------------------------------------- helpers
def canonical_data(lagrangian: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], q, v) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""Canonical training data for :class:`HNN` / ``MLPBaseline(output="vector_field")`` from states
    ``(q, v)`` of the *true* Lagrangian (the paper's "hnn" datasets):
    :math:`p = \partial L/\partial v` and, on solutions, :math:`\dot p = \tfrac{d}{dt}\partial L/\partial v
    = \partial L/\partial q` (Euler--Lagrange); :math:`\dot q = v`. Returns ``(p, pdot)``, detached."""
    if not callable(lagrangian):
        raise BeaTypeError(f"lagrangian must be a callable L(q, v), got {type(lagrangian).__name__}")
    q = torch.as_tensor(q, dtype=torch.float64)
    q, v = _state(q, v, q.shape[-1] if q.dim() else 0)
    with torch.enable_grad():
        qq, vv = q.detach().requires_grad_(True), v.detach().requires_grad_(True)
        L = lagrangian(qq, vv)
        gq, gv = torch.autograd.grad(L.sum(), (qq, vv), allow_unused=True)
    if gv is None:
        raise BeaValueError("the Lagrangian does not depend on the velocities: no momenta")
    return gv.detach(), (torch.zeros_like(q) if gq is None else gq.detach())


def paper_baseline(kind: str, system: str = "double_pendulum", *, light: bool = False, seed: Optional[int] = None) -> nn.Module:
    r"""A baseline with the paper's settings: ``kind`` in ``"lnn"``, ``"hnn"``, ``"baseline"``; ``system``
    in ``"double_pendulum"`` (n = 2) or ``"three_body"`` (n = 6); ``light=True`` for the paper's light
    versions (width 75 / 70). Angles are wrapped to :math:`[0, 2\pi)` for the pendulum, as the paper."""
    if system not in PAPER_WIDTHS:
        raise BeaValueError(f"system must be one of {sorted(PAPER_WIDTHS)}, got {system!r}")
    n = 2 if system == "double_pendulum" else 6
    width = PAPER_WIDTHS[system]["light" if light else kind] if kind in ("lnn", "hnn", "baseline") else None
    wrap = system == "double_pendulum"
    if kind == "lnn":
        return LNN(n, width, wrap_angles=wrap, seed=seed)
    if kind == "hnn":
        return HNN(n, width, wrap_angles=wrap, seed=seed)
    if kind == "baseline":
        return MLPBaseline(n, width, wrap_angles=wrap, seed=seed)
    raise BeaValueError(f"kind must be 'lnn', 'hnn' or 'baseline', got {kind!r}")
