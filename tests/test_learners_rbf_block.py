"""The RBF's in-place first-order block (learners.shadow.rbf_block) and the element blocks' in-place sums: bit for bit
the general form's numbers (torch.equal, not a tolerance: the search's choices amplify rounding, issue 23 item 5)."""

import pytest
import torch

from learners.shadow.element_blocks import _sum_into
from learners.shadow.element_kernel import ElementKernel
from learners.shadow.kernels import RBFKernel
from learners.shadow.rbf_block import first_order_block, usable


def _rbf(ard: int = 0) -> RBFKernel:
    k = RBFKernel(ard_num_dims=ard or None).to(torch.float64)
    k.lengthscale = torch.tensor([0.7, 1.3, 0.9, 2.1][: ard or 1], dtype=torch.float64)
    return k.requires_grad_(False)


def _general(kernel, X, U, Y, V):
    """The partition-sum form: the in-place path is skipped where an input requires grad."""
    with torch.enable_grad():
        return kernel.derivative_block(X.clone().requires_grad_(True), U, Y, V).detach()


@pytest.mark.parametrize("ard", [0, 4])
def test_first_order_block_is_the_general_form_bit_for_bit(ard):
    gen = torch.Generator().manual_seed(3)
    X, Y = (torch.randn(n, 4, generator=gen, dtype=torch.float64) for n in (37, 53))
    U, V = (torch.randn(n, 1, 4, generator=gen, dtype=torch.float64) for n in (37, 53))
    kernel = _rbf(ard)
    ref = _general(kernel, X, U, Y, V)
    assert usable(U, V, X, Y) and not usable(U, V, X.clone().requires_grad_(True))
    assert torch.equal(kernel.derivative_block(X, U, Y, V), ref)
    buf = torch.full((37, 80), float("nan"), dtype=torch.float64)  # a strided view, as the element sums write
    ls = kernel.lengthscale.reshape(-1)
    assert torch.equal(first_order_block(X / ls, U / ls, Y / ls, V / ls, out=buf[:, 20:73]), ref)
    assert bool(torch.isnan(buf[:, :20]).all()) and bool(torch.isnan(buf[:, 73:]).all())
    # against the closed form itself (not only the other code path): e^{-|r|^2/2} (u.v - (u.r)(v.r)), scaled
    ls = kernel.lengthscale.reshape(-1)
    r = (X[:, None] - Y[None]) / ls
    u, v = U[:, 0] / ls, V[:, 0] / ls
    direct = torch.exp(-0.5 * (r * r).sum(-1)) * (u @ v.T - (u[:, None] * r).sum(-1) * (v[None] * r).sum(-1))
    assert float((ref - direct).abs().max()) <= 1e-14 * float(direct.abs().max())
    assert torch.equal(first_order_block(X / ls, U / ls, Y / ls, V / ls), ref)


def test_other_orders_still_take_the_general_form(monkeypatch):
    """Order 0 and 2 atoms: the general form's block, the in-place one never called."""
    import learners.shadow.kernels as K

    calls = _counted(monkeypatch, K, "first_order_block")
    gen = torch.Generator().manual_seed(4)
    X, Y = (torch.randn(n, 3, generator=gen, dtype=torch.float64) for n in (9, 11))
    kernel = _rbf()
    for a, b in [(0, 0), (2, 1), (0, 1)]:
        U, V = (torch.randn(n, m, 3, generator=gen, dtype=torch.float64) for n, m in ((9, a), (11, b)))
        assert torch.equal(kernel.derivative_block(X, U, Y, V), _general(kernel, X, U, Y, V))
    assert calls == []


def _counted(monkeypatch, module, name):
    """Record each call of ``module.name`` (still called): a test of the in-place path must see it taken."""
    calls, real = [], getattr(module, name)

    def counting(*args, **kwargs):
        calls.append(name)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


def test_a_base_whose_scales_need_gradients_takes_the_general_sum(monkeypatch):
    """_sum_into with an RBF base whose lengthscale requires grad (inputs without): the general loop, differentiable,
    not the in-place one (whose out= writes autograd refuses)."""
    import learners.shadow.element_blocks as EB

    calls = _counted(monkeypatch, EB, "first_order_block")
    gen = torch.Generator().manual_seed(8)
    P, Q = torch.randn(30, 2, generator=gen, dtype=torch.float64), torch.randn(30, 1, 2, generator=gen, dtype=torch.float64)
    rows = (P, Q, torch.arange(30) % 7)
    base = RBFKernel().to(torch.float64)
    with torch.enable_grad():
        out = _sum_into(base, rows, rows, 7, 7, True)
        assert out.requires_grad and calls == []
        (g,) = torch.autograd.grad(out.sum(), base.raw_lengthscale)
    assert bool(torch.isfinite(g).all())


@pytest.mark.parametrize("symmetric", [True, False])
def test_in_place_element_sums_are_the_general_sums_bit_for_bit(symmetric, monkeypatch):
    """_sum_into's in-place loop (reused buffers, chunks halved in place) against its general loop, over more rows
    than one chunk (several chunks, a short last one, repeated atom indices)."""
    gen = torch.Generator().manual_seed(5)
    A = 700
    P = torch.randn(A, 2, generator=gen, dtype=torch.float64)
    Q = torch.randn(A, 1, 2, generator=gen, dtype=torch.float64)
    owner = torch.randint(0, 300, (A,), generator=gen)
    rows = (P, Q, owner)
    cols = rows if symmetric else (P[:650] + 0.1, Q[:650], torch.randint(0, 280, (650,), generator=gen))
    B = 300 if symmetric else 280
    base = _rbf()
    import learners.shadow.element_blocks as EB
    old = EB.ELEMENT_BLOCK_ENTRIES
    EB.ELEMENT_BLOCK_ENTRIES = 64 * 650  # ~64 rows a chunk: 11 chunks
    calls = _counted(monkeypatch, EB, "first_order_block")
    try:
        got = _sum_into(base, rows, cols, 300, B, symmetric)
        assert len(calls) >= 11  # the in-place loop ran, every chunk
        with torch.enable_grad():
            grad_rows = (P.clone().requires_grad_(True), Q, owner)
            ref = _sum_into(base, grad_rows, grad_rows if symmetric else cols, 300, B, symmetric).detach()
    finally:
        EB.ELEMENT_BLOCK_ENTRIES = old
    assert torch.equal(got, ref)


def test_element_blocks_in_place_are_the_autograd_paths_numbers():
    """A chain's element blocks on DEL atoms without gradients (in place) equal those computed with the scales
    requiring grad (the general form), bit for bit: the same atoms (one triangle) and a row range against all."""
    from learners.shadow.functionals import del_residual_functionals, triples_from_snapshots

    gen = torch.Generator().manual_seed(6)
    kernel = ElementKernel.chain(3).to(torch.float64)
    kernel.bind(None, 1.0, 1.0, None)
    kernel.lengthscale = torch.tensor([0.8, 1.4, 0.9, 0.7, 1.2, 1.1, 2.0, 3.0, 0.5], dtype=torch.float64)
    snaps = 0.5 * torch.randn(6, 5, 3, generator=gen, dtype=torch.float64)
    A = del_residual_functionals(triples_from_snapshots(snaps), 0.3, "midpoint").atoms[1]
    assert A.dirs.shape[1] == 1 and len(A) > 100
    for case in [(A.points, A.dirs, A.points, A.dirs), (A.points[:40], A.dirs[:40], A.points, A.dirs)]:
        with torch.no_grad():
            fast = kernel.derivative_block(*case)
        with torch.enable_grad():
            assert kernel.raw_lengthscale.requires_grad
            slow = kernel.derivative_block(*case).detach()
        assert torch.equal(fast, slow) and float(fast.abs().max()) > 0


@pytest.mark.parametrize("degree,ard", [(2, None), (8, None), (5, 6)])
def test_mechanical_first_order_block_is_the_general_form_bit_for_bit(degree, ard, monkeypatch):
    from learners.shadow.mechanical import MechanicalKernel

    gen = torch.Generator().manual_seed(7)
    X, Y = (torch.randn(n, 6, generator=gen, dtype=torch.float64) for n in (41, 29))
    U, V = (torch.randn(n, 1, 6, generator=gen, dtype=torch.float64) for n in (41, 29))
    kernel = MechanicalKernel(degree, ard_num_dims=ard).to(torch.float64)
    kernel.lengthscale = torch.linspace(0.6, 1.9, ard or 1, dtype=torch.float64)
    kernel.requires_grad_(False)
    ref = _general(kernel, X, U, Y, V)
    import learners.shadow.mechanical as M

    calls = _counted(monkeypatch, M, "mechanical_first_order_block")
    got = kernel.derivative_block(X, U, Y, V)
    assert calls and torch.equal(got, ref) and float(ref.abs().max()) > 0
    # and the formula itself: e^{-Q0}[f2 a_u a_v + f1 u.v + g_u f1 a_v + g_v f1 a_u + (g_u g_v + u.v) f0] by autograd
    with torch.enable_grad():
        t = torch.zeros(41, 29, dtype=torch.float64, requires_grad=True)
        s = torch.zeros(41, 29, dtype=torch.float64, requires_grad=True)
        x = X[:, None] + t[..., None] * U[:, None, 0]
        y = Y[None] + s[..., None] * V[None, :, 0]
        val = kernel.pointwise(x.reshape(-1, 6), y.reshape(-1, 6)).sum()
        (gt,) = torch.autograd.grad(val, t, create_graph=True)
        (gts,) = torch.autograd.grad(gt.sum(), s)
    assert float((gts - got).abs().max()) <= 1e-12 * float(got.abs().max())


def test_torch_func_transforms_take_the_general_form(monkeypatch):
    """torch.func.jvp and jacfwd through RBFKernel and MechanicalKernel blocks (requires_grad reads False inside them):
    the general, differentiable form, whose tangent equals central differences of the block to 1e-7 relative (step
    1e-5 on inputs of order 1: truncation 1e-10, rounding 1e-11 of the block's size)."""
    import learners.shadow.kernels as K
    from learners.shadow.mechanical import MechanicalKernel

    calls = _counted(monkeypatch, K, "first_order_block")
    gen = torch.Generator().manual_seed(9)
    X, Y = (torch.randn(n, 4, generator=gen, dtype=torch.float64) for n in (7, 5))
    U, V = (torch.randn(n, 1, 4, generator=gen, dtype=torch.float64) for n in (7, 5))
    dX = torch.randn(7, 4, generator=gen, dtype=torch.float64)
    mech = MechanicalKernel(3).to(torch.float64).requires_grad_(False)
    for kernel in (_rbf(), mech):
        def block(x):
            return kernel.derivative_block(x, U, Y, V)

        _, tangent = torch.func.jvp(block, (X,), (dX,))
        fd = (block(X + 1e-5 * dX) - block(X - 1e-5 * dX)) / 2e-5
        assert float((tangent - fd).abs().max()) <= 1e-7 * float(fd.abs().max())
        assert torch.func.jacfwd(block)(X).shape == (7, 5, 7, 4)
    assert len(calls) == 2  # the two central differences of the RBF, outside any transform
