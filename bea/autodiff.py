r"""Torch runtime for generated formulas: derivatives of a Lagrangian by autograd, :math:`M^{-1}`,
momenta and energy.

A *torch Lagrangian* is any callable ``L(q, v) -> Tensor`` with ``q, v`` of shape ``(..., n)``
and a result of shape ``(...)``, computed pointwise over the leading (batch) dimensions. All
derivatives are taken with ``create_graph=True``, so everything here is differentiable again
(with respect to ``q``, ``v`` and the parameters of ``L``).
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import torch

from .errors import BeaTypeError, BeaValueError, NotRegularError

TorchLagrangian = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

#: relative size of the smallest singular value of M below which L counts as not regular
REGULARITY_TOL = 1e-12


def check_state(q: torch.Tensor, v: torch.Tensor, n: int | None = None, names: tuple = ("q", "v"),
                mismatch: str | None = None) -> None:
    """Validate a batch of states ``(q, v)``: tensors of the same shape ``(..., n)`` and dtype.

    The one state-shape check of the project (integrators and learners call it too). ``names`` name the
    two arguments in the messages; ``mismatch`` says why ``n`` is expected (default: the formula's
    dimension)."""
    a, b = names
    if not isinstance(q, torch.Tensor) or not isinstance(v, torch.Tensor):
        raise BeaTypeError(f"{a} and {b} must be torch tensors, got {type(q).__name__} and {type(v).__name__}")
    if q.shape != v.shape:
        raise BeaValueError(f"{a} and {b} must have the same shape (..., n); got {tuple(q.shape)} and {tuple(v.shape)}")
    if q.dim() < 1 or q.shape[-1] == 0:
        raise BeaValueError(f"{a} and {b} must have shape (..., n) with a last dimension n >= 1; got shape {tuple(q.shape)} "
                            "(use shape (1,) for one coordinate)")
    if n is not None and q.shape[-1] != n:
        why = mismatch if mismatch is not None else f"this formula was derived for dimension n={n}"
        raise BeaValueError(f"{a} has {q.shape[-1]} coordinates in its last dimension (shape {tuple(q.shape)}), but {why}; "
                            f"pass states of shape (..., {n})")
    if not q.is_floating_point() or not v.is_floating_point():
        raise BeaTypeError(f"{a} and {b} must be real floating-point tensors (float64 recommended), got {q.dtype} and {v.dtype}")
    if q.dtype != v.dtype:
        raise BeaTypeError(f"{a} and {b} must have the same dtype, got {q.dtype} and {v.dtype}")


def check_step(h: Any, q: torch.Tensor) -> Any:
    """Validate a step ``h`` for states ``q`` of shape ``(..., n)``; return it (numbers as ``float``).

    Contract: ``h`` is a finite real Python number (``int``, ``float``, ``Fraction``, ``numpy`` scalar;
    not ``bool``), or a real floating-point tensor whose shape broadcasts to the batch shape
    ``q.shape[:-1]`` *without changing it* (0-d, or e.g. ``(B,)`` for ``q`` of shape ``(B, n)``). A tensor
    shaped like ``q`` itself, ``(B, n)`` with ``n > 1`` or ``(B, 1)``, would broadcast the result to the
    wrong shape and is refused, as is a tensor on another device than ``q`` (except a 0-d CPU tensor, which mixes with any
    device as a number does).
    Tensor values are not inspected (a NaN propagates pointwise). A tensor
    ``h`` that requires grad is supported: the result is differentiable with respect to it."""
    if isinstance(h, torch.Tensor):
        if not h.is_floating_point():
            raise BeaTypeError(f"h must be a real floating-point tensor or a number, got a tensor of dtype {h.dtype}")
        batch = q.shape[:-1]
        try:
            ok = torch.broadcast_shapes(h.shape, batch) == batch
        except RuntimeError:
            ok = False
        if h.device != q.device and not (h.dim() == 0 and h.device.type == "cpu"):  # a 0-d CPU tensor mixes with any device
            raise BeaValueError(f"h is a tensor on {h.device}, but q is on {q.device}: put h on the device of q "
                                "(h.to(q.device)), or pass a number or a 0-d CPU tensor")
        if not ok:
            raise BeaValueError(
                f"h has shape {tuple(h.shape)}, which does not broadcast to the batch shape {tuple(batch)} of q "
                f"(shape {tuple(q.shape)} = batch + (n,)) without changing it: give h the batch shape {tuple(batch)} "
                "(e.g. h.squeeze(-1) if it is shaped like q), a 0-d tensor or a number"
            )
        return h
    if isinstance(h, bool) or not isinstance(h, numbers.Real):
        raise BeaTypeError(f"h must be a real number or a torch tensor, got {type(h).__name__} {str(h)[:40]!r}")
    try:
        value = float(h)
    except (OverflowError, ValueError) as err:
        raise BeaValueError(f"h must be a finite real number, got {str(h)[:40]}") from err
    if not math.isfinite(value):
        raise BeaValueError(f"h must be a finite real number, got {value}")
    return value


#: dtypes the series functions refuse: 3-4 significant digits, and torch's linear algebra (the regularity test,
#: det M, solves with M) has no kernels for them
LOW_PRECISION = (torch.float16, torch.bfloat16)


def check_precision(q: torch.Tensor) -> None:
    """:class:`BeaTypeError` for the dtypes in :data:`LOW_PRECISION`, at every ``n`` (at ``n = 1`` they would run,
    at ``n >= 2`` torch's ``eigvalsh`` raises ``NotImplementedError``: one rule, said up front)."""
    if q.dtype in LOW_PRECISION:
        raise BeaTypeError(f"q and v are {q.dtype} tensors: too few digits for the h-series, and torch's linear algebra "
                           "does not support them; convert them with q.double(), v.double() (or .float())")


def check_call(L: Any, q: torch.Tensor, v: torch.Tensor, h: Any, n: Optional[int]) -> Any:
    """All argument checks of a series function ``f(L, q, v, h)`` (generated for ``n``, or dimension-free with
    ``n=None``); returns the validated ``h``."""
    if not callable(L):
        raise BeaTypeError(f"L must be a callable torch Lagrangian L(q, v) -> (...), got {type(L).__name__}")
    check_state(q, v, n)
    check_precision(q)
    return check_step(h, q)


def overflow_is_typed(fn: Callable) -> Callable:
    """Wrap a series function ``f(L, q, v, h)`` so that an ``OverflowError`` becomes a :class:`BeaValueError`
    naming ``h``. Python's ``float`` power raises it where ``|h|^k`` exceeds the float64 range (``h = 1e300``,
    ``k = 2``), deep inside the evaluation; converted here, at the boundary, by its type."""

    @functools.wraps(fn)
    def series_function(L, q, v, h):
        try:
            return fn(L, q, v, h)
        except OverflowError as err:
            raise BeaValueError(f"h = {str(h)[:40]} is too large: a power of h in the series overflows float64 ({err}); "
                                "the series expands in a small step h (|h| times the system's frequencies well "
                                "below 1)") from None

    return series_function


def _grad_mode_aware(fn):
    """Derivatives by autograd need a graph even when the caller works under ``torch.no_grad()``
    (e.g. while integrating): build it, and hand back detached results in that case."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        if torch.is_grad_enabled():
            return fn(*args, **kwargs)
        with torch.enable_grad():
            out = fn(*args, **kwargs)
        if isinstance(out, dict):
            return {k: t.detach() for k, t in out.items()}
        return out.detach()

    return wrapped


def _as_leaf(x: torch.Tensor) -> torch.Tensor:
    # A separate graph node per argument, so that derivatives are *partial* even when the caller
    # computed v from q (as the trapezoidal rule does with L(a, (b - a)/h)); a view keeps x in
    # the caller's graph, a detached copy is a fresh leaf when x needs no gradient.
    return x.view_as(x) if x.requires_grad else x.detach().requires_grad_(True)


def _evaluate(L: TorchLagrangian, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    out = L(q, v)
    if not isinstance(out, torch.Tensor):
        raise BeaTypeError(f"the Lagrangian must return a tensor, got {type(out).__name__}")
    if out.is_complex():  # autograd would fail deep inside ("grad can be implicitly created only for real ...")
        raise BeaTypeError(f"the Lagrangian must return real values, got a {out.dtype} tensor; a Lagrangian is a real "
                           "function of (q, v): return its real part if the imaginary part is meant to vanish")
    if out.shape != q.shape[:-1]:
        raise BeaValueError(
            f"the Lagrangian must return shape {tuple(q.shape[:-1])} for q of shape {tuple(q.shape)} "
            f"(one value per state), got {tuple(out.shape)}"
        )
    return out


@_grad_mode_aware
def lagrangian_jet(L: TorchLagrangian, q: torch.Tensor, v: torch.Tensor, needed: Iterable[Tuple[int, ...]]) -> Dict[Tuple[int, ...], torch.Tensor]:
    r"""Partial derivatives :math:`\partial^m L(q, v)` for the multi-indices ``needed``.

    A multi-index is a sorted tuple of slots (slot ``i < n`` is :math:`q_i`, slot ``n+i`` is
    :math:`v_i`). Each derivative costs one autograd call per distinct parent multi-index.
    """
    n = q.shape[-1]
    needed = {tuple(sorted(m)) for m in needed}
    closure = set()
    for m in needed:
        for r in range(len(m) + 1):
            closure.add(m[:r])
    q, v = _as_leaf(q), _as_leaf(v)
    out: Dict[Tuple[int, ...], torch.Tensor] = {(): _evaluate(L, q, v)}
    for m in sorted(closure, key=lambda t: (len(t), t)):
        if not m or m in out:
            continue
        parent = m[:-1]
        children = [c for c in closure if len(c) == len(m) and c[:-1] == parent]
        val = out[parent]
        if val.requires_grad:
            gq, gv = torch.autograd.grad(val.sum(), (q, v), create_graph=True, allow_unused=True)
        else:
            gq = gv = None
        for c in children:
            s = c[-1]
            g = gq if s < n else gv
            comp = g[..., s % n] if g is not None else None
            out[c] = comp if comp is not None else torch.zeros_like(val)
    return out


def grads(out: torch.Tensor, inputs: Tuple[torch.Tensor, ...]) -> Tuple[torch.Tensor, ...]:
    """Gradients of ``out.sum()`` with respect to ``inputs`` (``create_graph=True``), with zeros for the
    inputs ``out`` does not depend on. Autograd alone raises there, yet such Lagrangians are ordinary:
    a free particle (no ``q``), a linear potential (``L_q`` constant, so ``L_qq`` is not in the graph)."""
    if not out.requires_grad:
        return tuple(torch.zeros_like(x) for x in inputs)
    gs = torch.autograd.grad(out.sum(), inputs, create_graph=True, allow_unused=True)
    return tuple(torch.zeros_like(x) if g is None else g for g, x in zip(gs, inputs))


def _mass(d: Dict[Tuple[int, ...], torch.Tensor], n: int) -> torch.Tensor:
    rows = [torch.stack([d[tuple(sorted((n + i, n + j)))] for j in range(n)], -1) for i in range(n)]
    return torch.stack(rows, -2)


def _derivative_scale(d: Dict[Tuple[int, ...], torch.Tensor]) -> torch.Tensor:
    """Pointwise size of the first and second derivatives of L in the jet ``d`` (the quantities that
    formulas divide by powers of M): the reference for the relative regularity test."""
    parts = [t.detach().abs() for k, t in d.items() if len(k) in (1, 2)]
    return torch.stack(torch.broadcast_tensors(*parts)).amax(0)


def inverse_det(d: Dict[Tuple[int, ...], torch.Tensor], n: int) -> torch.Tensor:
    r""":math:`1/\det M` from the second velocity derivatives in ``d`` (regularity checked)."""
    M = _mass(d, n)
    check_regular(M, _derivative_scale(d))
    return 1 / torch.linalg.det(M) if n > 1 else 1 / M[..., 0, 0]


def inverse_mass(d: Dict[Tuple[int, ...], torch.Tensor], n: int) -> List[List[torch.Tensor]]:
    r""":math:`M^{-1}` from the second velocity derivatives in ``d``; raises if :math:`M` is singular.

    Regularity is tested with the smallest singular value relative to the largest
    (tolerance :data:`REGULARITY_TOL`), pointwise over the batch.
    """
    M = _mass(d, n)
    check_regular(M, _derivative_scale(d))
    Minv = 1 / M if n == 1 else torch.linalg.inv(M)
    return [[Minv[..., i, j] for j in range(n)] for i in range(n)]


def check_regular(M: torch.Tensor, scale: Optional[torch.Tensor] = None) -> None:
    r"""Raise a ``ValueError`` naming the points where the mass matrix ``M`` (..., n, n) is singular:
    its smallest singular value is at most :data:`REGULARITY_TOL` times its largest or, if given, times
    ``scale`` (..., the size of L's other first and second derivatives at each point). The relative
    test with ``scale`` also covers ``n = 1``, where ``M`` alone has no reference: ``L = v^4/12 + cos q`` at
    ``v = 1e-100`` has ``M = 1e-200`` against ``|L_q| ~ 0.3``, and the formulas, which divide by powers of
    ``M``, would return ``inf``. (Units where M is 1e12 times smaller than the forces trip it too: rescale.)

    An absolute floor applies as well: :math:`\sigma_{min}(M)` must exceed :func:`mass_floor` (the square
    root of the smallest normal number of M's dtype, 1.5e-154 in float64). The formulas divide by powers of
    ``M`` (``1/det M`` in components, :math:`M^{-1}` applied repeatedly in the trees), so a *uniformly* tiny
    ``M`` -- which has no spread of eigenvalues and may dwarf nothing (``L = 1e-300 |v|^2``) -- would
    underflow or overflow them. ``c L`` has the motion of ``L``: rescaling is the fix.

    Points where ``M`` is not finite are not tested: they come from non-finite inputs (e.g. a Newton
    iterate that diverged), and their NaN propagates so that the caller sees which points failed (the
    integrators mask such trajectories) instead of one error for the whole batch."""
    n = M.shape[-1]
    with torch.no_grad():
        finite = torch.isfinite(M).all(-1).all(-1)
        if n == 1:
            smin = smax = M[..., 0, 0].abs()
        else:
            # M is a Hessian, hence symmetric: its singular values are the moduli of its eigenvalues,
            # and eigvalsh is some 20x faster than svdvals for batches of n ~ 50
            safe = torch.where(finite[..., None, None], M, torch.eye(n, dtype=M.dtype, device=M.device))
            s = torch.linalg.eigvalsh((safe + safe.transpose(-1, -2)) / 2).abs()
            smin, smax = s.min(-1).values, s.max(-1).values
        if scale is None:
            ref = smax
        else:  # non-finite derivatives elsewhere in the jet: NaN propagates there (see above), no test
            scale = scale.detach().to(smax.dtype)
            ref = torch.where(torch.isfinite(scale), torch.maximum(smax, scale), smax)
        singular = ~(smin > REGULARITY_TOL * ref) & finite
        tiny = ~(smin > mass_floor(M.dtype)) & finite & ~singular
    for bad, why in ((singular, "its Hessian d^2L/dv^2 is singular there (smallest |eigenvalue| at most "
                                f"{REGULARITY_TOL:g} x the size of L's other derivatives), so the Euler-Lagrange "
                                "equations do not determine the acceleration"),
                     (tiny, f"its Hessian d^2L/dv^2 is below {mass_floor(M.dtype):.2g} there, too small for "
                            f"{M.dtype} arithmetic: the formulas divide by powers of it and would overflow. If L is "
                            "uniformly tiny, rescale it (c L has the same motion)")):
        if bool(bad.any()):
            count = int(bad.sum())
            idx = tuple(int(i) for i in torch.nonzero(bad)[0]) if bad.dim() else ()
            raise NotRegularError(
                f"the Lagrangian is not regular at {count} of {bad.numel()} points (first at batch index {idx}): "
                f"{why}. Formulas of backward error analysis need a regular Lagrangian."
            )


def mass_floor(dtype: torch.dtype) -> float:
    r"""The smallest admissible :math:`\sigma_{min}(M)`: the square root of the dtype's smallest normal
    number, so that ``M``, its square and their inverses are all representable."""
    return math.sqrt(torch.finfo(dtype).tiny)


def check_finite_result(L: TorchLagrangian, q: torch.Tensor, v: torch.Tensor, h: Any, out: torch.Tensor) -> torch.Tensor:
    r"""``out`` (a series evaluated at ``(q, v, h)``) if it is finite wherever it should be, else
    :class:`NotRegularError`. Shared by the component and the dimension-free functions.

    Non-finite values are expected -- and propagate -- where an input is not finite: ``q``, ``v``, ``h``, or
    ``L`` and its first derivatives at the point (a diverged Newton iterate, a Kepler collision). Anywhere
    else they mean that ``M`` is too small or too ill-conditioned for floating point there, which
    :func:`check_regular` did not see (e.g. only a higher derivative dwarfs ``M``): an error, never a silent
    NaN or infinity. The fast path is one reduction over ``out``."""
    if bool(torch.isfinite(out).all()):
        return out
    with torch.no_grad():
        bad = ~torch.isfinite(out.detach())
        if bad.dim() == q.dim():  # the modified equation: (..., n)
            bad = bad.any(-1)
        ok = torch.isfinite(q.detach()).all(-1) & torch.isfinite(v.detach()).all(-1)
        if isinstance(h, torch.Tensor):
            ok = ok & torch.broadcast_to(torch.isfinite(h.detach()), ok.shape)
        suspect = bad & ok
    if not bool(suspect.any()):
        return out
    with torch.enable_grad():
        qs = q.detach()[suspect].requires_grad_(True)
        vs = v.detach()[suspect].requires_grad_(True)
        val = _evaluate(L, qs, vs)
        gq, gv = torch.autograd.grad(val.sum(), (qs, vs), allow_unused=True) if val.requires_grad else (None, None)
    jet_ok = torch.isfinite(val.detach())
    for g in (gq, gv):
        if g is not None:
            jet_ok = jet_ok & torch.isfinite(g).all(-1)
    if bool(jet_ok.any()):
        first = tuple(int(i) for i in torch.nonzero(suspect)[int(torch.nonzero(jet_ok)[0])])
        raise NotRegularError(
            f"the series is not finite at {int(jet_ok.sum())} of {suspect.numel()} points where q, v, h, L and its "
            f"first derivatives are finite (first at batch index {first}): d^2L/dv^2 is too small or too "
            "ill-conditioned there for floating point (the formulas divide by powers of it). Formulas of backward "
            "error analysis need a regular Lagrangian; if L is uniformly tiny, rescale it (c L has the same motion)"
        )
    return out


def momentum(L: TorchLagrangian) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    r""":math:`p(q, v) = \partial L/\partial v` as a differentiable torch callable."""

    @_grad_mode_aware
    def p(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        check_state(q, v)
        q, v = _as_leaf(q), _as_leaf(v)
        (gv,) = grads(_evaluate(L, q, v), (v,))
        return gv

    return p


def energy(L: TorchLagrangian) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    r"""The energy :math:`H(q, v) = p \cdot v - L(q, v)`, :math:`p = \partial L/\partial v`, of any
    torch Lagrangian, as a differentiable torch callable with the same batching as ``L``."""
    if not callable(L):
        raise BeaTypeError(f"energy() needs a callable Lagrangian L(q, v), got {type(L).__name__}")

    @_grad_mode_aware
    def H(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        check_state(q, v)
        q, v = _as_leaf(q), _as_leaf(v)
        val = _evaluate(L, q, v)
        (gv,) = grads(val, (v,))
        return (gv * v).sum(-1) - val

    return H


def acceleration(L: TorchLagrangian) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    r"""Euler--Lagrange acceleration :math:`A = M^{-1}(\partial_q L - L_{vq} v)` by autograd."""

    @_grad_mode_aware
    def A(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        check_state(q, v)
        n = q.shape[-1]
        needed = [(i,) for i in range(n)] + [tuple(sorted((n + i, s))) for i in range(n) for s in range(2 * n)]
        d = lagrangian_jet(L, q, v, needed)
        W = inverse_mass(d, n)
        b = [d[(i,)] - sum(d[tuple(sorted((j, n + i)))] * v[..., j] for j in range(n)) for i in range(n)]
        return torch.stack([sum(W[i][j] * b[j] for j in range(n)) for i in range(n)], -1)

    return A
