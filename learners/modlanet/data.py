r"""Data for ModLaNet experiments (docs/theory/modlanet.md): multi-pendulum and planar ``N``-body trajectories from the
exact Euler–Lagrange flow (:func:`integrators.reference_flow`, DOP853 at ``1e-13``), as ``(q, v, a)``
samples for the acceleration loss or as position-only snapshots for the DEL loss.

Sampling follows the paper's reference code (the paper gives only "10k–20k samples, :math:`t_g` = 5 or
10 s, 10 or 20 steps per second"):

* **pendulum chain** (masses and lengths 1, :math:`g = 9.8`; Lagrangian
  :func:`integrators.systems.n_pendulum`, angles from the downward vertical): every angle
  :math:`\theta_i \sim U(0, 2\pi)`, every angular velocity :math:`\omega_i \sim U(-10, 10)` (the paper draws
  a momentum in :math:`U(-10, 10)` and divides by :math:`m_il_i^2 = 1`); 10 s at 10 samples per second,
  100 trajectories: 10 100 samples (``double_pendulum_data``).
* **bodies** (:math:`G = 1`, masses 1; :func:`integrators.systems.n_body`): the ``N`` bodies on a regular
  polygon of radius :math:`r \sim U(1, 5)` with a random orientation, each velocity tangential with the
  speed :math:`\sqrt{2}\,v_{circ}`, :math:`v_{circ}^2 = \frac{G}{4r}\sum_{k=1}^{N-1} m/\sin(\pi k/N)` (the
  paper's code uses :math:`G/(2r)` in place of :math:`G/(4r)`, i.e. this factor :math:`\sqrt 2`; ``speed``
  changes it), each component (in the frame of body 0, before the rotation
  that places body ``i``) then scaled by :math:`1 + \nu U(-1, 1)`, :math:`\nu = 0.5`; 5 s at 20
  samples per second, 200 trajectories: 20 200 samples (``three_body_data``).

Angles are kept continuous (not reduced mod :math:`2\pi`; the periodic transforms of
:class:`~learners.modlanet.ModLaNet` do not need it, and snapshots must be continuous for the DEL
loss). Everything is deterministic given ``seed`` (a NumPy ``Generator``; no global state).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from integrators import reference_flow, systems
from integrators.reference import acceleration_function

from bea.errors import BeaValueError

__all__ = [
    "AccelerationData",
    "pendulum_initial_states",
    "body_initial_states",
    "pendulum_chain_data",
    "n_body_data",
    "double_pendulum_data",
    "three_body_data",
    "pendulum_chain_snapshots",
    "n_body_snapshots",
]

G_EARTH = 9.8


class AccelerationData(NamedTuple):
    """Samples along trajectories, trajectory-major: ``q, v, a`` ``(N, n)``, time ``t`` ``(N,)``, trajectory
    index ``traj`` ``(N,)`` and the exact energy ``energy`` ``(N,)``."""

    q: torch.Tensor
    v: torch.Tensor
    a: torch.Tensor
    t: torch.Tensor
    traj: torch.Tensor
    energy: torch.Tensor

    def __len__(self) -> int:  # number of samples (not of fields)
        return self.q.shape[0]

    def subset(self, index) -> "AccelerationData":
        return AccelerationData(*(x[index] for x in self))


def _count(x, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1:
        raise BeaValueError(f"{what} must be a positive integer, got {x!r}")
    return int(x)


def _positive(x, what: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
        raise BeaValueError(f"{what} must be a positive number, got {x!r}")
    return float(x)


# ---------------------------------------------------------------------------------------------- initial states
def pendulum_initial_states(n: int, n_traj: int, seed: Optional[int] = 0, max_velocity: float = 10.0,
                            angle_range: Tuple[float, float] = (0.0, 2 * math.pi)) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""``(q0, v0)``, each ``(n_traj, n)``: angles :math:`U(\text{angle\_range})`, angular velocities
    :math:`U(-\text{max\_velocity}, \text{max\_velocity})`."""
    n, n_traj = _count(n, "n"), _count(n_traj, "n_traj")
    if not max_velocity >= 0:
        raise BeaValueError(f"max_velocity must be >= 0, got {max_velocity!r}")
    rng = np.random.default_rng(seed)
    lo, hi = float(angle_range[0]), float(angle_range[1])
    q = rng.uniform(lo, hi, size=(n_traj, n))
    v = rng.uniform(-max_velocity, max_velocity, size=(n_traj, n))
    return torch.from_numpy(q), torch.from_numpy(v)


def body_initial_states(n: int, n_traj: int, seed: Optional[int] = 0, G: float = 1.0, min_radius: float = 1.0,
                        max_radius: float = 5.0, nu: float = 0.5, speed: float = math.sqrt(2)) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""``(q0, v0)``, each ``(n_traj, 2n)`` (``q = (x_1, y_1, x_2, …)``), equal unit masses: the perturbed
    rotating polygon of the module docstring."""
    n, n_traj = _count(n, "n"), _count(n_traj, "n_traj")
    if n < 2:
        raise BeaValueError(f"the N-body data need n >= 2 bodies, got {n}")
    G, speed = _positive(G, "G"), _positive(speed, "speed")
    if not 0 < min_radius <= max_radius:
        raise BeaValueError(f"need 0 < min_radius <= max_radius, got {min_radius}, {max_radius}")
    rng = np.random.default_rng(seed)
    phi0 = rng.uniform(0, 2 * math.pi, size=n_traj)
    r = rng.uniform(min_radius, max_radius, size=n_traj)
    factors = 1 + nu * rng.uniform(-1, 1, size=(n_traj, n, 2))
    s = sum(1 / math.sin(math.pi * k / n) for k in range(1, n))
    v_circ = np.sqrt(G / (4 * r) * s)
    q = np.empty((n_traj, n, 2))
    v = np.empty((n_traj, n, 2))
    # as the paper's code: body 0's tangential velocity, scaled componentwise in body 0's frame, then
    # rotated with the body by 2 pi i / n
    w = speed * v_circ[:, None] * np.stack([-np.sin(phi0), np.cos(phi0)], -1)  # (n_traj, 2)
    for i in range(n):
        rot = 2 * math.pi * i / n
        c, s_ = math.cos(rot), math.sin(rot)
        phi = phi0 + rot
        q[:, i, 0], q[:, i, 1] = r * np.cos(phi), r * np.sin(phi)
        wi = w * factors[:, i]
        v[:, i, 0], v[:, i, 1] = c * wi[:, 0] - s_ * wi[:, 1], s_ * wi[:, 0] + c * wi[:, 1]
    return torch.from_numpy(q.reshape(n_traj, 2 * n)), torch.from_numpy(v.reshape(n_traj, 2 * n))


# ---------------------------------------------------------------------------------------------- samples
def _samples(system, q0, v0, t_max: float, rate: float, n_samples: Optional[int]) -> AccelerationData:
    t_max, rate = _positive(t_max, "t_max"), _positive(rate, "rate")
    steps = int(round(t_max * rate))
    if steps < 1:
        raise BeaValueError(f"t_max * rate must be >= 1, got {t_max} * {rate}")
    times = torch.linspace(0.0, t_max, steps + 1, dtype=torch.float64, device=q0.device)
    flow = reference_flow(system, q0, v0, times)
    qs, vs = flow.q, flow.v  # (T, B, n)
    T, B, n = qs.shape
    q = qs.transpose(0, 1).reshape(-1, n)
    v = vs.transpose(0, 1).reshape(-1, n)
    A, _ = acceleration_function(system)
    a = torch.from_numpy(A(q.cpu().numpy(), v.cpu().numpy())).to(q.device)  # NumPy on the host
    t = times.repeat(B)
    traj = torch.arange(B, device=q.device).repeat_interleave(T)
    energy = system.energy(q, v).detach()
    data = AccelerationData(q, v, a, t, traj, energy)
    if n_samples is not None:
        data = data.subset(slice(0, n_samples))
    for name, x in zip(data._fields, data):
        if not bool(torch.isfinite(x.double() if x.dtype != torch.long else x.double()).all()):
            raise BeaValueError(f"the generated {name} contains non-finite values (a near-collision?): change seed or the sampling ranges")
    return data


def _n_traj(n_traj: Optional[int], n_samples: Optional[int], per_traj: int, default: int) -> int:
    if n_samples is not None:
        n_samples = _count(n_samples, "n_samples")
        return math.ceil(n_samples / per_traj)
    return _count(default if n_traj is None else n_traj, "n_traj")


def pendulum_chain_data(n: int = 2, n_traj: Optional[int] = None, *, t_max: float = 10.0, rate: float = 10.0, seed: Optional[int] = 0,
                        n_samples: Optional[int] = None, g: float = G_EARTH, masses: Union[float, Sequence[float]] = 1,
                        lengths: Union[float, Sequence[float]] = 1, max_velocity: float = 10.0) -> AccelerationData:
    r"""``(q, v, a)`` samples of an ``n``-pendulum chain: ``n_traj`` trajectories (default 100) sampled at
    ``rate`` per second on :math:`[0, t_{max}]` (both ends: ``t_max * rate + 1`` samples each), or exactly
    ``n_samples`` samples (as many trajectories as needed, the last one cut)."""
    per = int(round(t_max * rate)) + 1
    nt = _n_traj(n_traj, n_samples, per, 100)
    system = systems.n_pendulum(n, masses=masses, lengths=lengths, g=g)
    q0, v0 = pendulum_initial_states(n, nt, seed, max_velocity)
    return _samples(system, q0, v0, t_max, rate, n_samples)


def n_body_data(n: int = 3, n_traj: Optional[int] = None, *, t_max: float = 5.0, rate: float = 20.0, seed: Optional[int] = 0,
                n_samples: Optional[int] = None, G: float = 1.0, **initial) -> AccelerationData:
    r"""``(q, v, a)`` samples of the planar ``n``-body problem (unit masses): ``n_traj`` trajectories
    (default 200) at ``rate`` per second on :math:`[0, t_{max}]`, or exactly ``n_samples`` samples;
    ``initial``: options of :func:`body_initial_states`."""
    per = int(round(t_max * rate)) + 1
    nt = _n_traj(n_traj, n_samples, per, 200)
    system = systems.n_body([1] * n, G=G)
    q0, v0 = body_initial_states(n, nt, seed, G=G, **initial)
    return _samples(system, q0, v0, t_max, rate, n_samples)


def double_pendulum_data(n_traj: Optional[int] = None, **kwargs) -> AccelerationData:
    """The paper's double-pendulum set (10 100 samples at the defaults); options of :func:`pendulum_chain_data`."""
    return pendulum_chain_data(2, n_traj, **kwargs)


def three_body_data(n_traj: Optional[int] = None, **kwargs) -> AccelerationData:
    """The paper's three-body set (20 200 samples at the defaults); options of :func:`n_body_data`."""
    return n_body_data(3, n_traj, **kwargs)


# ---------------------------------------------------------------------------------------------- snapshots
def _snapshots(system, q0, v0, n_steps: int, h: float, return_initial: bool):
    n_steps, h = _count(n_steps, "n_steps"), _positive(h, "h")
    times = h * torch.arange(n_steps + 1, dtype=torch.float64, device=q0.device)
    qs = reference_flow(system, q0, v0, times).q
    S = qs.transpose(0, 1).contiguous()  # (n_traj, n_steps + 1, n)
    return (S, (q0, v0)) if return_initial else S


def pendulum_chain_snapshots(n: int = 2, n_traj: int = 100, n_steps: int = 50, h: float = 0.1, *, seed: Optional[int] = 0,
                             g: float = G_EARTH, masses=1, lengths=1, max_velocity: float = 10.0,
                             angle_range: Tuple[float, float] = (0.0, 2 * math.pi), return_initial: bool = False):
    r"""Position-only snapshots ``(n_traj, n_steps + 1, n)`` of an ``n``-pendulum chain at step ``h`` (no
    velocities, no accelerations); ``return_initial=True`` also returns ``(q0, v0)`` (for evaluation only)."""
    system = systems.n_pendulum(n, masses=masses, lengths=lengths, g=g)
    q0, v0 = pendulum_initial_states(n, n_traj, seed, max_velocity, angle_range)
    return _snapshots(system, q0, v0, n_steps, h, return_initial)


def n_body_snapshots(n: int = 3, n_traj: int = 200, n_steps: int = 50, h: float = 0.1, *, seed: Optional[int] = 0, G: float = 1.0,
                     return_initial: bool = False, **initial):
    r"""Position-only snapshots ``(n_traj, n_steps + 1, 2n)`` of the planar ``n``-body problem at step ``h``."""
    system = systems.n_body([1] * n, G=G)
    q0, v0 = body_initial_states(n, n_traj, seed, G=G, **initial)
    return _snapshots(system, q0, v0, n_steps, h, return_initial)
