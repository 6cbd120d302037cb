r"""Random initial states drawn as in the ModLaNet paper's code (§5.2; docs/theory/modlanet.md): the
states from which learned models and the true system are rolled out and compared."""

from __future__ import annotations

import math
import re
from typing import Optional, Tuple, Union

import numpy as np
import torch

from bea.errors import BeaValueError

__all__ = ["random_initial_states"]


def random_initial_states(system, n: int = 100, seed: int = 0, *, device: Optional[Union[str, torch.device]] = None,
                          dtype: torch.dtype = torch.float64) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""``n`` random initial states ``(q0, v0)`` (each ``(n, dof)``, ``dtype`` on ``device``, by default float64
    on the CPU) drawn as in the paper's code (``random_config`` of YupuLu/ModLaNets), deterministic in ``seed``
    (NumPy ``default_rng``). The draws are made in float64 on the CPU, so they are the same on every device.

    ``system``: an :mod:`integrators.systems` system named ``"<k>-pendulum"`` or ``"<N>-body"``, or the
    strings ``"double_pendulum"`` / ``"three_body"``.

    * pendulum chain (unit masses and lengths, as the paper): each angle :math:`\theta_i \sim U(0, 2\pi)`,
      each angular velocity :math:`\omega_i \sim U(-10, 10)` (the paper draws a "momentum" in
      :math:`[-10, 10]` and divides it by :math:`m_i l_i^2 = 1`);
    * ``N`` bodies (unit masses, G = 1): a point :math:`p_0 \sim U([-1, 1]^2)` rescaled to radius
      :math:`r \sim U(1, 5)`; body ``i`` at :math:`R(2\pi i/N)\,p_0`; velocity
      :math:`R(2\pi i/N)\big[\hat t\, s \odot (1 + \nu\, u_i)\big]`, with :math:`\hat t` the unit tangent,
      :math:`u_i \sim U([-1, 1]^2)`, :math:`\nu = 0.5` and
      :math:`s^2 = \frac{1}{2r}\sum_{k=1}^{N-1} 1/\sin(\pi k/N)`, the paper's formula. That base speed
      is :math:`\sqrt2` times the circular-orbit speed of the regular polygon
      (:math:`\frac{1}{4r}\sum_k 1/\sin(\pi k/N)`), so many states are unbound -- the paper notes that
      particles often escape.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise BeaValueError(f"n must be a positive integer, got {n!r}")
    name = system if isinstance(system, str) else getattr(system, "name", "")
    name = {"double_pendulum": "2-pendulum", "three_body": "3-body"}.get(name, name)
    rng = np.random.default_rng(seed)
    m = re.fullmatch(r"(\d+)-pendulum", name or "")
    if m:
        k = int(m.group(1))
        u = rng.random((n, k, 2))
        q0 = 2 * math.pi * u[..., 0]
        v0 = (2 * u[..., 1] - 1) * 10.0
        return _tensors(q0, v0, device, dtype)
    m = re.fullmatch(r"(\d+)-body", name or "")
    if m:
        N = int(m.group(1))
        nu, r_min, r_max = 0.5, 1.0, 5.0
        theta = 2 * math.pi / N
        speed2_r = sum(1 / math.sin(math.pi * k / N) for k in range(1, N)) / 2  # s^2 * r
        q0, v0 = np.zeros((n, 2 * N)), np.zeros((n, 2 * N))
        for b in range(n):
            p0 = 2 * rng.random(2) - 1
            r = rng.random() * (r_max - r_min) + r_min
            p0 *= r / np.linalg.norm(p0)
            tangent = _rotate(p0 / np.linalg.norm(p0), math.pi / 2)
            s = math.sqrt(speed2_r / r)
            for i in range(N):
                q0[b, 2 * i: 2 * i + 2] = _rotate(p0, i * theta)
                vel = tangent * s * (1 + nu * (2 * rng.random(2) - 1))
                v0[b, 2 * i: 2 * i + 2] = _rotate(vel, i * theta)
        return _tensors(q0, v0, device, dtype)
    raise BeaValueError(f"random_initial_states knows pendulum chains ('<k>-pendulum', 'double_pendulum') and N-body systems "
                     f"('<N>-body', 'three_body'), got {name!r}")


def _rotate(x: np.ndarray, angle: float) -> np.ndarray:
    c, s = math.cos(angle), math.sin(angle)
    return np.array([c * x[0] - s * x[1], s * x[0] + c * x[1]])


def _tensors(q0: np.ndarray, v0: np.ndarray, device, dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    return (torch.from_numpy(q0).to(device=device, dtype=dtype), torch.from_numpy(v0).to(device=device, dtype=dtype))
