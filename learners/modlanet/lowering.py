r"""A ModLaNet on the compiled integrator path (:mod:`integrators.compiled`), through the tracing front-end:
:func:`integrators.traced.trace_lagrangian` turns its forward pass into a program of :mod:`integrators.codegen`, and
:func:`integrators.traced.trace_taylor` into its Taylor polynomial (for a :mod:`bea` series, :mod:`integrators.series_c`).
:func:`plan` refuses, with :class:`integrators.compiled.NotLowerable`, any submodule not in :data:`TRACEABLE`, a
subclass overriding the computation, and tensors that are not float64 (docs/theory/codegen.md, "ModLaNet").
"""

from __future__ import annotations

import dataclasses
import weakref
import numpy as np
import torch

from bea.errors import BeaRuntimeError
from integrators.compiled import CLagrangian, NotLowerable, check_n
from integrators.traced import trace_lagrangian, trace_taylor

from . import elements as E

__all__ = ["c_lagrangian", "c_taylor", "plan", "TRACEABLE", "AUTO_MAX_BATCH"]

#: batches above this roll out eagerly under execution="auto" (measured: docs/theory/codegen.md)
AUTO_MAX_BATCH = 200
#: the submodule types the trace may follow: a mutable, process-wide set (the object of
#: :data:`learners.modlanet.elements.TRACEABLE`), to which the decorator :func:`~learners.modlanet.elements.traceable`
#: adds a class; code that adds one for a while (a test) removes it afterwards
TRACEABLE = E.TRACEABLE


#: a bare nn.Module's own state (hooks, flags), and the ModLaNet's settings its forward reads (h, scheme, loss,
#: options and the learn_* flags belong to the estimator: changing them must not invalidate a compiled form)
_MODULE_STATE, _ROOT_SETTINGS = frozenset(vars(torch.nn.Module())), ("_order", "parents", "space_dim", "local_dims", "n",
                                                                     "_offsets")


def _setting(v):
    """One setting as :func:`plan` compares it: a plain tensor attribute (not a buffer) by shape and identity like a
    buffer (the form reads that object: a replaced one must retrace), also within a list, tuple or dict (``repr``
    rounds and abridges a tensor); a scalar by value; anything else by ``repr``. The forms kept per model hold the
    tensors they read, so an identity is never reused while its form lives (a loop replacing a tensor attribute keeps
    one form per replacement until the model is freed)."""
    if isinstance(v, torch.Tensor):
        return ("tensor", tuple(v.shape), id(v) if v.is_floating_point() else tuple(v.reshape(-1).tolist()))
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(_setting(x) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple((repr(k), _setting(x)) for k, x in v.items()))
    return v if isinstance(v, (bool, int, float, str, type(None))) else repr(v)


def _settings(mod, root: bool) -> tuple:
    """A module's settings (sizes, activation, axis, constants of any type, tensors held as plain attributes): what
    its trace reads. Submodules, parameters and buffers enter :func:`plan` on their own."""
    vals = ((k, getattr(mod, k, None)) for k in (_ROOT_SETTINGS if root else sorted(set(vars(mod)) - _MODULE_STATE)))
    return tuple((k, _setting(v)) for k, v in vals if not isinstance(v, torch.nn.Module))


def plan(model) -> tuple:
    """The model's structure (hashable: what a compiled form depends on besides the weights' values): each
    submodule's class (the object: two classes of one name differ) and settings, each tensor's shape and identity
    (the form reads the tensors it traced: one replaced by a new object would be stepped with the old one's values),
    and the values of the integer and boolean ones (index tables, read as literals); :class:`NotLowerable` for what
    is not compiled (module docstring)."""
    from .model import ModLaNet

    for name in ("forward", "global_states", "kinetic", "potential_energy", "masses"):
        if getattr(type(model), name) is not getattr(ModLaNet, name):
            raise NotLowerable(f"{type(model).__name__} overrides {name}: its C form may not be what it computes")
    check_n(model.n)
    parts = []
    for name, mod in model.named_modules():
        if name and type(mod) not in TRACEABLE:
            raise NotLowerable(f"the {type(mod).__name__} {name!r} has no C form (compiled: "
                               f"{', '.join(sorted(t.__name__ for t in TRACEABLE))}; a class whose forward is torch "
                               "code joins with the decorator learners.modlanet.elements.traceable)")
        # the class object, not its name: a class redefined under the same name (a re-run notebook cell) is new code
        parts.append((name, type(mod), _settings(mod, root=not name)))
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if t.is_floating_point() and t.dtype != torch.float64:
            raise NotLowerable(f"the ModLaNet tensor {name} is {t.dtype}; the compiled form computes in float64 like "
                               "the model must")
        parts.append((name, _setting(t)))  # as a tensor attribute: shape, and identity or integer values
    return tuple(parts)


#: traced forms per live model: {model: {(structure, order): form}} (a trace takes seconds; the forms read the
#: model's current weights, so they stay valid while its structure does)
_FORMS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _traced(model, order: int):
    """The traced form (``order`` None: the CLagrangian, else the CTaylor of that degree), kept per model."""
    structure = plan(model)
    forms = _FORMS.setdefault(model, {})
    if (structure, order) in forms:
        return forms[(structure, order)]
    form = trace_lagrangian(model, model.n) if order is None else trace_taylor(model, model.n, order)
    ref, read = weakref.ref(model), form.refresh

    def refresh() -> np.ndarray:
        now = ref()
        if now is None or plan(now) != structure:
            raise BeaRuntimeError("the ModLaNet's structure (elements, cells, their constants such as g or G, layer sizes, "
                                  "activations, or a parameter replaced by a new tensor) changed after it was compiled; "
                                  "build a new VariationalIntegrator for the changed model")
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
