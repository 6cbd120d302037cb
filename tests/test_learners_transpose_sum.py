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
    """Where autograd records the matrix, the whole-matrix forms: tiles written through views would make the graph a
    chain of CopySlices nodes, one per tile (several tiles here)."""
    n = 2 * transpose_sum.TILE + 3
    M = torch.randn(n, n, dtype=torch.float64, requires_grad=True)
    for f in (add_transpose_, symmetrise_):
        S = f(M * 1.0)
        assert type(S.grad_fn).__name__ != "CopySlices", type(S.grad_fn).__name__
        S.sum().backward()
        assert torch.equal(M.grad, torch.full((n, n), 2.0 if f is add_transpose_ else 1.0, dtype=torch.float64))
        M.grad = None


def test_a_matrix_that_is_not_square_is_refused():
    from bea.errors import BeaValueError
    with pytest.raises(BeaValueError, match="square"):
        add_transpose_(torch.zeros(3, 4, dtype=torch.float64))


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
        cross, full = (fk.forward(Functionals(4, 5, {1: A}), Functionals(4, 5, {1: a})) for a in (twice, A))
    assert torch.equal(two, 4.0 * one) and torch.equal(cross, 2.0 * full)  # scaling by powers of 2 is exact
    assert float(one.abs().max()) > 0.1  # not a vacuous zero matrix


class _Memoising(RBFKernel):
    """A user kernel that caches its blocks (not marked fresh_block: the assembly must not modify what it returns)."""

    def derivative_block(self, X, U, Y, V):
        key = (X.data_ptr(), Y.data_ptr(), X.shape, Y.shape)
        cache = self.__dict__.setdefault("_blocks", {})
        if key not in cache:
            cache[key] = super().derivative_block(X, U, Y, V)
        return cache[key]


def test_a_user_kernel_that_memoises_its_blocks_gets_the_same_covariance_twice():
    gen = torch.Generator().manual_seed(3)
    F = snapshot_functionals(0.3 * torch.randn(12, 6, 2, generator=gen, dtype=torch.float64).cumsum(1), 0.2, "midpoint")[0]
    kern = _Memoising(ard_num_dims=4).to(torch.float64)
    kern.lengthscale = torch.tensor([0.7, 1.1, 0.9, 1.3], dtype=torch.float64)
    fk = FunctionalKernel(kern.requires_grad_(False)).requires_grad_(False)
    first, again = symmetric_covariance(fk, F), symmetric_covariance(fk, F)
    assert torch.equal(first, again) and torch.equal(first, symmetric_covariance(_rbf(), F))
