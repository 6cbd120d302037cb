"""M + M^T tile by tile (learners/shadow/transpose_sum.py): bit for bit the whole-matrix form, which the symmetric
assembly used before; and the assembly's unit atom coefficients, no longer multiplied, against scaled ones."""

import pytest
import torch

from learners.shadow import transpose_sum
from learners.shadow.functionals import AtomSet, Functionals, snapshot_functionals
from learners.shadow.kernels import FunctionalKernel, RBFKernel
from learners.shadow.symmetric_covariance import symmetric_covariance
from learners.shadow.transpose_sum import add_transpose_, symmetrise_


@pytest.mark.parametrize("n, tile", [(1, 4), (7, 4), (8, 4), (9, 4), (300, 256), (513, 256)])
def test_the_tiled_sum_is_the_whole_matrix_sum_bit_for_bit(n, tile):
    M = torch.randn(n, n, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
    ref = M.add(M.T.clone())  # equal entries are the same rounded sum M_ij + M_ji either way: torch.equal, no tolerance
    got = add_transpose_(M.clone(), tile)
    assert torch.equal(got, ref) and torch.equal(got, got.T)
    assert torch.equal(symmetrise_(M.clone()), 0.5 * (M + M.T))


def test_a_recorded_matrix_keeps_its_graph():
    M = torch.randn(5, 5, dtype=torch.float64, requires_grad=True)
    S = symmetrise_(M * 1.0)  # out of place: a tile write through a view would add nodes (and M * 1.0 stays as it was)
    S.sum().backward()
    assert torch.equal(M.grad, torch.ones(5, 5, dtype=torch.float64))


def _rbf():
    kern = RBFKernel(ard_num_dims=4).to(torch.float64)
    kern.lengthscale = torch.tensor([0.7, 1.1, 0.9, 1.3], dtype=torch.float64)
    return FunctionalKernel(kern.requires_grad_(False)).requires_grad_(False)


def test_the_symmetric_assembly_is_the_whole_matrix_form_bit_for_bit(monkeypatch):
    gen = torch.Generator().manual_seed(1)
    F = snapshot_functionals(0.3 * torch.randn(70, 6, 2, generator=gen, dtype=torch.float64).cumsum(1), 0.2, "midpoint")[0]
    assert F.count > transpose_sum.TILE  # several tiles, one of them partial
    fk = _rbf()
    got = symmetric_covariance(fk, F)
    import learners.shadow.kernels as K
    monkeypatch.setattr(K, "add_transpose_", lambda M: M.add_(M.T.clone()))
    assert torch.equal(got, symmetric_covariance(fk, F))


def test_atom_coefficients_still_scale_the_covariance():
    """Unit coefficients skip their product (x * 1 is x); any other coefficient must still enter, both sides."""
    gen = torch.Generator().manual_seed(2)
    A = AtomSet(torch.randn(12, 4, generator=gen, dtype=torch.float64), torch.randn(12, 1, 4, generator=gen, dtype=torch.float64),
                torch.ones(12, dtype=torch.float64), torch.arange(12) % 5)
    twice = AtomSet(A.points, A.dirs, 2.0 * A.coef, A.owner)
    fk = _rbf()
    with torch.no_grad():
        one, two = (symmetric_covariance(fk, Functionals(4, 5, {1: a})) for a in (A, twice))
        cross = fk.forward(Functionals(4, 5, {1: A}), Functionals(4, 5, {1: twice}))
    assert torch.allclose(two, 4.0 * one, rtol=1e-14, atol=0) and torch.allclose(cross, 2.0 * one, rtol=1e-14, atol=0)
    assert float(one.abs().max()) > 0.1  # not a vacuous zero matrix
