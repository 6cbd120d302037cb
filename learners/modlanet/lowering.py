r"""A ModLaNet as C, for the compiled integrator path (:mod:`integrators.compiled`).

:func:`c_lagrangian` returns the :class:`integrators.compiled.CLagrangian` of a
:class:`~learners.modlanet.ModLaNet`: C code computing :math:`L`, its gradient :math:`g` and Hessian
:math:`H` in :math:`x = (q, v) \in \mathbb R^{D}`, :math:`D = 2n`, by second-order forward jets
(:mod:`learners.modlanet._jets_c`), following the model's own computation:

* each element's offset :math:`T_i(q_i)` and velocity :math:`J_{T_i}(q_i)\dot q_i` as jets in its local
  variables :math:`(q_i, \dot q_i)` (:class:`~learners.modlanet.elements.MLPTransform`: value and tangent
  propagated through the network as :meth:`MLP.tangent` does, both as jets, so the derivatives of
  :math:`\sigma'` enter through :math:`\sigma'', \sigma'''`), then summed along the tree as jets in
  :math:`\mathbb R^D`;
* the energy cells :math:`U_1(x_i)`, :math:`U_2(x_i, x_j)` as jets in their own inputs (``d`` or ``2d``
  directions: cheap), composed with the jets of :math:`x_i` by the chain rule
  :math:`\nabla(u\circ X) = \sum_a u_a\nabla X_a`,
  :math:`\nabla^2(u\circ X) = \sum_{ab}u_{ab}\nabla X_a\nabla X_b^\top + \sum_a u_a\nabla^2X_a`;
* :math:`L = \sum_i \tfrac12 m_i|\dot x_i|^2 - c_1\sum_i m_iU_1(x_i) - c_2\sum_{i<j}m_im_jU_2(x_i, x_j)`.

The C source depends only on the model's *structure* (sizes, element kinds, activations: offsets are
constants), so it is compiled once per process and structure (with the host's vector instructions: the layer loops
run over contiguous rows); the weights, masses, ``c1``, ``c2`` and
lengths are a run-time array that :attr:`CLagrangian.refresh` repacks before every chunk of steps, so
an integrator never steps with weights older than the model's (training may continue between rollouts).
The C loop costs the same per trajectory at any batch, while batched torch gets cheaper per trajectory:
under ``execution="auto"`` batches above :data:`AUTO_MAX_BATCH` stay on the eager path.

Lowered: :class:`~learners.modlanet.elements.Identity`, ``AngleOnRod``, ``MLPTransform`` transforms;
``PotentialCell``, ``PairCell``, ``UniformGravity``, ``NewtonianPair`` cells; :class:`~learners.neural.mlp.MLP`
with ``tanh`` or ``softplus``; float64 parameters. Anything else (a ``CallableTransform``, a plain callable
cell, a subclass overriding the computation) raises :class:`integrators.compiled.NotLowerable` and the
integrator takes its eager path. Series of the model (:math:`\mathrm{inv}_2(M)`, which needs derivatives up to
order 4) use its Taylor form, :mod:`learners.modlanet.taylor`, built from the same :func:`plan`.
"""

from __future__ import annotations

from typing import List, Tuple

import numpy as np
import torch

from bea.errors import BeaRuntimeError
from integrators.compiled import MAX_N, CLagrangian, NotLowerable

from ..neural.mlp import MLP
from . import elements as E
from ._jets_c import SOURCE as JETS

__all__ = ["c_lagrangian", "ACTIVATIONS", "AUTO_MAX_BATCH"]

#: activations with a C form (code in the C helpers)
ACTIVATIONS = {"tanh": 0, "softplus": 1}
#: batches above this roll out eagerly under execution="auto": double pendulum, cells 2 x 50, one core,
#: trajectory-steps/s compiled / eager: 7.3 k / 6.2 k at batch 100, 7.4 k / 15.4 k at batch 1000
#: (benchmarks/RESULTS_speed.md); the C loop costs the same per trajectory at any batch
AUTO_MAX_BATCH = 200


class _Plan:
    """The run-time parameter array under construction, and the structure (offsets included)."""

    def __init__(self):
        self.parts: List[torch.Tensor] = []
        self.size = 0

    def add(self, t) -> int:
        t = torch.as_tensor(t, device=t.device if isinstance(t, torch.Tensor) else "cpu").detach().reshape(-1)
        if t.dtype != torch.float64:
            raise NotLowerable(f"a ModLaNet parameter is {t.dtype}; the C form computes in float64 like the model must")
        self.parts.append(t.cpu())
        self.size += t.numel()
        return self.size - t.numel()

    def mlp(self, net, scalar: bool = False) -> tuple:
        """``(offset, dims, activation, offset of W^T)``; for ``scalar`` networks (one output, a hidden layer:
        energy cells) the last hidden layer's weights are packed again, transposed, after the rest (-1: not)."""
        if type(net) is not MLP:
            raise NotLowerable(f"a {type(net).__name__} network has no C form (only learners.neural.mlp.MLP)")
        if net.activation not in ACTIVATIONS:
            raise NotLowerable(f"the activation {net.activation!r} has no C form (only {sorted(ACTIVATIONS)})")
        off, dims = self.size, [net.in_dim]
        for lin in net.linears:
            if type(lin) is not torch.nn.Linear or lin.in_features != dims[-1]:
                raise NotLowerable("an MLP layer that is not a plain nn.Linear chain has no C form")
            dims.append(lin.out_features)
            self.add(lin.weight)
            self.add(lin.bias if lin.bias is not None else torch.zeros(lin.out_features, dtype=torch.float64, device="cpu"))
        wt = -1
        if scalar and dims[-1] == 1 and len(dims) >= 3:
            wt = self.add(net.linears[-2].weight.t().contiguous())
        return off, tuple(dims), ACTIVATIONS[net.activation], wt

    def transform(self, t) -> tuple:
        if type(t) is E.Identity:
            return ("id", t.in_dim)
        if type(t) is E.AngleOnRod:
            return ("rod", self.add(t.length))
        if type(t) is E.MLPTransform:
            return ("mlp", t.in_dim, bool(t.periodic), self.mlp(t.net))
        raise NotLowerable(f"the transform {type(t).__name__} has no C form (Identity, AngleOnRod, MLPTransform)")

    def cell(self, c, kind: str, d: int):
        if c is None:
            return None
        if kind == "potential" and type(c) is E.PotentialCell or kind == "pair" and type(c) is E.PairCell:
            return ("mlp", self.mlp(c.net, scalar=True))
        if kind == "potential" and type(c) is E.UniformGravity and 0 <= c.axis < d:
            return ("grav", self.add(torch.tensor(c.g, dtype=torch.float64, device="cpu")), c.axis)
        if kind == "pair" and type(c) is E.NewtonianPair and d <= 8:
            return ("newton", self.add(torch.tensor(c.G, dtype=torch.float64, device="cpu")))
        raise NotLowerable(f"the {kind} cell {type(c).__name__} has no C form")


def plan(model) -> Tuple[tuple, List[torch.Tensor]]:
    """``(structure, tensors)``: the hashable structure the C source is generated from, and the tensors
    whose concatenation is the run-time parameter array. :class:`NotLowerable` for what has no C form."""
    from .model import ModLaNet

    for name in ("forward", "global_states", "kinetic", "potential_energy", "masses"):
        if getattr(type(model), name) is not getattr(ModLaNet, name):
            raise NotLowerable(f"{type(model).__name__} overrides {name}: its C form may not be what it computes")
    if model.n > MAX_N:
        raise NotLowerable(f"n = {model.n} coordinates; the compiled loop handles at most {MAX_N}")
    p = _Plan()
    with torch.no_grad():
        masses, c1, c2 = p.add(model.masses), p.add(model.c1), p.add(model.c2)
        N = model.n_elements
        if model.transform is not None:
            shared = p.transform(model.transform)
            trans = (shared,) * N
        else:
            trans = tuple(p.transform(model.transforms[i]) for i in range(N))
        pot = p.cell(model.potential, "potential", model.space_dim)
        pair = p.cell(model.pair, "pair", model.space_dim)
    pairs = tuple(zip(model._pair_i.tolist(), model._pair_j.tolist())) if pair is not None else ()
    structure = (model.n, model.space_dim, tuple(model.parents), tuple(model._order), tuple(model.local_dims),
                 tuple(model._offsets), trans, pot, pair, pairs, masses, c1, c2)
    return structure, p.parts


def pack(parts: List[torch.Tensor]) -> np.ndarray:
    return np.ascontiguousarray(torch.cat(parts).numpy(), dtype=np.float64)


def c_lagrangian(model) -> CLagrangian:
    """The :class:`~integrators.compiled.CLagrangian` of a ModLaNet (module docstring), with a ``refresh``
    that repacks the current weights; :class:`NotLowerable` if the model has no C form."""
    structure, parts = plan(model)
    from ._lowering_source import generate

    source, cost = generate(structure)

    def refresh() -> np.ndarray:
        now, current = plan(model)
        if now != structure:
            raise BeaRuntimeError("the ModLaNet's structure (elements, cells, layer sizes or activations) changed after it "
                               "was lowered to C; build a new VariationalIntegrator for the changed model")
        return pack(current)

    return CLagrangian(n=model.n, source=JETS + source, params=pack(parts), cost=cost, refresh=refresh,
                       vectorise=True, auto_max_batch=AUTO_MAX_BATCH)
