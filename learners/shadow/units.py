r"""The standardised coordinates in which the GP Lagrangian models learn: units of position *and* time.

A model fitted to positions :math:`q` sampled at a step :math:`h` learns in the coordinates

.. math::  q' = (q - \bar q)/\sigma, \qquad t' = t/\tau, \qquad v' = v\,\tau/\sigma, \qquad h' = h/\tau,

with :math:`\bar q` the mean position (per coordinate), :math:`\sigma` the RMS over coordinates of their
standard deviations (one scale for all coordinates, so rotations and the kernel's geometry are kept) and
:math:`\tau` a time unit chosen from the data: the one in which the step velocities :math:`(q'_{k+1} -
q'_k)/h'` have the RMS :math:`\kappa` (:data:`VELOCITY_RMS`), i.e.

.. math::  h' = \frac1\kappa\Big(\tfrac{1}{K n}\sum_{k,i} (q'_{k+1,i} - q'_{k,i})^2\Big)^{1/2}, \qquad \tau = h/h'

(:func:`standard_step`; given velocities instead, :math:`\tau = \kappa\sigma/\mathrm{RMS}(v)`, :func:`standard_time`).
:math:`h'` is computed from the positions alone, so the standardised problem -- data, step, kernel
search, solve -- is the same, bit for bit, whatever unit :math:`h` is given in: scaling :math:`h` by
:math:`c` (same positions) scales :math:`\tau` by :math:`c` and nothing else.

The model's Lagrangian in the data's units is :math:`L(q, v) = s^2 L'(q', v')` with :math:`s = \sigma/\tau`
the unit of velocity. Every scheme's discrete Lagrangian then satisfies :math:`L_\Delta(a, b; h) =
(\sigma^2/\tau)\,L'_\Delta(a', b'; h')` (it is :math:`h` times a quadrature of :math:`L` at velocities
:math:`(b - a)/h`), so the discrete motions of :math:`L` are those of :math:`L'` mapped back, and
:math:`\partial_v^2 L = \partial_{v'}^2 L'` keeps the mass normalisation in the data's units. Outputs map
back with one factor per unit: positions :math:`\sigma q' + \bar q`, velocities :math:`s v'`, momenta
:math:`s p'`, DEL residuals :math:`s r'`, energies and Lagrangians :math:`s^2`, their variances
:math:`s^4`, lengthscales :math:`\sigma` (positions) and :math:`s` (velocities); :math:`\mathrm{mod}_N`
is taken at :math:`h'`.

*A rotation.* The positions may also be turned to orthonormal directions :math:`R` (:math:`n\times n`,
:math:`R^\top R = I`; the columns in the data's coordinates), :math:`q' = R^\top(q - \bar q)/\sigma`, i.e. the linear
map :math:`q = \bar q + A q'` with :math:`A = \sigma R` (the scale alone is :math:`R = I`). Every scheme's DEL
equations commute with a linear map of the configuration space, :math:`L'(q', v') = s^{-2} L(\bar q + A q', A v'/\tau)`,
so the discrete motions again map back. Velocities map by :math:`A` (:math:`v = s R v'`), momenta and DEL residuals
(covectors) by :math:`A^{-\top}`, which for an orthogonal :math:`R` is the same rotation (:math:`p = s R p'`); energies and
Lagrangians are scalars (factor :math:`s^2` as before) and the trace of the mass matrix is kept. Why orthogonal only:
the principal directions that use it (:mod:`learners.shadow.principal`) are orthonormal, and then vectors and covectors
map alike. A per-component std does not map component by component (the rotated components are correlated): the
velocities rotate their covariance, and the DEL residuals' components along the data's axes are functionals of their
own (:func:`~learners.shadow.functionals.del_residual_functionals` with ``axes``), so every reported std is exact.
Lengthscales are then those of the rotated coordinates :math:`q'`.
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

import torch

from bea.errors import BeaValueError

from .functionals import AtomSet, Functionals

__all__ = ["position_units", "standard_step", "standard_time", "StandardUnits", "VELOCITY_RMS", "check_rotation",
           "StandardisedMean", "data_units_form"]

#: RMS of the standardised velocities (positions have unit RMS spread). Why 1/2 and not 1: a Lagrangian is a
#: low-degree function of the velocities (quadratic for mechanical systems), so it is smoother in them than in the
#: positions -- the learned velocity lengthscales come out 1.8-8x the position ones -- and the hyperparameter
#: search, which starts from one shared lengthscale, starts nearer to that. Measured with the default objective
#: (README experiments; level-set errors of H_rec[2] / H_rec[4], trajectory error over 10,000 steps): pendulum
#: (400 x 5, h = 0.5) 2.39e-4 / 1.76e-5 at 1/2 against 2.78e-4 / 2.03e-5 at 1 and 2.50e-4 / 1.84e-5 before time
#: was standardised (h' = h, RMS 0.57); Henon-Heiles (200 x 5, h = 0.1) trajectory 5.3e-5 and H_rec[2] 4.7e-5
#: at 1/2 against 1.29e-4 and 7.25e-5 at 1, which is h' = h there, as before (``python3 -m bea demo`` and
#: ``pipelines.shadow_experiments.run(HENON_HEILES)``, the same commands before and after).
VELOCITY_RMS = 0.5


def position_units(S: torch.Tensor) -> Tuple[torch.Tensor, float]:
    r"""Origin :math:`\bar q` (n,) and scale :math:`\sigma` of positions ``S`` (..., n); a coordinate that never
    moves is an error (nothing to learn about its dynamics)."""
    flat_S = S.reshape(-1, S.shape[-1])
    center = flat_S.mean(0)
    spread = (flat_S - center).pow(2).mean(0).sqrt()  # (n,) standard deviation of each coordinate
    flat = torch.nonzero(spread <= 1e-13 * (center.abs() + 1e-300)).flatten()
    if flat.numel():
        i = int(flat[0])
        raise BeaValueError(f"coordinate q{i} takes the same value ({float(center[i])!r}) in every snapshot: the data show "
                         f"no motion in it, so they say nothing about its dynamics. Give trajectories that move "
                         f"(initial velocities or positions away from equilibrium)")
    return center, float(spread.pow(2).mean().sqrt())


def standard_step(S_std: torch.Tensor) -> float:
    r""":math:`h'`, the step in the time unit where the step velocities of standardised snapshots ``S_std``
    (n_traj, m, n) have the RMS :data:`VELOCITY_RMS` (module docstring)."""
    step = float((S_std[:, 1:] - S_std[:, :-1]).pow(2).mean().sqrt()) / VELOCITY_RMS
    if not step > 1e-13:  # positions standardised to unit spread: a smaller step is rounding noise
        raise BeaValueError("no trajectory moves between consecutive snapshots (each stays at one position), so the data "
                         "say nothing about the dynamics. Give trajectories that move (initial velocities or positions "
                         "away from equilibrium)")
    return step


def standard_time(v: torch.Tensor, unit: float) -> float:
    r""":math:`\tau = \kappa\sigma/\mathrm{RMS}(v)` for given velocities ``v`` (..., n): the time unit in which they
    have the RMS :math:`\kappa` (:data:`VELOCITY_RMS`) after standardisation (the rule of :func:`standard_step`
    for exact velocities)."""
    rms = float(v.pow(2).mean().sqrt())
    if not rms > 0:
        raise BeaValueError("every velocity is zero, so the states say nothing about the dynamics (and fix no time unit). "
                         "Give states that move")
    return VELOCITY_RMS * unit / rms


class StandardUnits:
    r"""Maps between the data's units and the standardised coordinates of a fitted model (module docstring).

    State: ``_center`` :math:`\bar q` (None: no shift), ``_unit`` :math:`\sigma`, ``_step`` :math:`h'` (None:
    the time unit is the data's, :math:`h' = h`), ``_rotation`` :math:`R` (None: :math:`I`; only with a centre);
    ``h`` is the model's step in the data's units."""

    h: float
    _center: Optional[torch.Tensor] = None
    _unit: float = 1.0
    _step: Optional[float] = None
    _rotation: Optional[torch.Tensor] = None

    def _set_units(self, center: Optional[torch.Tensor], unit: float, step: Optional[float],
                   device: Optional[torch.device] = None, rotation: Optional[torch.Tensor] = None) -> None:
        """``device``: where the data are, when there is no ``center`` to tell (default: the CPU); ``rotation``: an
        orthogonal :math:`R` (module docstring), or None."""
        self._center, self._unit, self._step = center, float(unit), (None if step is None else float(step))
        self._data_device = center.device if center is not None else torch.device(device or "cpu")
        self._rotation = None if rotation is None else check_rotation(rotation, center)

    @property
    def _h_std(self) -> float:
        """:math:`h'`, the step in the standardised time unit."""
        return self.h if self._step is None else self._step

    @property
    def _time(self) -> float:
        r""":math:`\tau = h/h'`, the time unit in the data's units."""
        return 1.0 if self._step is None else self.h / self._step

    @property
    def _speed(self) -> float:
        r""":math:`s = \sigma/\tau`, the unit of velocity (and the factor of momenta and DEL residuals)."""
        return self._unit / self._time

    @property
    def _units_device(self) -> torch.device:
        """The device of the fitted data, where the model's own tensors are made."""
        return getattr(self, "_data_device", torch.device("cpu"))

    @property
    def _standardised(self) -> bool:
        return self._unit != 1.0 or self._time != 1.0 or (self._center is not None and bool(self._center.any()))

    def _to_standard(self, q: torch.Tensor) -> torch.Tensor:
        if self._center is None:
            return q
        d = (q - self._center) / self._unit
        return d if self._rotation is None else d @ self._rotation

    def _from_standard(self, q: torch.Tensor) -> torch.Tensor:
        if self._center is None:
            return q
        return (q if self._rotation is None else q @ self._rotation.T) * self._unit + self._center

    def _vector_to_standard(self, v: torch.Tensor) -> torch.Tensor:
        r"""A velocity in the data's units in the GP's coordinates, :math:`v' = R^\top v/s`."""
        return (v if self._rotation is None else v @ self._rotation) / self._speed

    def _in_data_units(self, L_std: Callable) -> Callable:
        r"""A Lagrangian of the GP's coordinates as one of the data's: :math:`L(q, v) = s^2 L'(q'(q), v'(v))`
        (energies scale as :math:`s^2`)."""
        frozen = self._frozen_units()  # the units of now, whatever the model is fitted on next (learners.shadow.handles)
        s2, to_std, vec_to_std = frozen._speed ** 2, frozen._to_standard, frozen._vector_to_standard
        return lambda q, v: s2 * L_std(to_std(q), vec_to_std(v))

    def _frozen_units(self) -> "StandardUnits":
        """A copy of these units alone (the tensors cloned): what a handle of the model reads."""
        u = StandardUnits()
        u.h, u._step, u._unit = self.h, self._step, self._unit
        u._center = None if self._center is None else self._center.clone()
        u._rotation = None if self._rotation is None else self._rotation.clone()
        u._data_device = self._units_device
        return u

    def _vector_from_standard(self, v: torch.Tensor) -> torch.Tensor:
        """A velocity, momentum or DEL residual of the GP's coordinates in the data's units, :math:`s R v'` (module
        docstring: for an orthogonal :math:`R` covectors map as vectors)."""
        return self._speed * (v if self._rotation is None else v @ self._rotation.T)

    def _standard_state(self, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``(q, v)`` in the GP's coordinates ``(R^T (q - center)/unit, R^T v/speed)``, concatenated."""
        return torch.cat([self._to_standard(q), self._vector_to_standard(v)], -1)

    def _input_units(self, n: int) -> torch.Tensor:
        r"""The unit of each GP input in the data's units: :math:`\sigma` (n positions), :math:`s` (n velocities)."""
        return torch.tensor([self._unit] * n + [self._speed] * n, dtype=torch.float64, device=self._units_device)

    def _standard_functionals(self, G: Functionals) -> Functionals:
        r"""Functionals of :math:`L = s^2 L'(x')` (points and directions in the data's units) as functionals of
        :math:`L'`: points mapped, each direction component divided by its input's unit (one factor per
        derivative), coefficients times :math:`s^2`."""
        n, R, units = G.dim // 2, self._rotation, self._input_units(G.dim // 2)

        def lin(x):  # with a rotation, a derivative along d is one along (R^T d_q / unit, R^T d_v / speed)
            return (x if R is None else torch.cat([x[..., :n] @ R, x[..., n:] @ R], -1)) / units
        center = self._center if self._center is not None else torch.zeros(n, dtype=torch.float64, device=G.device)
        shift = torch.cat([center, torch.zeros_like(center)])
        atoms = {m: AtomSet(lin(A.points - shift), lin(A.dirs), A.coef * self._speed ** 2, A.owner)
                 for m, A in G.atoms.items()}
        return Functionals(G.dim, G.count, atoms, G.targets)


def check_rotation(R: torch.Tensor, center: Optional[torch.Tensor]) -> torch.Tensor:
    """:math:`R` as float64 on the centre's device, if it is orthogonal (to rounding) and the units have a centre."""
    if center is None:
        raise BeaValueError("a rotation of the standardised coordinates needs their centre (a standardised fit)")
    R = torch.as_tensor(R, dtype=torch.float64, device=center.device)
    n = center.numel()
    if R.shape != (n, n) or not bool(torch.isfinite(R).all()):
        raise BeaValueError(f"the rotation must be a finite ({n}, {n}) matrix, got shape {tuple(R.shape)}")
    err = float((R.T @ R - torch.eye(n, dtype=torch.float64, device=R.device)).abs().max())
    if err > 1e-10:
        raise BeaValueError(f"the rotation must be orthogonal (R^T R = I), it is off by {err:.3g}: use orthonormal directions")
    return R


class StandardisedMean:
    r""":math:`\bar L'_{inv}` of a fitted model in its standardised coordinates, callable as ``L(q, v)``
    and with the C form of the posterior mean, so that predictions step on the integrators' compiled path."""

    def __init__(self, model):
        self.model = model
        self.n = model.n

    def __call__(self, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.model.gp.mean(torch.cat([q, v], -1))

    def c_lagrangian(self):
        return self.model._standardised_c_lagrangian()


def data_units_form(model, n: int):
    r"""The C form of a fitted model's posterior mean in the data's units: :math:`L(q, v) = s^2\,\bar L'((q - \bar q)/\sigma,
    v/s)` (module docstring), the GP coordinates' C form composed by
    :class:`integrators.model_protocol.AffineModel` (so the public ``integrator()`` steps in C like ``predict``)."""
    from integrators.model_protocol import AffineModel

    if model._rotation is not None:  # AffineModel maps each coordinate alone: the full linear map
        return rotated_form(model, n)
    speed = float(model._speed)
    unit = float(model._unit) if model._center is not None else 1.0
    center = model._center if model._center is not None else torch.zeros(n, dtype=torch.float64)
    units = [unit] * n + [speed] * n
    offsets = torch.cat([center.reshape(-1).double().cpu(), torch.zeros(n, dtype=torch.float64)])
    return AffineModel(StandardisedMean(model), speed ** 2, units, offsets).compiled_form(n)


def rotated_form(model, n: int):
    r"""The C form of a model fitted in rotated coordinates: :math:`L(q, v) = s^2\,\bar L'(R^\top(q - \bar q)/\sigma,
    R^\top v/s)` (module docstring), by :class:`integrators.model_protocol.LinearMapModel`."""
    from integrators.model_protocol import LinearMapModel

    speed, R = float(model._speed), model._rotation.double().cpu()
    A = torch.block_diag(R.T / float(model._unit), R.T / speed)
    offsets = torch.cat([model._center.reshape(-1).double().cpu(), torch.zeros(n, dtype=torch.float64)])
    return LinearMapModel(StandardisedMean(model), speed ** 2, A, offsets).compiled_form(n)
