r"""Normalisations: functionals with non-zero targets that rule out the trivial Lagrangian.

Every constant :math:`L` satisfies all DEL (and EL) conditions, and :math:`sL + \tfrac{d}{dt}\xi(q)`
has the same motions as :math:`L` (docs/theory/mechanics.md, docs/theory/lsi.md). A normalisation fixes the scale ``c``:

* :class:`VertexNormalisation` (the paper's, docs/theory/lsi.md): with ``z`` running over the
  :math:`2^{2n}` vertices of :math:`[0,1]^{2n}`,

  .. math:: \frac{1}{n!\,4^n}\sum_z \sum_{i=1}^n \frac{\partial L}{\partial v_i}(z) = c, \qquad L(0) = 0.

* :class:`MassNormalisation`: at a point :math:`x_0 = (q_0, v_0)` (default: the centre of the data),
  :math:`L(x_0) = 0`, :math:`\partial_v L(x_0) = 0` (fixes the gauge term :math:`\xi` there) and
  :math:`\operatorname{tr}\partial_v^2 L(x_0) = c\,n`; useful when the unit cube lies far from the
  data.
  With ``matrix=True`` the whole mass matrix is fixed, :math:`\partial_v^2 L(x_0) = c\,I` (:math:`n(n+1)/2`
  conditions instead of the trace); ``matrix=None`` (the default) lets the fit choose (below).

These are the only functionals with non-zero targets, so they carry the whole signal of the fit.

Why ``"mass"`` is the default: the vertex condition constrains :math:`\partial L/\partial v`, which a
gauge term :math:`\xi'(q)\,v` -- invisible to every DEL equation -- can satisfy on its own. The
minimum-norm GP posterior then puts much of ``c`` into the gauge: on the pendulum the learned mass
came out near 0.005 instead of O(1), so the posterior mean's rounding noise is large relative to
its dynamics. Same data and kernel (lengthscale 0.7, nugget 1e-12): trajectory error over 500 steps
9e-5 with the vertex normalisation, 4e-7 with the mass normalisation. A second derivative in
:math:`v` cannot be produced by a gauge term, so the mass condition fixes the scale of the dynamics
itself (and, with ``c = 1``, gives the true pendulum's units).

Why the whole mass matrix can matter (``n >= 3``): a Lagrangian that separates into independent parts,
:math:`L = L_1(x_1) + L_2(x_2)`, has the same motions as :math:`a L_1 + b L_2` for any :math:`a, b \ne 0`, and the
trace fixes only :math:`a + b`. The GP's minimum-norm posterior then shrinks the part with the larger RKHS norm,
and with it the Jacobian that predicts that part's motion. The softened two-body problem in a harmonic trap
(centre of mass and relative motion separate; ``tests/test_learners_shadow_auto.py``'s ``two_body4``) came out
with the relative part at 0.06 of the centre of mass's, energy differences 4.99 relative; with the mass matrix
fixed, 0.77 and 0.099. It is an assumption -- equal masses in the standardised coordinates at :math:`x_0` -- and
biased by :math:`O(h^2)` for :math:`L_{inv}`, whose mass matrix carries terms in the potential's Hessian, so the
default (``matrix=None``) fixes the matrix only where it predicts held-out positions clearly better
(:data:`~learners.shadow.position_search.MATRIX_MARGIN`), and the trace everywhere else (``"mll"``, ``n <= 2``:
results unchanged). Where the parts' motions are predicted as well either way (separable oscillators), the trace is
kept and their relative scales stay undetermined.
"""

from __future__ import annotations

import itertools
import math
from typing import Optional, Union

import torch

from bea.errors import BeaValueError

from .functionals import AtomSet, Functionals

__all__ = ["Normalisation", "VertexNormalisation", "MassNormalisation", "get_normalisation"]


class Normalisation:
    """Base class: ``functionals(n, data_center)`` returns :class:`Functionals` with targets."""

    c: float = 1.0

    def functionals(self, n: int, center: Optional[torch.Tensor] = None) -> Functionals:  # pragma: no cover
        raise NotImplementedError


class VertexNormalisation(Normalisation):
    r"""The paper's quadrature of :math:`\int_{[0,1]^{2n}} \sum_i \partial L/\partial v_i = c` plus :math:`L(0) = 0`."""

    def __init__(self, c: float = 1.0):
        c = float(c)
        if not math.isfinite(c) or c == 0:
            raise BeaValueError(f"the normalisation constant c must be finite and non-zero, got {c}")
        self.c = c

    def __repr__(self) -> str:
        return f"VertexNormalisation(c={self.c})"

    def functionals(self, n: int, center: Optional[torch.Tensor] = None) -> Functionals:
        D = 2 * n
        f64 = dict(dtype=torch.float64, device=_device(center))  # on the data's device, which the centre is on
        z = torch.tensor(list(itertools.product((0.0, 1.0), repeat=D)), **f64)
        w = torch.zeros(D, **f64)
        w[n:] = 1.0 / (math.factorial(n) * 4**n)
        V = z.shape[0]
        index = dict(dtype=torch.long, device=f64["device"])
        atoms = {1: AtomSet(z, w.expand(V, D)[:, None, :].clone(), torch.ones(V, **f64), torch.zeros(V, **index)),
                 0: AtomSet(torch.zeros(1, D, **f64), torch.zeros(1, 0, D, **f64), torch.ones(1, **f64),
                             torch.ones(1, **index))}
        return Functionals(D, 2, atoms, torch.tensor([self.c, 0.0], **f64))


class MassNormalisation(Normalisation):
    r""":math:`L(x_0) = 0`, :math:`\partial_vL(x_0) = 0`, :math:`\operatorname{tr}\partial_v^2L(x_0) = c\,n`
    (``matrix=False``), or :math:`\partial_v^2L(x_0) = c\,I` (``matrix=True``); ``matrix=None``: the trace, unless
    the fit chooses the matrix (module docstring)."""

    def __init__(self, c: float = 1.0, point: Optional[torch.Tensor] = None, matrix: Optional[bool] = None):
        c = float(c)
        if not math.isfinite(c) or c == 0:
            raise BeaValueError(f"the normalisation constant c must be finite and non-zero, got {c}")
        if matrix not in (None, True, False):
            raise BeaValueError(f"matrix must be True, False or None (let the fit choose), got {matrix!r}")
        self.c = c
        # kept where it is given (the CPU for numbers); functionals() moves it to the data's device
        self.point = None if point is None else torch.as_tensor(point, dtype=torch.float64, device=_device(point))
        self.matrix = matrix

    def __repr__(self) -> str:
        return f"MassNormalisation(c={self.c})" if self.matrix is None else f"MassNormalisation(c={self.c}, matrix={self.matrix})"

    def with_matrix(self, matrix: Optional[bool]) -> "MassNormalisation":
        """The same normalisation (constant and point) with ``matrix`` set."""
        return MassNormalisation(self.c, self.point, matrix)

    def functionals(self, n: int, center: Optional[torch.Tensor] = None) -> Functionals:
        D = 2 * n
        f64 = dict(dtype=torch.float64, device=_device(center))  # on the data's device, which the centre is on
        x0 = self.point if self.point is not None else (center if center is not None else torch.zeros(D, **f64))
        x0 = x0.to(**f64).reshape(1, D)
        eye = torch.eye(D, **f64)
        index = dict(dtype=torch.long, device=f64["device"])
        atoms = {0: AtomSet(x0, torch.zeros(1, 0, D, **f64), torch.ones(1, **f64), torch.zeros(1, **index)),
                 1: AtomSet(x0.expand(n, D), eye[n:][:, None, :], torch.ones(n, **f64), torch.arange(1, n + 1, **index))}
        if not self.matrix:  # one condition: the trace
            atoms[2] = AtomSet(x0.expand(n, D), torch.stack([eye[n:], eye[n:]], 1), torch.ones(n, **f64),
                               torch.full((n,), n + 1, **index))
            return Functionals(D, n + 2, atoms, torch.tensor([0.0] * (n + 1) + [self.c * n], **f64))
        i, j = torch.triu_indices(n, n, **index)  # one condition per entry on and above the diagonal
        P = i.numel()
        atoms[2] = AtomSet(x0.expand(P, D), torch.stack([eye[n + i], eye[n + j]], 1), torch.ones(P, **f64),
                           torch.arange(n + 1, n + 1 + P, **index))
        return Functionals(D, n + 1 + P, atoms, torch.cat([torch.zeros(n + 1, **f64), self.c * (i == j).to(torch.float64)]))


def _device(x) -> torch.device:
    """The device of a tensor; the CPU for numbers, arrays and None."""
    return x.device if isinstance(x, torch.Tensor) else torch.device("cpu")


def get_normalisation(spec: Union[str, Normalisation, None]) -> Normalisation:
    if spec is None or spec == "vertices":
        return VertexNormalisation()
    if spec == "mass":
        return MassNormalisation()
    if isinstance(spec, Normalisation):
        return spec
    raise BeaValueError(f"normalisation must be 'vertices', 'mass' or a learners.Normalisation, got {spec!r}")
