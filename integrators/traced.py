r"""A C form for any torch Lagrangian, by tracing: the front-end of the compiled path for plain callables,
``nn.Module`` Lagrangians (MLP, LNN) and :mod:`bea` series applied to them.

Tracing runs ``L(q, v)`` once, on one state (``q, v`` of shape ``(1, n)``), under a
:class:`~torch.utils._python_dispatch.TorchDispatchMode` that sees every torch (aten) operation, including
those of the backward passes that a :mod:`bea` series takes inside ``L``. Each tensor becomes an array of
scalars and each operation one lowering rule (:mod:`integrators._trace_aten`), which emits straight-line
code on second-order Taylor jets in the state :math:`x = (q, v)` (:mod:`integrators.codegen`). The final jet
is :math:`(L, \nabla L, \nabla^2 L)`: exactly the ``lag_derivs`` a :class:`~integrators.compiled.CLagrangian`
needs, so the DEL Newton step of the compiled march gets compiled derivatives.

Tensors the trace meets without having produced them (a network's weights, captured constants) are read
at run time from the parameter array ``P`` (refreshed before every chunk of steps, so training between
runs is seen). Python control flow that reads a tensor (``bool(x.any())``, ``x.item()``) becomes a
*guard*: the compiled code checks that the value is the traced one and otherwise hands the step back to
the eager path.

Because tracing sees one run, code whose operations depend on the state in ways no guard records could
be traced wrongly; so every traced form is *verified* before use: its gradient and Hessian must equal
autograd's at several random states (relative 1e-8). A Lagrangian that fails any of this raises
:class:`~integrators.compiled.NotLowerable` with the reason, and the integrator runs it eagerly.
"""

from __future__ import annotations

import math
from typing import Dict, List

import numpy as np
import torch

import bea
from torch.utils._python_dispatch import TorchDispatchMode

from . import _trace_linalg  # noqa: F401  (registers its lowering rules)
from ._trace_aten import FACTORIES, OPAQUE_OPS, RULES, literal_array
from .codegen.emit import derivs_of_taylor, emit_c
from .codegen.ir import OPAQUE, Jet, Program, Val
from .compiled import CLagrangian, NotLowerable, check_n
from .series_c import CTaylor

__all__ = ["trace_lagrangian", "trace_taylor", "VERIFY_RTOL"]

#: relative agreement with autograd required of a traced form at the verification states
VERIFY_RTOL = 1e-8
#: a traced form with at least NETWORK_TERMS weighted terms (a 64 x 64 layer has 4096) is a network: under
#: execution="auto", batches above NETWORK_MAX_BATCH take the eager path (batched torch matrix products)
NETWORK_TERMS, NETWORK_MAX_BATCH = 1024, 100


def _key(t: torch.Tensor) -> tuple:
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)


class _Tracer(TorchDispatchMode):
    """Maps tensors (by storage and geometry) to arrays of scalars while the Lagrangian runs."""

    def __init__(self, prog: Program):
        super().__init__()
        self.prog = prog
        self.arrays: Dict[tuple, np.ndarray] = {}
        self.keep: List[torch.Tensor] = []  # every tensor seen stays alive: storage addresses are never reused
        self.leaves: List[torch.Tensor] = []
        self.nparams = 0
        self.error = None

    def bind(self, t: torch.Tensor, arr: np.ndarray) -> None:
        self.keep.append(t)
        self.arrays[_key(t)] = arr

    def lookup(self, t: torch.Tensor) -> np.ndarray:
        arr = self.arrays.get(_key(t))
        if arr is not None:
            return arr
        if t.is_floating_point() and t.numel():  # produced outside the trace: a run-time parameter
            arr = np.empty(tuple(t.shape), dtype=object)
            arr.reshape(-1)[:] = [Val(f"P[{self.nparams + k}]") for k in range(t.numel())]
            self.nparams += t.numel()
            self.leaves.append(t)
        else:
            arr = literal_array(t)
        self.bind(t, arr)
        return arr

    def _convert(self, x):  # (torch's pytree: 6x slower per operation)
        if isinstance(x, torch.Tensor):
            return self.lookup(x)
        if isinstance(x, (list, tuple)):
            return type(x)(self._convert(y) for y in x)
        return x

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.error is None:
            try:
                self._lower(func, args, kwargs, out)
            except NotLowerable as err:
                self.error = err
        return out

    def _lower(self, func, args, kwargs, out) -> None:
        name = str(func)
        conv = self._convert(list(args))
        if name == "aten._local_scalar_dense.default":
            self.prog.guard(conv[0].reshape(-1)[0], float(out))
            return
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        tensors = [o for o in outs if isinstance(o, torch.Tensor)]
        ins = [a for a in _flat(conv) if isinstance(a, np.ndarray)]
        rule = RULES.get(name)
        if name in OPAQUE_OPS or (rule is None and any(x is OPAQUE for a in ins for x in a.reshape(-1))):
            for o in tensors:  # no lowering: opaque (only checks may use it, module docstring of codegen.ir)
                self.bind(o, np.full(tuple(o.shape), OPAQUE, dtype=object))
            return
        literal = all(isinstance(x, float) for a in ins for x in a.reshape(-1))
        if literal or name.split(".")[1] in FACTORIES:
            for o in tensors:
                self.bind(o, literal_array(o))
            return
        if rule is None:
            raise NotLowerable(f"the torch operation {name} has no compiled form")
        res = rule(self.prog, conv, {**kwargs, "_op": name}, out)
        results = [np.asarray(r, dtype=object) for r in (res if isinstance(res, (list, tuple)) else [res])]
        if len(results) != len(tensors) or any(tuple(r.shape) != tuple(o.shape) for r, o in zip(results, tensors)):
            raise NotLowerable(f"internal: the rule for {name} gave the wrong shape")
        for r, o in zip(results, tensors):
            self.bind(o, r)


def _flat(xs):
    for x in xs:
        if isinstance(x, (list, tuple)):
            yield from _flat(x)
        else:
            yield x


def _traced(L, n: int, seed: int, K: int):
    """``(program, result, params function or None, x0, generator)``: ``L`` traced to degree ``K`` at a random state."""
    check_n(n)
    gen = torch.Generator().manual_seed(seed)
    x0 = 0.3 + 0.4 * torch.rand(2 * n, generator=gen, dtype=torch.float64)
    prog = Program(2 * n, K)
    tracer = _Tracer(prog)
    q = x0[:n].clone().reshape(1, n).requires_grad_(True)
    v = x0[n:].clone().reshape(1, n).requires_grad_(True)
    with torch.enable_grad():
        tracer.bind(q, np.array([[prog.seed(i) for i in range(n)]], dtype=object))
        tracer.bind(v, np.array([[prog.seed(n + i) for i in range(n)]], dtype=object))
        try:
            with tracer:
                val = L(q, v)
        except NotLowerable:
            raise
        except Exception as err:  # anything the Lagrangian raises under tracing: it is not traceable
            raise NotLowerable(f"tracing the Lagrangian failed ({type(err).__name__}: {err})") from None
    if tracer.error is not None:
        raise tracer.error
    if not isinstance(val, torch.Tensor) or val.numel() != 1:
        raise NotLowerable("the Lagrangian did not return one value per state when traced on q, v of shape (1, n)")
    out = tracer.arrays.get(_key(val))
    if out is None:
        raise NotLowerable("the Lagrangian's value was not produced by traced torch operations")
    result, leaves = out.reshape(-1)[0], list(tracer.leaves)
    if result is OPAQUE or not isinstance(result, Jet):
        raise NotLowerable("the traced Lagrangian does not depend on the state (or only through untraceable operations)")

    def params() -> np.ndarray:
        return np.concatenate([t.detach().cpu().double().reshape(-1).numpy() for t in leaves])

    return prog, result, (params if leaves else None), x0, gen


def trace_lagrangian(L, n: int, *, seed: int = 0) -> CLagrangian:
    """Trace ``L`` for ``n`` coordinates into a verified :class:`~integrators.compiled.CLagrangian`
    (:class:`~integrators.compiled.NotLowerable` if it cannot be)."""
    prog, result, refresh, x0, gen = _traced(L, n, seed, 2)
    source, ops, tables = emit_c(prog, result)
    # networks (weight tables): vector instructions, and batches beyond NETWORK_MAX_BATCH left to batched torch
    # under execution="auto", which overtakes the per-element C loop there (benchmarks/integrate_any.py)
    clag = CLagrangian(n=n, source=source, params=refresh() if refresh else np.zeros(1), cost=max(1, (ops + tables) // 20),
                       refresh=refresh, vectorise=tables > 0,
                       auto_max_batch=NETWORK_MAX_BATCH if tables >= NETWORK_TERMS else None)
    _verify(L, clag, n, x0, gen)
    return clag


def trace_taylor(L, n: int, order: int, *, seed: int = 0) -> CTaylor:
    """Trace ``L`` for ``n`` coordinates into its Taylor polynomial to degree ``order`` in C, a
    :class:`~integrators.series_c.CTaylor` (what a :mod:`bea` series on the compiled path needs of a model).
    Verified as :func:`trace_lagrangian` on its coefficients of degree <= 2; the higher ones come from the
    same instructions and runtime rules (tested against nested autograd)."""
    if not isinstance(order, int) or order < 2:
        raise NotLowerable(f"a Taylor form of order {order} (at least 2) was asked for")
    prog, result, refresh, x0, gen = _traced(L, n, seed, order)
    source, ops, tables = emit_c(prog, result, taylor=True, prefix="tt")
    params = refresh() if refresh else np.zeros(1)
    check = CLagrangian(n=n, source=source + derivs_of_taylor(2 * n, order), params=params, refresh=refresh)
    _verify(L, check, n, x0, gen)
    return CTaylor(n=n, order=order, source=source, params=params, cost=max(1, (ops + tables) // 20),
                   refresh=refresh, vectorise=tables > 0)


def _verify(L, clag: CLagrangian, n: int, x0: torch.Tensor, gen: torch.Generator) -> None:
    """The traced gradient and Hessian against autograd at the traced state and three random ones near it."""
    from .compiled import CompiledStepper  # the library's bea_lag_derivs entry

    xs = torch.cat([x0[None], x0[None] + 0.5 * (torch.rand(3, 2 * n, generator=gen, dtype=torch.float64) - 0.5)])
    from .model_protocol import derivatives  # the protocol's autograd reference

    _, g_ref, H_ref = derivatives(L, xs)
    stepper = CompiledStepper(clag, 0.1, bea.get_scheme("midpoint"), n)
    g, H = stepper.lagrangian_derivatives(xs)
    scale = 1.0 + max(float(g_ref.abs().max()), float(H_ref.abs().max()))
    err = max(float((g - g_ref).abs().max()), float((H - H_ref).abs().max()))
    if not math.isfinite(err) or err > VERIFY_RTOL * scale:
        raise NotLowerable(f"the traced derivatives differ from autograd's by {err:.3g} at test states "
                           "(state-dependent control flow the trace cannot see?)")
