r"""Building blocks of :class:`learners.modlanet.ModLaNet`: MLPs, local→global transforms, energy cells.

Everything is float64 and pointwise over leading (batch) dimensions.

Transforms (docs/theory/modlanet.md) map the local coordinates :math:`q_i \in \mathbb R^k` of element ``i`` to its
position relative to its origin, :math:`x_i - x_{O_i} = T(q_i) \in \mathbb R^d`, and its velocity by the
chain rule, :math:`\dot x_i - \dot x_{O_i} = J_T(q_i)\,\dot q_i` (:meth:`Transform.tangent`):

* :class:`Identity` -- inputs already global (bodies): :math:`T(q) = q`;
* :class:`AngleOnRod` -- a pendulum bob: :math:`\theta \mapsto l(\sin\theta, -\cos\theta)` (angle from the
  downward vertical, ``y`` up; the convention of :func:`integrators.systems.n_pendulum`);
* :class:`MLPTransform` -- learned, :math:`T = \mathrm{MLP}(\phi(q))` with :math:`\phi(q) = q` or, for angles,
  :math:`(\cos q, \sin q)`; its Jacobian–vector product is propagated layer by layer (forward mode by
  hand), so velocities are exactly :math:`d/dt` of positions and everything stays differentiable to any
  order and compatible with :mod:`torch.func`;
* :class:`CallableTransform` -- any torch function ``q -> x``; tangent by :func:`torch.func.jvp`.

Energy cells: :class:`PotentialCell` (:math:`U_1(x)`, an MLP :math:`\mathbb R^d \to \mathbb R`),
:class:`PairCell` (:math:`U_2(x_i, x_j)`, an MLP on the concatenation, symmetrised
:math:`\tfrac12[f(x_i, x_j) + f(x_j, x_i)]`), and the known potentials :class:`UniformGravity`
(:math:`U_1(x) = g\,x_y`) and :class:`NewtonianPair` (:math:`U_2 = -G/|x_i - x_j|`). A plain callable is
wrapped by :class:`FixedCell`.
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence, Set, Tuple

import torch
from torch import nn

from bea.deprecation import renamed
from bea.errors import BeaTypeError, BeaValueError
from integrators._environment import dynamo_imported

from ..neural.mlp import MLP, positive_int
from ..saving import recorded, register

__all__ = [
    "TRACEABLE",
    "traceable",
    "MLP",
    "Transform",
    "Identity",
    "AngleOnRod",
    "MLPTransform",
    "CallableTransform",
    "PotentialCell",
    "PairCell",
    "FixedCell",
    "UniformGravity",
    "NewtonianPair",
]

DTYPE = torch.float64

#: the module types whose forward is known torch code, which the compiled path's trace may follow
#: (:func:`learners.modlanet.lowering.plan`): a mutable set, grown by :func:`traceable`. Exact types: a subclass may
#: override the computation. A CallableTransform or FixedCell runs Python that the trace cannot vouch for (a branch on
#: a value it did not see).
TRACEABLE: Set[type] = {MLP, nn.Linear, nn.ModuleList}


def traceable(cls: type) -> type:
    """Class decorator: ``cls`` (an element or cell whose ``forward`` is torch code without data-dependent Python) takes
    the compiled path; its C form is its traced forward, so an element needs nothing beyond its class. Adds ``cls`` to
    the mutable, process-wide :data:`TRACEABLE` (it only grows: a class redefined under its name, as by a re-run
    notebook cell, is another entry). Constants its ``forward`` reads are Python scalars, buffers or tensor attributes
    (a module-level global read in ``forward`` is baked into the trace). :class:`BeaTypeError` for what is not an
    ``nn.Module`` class, and for a :class:`Transform` whose ``tangent`` is the default one (:func:`torch.func.jvp`),
    which the trace cannot follow."""
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise BeaTypeError(f"traceable decorates a torch.nn.Module class (an element or cell), got {cls!r}")
    if issubclass(cls, Transform) and cls.tangent is Transform.tangent:
        # refused here, not at the first compiled solve: jvp's layout checks and zero tangents have no C form
        raise BeaTypeError(f"the Transform {cls.__name__} keeps the default tangent (torch.func.jvp), which the compiled "
                           "path cannot trace; write tangent by hand ((T(q), J_T(q) qdot), as AngleOnRod does) before "
                           "decorating it with traceable")
    TRACEABLE.add(cls)
    return cls


# ---------------------------------------------------------------------------------------------- transforms
class Transform(nn.Module):
    r"""Local coordinates of one element (``in_dim``) → its position relative to its origin (``out_dim``).

    Subclasses implement :meth:`forward` and, where cheaper than :func:`torch.func.jvp`, :meth:`tangent`."""

    in_dim: int
    out_dim: int

    def tangent(self, q: torch.Tensor, qdot: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        r""":math:`(T(q), J_T(q)\dot q)` for ``q, qdot`` of shape ``(..., in_dim)``."""
        dynamo_imported()  # jvp's first decomposition imports torch._dynamo, which writes os.environ (the caller's)
        return torch.func.jvp(self.forward, (q,), (qdot,))


@traceable
@register
class Identity(Transform):
    """Global coordinates already: :math:`T(q) = q` (``space_dim`` = local = global dimension)."""

    @renamed(dim="space_dim")
    @recorded
    def __init__(self, space_dim: int = 2):
        super().__init__()
        self.in_dim = self.out_dim = positive_int(space_dim, "space_dim")

    def forward(self, q):
        return q

    def tangent(self, q, qdot):
        return q, qdot

    def extra_repr(self) -> str:
        return f"dim={self.in_dim}"


@traceable
@register
class AngleOnRod(Transform):
    r"""A bob on a massless rod of length ``length``: :math:`\theta \mapsto l(\sin\theta, -\cos\theta)`,
    velocity :math:`l(\cos\theta, \sin\theta)\dot\theta` (angle from the downward vertical, ``y`` up).
    ``learn_length=True`` makes the length a parameter (kept positive through its logarithm)."""

    @recorded
    def __init__(self, length: float = 1.0, learn_length: bool = False):
        super().__init__()
        length = float(length)
        if not math.isfinite(length) or length <= 0:
            raise BeaValueError(f"the rod length must be a positive number, got {length}")
        self.in_dim, self.out_dim = 1, 2
        log_len = torch.tensor(math.log(length), dtype=DTYPE, device="cpu")  # moved with the model's .to()
        if learn_length:
            self.log_length = nn.Parameter(log_len)
        else:
            self.register_buffer("log_length", log_len)

    @property
    def length(self) -> torch.Tensor:
        return self.log_length.exp()

    def forward(self, q):
        th = q[..., 0]
        return self.length * torch.stack([torch.sin(th), -torch.cos(th)], -1)

    def tangent(self, q, qdot):
        th, w = q[..., 0], qdot[..., 0]
        s, c, l = torch.sin(th), torch.cos(th), self.length
        return l * torch.stack([s, -c], -1), (l * w)[..., None] * torch.stack([c, s], -1)

    def extra_repr(self) -> str:
        return f"length={float(self.length):g}"


@traceable
@register
class MLPTransform(Transform):
    r"""Learned :math:`T(q) = \mathrm{MLP}(\phi(q))`; ``periodic=True`` uses :math:`\phi(q) = (\cos q, \sin q)`
    (angles: the map is :math:`2\pi`-periodic, as the physical position is), else :math:`\phi(q) = q`.
    The velocity is the exact Jacobian–vector product (the paper's alternative to a second network
    :math:`T_{\dot q}`, docs/theory/modlanet.md): :math:`\dot x = J_{\mathrm{MLP}}\,J_\phi\,\dot q`."""

    @recorded
    def __init__(self, in_dim: int = 1, out_dim: int = 2, hidden: int = 16, layers: int = 2, activation: str = "tanh",
                 periodic: bool = False, generator: Optional[torch.Generator] = None):
        super().__init__()
        self.in_dim, self.out_dim = positive_int(in_dim, "in_dim"), positive_int(out_dim, "out_dim")
        self.periodic = bool(periodic)
        feat = 2 * in_dim if self.periodic else in_dim
        self.net = MLP(feat, out_dim, hidden, layers, activation, generator=generator)

    def _features(self, q, qdot=None):
        if not self.periodic:
            return q, qdot
        c, s = torch.cos(q), torch.sin(q)
        f = torch.cat([c, s], -1)
        return f, (None if qdot is None else torch.cat([-s * qdot, c * qdot], -1))

    def forward(self, q):
        return self.net(self._features(q)[0])

    def tangent(self, q, qdot):
        f, df = self._features(q, qdot)
        return self.net.tangent(f, df)

    def extra_repr(self) -> str:
        return f"in_dim={self.in_dim}, out_dim={self.out_dim}, periodic={self.periodic}"


class CallableTransform(Transform):
    """Wrap a torch function ``fn(q) -> x`` (``(..., in_dim) -> (..., out_dim)``) as a fixed transform;
    the velocity comes from :func:`torch.func.jvp`."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor], in_dim: int, out_dim: int):
        super().__init__()
        if not callable(fn):
            raise BeaTypeError(f"fn must be callable, got {type(fn).__name__}")
        self.fn = fn
        self.in_dim, self.out_dim = positive_int(in_dim, "in_dim"), positive_int(out_dim, "out_dim")

    def forward(self, q):
        return self.fn(q)


# ---------------------------------------------------------------------------------------------- energy cells
@traceable
@register
class PotentialCell(nn.Module):
    r"""One-body potential :math:`U_1(x)`: an MLP :math:`\mathbb R^d \to \mathbb R`; ``(..., d) -> (...)``."""

    @renamed(dim="space_dim")
    @recorded
    def __init__(self, space_dim: int = 2, hidden: int = 50, layers: int = 2, activation: str = "tanh",
                 generator: Optional[torch.Generator] = None):
        super().__init__()
        self.space_dim = positive_int(space_dim, "space_dim")
        self.net = MLP(space_dim, 1, hidden, layers, activation, generator=generator)

    def forward(self, x):
        return self.net(x)[..., 0]


@traceable
@register
class PairCell(nn.Module):
    r"""Pair potential :math:`U_2(x_i, x_j) = \tfrac12[f(x_i \oplus x_j) + f(x_j \oplus x_i)]`, ``f`` an MLP
    :math:`\mathbb R^{2d} \to \mathbb R` (symmetric by construction, :math:`U_{ij} = U_{ji}`)."""

    @renamed(dim="space_dim")
    @recorded
    def __init__(self, space_dim: int = 2, hidden: int = 50, layers: int = 2, activation: str = "tanh",
                 generator: Optional[torch.Generator] = None):
        super().__init__()
        self.space_dim = positive_int(space_dim, "space_dim")
        self.net = MLP(2 * space_dim, 1, hidden, layers, activation, generator=generator)

    def forward(self, xi, xj):
        a = self.net(torch.cat([xi, xj], -1))[..., 0]
        b = self.net(torch.cat([xj, xi], -1))[..., 0]
        return 0.5 * (a + b)


class FixedCell(nn.Module):
    """A known potential given as a plain callable (no parameters): ``U1(x)`` or ``U2(xi, xj)``."""

    def __init__(self, fn: Callable[..., torch.Tensor]):
        super().__init__()
        if not callable(fn):
            raise BeaTypeError(f"a potential cell must be callable, got {type(fn).__name__}")
        self.fn = fn

    def forward(self, *x):
        return self.fn(*x)


@traceable
@register
class UniformGravity(nn.Module):
    r"""Known one-body potential :math:`U_1(x) = g\,x_{\text{axis}}` (default ``y``, up); with :math:`c_1 = 1`
    the model's :math:`c_1\sum_i m_iU_1(x_i)` is the gravitational energy :math:`\sum_i m_i g y_i`."""

    @recorded
    def __init__(self, g: float = 9.8, axis: int = 1):
        super().__init__()
        self.g, self.axis = float(g), int(axis)

    def forward(self, x):
        return self.g * x[..., self.axis]

    def extra_repr(self) -> str:
        return f"g={self.g}, axis={self.axis}"


@traceable
@register
class NewtonianPair(nn.Module):
    r"""Known pair potential :math:`U_2(x_i, x_j) = -G/|x_i - x_j|`; with :math:`c_2 = 1` the model's pair
    energy is :math:`-\sum_{i<j} G m_im_j/|x_i - x_j|`."""

    @recorded
    def __init__(self, G: float = 1.0):
        super().__init__()
        self.G = float(G)

    def forward(self, xi, xj):
        return -self.G / torch.linalg.vector_norm(xi - xj, dim=-1)

    def extra_repr(self) -> str:
        return f"G={self.G}"


def as_cell(cell, kind: str, dim: int, hidden: int, layers: int, activation: str, generator) -> Optional[nn.Module]:
    """``"mlp"`` → a new learned cell, ``None`` → no such term, an ``nn.Module`` → itself, a callable →
    :class:`FixedCell`."""
    if cell is None:
        return None
    if isinstance(cell, str):
        if cell != "mlp":
            raise BeaValueError(f"{kind} must be 'mlp', None, an nn.Module or a callable, got {cell!r}")
        cls = PotentialCell if kind == "potential" else PairCell
        return cls(dim, hidden, layers, activation, generator)
    if isinstance(cell, nn.Module):
        return cell
    if callable(cell):
        return FixedCell(cell)
    raise BeaTypeError(f"{kind} must be 'mlp', None, an nn.Module or a callable, got {type(cell).__name__}")


def check_transforms(transforms, n: int, dim: int) -> Tuple[Optional[Transform], Optional[Sequence[Transform]]]:
    """``(shared, None)`` or ``(None, per_element_list)``, validated against ``n`` elements in ``dim`` dimensions."""
    if isinstance(transforms, Transform):
        items, shared = [transforms], transforms
    elif isinstance(transforms, (list, tuple, nn.ModuleList)):
        items, shared = list(transforms), None
        if len(items) != n:
            raise BeaValueError(f"give one transform per element: {n} elements (len(parents)), got {len(items)} transforms; "
                             f"or pass a single Transform shared by all elements")
    else:
        raise BeaTypeError(f"transforms must be a Transform (shared) or a list of Transforms (one per element), "
                        f"got {type(transforms).__name__}")
    for k, t in enumerate(items):
        if not isinstance(t, Transform):
            raise BeaTypeError(f"transform {k} must be a learners.modlanet.elements.Transform (wrap a function in CallableTransform), "
                            f"got {type(t).__name__}")
        if t.out_dim != dim:
            raise BeaValueError(f"dimension mismatch: transform {k} ({type(t).__name__}) maps to R^{t.out_dim}, but the model's "
                             f"global dimension is dim={dim}; build the model with dim={t.out_dim} or use a transform with out_dim={dim}")
    return shared, (None if shared is not None else items)
