"""Issue 27's metrics (benchmarks/element_acceptance.py), for any model with ``energy(N)`` (a callable H(q, v)) and
``predict(q0, qdot0, steps, order=2)``; the calibration also needs ``energy(N, return_std=True, reference=...)``.

* level-set error of H_rec[N]: the mean of mu(x) = sin angle(grad H_rec[N](x), grad H(x)) over the first ``points``
  Halton states (unscrambled) of the system's box shrunk about its centre to ``fraction`` of its width (0.7:
  pipelines.identification's states, inside the data's box); the order-4 gain is ls2 / ls4 (the README's FPU
  table, benchmarks/identification_default.py).
* calibration of held-out energy differences: H_rec[N](x_k) - H_rec[N](x_0) at the 40 + 1 states of
  tests/test_learners_shadow_auto.held_out_states (middle 70% of the box, seed 11), against the true differences
  times their least-squares scale s (the energy is identified up to scale and constant); z_k = (mean_k - s true_k) /
  std_k; reported: relative error, RMS z, fraction |z| <= 2, mean |z|, max |z| (benchmarks/identification_acceptance.py).
* trajectory error: max over ``steps`` steps and the coordinates of |q_model(t_j) - q(t_j)| from ``count`` initial
  states (scrambled Halton, seed 5, in the same shrunk box) against the exact flow
  (:func:`integrators.reference_flow`), per initial state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Sequence

import torch

#: fraction of the data's box where the level sets and the trajectories' initial states lie (pipelines.identification)
FRACTION = 0.7


def shrunk_box(domain, fraction: float = FRACTION):
    """The box ``domain`` scaled about its centre by ``fraction``."""
    return [((lo + hi) / 2 - fraction * (hi - lo) / 2, (lo + hi) / 2 + fraction * (hi - lo) / 2) for lo, hi in domain]


def level_set_errors(model, system, orders: Sequence[int], points: int = 40) -> Dict[int, float]:
    """``{N: mean level-set error of model.energy(N)}`` against ``system.energy`` (module docstring)."""
    from pipelines.identification import _Box
    from pipelines.shadow_experiments import _level_sets, _level_states

    states = _level_states(_Box(shrunk_box(system.domain), points), system.n)
    return {N: _level_sets({}, "", model.energy(N), system.energy, states, chunk=64) for N in orders}


@dataclass(frozen=True)
class Calibration:
    """Held-out energy differences of one order: relative error after the best scale and the z-scores' summary."""

    rel: float
    rms_z: float
    within2: float
    mean_abs_z: float
    max_abs_z: float

    @classmethod
    def of(cls, rel: float, z: torch.Tensor) -> "Calibration":
        a = z.detach().abs()
        return cls(rel, float(a.pow(2).mean().sqrt()), float((a <= 2).double().mean()), float(a.mean()), float(a.max()))

    def met(self) -> bool:
        """Issue 27's calibration: 85-99% within 2 sigma and RMS z in [0.5, 1.5]."""
        return 0.85 <= self.within2 <= 0.99 and 0.5 <= self.rms_z <= 1.5


def calibration(model, system, order: int, count: int = 40, std: bool = True) -> Calibration:
    """The held-out energy differences of ``model.energy(order)`` and their z-scores (module docstring); ``std=False``
    for a model without one (ModLaNet): the relative error only, the z-scores' summary NaN."""
    import tests.test_learners_shadow_auto as A

    rel, z = A.energy_differences(model, system, order, count, return_std=std)
    return Calibration.of(rel, z) if std else Calibration(rel, math.nan, math.nan, math.nan, math.nan)


def trajectory_errors(model, system, h: float, steps: int = 200, count: int = 3, seed: int = 5, **predict) -> torch.Tensor:
    """``(count,)``: max |q_model - q_exact| over ``steps`` steps of ``h`` from each initial state (module docstring);
    ``predict``: options of the model's ``predict`` (e.g. ``on_extrapolation="ignore"`` for the GP). A trajectory
    the model cannot continue (non-finite positions) reads inf."""
    from integrators import reference_flow
    from integrators.data import halton_initial_conditions

    q0, v0 = halton_initial_conditions(shrunk_box(system.domain), count, seed=seed)
    times = h * torch.arange(steps + 1, dtype=torch.float64)
    q_ref = reference_flow(system, q0, v0, times).q
    q = model.predict(q0, v0, steps, order=2, **predict).q.detach()
    err = (q - q_ref).abs().amax(dim=(0, 2))
    return torch.where(torch.isfinite(err), err, torch.full_like(err, math.inf))
