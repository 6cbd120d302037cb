r"""Two pieces of the ``torch.compile`` path (:mod:`integrators.compiled_func`) kept apart from its stepper.

* :func:`scan_steps`: ``k`` applications of a step function in one compiled graph. Under ``torch.compile`` it is
  torch's ``scan`` operator, which inductor lowers to a loop around one compiled body: the graph and its compile
  time do not grow with ``k`` (unrolling the steps in Python does both). Uncompiled, and where torch has no
  ``scan``, the same loop in Python, with the same operations in the same order.
* :func:`autograd_derivatives`: the residual, momenta and Jacobian of the stepper's Newton step by ordinary
  reverse-mode autograd, for the evaluations that :func:`~integrators.newton.newton` makes before its compiled
  versions exist. Eagerly this is faster than the ``torch.func`` forms that ``torch.compile`` needs (MLP 2x64, 1024
  rows: 2.4 against 3.2 ms a residual, 4.5 against 6-7 ms a Jacobian) and gives the same numbers bit for bit
  (the same operations; ``tests/test_integrators_compiled_func.py`` compares them).

Mathematics (as in :mod:`integrators.compiled_func`): with :math:`y_k = o_k + A_k a + B_k x`,
:math:`r = \sum_k w_k A_k^\top \nabla L(y_k) + p`, :math:`p' = \sum_k w_k B_k^\top \nabla L(y_k)` and
:math:`J e_i = \sum_k w_k A_k^\top \nabla^2 L(y_k) B_k e_i`, one Hessian-vector product per column.
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

import torch

try:  # torch's control-flow operator (torch >= 2.6); its module is not public, so its absence is not an error
    from torch._higher_order_ops.scan import scan as _torch_scan
except ImportError:  # pragma: no cover - depends on the installed torch
    _torch_scan = None

__all__ = ["scan_steps", "has_scan", "autograd_derivatives", "contract", "pad", "store"]


def has_scan() -> bool:
    """Whether this torch has the ``scan`` operator (read when a stepper is built, not at import)."""
    return _torch_scan is not None


def _in_graph() -> bool:
    return torch.compiler.is_compiling()


def scan_steps(step: Callable, init: Tuple[torch.Tensor, ...], k: int, use_scan: bool = True):
    """``k`` steps ``carry, out = step(carry, None)`` from ``init``: the outputs stacked along a new first
    dimension; under ``torch.compile`` by torch's ``scan`` where it exists and ``use_scan`` (else unrolled).
    ``step`` must return fresh tensors as outputs (not its carry) and keep the carry's shapes, dtypes and layout
    (torch's ``scan`` refuses aliasing and layout changes)."""
    init = tuple(t.clone(memory_format=torch.contiguous_format) for t in init)  # (fresh: the carry may not alias)
    if use_scan and _torch_scan is not None and _in_graph():
        return _torch_scan(step, init, torch.zeros(k, dtype=torch.float64))[1]
    carry, outs = init, []
    for _ in range(k):
        carry, out = step(carry, None)
        outs.append(out)
    return tuple(torch.stack(o) for o in zip(*outs))


def autograd_derivatives(stepper, x: torch.Tensor, a: torch.Tensor, p: torch.Tensor, jacobian: bool):
    """``(r, p_next)`` at ``x`` (and ``J`` as well where ``jacobian``) for the previous position ``a`` and momenta
    ``p`` (None: ``r`` without them) of ``stepper`` (its ``L``, ``n``, weights ``w``, maps ``A``, ``B`` and ``_points``), by autograd."""
    n, w = stepper.n, stepper.w
    y = stepper._points(x, a).detach().requires_grad_(True)
    with torch.enable_grad():  # (allow_unused, zeros for None: a gradient may not depend on y, L not at all)
        g, = torch.autograd.grad(stepper.L(y[..., :n], y[..., n:]).sum(), y, create_graph=jacobian, allow_unused=True)
        g = torch.zeros_like(y) if g is None else g
        r = contract(w, g.detach(), stepper.A)
        out = (r if p is None else r + p, contract(w, g.detach(), stepper.B))
        if not jacobian:
            return out
        cols = []
        for i in range(n if g.requires_grad else 0):  # (a gradient constant in y has no graph: its J is 0)
            u = stepper.B[:, None, :, i].expand_as(y)
            hv, = torch.autograd.grad((g * u).sum(), y, retain_graph=i + 1 < n, allow_unused=True)
            cols.append(contract(w, torch.zeros_like(y) if hv is None else hv, stepper.A))
    J = torch.stack(cols, -1) if cols else torch.zeros(*x.shape, n, dtype=x.dtype, device=x.device)
    return out + (J,)


def contract(w: torch.Tensor, g: torch.Tensor, M: torch.Tensor) -> torch.Tensor:
    r""":math:`\sum_k w_k M_k^\top g_k` for weights ``w`` ``(K,)``, ``g`` ``(K, batch, 2n)`` and maps ``M`` ``(K, 2n, n)``:
    ``(batch, n)``."""
    return torch.einsum("kbd,kdn->bn", w[:, None, None] * g, M)


def pad(t: torch.Tensor, size: int, dim: int = 0) -> torch.Tensor:
    """``t`` with its first row (along ``dim``) repeated up to ``size`` rows (finite filler; the extra rows are
    discarded)."""
    extra = size - t.shape[dim]
    if extra == 0:
        return t
    first = t.narrow(dim, 0, 1)
    return torch.cat([t, first.expand(*t.shape[:dim], extra, *t.shape[dim + 1:])], dim)


def store(buf: Optional[torch.Tensor], j: int, rows: Optional[torch.Tensor], value: torch.Tensor) -> None:
    """``buf[j] = value`` for the trajectories ``rows`` (None: all; no buffer: nothing)."""
    if buf is None:
        return
    if rows is None:
        buf[j] = value
    else:
        buf[j, rows] = value
