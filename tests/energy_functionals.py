"""Test helper: the energy H = v . dL/dv - L at given states as linear functionals of L (atoms), so that a GP's exact
functional posterior can be compared with the routes the models take."""

import torch

from learners.shadow.functionals import AtomSet, Functionals


def energy_functionals(x: torch.Tensor, n: int) -> Functionals:
    """H = v . dL/dv - L at the states x (B, 2n), as atoms (linear in L)."""
    B, D = x.shape
    dirs = torch.cat([torch.zeros(B, n, dtype=torch.float64), x[:, n:]], -1)[:, None, :]
    own = torch.arange(B)
    return Functionals(D, B, {0: AtomSet(x, torch.zeros(B, 0, D, dtype=torch.float64), -torch.ones(B, dtype=torch.float64), own),
                             1: AtomSet(x, dirs, torch.ones(B, dtype=torch.float64), own)})
