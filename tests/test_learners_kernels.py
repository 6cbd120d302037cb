"""Functionals, the functional kernel and the functional GP: exact identities, checked to rounding."""

import math

import pytest
import torch

import bea
from learners.shadow.functionals import (Functionals, del_residual_functionals, discrete_momentum_functionals,
                                         euler_lagrange_residuals, point_evaluations, triples_from_snapshots)
from learners.shadow.gp import FunctionalGP
from learners.shadow.kernels import AtomExpansion, FunctionalKernel, RBFKernel, SmoothKernel
from learners.shadow.normalisation import MassNormalisation, VertexNormalisation


def L1(q, v):
    return 0.5 * (1 + 0.3 * q[..., 0] ** 2) * v[..., 0] ** 2 + torch.cos(q[..., 0]) + 0.2 * q[..., 0] * v[..., 0] ** 3


def L2(q, v):
    return 0.5 * (v**2).sum(-1) * (1 + q[..., 0] ** 2) + torch.cos(q).prod(-1) + 0.1 * q[..., 1] * v[..., 0]


def _as_x(L, n):
    return lambda x: L(x[..., :n], x[..., n:])


@pytest.mark.parametrize("scheme,n,L", [("midpoint", 1, L1), ("trapezoidal", 1, L1), ("generalised_midpoint:0.3", 2, L2),
                                        ("midpoint", 2, L2)])
def test_del_atoms_reproduce_autograd_residuals(scheme, n, L):
    """The probe-extracted atoms give exactly the DEL residual that autograd computes from the scheme."""
    torch.manual_seed(0)
    S = 0.5 * torch.randn(3, 6, n)
    tr = triples_from_snapshots(S)
    h = 0.3
    F = del_residual_functionals(tr, h, scheme)
    sch = bea.get_scheme(scheme)
    b = tr[:, 1].clone().requires_grad_(True)
    (R,) = torch.autograd.grad((sch(L, tr[:, 0], b, h) + sch(L, b, tr[:, 2], h)).sum(), b)
    assert F.count == tr.shape[0] * n
    assert torch.allclose(F.apply(_as_x(L, n)).detach(), R.reshape(-1), atol=1e-13, rtol=0)
    # discrete momenta D2 L_d(a, b)
    P = discrete_momentum_functionals(tr[:, :2], h, scheme)
    (p,) = torch.autograd.grad(sch(L, tr[:, 0], b, h).sum(), b)
    assert torch.allclose(P.apply(_as_x(L, n)).detach(), p.reshape(-1), atol=1e-13, rtol=0)


def test_euler_lagrange_atoms():
    torch.manual_seed(1)
    q, v, a = torch.randn(4, 2), torch.randn(4, 2), torch.randn(4, 2)
    F = euler_lagrange_residuals(q, v, a)
    # direct: M a + L_vq v - L_q
    qq, vv = q.clone().requires_grad_(True), v.clone().requires_grad_(True)
    val = L2(qq, vv)
    gq, gv = torch.autograd.grad(val.sum(), (qq, vv), create_graph=True)
    res = []
    for i in range(2):
        hq, hv = torch.autograd.grad(gv[:, i].sum(), (qq, vv), retain_graph=True)
        res.append((hv * a).sum(-1) + (hq * v).sum(-1) - gq[:, i])
    direct = torch.stack(res, -1).reshape(-1)
    assert torch.allclose(F.apply(_as_x(L2, 2)).detach(), direct.detach(), atol=1e-12, rtol=0)


@pytest.mark.parametrize("a,b", [(a, b) for a in range(3) for b in range(3)])
def test_rbf_closed_form_matches_autograd(a, b):
    """Isserlis-type closed form of the RBF derivative blocks = nested autograd on per-pair leaves."""
    torch.manual_seed(2)
    k = RBFKernel(ard_num_dims=3)
    k.lengthscale = torch.tensor([[0.7, 1.3, 2.1]])
    X, Y = torch.randn(4, 3), torch.randn(5, 3)
    U, V = torch.randn(4, a, 3), torch.randn(5, b, 3)
    closed = k.derivative_block(X, U, Y, V)
    auto = SmoothKernel.derivative_block(k, X, U, Y, V).detach()
    assert torch.allclose(closed, auto, atol=1e-13 * max(1.0, float(auto.abs().max())), rtol=0)


def _family():
    torch.manual_seed(3)
    S = 0.7 * torch.randn(3, 5, 2)
    return Functionals.cat([del_residual_functionals(triples_from_snapshots(S), 0.2), MassNormalisation().functionals(2),
                            euler_lagrange_residuals(torch.randn(2, 2), torch.randn(2, 2), torch.randn(2, 2)),
                            point_evaluations(torch.randn(2, 4)), VertexNormalisation().functionals(2)])


def test_theta_is_functionals_applied_on_both_sides():
    """Theta_ij = Lambda_i Lambda'_j k: column j equals the functionals applied (by autograd) to
    x -> Lambda'_j k(x, .), which is itself evaluated through the atom expansion."""
    G = _family()
    k = RBFKernel(ard_num_dims=4)
    k.lengthscale = torch.tensor([[0.9, 1.4, 1.1, 2.0]])
    fk = FunctionalKernel(k)
    for p in fk.parameters():
        p.requires_grad_(False)
    Theta = fk.forward(G, G)
    assert torch.allclose(Theta, Theta.T, atol=1e-12)
    assert float(torch.linalg.eigvalsh(Theta).min()) > -1e-10 * float(Theta.diagonal().max())
    generic = FunctionalKernel(k, closed_form=False).forward(G, G)
    assert torch.allclose(Theta, generic, atol=1e-11 * float(Theta.abs().max()), rtol=0)
    for j in (0, 5, G.count - 3, G.count - 1):
        one = G.subset(torch.tensor([j]))
        f = AtomExpansion(fk, one.atoms)  # x -> sum_atoms coef * d/dy.. k(x, y)
        col = G.apply(f).detach()
        assert torch.allclose(col, Theta[:, j], atol=1e-11 * float(Theta.abs().max()), rtol=0)
    assert torch.allclose(fk.diagonal(G), Theta.diagonal(), atol=1e-13)


def test_posterior_mean_consistency_and_fast_path():
    """Posterior mean of functionals (Theta beta) = functionals applied to the posterior mean; the fused
    RBF expansion agrees with the generic blocks, with its derivatives (gradcheck, gradgradcheck)."""
    G = _family()
    gp = FunctionalGP(FunctionalKernel(RBFKernel(ard_num_dims=4)), noise=1e-4)
    for p in gp.parameters():
        p.requires_grad_(False)
    torch.manual_seed(5)
    y = torch.randn(G.count)
    gp.condition(G, y)
    assert gp._mean_fn.fast
    # the mean is a sum of terms of size |beta|: compare at a tolerance of rounding relative to that
    tol = 1e-13 * float(gp._beta.abs().sum())
    assert torch.allclose(G.apply(gp.mean).detach(), gp.functional_mean(G), atol=tol, rtol=0)
    # the solve: Theta beta + sigma_n^2 beta = y
    assert torch.allclose(gp.functional_mean(G) + gp.noise * gp._beta, y, atol=1e-10, rtol=0)
    x = torch.randn(5, 4, requires_grad=True)
    slow = AtomExpansion(gp.kernel, gp._mean_atoms)
    slow.fast = False
    assert torch.allclose(gp.mean(x), slow(x), atol=1e-10)
    assert torch.autograd.gradcheck(gp.mean, (x,))
    assert torch.autograd.gradgradcheck(gp.mean, (x,))
    # posterior variance: far below the prior at the conditioned point evaluations, prior far away
    P = G.subset(torch.arange(G.count - 4, G.count - 2))  # the two point evaluations
    _, var = gp.functional_posterior(P)
    assert float(var.max()) < 1e-3 * float(gp.kernel.outputscale)
    far = gp.variance(torch.full((1, 4), 50.0))
    assert math.isclose(float(far), float(gp.kernel.outputscale), rel_tol=1e-9)


def test_cholesky_jitter_is_reported():
    """A duplicated functional makes Theta singular: the solve adds a reported jitter instead of failing."""
    torch.manual_seed(4)
    F = del_residual_functionals(triples_from_snapshots(torch.randn(1, 4, 1)), 0.5)
    dup = Functionals.cat([F, F, MassNormalisation().functionals(1)])
    gp = FunctionalGP(FunctionalKernel(RBFKernel()), noise=0.0, min_noise=0.0)
    for p in gp.parameters():
        p.requires_grad_(False)
    gp.condition(dup)
    assert gp.info.jitter > 0
    assert gp.info.size == dup.count
    assert "jitter" in str(gp.info)


def test_covariance_without_gradients_equals_the_differentiable_one():
    """The in-place assembly (no gradients) and the out-of-place one (gradients through the hyperparameters) add
    the same atom blocks: equal to rounding, on a family with atoms of orders 0, 1 and 2."""
    G = _family()
    assert len(G.atoms) >= 2
    fk = FunctionalKernel(RBFKernel(ard_num_dims=4))
    fk.base_kernel.lengthscale = torch.tensor([[0.9, 1.4, 1.1, 2.0]])
    fk.outputscale = 1.7
    with torch.no_grad():
        fast = fk.forward(G, G)
    slow = fk.forward(G, G)
    assert slow.requires_grad and not fast.requires_grad
    assert torch.allclose(fast, slow.detach(), atol=1e-14 * float(fast.abs().max()), rtol=0)


def test_a_solve_is_reused_only_for_the_same_functionals_and_hyperparameters():
    """condition() twice with the same functionals object and hyperparameters keeps the factor (no new solve); a
    changed lengthscale or other functionals solve again."""
    torch.manual_seed(3)
    G = Functionals.cat([del_residual_functionals(triples_from_snapshots(0.7 * torch.randn(3, 5, 2)), 0.2),
                         MassNormalisation().functionals(2)])
    gp = FunctionalGP(FunctionalKernel(RBFKernel(ard_num_dims=4)), noise=1e-4)
    for p in gp.parameters():
        p.requires_grad_(False)
    gp.condition(G)
    first, ls0 = gp._chol, gp.kernel.base_kernel.lengthscale.clone()
    assert gp.condition(G)._chol is first
    gp.kernel.base_kernel.lengthscale = torch.full((1, 4), 1.3)
    assert gp.condition(G)._chol is not first
    other = gp._chol
    assert gp.condition(G.subset(torch.arange(G.count)))._chol is not other  # equal values, another object
    gp.kernel.base_kernel.lengthscale = ls0
    again = gp.condition(G)._chol
    assert again is not other and gp.condition(G)._chol is again
    ref = FunctionalGP(FunctionalKernel(RBFKernel(ard_num_dims=4)), noise=1e-4)
    for p in ref.parameters():
        p.requires_grad_(False)
    assert torch.equal(ref.condition(G)._beta, gp._beta)  # the reused solve is the one a fresh GP makes


@pytest.mark.parametrize("orders", [(1, 0, 2), (2, 1, 0), (0, 2, 1), (2,), (0, 1)])
def test_the_fused_expansion_takes_order_two_terms_on_their_atoms_only(orders):
    """The fused RBF expansion forms the order-2 atoms' terms on their own block of the atoms (wherever the order-2
    set sits among the orders) and agrees with the generic blocks in value, gradient and Hessian-vector product. Why
    1e-12 relative to the sum of |coefficients|: each is a sum over the atoms of O(1) terms times them (rounding); a
    block taken at the wrong offset pairs the order-2 coefficients with other atoms' directions, an O(1) error."""
    G = _family()
    gp = FunctionalGP(FunctionalKernel(RBFKernel(ard_num_dims=4)), noise=1e-4)
    for p in gp.parameters():
        p.requires_grad_(False)
    gp.kernel.base_kernel.lengthscale = torch.tensor([[0.8, 1.3, 1.1, 1.7]])
    gp.condition(G, torch.randn(G.count, generator=torch.Generator().manual_seed(2), dtype=torch.float64))
    atoms = {m: gp._mean_atoms[m] for m in orders}
    fast, slow = AtomExpansion(gp.kernel, atoms), AtomExpansion(gp.kernel, atoms)
    slow.fast = False
    assert fast.fast and (2 not in atoms or fast._Us.shape[0] == len(atoms[2]) <= sum(len(A) for A in atoms.values()))
    tol = 1e-12 * sum(float(A.coef.abs().sum()) for A in atoms.values())
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(4), dtype=torch.float64).requires_grad_(True)
    w = torch.randn(6, 4, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    got = []
    for ex in (fast, slow):
        f = ex(x)
        (g,) = torch.autograd.grad(f.sum(), x, create_graph=True)
        (hw,) = torch.autograd.grad((g * w).sum(), x, create_graph=True)
        (third,) = torch.autograd.grad((hw * w).sum(), x)  # through the HVP's own graph (the in-place block sums)
        got.append((f.detach(), g.detach(), hw.detach(), third))
    for a, b in zip(*got):
        assert float((a - b).abs().max()) < tol
    assert float(got[0][2].abs().max()) > 1e3 * tol  # the product is not trivially small
