r"""The model protocol: what an integrator (and a learner) may ask of a Lagrangian, in one place.

A Lagrangian model has

* ``n`` -- its number of degrees of freedom (``None``: any);
* a value ``L(q, v)`` for ``q, v`` of shape ``(..., n)``, pointwise over the leading dimensions;
* derivatives in the state :math:`x = (q, v)`: :func:`derivatives` gives the gradient :math:`\nabla L`
  and the Hessian :math:`\nabla^2 L` that the Newton step of the discrete Euler--Lagrange equations
  needs (:math:`D_{12}L_\Delta = \sum_k w_k A_k^\top \nabla^2 L(y_k) B_k`, :mod:`integrators.compiled`);
* optionally a compiled form, :meth:`LagrangianModel.compiled_form` ``(n)`` returning a
  :class:`~integrators.compiled.CLagrangian` (C computing the same gradient and Hessian), or raising
  :class:`~integrators.compiled.NotLowerable` with the reason.

:func:`compiled_form` is the single dispatch that every compiled path goes through: a model's own
``compiled_form``; the adapters for today's kinds (a SymPy :class:`~integrators.symbolic.SymbolicLagrangian`
such as every :mod:`integrators.systems` system; objects with the older ``c_lagrangian()`` hook: the GP
posterior mean, ModLaNet, a :mod:`bea` series of a model with a Taylor form); and, for anything else that
is torch code (a plain callable, an ``nn.Module``, a :mod:`bea` series of either), the tracing front-end
:mod:`integrators.traced`. :class:`AffineModel` composes a model with a diagonal affine change of state
and a constant factor, so a model fitted in standardised units is stepped in the data's units on the
same compiled path (:math:`L(x) = c\,M((x - o)/u)`: :math:`\nabla L = c\,\nabla M/u`,
:math:`\nabla^2 L = c\,\nabla^2 M/(u u^\top)`).
"""

from __future__ import annotations

from typing import Optional, Protocol, Sequence, Tuple, runtime_checkable

import numpy as np
import torch

from bea.errors import BeaWarning

from .compiled import CLagrangian, NotLowerable, check_n

__all__ = ["LagrangianModel", "compiled_form", "declares_form", "derivatives", "AffineModel", "LinearMapModel",
           "CompiledPathWarning"]


class CompiledPathWarning(BeaWarning):
    """``execution="auto"`` found no compiled form for a Lagrangian and steps it eagerly; the message says why
    (issued once per integrator and ``n``)."""


@runtime_checkable
class LagrangianModel(Protocol):
    """The protocol (see the module docstring). Only ``__call__`` is required of a plain Lagrangian."""

    n: Optional[int]

    def __call__(self, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor: ...

    def compiled_form(self, n: int) -> CLagrangian: ...


def derivatives(L, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""``(L, \nabla L, \nabla^2 L)`` at states ``x`` of shape ``(m, 2n)``, by autograd (reference for any model)."""
    n = x.shape[-1] // 2
    vals, grads, hessians = [], [], []
    for xi in x:
        with torch.enable_grad():
            xi = xi.detach().clone().requires_grad_(True)
            val = L(xi[:n].reshape(1, n), xi[n:].reshape(1, n)).reshape(())
            (g,) = torch.autograd.grad(val, xi, create_graph=True)
            rows = []
            for i in range(2 * n):
                gi = torch.autograd.grad(g[i], xi, retain_graph=True, allow_unused=True)[0] if g[i].requires_grad else None
                rows.append(torch.zeros_like(xi) if gi is None else gi)
        vals.append(val.detach())
        grads.append(g.detach())
        hessians.append(torch.stack(rows).detach())
    return torch.stack(vals), torch.stack(grads), torch.stack(hessians)


def declares_form(L) -> bool:
    """Whether ``L`` declares its own compiled form: one of :func:`compiled_form`'s rules before tracing applies (a
    model hook, the older ``c_lagrangian`` hook, a SymPy Lagrangian). Such models keep their declared path and are
    never handed to ``torch.compile`` (:mod:`integrators.compiled_func`); kept beside :func:`compiled_form` so
    that the two list the same rules."""
    from .symbolic import SymbolicLagrangian

    return (callable(getattr(type(L), "compiled_form", None)) or callable(getattr(L, "c_lagrangian", None))
            or isinstance(L, SymbolicLagrangian))


def compiled_form(L, n: int, *, trace: bool = True) -> CLagrangian:
    """The :class:`~integrators.compiled.CLagrangian` of ``L`` for ``n`` coordinates, by the first rule of the
    module docstring that applies; :class:`~integrators.compiled.NotLowerable` (with the reason) if none does.
    ``trace=False``: no tracing front-end (only forms that a model declares)."""
    hook = getattr(type(L), "compiled_form", None)
    if callable(hook):
        out = L.compiled_form(n)
    elif callable(getattr(L, "c_lagrangian", None)):
        out = L.c_lagrangian()
    else:
        from .symbolic import SymbolicLagrangian

        if isinstance(L, SymbolicLagrangian):
            from .compiled import lower_lagrangian

            out = lower_lagrangian(L)
        elif trace and callable(L):
            from .traced import trace_lagrangian

            out = trace_lagrangian(L, n)
        else:
            raise NotLowerable(f"a {type(L).__name__} has no C form")
    if not isinstance(out, CLagrangian):
        raise NotLowerable(f"{type(L).__name__} gave a {type(out).__name__} as its compiled form, not a CLagrangian")
    if out.n != n:
        raise NotLowerable(f"the Lagrangian's C form has n = {out.n}, the data n = {n}")
    check_n(n)
    return out


AFFINE = r"""
static void lag_derivs(const double *x, const double *P, double *g, double *H) {
    /* P = (c, u (D), o (D), inner parameters...): L(x) = c M((x - o) / u) */
    const int D = AFFINE_D;
    double y[AFFINE_D], gi[AFFINE_D], Hi[AFFINE_D * AFFINE_D];
    for (int i = 0; i < D; i++) y[i] = (x[i] - P[1 + D + i]) / P[1 + i];
    inner_lag_derivs(y, P + 1 + 2 * D, gi, Hi);
    for (int i = 0; i < D; i++) g[i] = P[0] * gi[i] / P[1 + i];
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) H[i * D + j] = P[0] * Hi[i * D + j] / (P[1 + i] * P[1 + j]);
}
"""


def _composed_form(model, n: int, head: np.ndarray, outer: str) -> CLagrangian:
    """The compiled form of ``model`` renamed ``inner_lag_derivs``, composed with the ``outer`` C map (its own
    ``lag_derivs``), whose parameters ``head`` come before the inner ones."""
    inner = compiled_form(model, n, trace=False)
    if inner.source.count("lag_derivs(") < 1:
        raise NotLowerable("internal: the inner C form defines no lag_derivs")
    source = inner.source.replace("lag_derivs(", "inner_lag_derivs(") + outer

    def refresh():
        return np.concatenate([head, np.asarray(inner.refresh(), dtype=np.float64).reshape(-1)])
    return CLagrangian(n=n, source=source, params=np.concatenate([head, np.asarray(inner.params).reshape(-1)]),
                       cost=inner.cost, refresh=None if inner.refresh is None else refresh, vectorise=inner.vectorise,
                       auto_max_batch=inner.auto_max_batch)


class AffineModel:
    r""":math:`L(q, v) = c\,M(((q, v) - o)/u)` for a model ``M`` (coordinate-wise ``u > 0``, offsets ``o``, both
    of length ``2n``), with ``M``'s compiled form composed with the same map (module docstring)."""

    def __init__(self, model, factor: float, units: Sequence[float], offsets: Sequence[float]):
        self.model = model
        self.factor = float(factor)
        self.units = torch.as_tensor(units, dtype=torch.float64).reshape(-1)
        self.offsets = torch.as_tensor(offsets, dtype=torch.float64).reshape(-1)
        self.n = self.units.numel() // 2

    def __call__(self, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        u, o = self.units.to(q.device), self.offsets.to(q.device)
        n = self.n
        return self.factor * self.model((q - o[:n]) / u[:n], (v - o[n:]) / u[n:])

    def compiled_form(self, n: int) -> CLagrangian:
        head = np.concatenate([[self.factor], self.units.numpy(), self.offsets.numpy()])
        return _composed_form(self.model, n, head, AFFINE.replace("AFFINE_D", str(2 * n)))


LINEAR = r"""
static void lag_derivs(const double *x, const double *P, double *g, double *H) {
    /* P = (c, A (D x D, row-major), o (D), inner parameters...): L(x) = c M(A (x - o)) */
    const int D = LINEAR_D;
    const double *A = P + 1, *o = P + 1 + D * D;
    double y[LINEAR_D], gi[LINEAR_D], Hi[LINEAR_D * LINEAR_D], HA[LINEAR_D * LINEAR_D];
    for (int i = 0; i < D; i++) {
        y[i] = 0.0;
        for (int j = 0; j < D; j++) y[i] += A[i * D + j] * (x[j] - o[j]);
    }
    inner_lag_derivs(y, P + 1 + D * D + D, gi, Hi);
    for (int i = 0; i < D; i++) {  /* g = c A^T gi */
        g[i] = 0.0;
        for (int k = 0; k < D; k++) g[i] += A[k * D + i] * gi[k];
        g[i] *= P[0];
    }
    for (int k = 0; k < D; k++)  /* HA = Hi A */
        for (int j = 0; j < D; j++) {
            HA[k * D + j] = 0.0;
            for (int l = 0; l < D; l++) HA[k * D + j] += Hi[k * D + l] * A[l * D + j];
        }
    for (int i = 0; i < D; i++)  /* H = c A^T Hi A */
        for (int j = 0; j < D; j++) {
            double s = 0.0;
            for (int k = 0; k < D; k++) s += A[k * D + i] * HA[k * D + j];
            H[i * D + j] = P[0] * s;
        }
}
"""


class LinearMapModel:
    r""":math:`L(x) = c\,M(A(x - o))` for a model ``M``, ``x = (q, v)``, a ``(2n, 2n)`` matrix ``A`` and offsets ``o``
    (:class:`AffineModel` with a full matrix, e.g. a rotation of the coordinates): the compiled form of ``M`` composed
    with the map by the chain rule in C, :math:`\nabla L = cA^\top\nabla M`, :math:`\nabla^2L = cA^\top\nabla^2M\,A`."""

    def __init__(self, model, factor: float, matrix: torch.Tensor, offsets: Sequence[float]):
        self.model = model
        self.factor = float(factor)
        self.matrix = torch.as_tensor(matrix, dtype=torch.float64).cpu()
        self.offsets = torch.as_tensor(offsets, dtype=torch.float64).reshape(-1).cpu()
        self.n = self.offsets.numel() // 2

    def __call__(self, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        n = self.n
        y = (torch.cat([q, v], -1) - self.offsets.to(q.device)) @ self.matrix.to(q.device).T
        return self.factor * self.model(y[..., :n], y[..., n:])

    def compiled_form(self, n: int) -> CLagrangian:
        head = np.concatenate([[self.factor], self.matrix.reshape(-1).numpy(), self.offsets.numpy()])
        return _composed_form(self.model, n, head, LINEAR.replace("LINEAR_D", str(2 * n)))
