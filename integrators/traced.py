r"""A C form for any torch Lagrangian, by tracing (plain callables, ``nn.Module`` Lagrangians, :mod:`bea` series of them).

``L(q, v)`` runs once on one state under a dispatch mode; each torch (aten) operation, backward ones included,
becomes its rule's instructions (:mod:`integrators._trace_aten`) on Taylor jets in :math:`x = (q, v)`, and the final
jet is :math:`(L, \nabla L, \nabla^2 L)` (``lag_derivs``) or the Taylor polynomial to degree ``K``. Tensors not
produced by the trace are run-time parameters ``P``; tensor reads are guards; the form must equal autograd at random
states, or :class:`~integrators.compiled.NotLowerable`. Derivation: docs/theory/tracing.md.
"""

from __future__ import annotations

import functools
import math
import types
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
#: a network (>= NETWORK_TERMS weighted terms): vector C, and under execution="auto" larger batches than this go eager
NETWORK_TERMS, NETWORK_MAX_BATCH = 1024, 100


@functools.cache
def _decompositions() -> types.MappingProxyType:
    """torch's decompositions into core ATen operations (built on the first operation without a rule; read-only)."""
    from torch._decomp import core_aten_decompositions

    return types.MappingProxyType(dict(core_aten_decompositions()))


def _written(func, args, kwargs) -> list:
    """The tensors an operation writes in place (its schema marks them ``a!``: ``copy_``, ``masked_fill_``, ``out=``)."""
    given = {**{a.name: x for a, x in zip(func._schema.arguments, args)}, **kwargs}
    return [given[a.name] for a in func._schema.arguments
            if a.alias_info is not None and a.alias_info.is_write and isinstance(given.get(a.name), torch.Tensor)]


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
        self.decomposing = None  # the outermost operation whose decomposition is running (named in refusals)

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

    def _convert(self, x):
        if isinstance(x, torch.Tensor):
            return self.lookup(x)
        if isinstance(x, (list, tuple)):
            return type(x)(self._convert(y) for y in x)
        return x

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func)
        if self.error is None and func._schema.is_mutable:
            self._check_write(name, _written(func, args, kwargs))
        if self.error is None and name not in RULES and name not in OPAQUE_OPS and name.split(".")[1] not in FACTORIES:
            outer, self.decomposing = self.decomposing, self.decomposing or name
            try:
                with self:  # torch's own decomposition (or NotImplemented): its operations are traced (a rule, or decomposed)
                    out = _decompositions().get(func, func.decompose)(*args, **kwargs)
            finally:
                self.decomposing = outer
            if out is not NotImplemented:
                return out
        out = func(*args, **kwargs)
        if self.error is None:
            try:
                self._lower(name, args, kwargs, out)
            except NotLowerable as err:
                self.error = NotLowerable(f"{err} (while decomposing {self.decomposing})") if self.decomposing else err
        return out

    def _check_write(self, name: str, written: list) -> None:
        """An in-place write updates only the array of the written geometry (rules are functional): refused when
        another tensor the trace holds views the same storage differently, as that view would keep its old values."""
        for t in written:
            ptr, key = t.untyped_storage().data_ptr(), _key(t)
            if any(k[0] == ptr and k != key for k in self.arrays):
                self.error = NotLowerable(f"the in-place operation {name} writes a tensor that another view of the same "
                                          "storage also holds (the traced form would not update that view); write out of "
                                          "place (torch.where, torch.cat) for a compiled form")
                return

    def _lower(self, name: str, args, kwargs, out) -> None:
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
    clag = CLagrangian(n=n, source=source, params=refresh() if refresh else np.zeros(1), cost=max(1, (ops + tables) // 20),
                       refresh=refresh, vectorise=tables > 0,
                       auto_max_batch=NETWORK_MAX_BATCH if tables >= NETWORK_TERMS else None)
    _verify(L, clag, n, x0, gen)
    return clag


def trace_taylor(L, n: int, order: int, *, seed: int = 0) -> CTaylor:
    """Trace ``L`` for ``n`` coordinates into its Taylor polynomial to degree ``order``, a
    :class:`~integrators.series_c.CTaylor`; verified as :func:`trace_lagrangian` on its coefficients of degree <= 2."""
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
    """The traced gradient and Hessian against autograd at the traced state x0 (must agree), three random ones near
    it and the mirrored and wider states -x0, 2 x0, -2 x0 (sign branches seen from both sides): there a state outside
    L's domain (autograd not finite) or one the C form declines (not finite: a failed guard, handed to the eager path
    as any such step is) is skipped, any other must agree, and at least one must be left besides x0."""
    from .compiled import CompiledStepper  # the library's bea_lag_derivs entry
    from .model_protocol import derivatives  # the protocol's autograd reference

    near = x0[None] + 0.5 * (torch.rand(3, 2 * n, generator=gen, dtype=torch.float64) - 0.5)
    xs = torch.cat([x0[None], near, torch.stack([-x0, 2 * x0, -2 * x0])])
    try:  # one batch; a Lagrangian may raise outside its domain: then only the near states are checked
        _, g_ref, H_ref = derivatives(L, xs)
    except Exception as wider:  # any error L raises; its reason is kept where the near states fail too
        xs = xs[:4]
        try:
            _, g_ref, H_ref = derivatives(L, xs)
        except Exception as near_error:
            if hasattr(near_error, "add_note"):  # Python >= 3.11; on 3.10 the near states' error alone
                near_error.add_note(f"(verifying the traced form; at the wider states -x0, 2 x0, -2 x0 first: {wider!r})")
            raise
    g, H = CompiledStepper(clag, 0.1, bea.get_scheme("midpoint"), n).lagrangian_derivatives(xs)
    ref, got = torch.cat([g_ref, H_ref.flatten(1)], 1), torch.cat([g, H.flatten(1)], 1)
    use = ref.isfinite().all(1) & ~got.isnan().all(1)  # a failed guard NaNs every output; a partly non-finite row is an error
    use[0] = True  # x0 must agree: a non-finite result there is an error of inf below
    if int(use.sum()) < 2:
        raise NotLowerable("the traced form could be checked at the traced state only (every other test state outside "
                           "L's domain or declined by a guard)")
    err = ((got - ref).abs().amax(1) / (1.0 + ref.abs().amax(1)))[use].nan_to_num(math.inf).max()  # relative, per state
    if float(err) > VERIFY_RTOL:
        raise NotLowerable(f"the traced derivatives differ from autograd's by {float(err):.3g} (relative) at test states "
                           "(state-dependent control flow the trace cannot see?)")
