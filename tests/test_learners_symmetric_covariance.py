"""The search's covariance assembly (learners/shadow/symmetric_covariance.py): each atom pair once, equal to the
full, averaged assembly of FunctionalKernel.forward to rounding, for the RBF and the mechanical kernel."""

import pytest
import torch

from bea.errors import BeaValueError
from learners import FunctionalKernel, RBFKernel
from learners.shadow.functionals import (Functionals, del_residual_functionals, gradient_evaluations, point_evaluations,
                                         triples_from_snapshots)
from learners.shadow.kernels import CHUNK_ATOMS
from learners.shadow.gp import FunctionalGP
from learners.shadow.mechanical import MechanicalKernel
from learners.shadow.normalisation import MassNormalisation
from learners.shadow.symmetric_covariance import symmetric_covariance

#: entries are sums of a few hundred atom-pair terms of size <= 1 (times the outputscale): the two assemblies add
#: them in different orders, so they differ by a few hundred ulps of the largest entry at most; any missing or
#: doubled pair differs by O(1) of an entry (the diagonal pairs: half of a diagonal entry)
ROUNDING = 1e-12


def _functionals(seed: int, traj: int) -> Functionals:
    """Point values, gradients (orders 0 and 1, as a normalisation has), the whole mass matrix's conditions with a
    curvature term (order-2 atoms and order-0/1 ones at the same point) and DEL residuals of ``traj`` trajectories
    in n = 2 (order-1 atoms, neighbouring triples sharing midpoints): every pair of orders 0, 1, 2 meets, so a block
    assembled in the wrong order for one pair of orders is not hidden by a symmetric one."""
    g = torch.Generator().manual_seed(seed)
    S = 0.6 * torch.randn(traj, 5, 2, generator=g, dtype=torch.float64)
    x = torch.randn(3, 4, generator=g, dtype=torch.float64)
    d = torch.randn(3, 4, generator=g, dtype=torch.float64)
    return Functionals.cat([point_evaluations(x), gradient_evaluations(x, d),
                            MassNormalisation(matrix=True, curvature=0.3).functionals(2, None),
                            del_residual_functionals(triples_from_snapshots(S), 0.3)])


def _mechanical():
    k = MechanicalKernel(2, ard_num_dims=4).to(torch.float64)
    k.lengthscale = torch.tensor([[0.7, 1.3, 1.9, 2.6]], dtype=torch.float64)
    return k


def _rbf():
    k = RBFKernel(ard_num_dims=4).to(torch.float64)
    k.lengthscale = torch.tensor([[0.7, 1.3, 1.9, 2.6]], dtype=torch.float64)
    return k


@pytest.mark.parametrize("base", [_rbf, _mechanical])
@pytest.mark.parametrize("traj", [4, 150])  # 150 trajectories: more atoms than one chunk's rows (several chunks)
def test_symmetric_assembly_equals_the_full_one(base, traj):
    FK = FunctionalKernel(base()).to(torch.float64)
    FK.outputscale = 2.5
    F = _functionals(traj, traj)
    if traj == 150:  # the chunked path: the order-1 set has several row chunks
        assert len(F.atoms[1]) > max(16, CHUNK_ATOMS * CHUNK_ATOMS // len(F.atoms[1]))
    with torch.no_grad():
        full = FK.forward(F, F)
    full = 0.5 * (full + full.T)  # what FunctionalGP.factor solves with
    sym = symmetric_covariance(FK, F)
    assert torch.equal(sym, sym.T)
    assert float((sym - full).abs().max()) <= ROUNDING * float(full.abs().max())
    assert set(F.atoms) == {0, 1, 2}


def test_a_search_solve_is_not_the_full_solve():
    """FunctionalGP.condition(F, symmetric=True) (a positions search's evaluation) and then condition(F) with the
    same functionals and hyperparameters (the calibration) solves again with the full assembly, bit for bit a fresh
    GP's solve; the same assembly twice reuses its solve. The mechanical kernel: its entries round differently in
    the two assemblies (the coefficients differ, else this test could not tell the solves apart)."""
    F = _functionals(4, 4)
    F = Functionals(F.dim, F.count, F.atoms, torch.randn(F.count, generator=torch.Generator().manual_seed(5),
                                                         dtype=torch.float64))
    gps = []
    for _ in range(2):
        gp = FunctionalGP(FunctionalKernel(_mechanical()), noise=1e-6)
        for p in gp.parameters():
            p.requires_grad_(False)
        gps.append(gp)
    gp, fresh = gps
    with torch.no_grad():
        sym = gp.condition(F, symmetric=True)._beta
        assert gp.condition(F, symmetric=True)._beta is sym
        full = gp.condition(F)._beta
        assert not torch.equal(full, sym)
        assert torch.equal(full, fresh.condition(F)._beta)
        assert gp.condition(F)._beta is full


def test_the_symmetric_assembly_refuses_two_families_or_gradients():
    """forward(F1, F2, symmetric=True) adds only F1's atom pairs m <= m' and U + U^T: with F2 another family, or with
    gradients in the hyperparameters (the in-place assembly has none), it would be a wrong matrix, so it is an error."""
    FK = FunctionalKernel(_rbf()).to(torch.float64)
    F, G = _functionals(4, 4), _functionals(5, 4)  # the same sizes and orders: only the atoms differ
    with torch.no_grad():
        with pytest.raises(BeaValueError):
            FK.forward(F, G, symmetric=True)
        assert torch.equal(FK.forward(F, F, symmetric=True), symmetric_covariance(FK, F))
    with pytest.raises(BeaValueError):
        FK.forward(F, F, symmetric=True)  # the lengthscale and outputscale require grad
