r"""Lowering rules: one per torch (aten) operation, on arrays of scalars of :mod:`integrators.codegen.ir`.

A rule maps ``(program, arguments with tensors as object arrays of scalars, the traced result)`` to the result's
array(s): shape operations move scalars, arithmetic emits one instruction per element. An operation without a rule
runs torch's decomposition (:mod:`integrators.traced`); what each rule computes: docs/theory/tracing.md.
"""

from __future__ import annotations

import functools
import itertools
from typing import Callable, Dict

import numpy as np
import torch

from .codegen.ir import FUNCTIONS, Program
from .compiled import NotLowerable

__all__ = ["RULES", "literal_array", "OPAQUE_OPS"]

#: operations whose results are opaque (used only by checks that the compiled code then skips)
OPAQUE_OPS = ("aten._linalg_eigh.default", "aten.linalg_eigh.default", "aten.linalg_eigvalsh.default",
              "aten._linalg_svd.default", "aten.linalg_svd.default", "aten._linalg_det.default")

#: factories and ``*_like``: their values never depend on the state
FACTORIES = ("zeros_like", "ones_like", "full_like", "empty_like", "new_zeros", "new_ones", "new_full", "new_empty",
             "zeros", "ones", "full", "eye", "arange", "scalar_tensor", "empty", "_linalg_check_errors")

RULES: Dict[str, Callable] = {}


def literal_array(t) -> np.ndarray:
    """The values of a tensor as an object array of Python floats."""
    return np.asarray(t.detach().cpu().double().numpy(), dtype=float).astype(object)  # Python floats


def _rule(*names):
    def deco(fn):
        for name in names:
            RULES[name] = fn
        return fn
    return deco


def _arr(x) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    return np.full((), float(x), dtype=object)


def _map(fn, *arrays) -> np.ndarray:
    arrays = np.broadcast_arrays(*[_arr(a) for a in arrays])
    out = np.empty(arrays[0].shape, dtype=object)
    flat = [a.reshape(-1) for a in arrays]
    out.reshape(-1)[:] = [fn(*xs) for xs in zip(*flat)] if out.size else []
    return out


def _dim(d: int, ndim: int) -> int:
    return d + ndim if d < 0 else d


# ------------------------------------------------------------------ shapes (no code)
def _along(a: np.ndarray, dim: int, at) -> tuple:
    """The index of ``at`` (an integer or a slice) along the dimension ``dim`` of ``a``."""
    return tuple(at if k == _dim(dim, a.ndim) else slice(None) for k in range(a.ndim))


def _put(a: np.ndarray, dim: int, at, src) -> np.ndarray:
    """A copy of ``a`` with ``src`` written at ``at`` along ``dim``."""
    res = a.copy()
    res[_along(res, dim, at)] = src
    return res


#: shape operations: aten name (overloads separated by spaces) -> fn(*args, shape=the shape of the result)
SHAPES = {
    "view.default _unsafe_view.default reshape.default squeeze.dim squeeze.dims squeeze.default unsqueeze.default "
    "view_as.default": lambda a, *_, shape: a.reshape(shape),
    "alias.default detach.default clone.default lift_fresh.default lift_fresh_copy.default contiguous.default "
    "positive.default": lambda a, *_, shape: a.copy(),
    "expand.default": lambda a, *_, shape: np.broadcast_to(a, shape),
    "permute.default": lambda a, dims, *_, shape: np.transpose(a, [_dim(d, a.ndim) for d in dims]),
    "select.int": lambda a, dim, index, *_, shape: np.take(a, index, axis=_dim(dim, a.ndim)),
    "slice.Tensor": lambda a, dim=0, start=None, end=None, step=1, *, shape: a[_along(a, dim, slice(start, end, step))],
    "copy_.default": lambda a, src, *_, shape: np.broadcast_to(src, a.shape).copy(),
    "slice_scatter.default": lambda a, src, dim=0, i=None, j=None, step=1, *, shape: _put(a, dim, slice(i, j, step), src),
    # (dim is positional: the dispatcher passes only keyword-only arguments by keyword)
    "cat.default": lambda parts, dim=0, *, shape: np.concatenate([a for a in parts if a.size or a.ndim > 1],
                                                                 axis=_dim(dim, len(shape))),
}
for _names, _fn in SHAPES.items():
    for _n in _names.split():
        RULES[f"aten.{_n}"] = (lambda fn: lambda p, args, kw, out: fn(*args, shape=tuple(out.shape)))(_fn)


@_rule("aten.masked_scatter.default")
def _masked_scatter(p, args, kw, out):
    a, mask, src = args[0].copy(), np.broadcast_to(args[1], args[0].shape), args[2]
    picked = [k for k, m in enumerate(mask.reshape(-1)) if m != 0.0]  # the mask is a literal (bool) tensor
    a.reshape(-1)[picked] = src.reshape(-1)[:len(picked)]
    return a


@_rule("aten.index.Tensor")
def _index(p, args, kw, out):
    idx = tuple(slice(None) if i is None else np.asarray(i, dtype=float).astype(np.int64) for i in args[1])
    return args[0][idx]


@_rule("aten._to_copy.default")
def _to_copy(p, args, kw, out):
    """A copy; a cast to another dtype (``.float()``, ``.long()``) would round what the C computes in double: refused."""
    if out.dtype != torch.float64:
        raise NotLowerable(f"a cast of a state-dependent tensor to {out.dtype} has no compiled form (float64 only)")
    return args[0].copy()


# ------------------------------------------------------------------ elementwise
def _binary(fn):
    def rule(p, args, kw, out):
        b = args[1]
        alpha = kw.get("alpha", 1)
        if alpha != 1:
            b = _map(lambda x: p.mul(x, float(alpha)), b)
        return _map(fn(p), args[0], b)
    return rule


for _n, _f in (("add", lambda p: p.add), ("sub", lambda p: p.sub), ("mul", lambda p: p.mul), ("div", lambda p: p.div)):
    RULES[f"aten.{_n}.Tensor"] = RULES[f"aten.{_n}.Scalar"] = _binary(_f)


def _value_or_select(p: Program, op: str, x, y):
    if op in ("max", "min") and (type(x).__name__ == "Jet" or type(y).__name__ == "Jet"):
        return p.select(p.value("ge" if op == "max" else "le", x, y), x, y)
    if isinstance(x, float) and isinstance(y, float):
        return float(max(x, y) if op == "max" else min(x, y)) if op in ("max", "min") else float(bool(x) and bool(y)) \
            if op == "and" else float(bool(x) or bool(y))
    return p.value(op, x, y)


#: operations element by element (broadcast) on their first ``arity`` arguments: aten name (overloads separated by
#: spaces) -> (arity, fn(program, *scalars))
ELEMENTWISE = {
    "pow.Tensor_Scalar pow.Tensor_Tensor pow.Scalar": (2, Program.pow),
    "neg.default": (1, Program.neg),
    "bitwise_not.default logical_not.default": (1, Program.vnot),
    "where.self": (3, lambda p, c, a, b: (a if c else b) if isinstance(c, float) else p.select(c, a, b)),
    "sign.default": (1, lambda p, a: p.sub(p.value("gt", a, 0.0), p.value("lt", a, 0.0))),
    # g y (1 - y): torch's decomposition keeps g and 1 - y live too, nearly twice the jet workspace (tracing.md)
    "sigmoid_backward.default": (2, lambda p, g, y: p.mul(g, p.mul(y, p.sub(1.0, y)))),
}
# erf: the SymPy front-end's only (untested traced)
ELEMENTWISE.update({f"{n}.default": (1, lambda p, a, n=n: p.unary(n, a)) for n in FUNCTIONS if n not in ("pow", "erf")})
ELEMENTWISE.update({f"{n}.Tensor {n}.Scalar": (2, lambda p, a, b, n=n: p.value(n, a, b))
                    for n in ("lt", "le", "gt", "ge", "eq", "ne")})
ELEMENTWISE.update({f"{n}.Tensor {n}.default": (2, lambda p, a, b, op=op: _value_or_select(p, op, a, b))
                    for n, op in (("bitwise_and", "and"), ("logical_and", "and"), ("bitwise_or", "or"),
                                  ("logical_or", "or"), ("maximum", "max"), ("minimum", "min"))})
for _names, (_arity, _fn) in ELEMENTWISE.items():
    for _n in _names.split():
        RULES[f"aten.{_n}"] = (lambda k, fn: lambda p, args, kw, out: _map(lambda *xs: fn(p, *xs), *args[:k]))(_arity, _fn)


@_rule("aten.softplus_backward.default")
def _softplus_backward(p, args, kw, out):
    beta, threshold = float(args[2]), float(args[3])

    def one(g, x):
        z = p.mul(x, beta)
        return p.select(p.value("gt", z, threshold), g, p.mul(g, p.unary("sigmoid", z)))
    return _map(one, args[0], args[1])


@_rule("aten.softplus.default")
def _softplus(p, args, kw, out):
    beta = float(args[1]) if len(args) > 1 else 1.0
    if beta == 1.0 and (len(args) < 3 or float(args[2]) == 20.0):
        return _map(lambda a: p.unary("softplus", a), args[0])
    return _map(lambda a: p.div(p.unary("softplus", p.mul(a, beta)), beta), args[0])  # threshold scales with beta


# ------------------------------------------------------------------ reductions and products
def _sum_all(p: Program, items):
    return functools.reduce(p.add, items, 0.0)


def _reduce(a: np.ndarray, dims, shape, fn) -> np.ndarray:
    """``fn`` (a list of scalars -> a scalar) over the dimensions ``dims`` of ``a`` (an int, a list, or none: all),
    shaped as ``shape``, the traced result's (so with or without ``keepdim``)."""
    dims = [dims] if isinstance(dims, int) else dims
    dims = tuple(range(a.ndim)) if not dims else tuple(sorted(_dim(d, a.ndim) for d in dims))
    moved = np.moveaxis(a, dims, tuple(range(a.ndim - len(dims), a.ndim)))
    keep = moved.shape[:a.ndim - len(dims)]
    flat = moved.reshape(keep + (-1,))
    res = np.empty(keep, dtype=object)
    for idx in itertools.product(*[range(s) for s in keep]):
        res[idx] = fn(list(flat[idx]))
    return res.reshape(tuple(shape))


@_rule("aten.sum.default", "aten.sum.dim_IntList", "aten.mean.default", "aten.mean.dim")
def _sum(p, args, kw, out):
    dims = args[1] if len(args) > 1 else kw.get("dim")
    mean = "mean" in str(kw.get("_op", ""))
    return _reduce(args[0], dims, out.shape, lambda xs: p.div(_sum_all(p, xs), float(len(xs))) if mean else _sum_all(p, xs))


def _fold(p: Program, op: str):
    """The reduction of a list by the binary ``op`` (max, min, and, or), left to right."""
    return lambda xs: functools.reduce(lambda acc, x: _value_or_select(p, op, acc, x), xs)


@_rule("aten.amax.default", "aten.amin.default", "aten.any.default", "aten.any.dim", "aten.all.default",
       "aten.all.dim", "aten.any.dims", "aten.all.dims")
def _amax(p, args, kw, out):
    name = kw["_op"].split(".")[1]
    op = {"amax": "max", "amin": "min", "any": "or", "all": "and"}[name]
    return _reduce(args[0], args[1] if len(args) > 1 else None, out.shape, _fold(p, op))


def _matmul(p: Program, A: np.ndarray, B: np.ndarray) -> np.ndarray:
    res = np.empty((A.shape[0], B.shape[1]), dtype=object)
    for i in range(A.shape[0]):
        for k in range(B.shape[1]):
            res[i, k] = p.dot(A[i, :], B[:, k])
    return res


RULES["aten.mm.default"] = lambda p, a, kw, out: _matmul(p, a[0], a[1])
RULES["aten.bmm.default"] = lambda p, a, kw, out: np.stack([_matmul(p, x, y) for x, y in zip(a[0], a[1])])
RULES["aten.mv.default"] = lambda p, a, kw, out: _matmul(p, a[0], a[1][:, None])[:, 0]


@_rule("aten.addmm.default")
def _addmm(p, args, kw, out):
    prod = _matmul(p, args[1], args[2])
    beta, alpha = float(kw.get("beta", 1)), float(kw.get("alpha", 1))
    bias = _map(lambda b: p.mul(b, beta), args[0])
    return _map(lambda x, b: p.add(p.mul(x, alpha), b), prod, bias)


@_rule("aten.linalg_vector_norm.default")
def _vector_norm(p, args, kw, out):
    """The 2-norm :math:`\\sqrt{\\sum x^2}` and the 1-norm :math:`\\sum |x|` (others are not lowered)."""
    order = float(args[1]) if len(args) > 1 else float(kw.get("ord", 2))
    dims = args[2] if len(args) > 2 else kw.get("dim")
    if order == 2.0:
        return _reduce(args[0], dims, out.shape, lambda xs: p.unary("sqrt", _sum_all(p, [p.mul(x, x) for x in xs])))
    if order == 1.0:
        return _reduce(args[0], dims, out.shape, lambda xs: _sum_all(p, [p.unary("abs", x) for x in xs]))
    raise NotLowerable(f"the vector norm of order {order:g} has no compiled form (orders 1 and 2 have)")


@_rule("aten.clamp.default", "aten.clamp.Tensor")
def _clamp(p, args, kw, out):
    """``x < lo ? lo : x``, then ``x > hi ? hi : x``, for the bounds given (numbers or tensors, broadcast)."""
    lo = args[1] if len(args) > 1 else kw.get("min")
    hi = args[2] if len(args) > 2 else kw.get("max")
    tests = [op for op, b in (("lt", lo), ("gt", hi)) if b is not None]

    def one(x, *bounds):
        for op, b in zip(tests, bounds):
            x = p.select(p.value(op, x, b), b, x)
        return x
    return _map(one, args[0], *[b for b in (lo, hi) if b is not None])
