r"""A ModLaNet on the compiled integrator path (:mod:`integrators.compiled`), through the tracing front-end.

The model is ordinary torch code, so :func:`integrators.traced.trace_lagrangian` turns its forward pass into a
program of :mod:`integrators.codegen` (second-order Taylor jets; each network layer one linear combination
with run-time weights, each activation one function rule; the energy cells, which depend on the positions
only, run on polynomials in the positions, :mod:`integrators.codegen.spaces`), and
:func:`integrators.traced.trace_taylor` into its Taylor polynomial to any degree, which a :mod:`bea`
series of the model needs (:math:`\mathrm{inv}_2(M)`: order 4, :mod:`integrators.series_c`). Both are
verified against autograd when built. A new element or cell therefore needs no C of its own: its
``forward`` in torch is its compiled form.

:func:`plan` keeps the list of what is compiled, and why not: :class:`~learners.modlanet.elements.Identity`,
``AngleOnRod``, ``MLPTransform`` transforms; ``PotentialCell``, ``PairCell``, ``UniformGravity``,
``NewtonianPair`` cells; :class:`~learners.neural.mlp.MLP` with ``tanh`` or ``softplus``; float64 parameters.
Anything else (a ``CallableTransform``, whose Python the trace cannot vouch for, a plain callable cell, a
subclass overriding the computation) raises :class:`integrators.compiled.NotLowerable` and the integrator
takes its eager path. The weights are read before every chunk of steps (training may continue between
rollouts); a change of structure after the form was built raises :class:`~bea.errors.BeaRuntimeError`. The
C loop costs the same per trajectory at any batch, while batched torch gets cheaper per trajectory: under
``execution="auto"`` batches above :data:`AUTO_MAX_BATCH` stay on the eager path.
"""

from __future__ import annotations

import dataclasses
import weakref
import numpy as np
import torch

from bea.errors import BeaRuntimeError
from integrators.compiled import CLagrangian, NotLowerable, check_n

from ..neural.mlp import MLP
from . import elements as E

__all__ = ["c_lagrangian", "c_taylor", "plan", "ACTIVATIONS", "AUTO_MAX_BATCH"]

#: activations of the networks that are compiled
ACTIVATIONS = ("tanh", "softplus")
#: batches above this roll out eagerly under execution="auto": double pendulum, cells 2 x 50, one core,
#: trajectory-steps/s compiled / eager: 7.3 k / 6.2 k at batch 100, 7.4 k / 15.4 k at batch 1000
#: (benchmarks/RESULTS_speed.md); the C loop costs the same per trajectory at any batch
AUTO_MAX_BATCH = 200


def _float64(*ts) -> None:
    for t in ts:
        if torch.as_tensor(t).dtype != torch.float64:
            raise NotLowerable(f"a ModLaNet parameter is {torch.as_tensor(t).dtype}; the compiled form computes in "
                               "float64 like the model must")


def _mlp(net) -> tuple:
    """``(dims, activation)`` of a network that is compiled."""
    if type(net) is not MLP:
        raise NotLowerable(f"a {type(net).__name__} network has no C form (only learners.neural.mlp.MLP)")
    if net.activation not in ACTIVATIONS:
        raise NotLowerable(f"the activation {net.activation!r} has no C form (only {sorted(ACTIVATIONS)})")
    dims = [net.in_dim]
    for lin in net.linears:
        if type(lin) is not torch.nn.Linear or lin.in_features != dims[-1]:
            raise NotLowerable("an MLP layer that is not a plain nn.Linear chain has no C form")
        dims.append(lin.out_features)
        _float64(*[t for t in (lin.weight, lin.bias) if t is not None])
    return tuple(dims), net.activation


def _transform(t) -> tuple:
    if type(t) is E.Identity:
        return ("id", t.in_dim)
    if type(t) is E.AngleOnRod:
        _float64(t.length)
        return ("rod",)
    if type(t) is E.MLPTransform:
        return ("mlp", t.in_dim, bool(t.periodic), _mlp(t.net))
    raise NotLowerable(f"the transform {type(t).__name__} has no C form (Identity, AngleOnRod, MLPTransform)")


def _cell(c, kind: str, d: int):
    if c is None:
        return None
    if kind == "potential" and type(c) is E.PotentialCell or kind == "pair" and type(c) is E.PairCell:
        return ("mlp", _mlp(c.net))
    if kind == "potential" and type(c) is E.UniformGravity and 0 <= c.axis < d:
        return ("grav", c.axis)
    if kind == "pair" and type(c) is E.NewtonianPair and d <= 8:
        return ("newton",)
    raise NotLowerable(f"the {kind} cell {type(c).__name__} has no C form")


def plan(model) -> tuple:
    """The model's structure (hashable: what a compiled form depends on besides the numbers);
    :class:`NotLowerable` for what is not compiled (module docstring)."""
    from .model import ModLaNet

    for name in ("forward", "global_states", "kinetic", "potential_energy", "masses"):
        if getattr(type(model), name) is not getattr(ModLaNet, name):
            raise NotLowerable(f"{type(model).__name__} overrides {name}: its C form may not be what it computes")
    check_n(model.n)
    with torch.no_grad():
        _float64(model.masses, model.c1, model.c2)
        N = model.n_elements
        shared = model.transform is not None
        trans = tuple(_transform(model.transform if shared else model.transforms[i]) for i in range(N))
        pot = _cell(model.potential, "potential", model.space_dim)
        pair = _cell(model.pair, "pair", model.space_dim)
    pairs = tuple(zip(model._pair_i.tolist(), model._pair_j.tolist())) if pair is not None else ()
    return (model.n, model.space_dim, tuple(model.parents), tuple(model._order), tuple(model.local_dims),
            tuple(model._offsets), shared, trans, pot, pair, pairs)


#: traced forms per live model: {model: {(structure, order): form}} (a trace takes seconds; the forms read the
#: model's current weights, so they stay valid while its structure does)
_FORMS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _traced(model, order: int):
    """The traced form (``order`` None: the CLagrangian, else the CTaylor of that degree), kept per model."""
    structure = plan(model)
    forms = _FORMS.setdefault(model, {})
    if (structure, order) in forms:
        return forms[(structure, order)]
    from integrators.traced import trace_lagrangian, trace_taylor

    form = trace_lagrangian(model, model.n) if order is None else trace_taylor(model, model.n, order)
    ref, read = weakref.ref(model), form.refresh

    def refresh() -> np.ndarray:
        now = ref()
        if now is None or plan(now) != structure:
            raise BeaRuntimeError("the ModLaNet's structure (elements, cells, layer sizes or activations) changed after it "
                                  "was compiled; build a new VariationalIntegrator for the changed model")
        return read()

    form = dataclasses.replace(form, refresh=refresh)
    if order is None:
        form = dataclasses.replace(form, vectorise=True, auto_max_batch=AUTO_MAX_BATCH)
    forms[(structure, order)] = form
    return form


def c_lagrangian(model) -> CLagrangian:
    """The :class:`~integrators.compiled.CLagrangian` of a ModLaNet (module docstring); :class:`NotLowerable` if the
    model has no compiled form."""
    return _traced(model, None)


def c_taylor(model, order: int):
    """The :class:`~integrators.series_c.CTaylor` of a ModLaNet to degree ``order`` (module docstring);
    :class:`NotLowerable` if the model has no compiled form."""
    return _traced(model, int(order))
