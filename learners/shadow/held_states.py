r"""States :math:`(q, v)` read off snapshots, and a choice of them spread across trajectories.

A state of a trajectory :math:`q_0, q_1, \dots` at step :math:`h` is a midpoint of a triple with its central-difference
velocity, :math:`(q_j,\ (q_{j+1} - q_{j-1})/2h)`, :math:`j = 1 \dots m-2`. Along one trajectory a conserved energy
barely changes, so a check that compares energies of states must draw them from many trajectories:
:func:`spread_picks` takes one state per trajectory first, then further ones at times spread over each trajectory.
"""

from __future__ import annotations

from typing import Tuple

import torch

__all__ = ["midpoint_states", "spread_picks"]


def midpoint_states(S: torch.Tensor, h: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """Midpoints ``q`` and central-difference velocities ``v`` (each ``(T, m - 2, n)``) of snapshots ``S``
    ``(T, m, n)`` at step ``h`` (module docstring)."""
    return S[:, 1:-1], (S[:, 2:] - S[:, :-2]) / (2 * h)


def spread_picks(trajectories: int, per: int, count: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Indices ``(t, j)`` (long, CPU) of up to ``count`` of ``trajectories`` x ``per`` states: where ``count`` is below
    the number of trajectories, one state (the first) of each of ``count`` trajectories spread evenly over them;
    otherwise one per trajectory at each of ``ceil(count / trajectories)`` times spread evenly over a trajectory (the
    first time first), pass by pass, the last pass cut at ``count``."""
    count = min(count, trajectories * per)
    if count < trajectories:
        t = torch.linspace(0, trajectories - 1, count, dtype=torch.float64).round().long()
        return t, torch.zeros_like(t)
    passes = -(-count // trajectories)  # <= per, so the rounded times below are distinct
    times = torch.linspace(0, per - 1, passes, dtype=torch.float64).round().long()
    t = torch.arange(trajectories).repeat(passes)
    return t[:count], times.repeat_interleave(trajectories)[:count]
