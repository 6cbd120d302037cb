"""The element kernel's exact posterior std (learners.shadow.element_uncertainty, issue 27): against a brute-force
reference by nested autograd of the kernel on the full state, and against the plain RBF where the structure is one
identity element."""

import pytest
import torch

import bea
from bea.errors import BeaRuntimeError, BeaTypeError
from learners.shadow import ElementKernel
from learners.shadow import uncertainty as U
from learners.shadow.functionals import AtomSet, Functionals
from learners.shadow.gp import FunctionalGP
from learners.shadow.kernels import FunctionalKernel, RBFKernel

# two exact routes (closed-form Hermite tables against nested autograd; against the RBF's Gaussian features) round
# differently: measured <= 5.3e-14 relative on the cases below; 1e-10 leaves room for other BLAS orders and thread
# counts while any wrong term (a sign, a missing instance pair or order) is O(1)
EXACT = 1e-10


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _functionals(D, P, count, gen):
    """Random atoms of orders 0, 1, 2 (P each) spread over ``count`` functionals."""
    atoms = {m: AtomSet(torch.randn(P, D, generator=gen, dtype=torch.float64),
                        torch.randn(P, m, D, generator=gen, dtype=torch.float64),
                        torch.randn(P, generator=gen, dtype=torch.float64),
                        torch.randint(0, count, (P,), generator=gen)) for m in (0, 1, 2)}
    return Functionals(D, count, atoms)


def _gp(base, F, targets, outputscale=1.7):
    fk = FunctionalKernel(base).to(torch.float64)
    fk.outputscale = outputscale
    fk.requires_grad_(False)
    gp = FunctionalGP(fk)
    gp.requires_grad_(False)
    return gp.condition(F, targets)


def _quantity(L, q, v):
    r"""A jet quantity of order 3, nonlinear in :math:`L` (its linearisation depends on the mean), cheap to nest:
    :math:`v\cdot\partial_v L - L + \tfrac{1}{10}\sum\partial_v\partial_q|\partial_v L|^2`."""
    q, v = (z if z.requires_grad else z.detach().requires_grad_(True) for z in (q, v))  # states, as bea's functions take them
    ell = L(q, v)
    (gv,) = torch.autograd.grad(ell.sum(), v, create_graph=True)
    (g2,) = torch.autograd.grad((gv * gv).sum(), q, create_graph=True)
    (g3,) = torch.autograd.grad(g2.sum(), v, create_graph=True)
    return (gv * v).sum(-1) - ell + 0.1 * g3.sum(-1)


def _apply(gp, x, fun):
    """The jet part T_b[fun] at each row's state (linearised at the posterior mean), differentiable in fun."""
    n = x.shape[-1] // 2
    eps = torch.zeros(x.shape[0], dtype=torch.float64, requires_grad=True)
    L = lambda q, v: gp.mean(torch.cat([q, v], -1)) + eps * fun(torch.cat([q, v], -1))  # noqa: E731
    q, v = x[:, :n].clone(), x[:, n:].clone()
    (g,) = torch.autograd.grad(_quantity(L, q, v).sum(), eps, create_graph=True)
    return g


def _brute_force(gp, x, xr):
    """Posterior variances of T_b and of T_b - T_r by nested autograd of the kernel on the full state (prior and cross
    terms) and the generic kernel sections (derivative_block through the linearisation): no element table."""
    kern, s2 = gp.kernel.base_kernel, gp.kernel.outputscale.detach()
    with torch.enable_grad():
        cov = lambda a, b: _apply(gp, a, lambda xo: _apply(gp, b, lambda y: s2 * kern.pointwise(xo, y))).detach()  # noqa: E731
        prior, prior_r, cross = cov(x, x), cov(xr, xr), cov(x, xr)
    (Kb,), (Kr,) = (U._linearise(gp.mean, _quantity, z, [U._Sections(gp, gp.train_functionals)], 1) for z in (x, xr))
    solve = lambda K: torch.linalg.solve_triangular(gp._chol, K[:, 0].T, upper=False)  # noqa: E731
    Vb, Vd = solve(Kb), solve(Kb - Kr)
    return prior - (Vb * Vb).sum(0), prior + prior_r - 2 * cross - (Vd * Vd).sum(0), prior


@pytest.mark.parametrize("kernel", [ElementKernel.chain(2), ElementKernel.bodies(2, 1, correction=False),
                                    ElementKernel.chain(2, window=2, correction=False)],
                         ids=["chain2-correction", "bodies2x1", "chain2-window2"])
def test_element_std_equals_brute_force(kernel):
    """Variances of a jet quantity (order 3) and of its differences to reference states, under a GP conditioned on
    random functionals of orders 0..2: the element tables equal nested autograd of the kernel to rounding."""
    gen = _gen(0)
    kern = kernel.to(torch.float64)
    kern.lengthscale = torch.rand(kern.raw_lengthscale.shape[-1], generator=gen, dtype=torch.float64) + 0.7
    kern.requires_grad_(False)
    D = kern.dim
    F = _functionals(D, 10, 8, gen)
    gp = _gp(kern, F, torch.randn(8, generator=gen, dtype=torch.float64))
    x, xr = (0.5 * torch.randn(2, D, generator=gen, dtype=torch.float64) for _ in range(2))
    assert U.jet_order(gp, _quantity, x[:1], 1) == 3
    G = U.LinearisedQuantity(_quantity, x, 1, 3)
    var, var_r = U.posterior_variance(gp, G)[:, 0, 0], U.posterior_variance(gp, G, U.Reference(xr))[:, 0, 0]
    bf, bf_r, prior = _brute_force(gp, x, xr)
    assert bool((bf > 0.01 * prior).all())  # the data leave 3-6% of the prior (measured): a cancellation of ~30x, not 1e10
    assert float(((var - bf) / bf).abs().max()) <= EXACT
    assert float(((var_r - bf_r) / bf_r).abs().max()) <= EXACT


def test_element_features_are_the_reference_section():
    r"""The row functions (an atom part against a reference's jet part): :math:`\sum_m c_m\,\mathrm{fmap}_m(y, x_r)`
    equals :math:`\sigma_f^{-2} T_r^s k(s, y)` by autograd, at random points ``y``."""
    gen = _gen(3)
    kern = ElementKernel.chain(2).to(torch.float64)
    kern.lengthscale = torch.rand(kern.raw_lengthscale.shape[-1], generator=gen, dtype=torch.float64) + 0.7
    kern.requires_grad_(False)
    gp = _gp(kern, _functionals(4, 6, 5, gen), torch.randn(5, generator=gen, dtype=torch.float64))
    xr, y = 0.5 * torch.randn(3, 4, generator=gen, dtype=torch.float64), torch.randn(3, 4, generator=gen, dtype=torch.float64)
    fmap = U._feature_map(kern, 4, 3)
    layout = fmap.split()
    (J,) = U._linearise(gp.mean, _quantity, xr, [layout.jet_columns(xr)], 1)
    c = layout.coefficients(J, xr)[:, 0]
    closed = (fmap(y, xr) * c).sum(-1)
    with torch.enable_grad():
        ref = _apply(gp, xr, lambda s: kern.pointwise(s, y)).detach()
    assert float((closed - ref).abs().max()) <= EXACT * float(ref.abs().max())


def test_one_identity_element_is_the_rbf():
    """One group whose map is the identity, without correction: the element kernel is the RBF with lengthscales
    (l, .., lambda, ..) and outputscale s^2 sigma_f^2, and so are its std and its differences' std."""
    gen = _gen(1)
    n, D = 2, 4
    group = {"name": "all", "maps": torch.eye(D, dtype=torch.float64)[None], "offsets": torch.zeros(1, D, dtype=torch.float64),
             "positions": n}
    kern = ElementKernel([group], correction=False).to(torch.float64)
    kern.lengthscale = torch.tensor([0.8, 1.3, 0.9], dtype=torch.float64)
    kern.requires_grad_(False)
    rbf = RBFKernel(ard_num_dims=D).to(torch.float64)
    rbf.lengthscale = torch.tensor([0.8, 0.8, 1.3, 1.3], dtype=torch.float64)
    rbf.requires_grad_(False)
    F, y = _functionals(D, 10, 8, gen), torch.randn(8, generator=gen, dtype=torch.float64)
    gp_e, gp_r = _gp(kern, F, y), _gp(rbf, F, y, 1.7 * 0.9 ** 2)
    x, xr = (0.5 * torch.randn(4, D, generator=gen, dtype=torch.float64) for _ in range(2))
    G = U.LinearisedQuantity(_quantity, x, 1, 3)
    for R in (None, U.Reference(xr)):
        ve, vr = U.posterior_variance(gp_e, G, R), U.posterior_variance(gp_r, G, R)
        assert float(((ve - vr) / vr).abs().max()) <= EXACT


def test_mechanical_bases_are_refused_with_the_fix():
    """The mechanical base has no element tables yet: a typed refusal that names the fix (degree=None)."""
    kern = ElementKernel.bodies(2, 1, degree=2)
    assert "degree=None" in kern.missing_std
    assert ElementKernel.bodies(2, 1).missing_std is None
    from learners.shadow.element_uncertainty import ElementLayout

    with pytest.raises(BeaTypeError, match="degree=None"):
        ElementLayout(kern, 4, 3)


def _quantity2(L, q, v):
    r"""Two outputs per state: :func:`_quantity` and a momentum-like :math:`\partial_{v_0}L` (jet order 3)."""
    q, v = (z if z.requires_grad else z.detach().requires_grad_(True) for z in (q, v))
    (gv,) = torch.autograd.grad(L(q, v).sum(), v, create_graph=True)
    return torch.stack([_quantity(L, q, v), gv[:, 0]], -1)


def _apply2(gp, x, fun):
    """The jet parts T_{b,o}[fun] (B, 2) of :func:`_quantity2` at each row's state, differentiable in fun."""
    n = x.shape[-1] // 2
    eps = torch.zeros(x.shape[0], dtype=torch.float64, requires_grad=True)
    L = lambda q, v: gp.mean(torch.cat([q, v], -1)) + eps * fun(torch.cat([q, v], -1))  # noqa: E731
    Q = _quantity2(L, x[:, :n].clone(), x[:, n:].clone())
    return torch.stack([torch.autograd.grad(Q[:, o].sum(), eps, create_graph=True)[0] for o in range(2)], -1)


def test_element_std_with_atoms_and_two_outputs_equals_brute_force():
    """G_b = A_b + T_b with k = 2 outputs (a jet quantity of order 3 and a momentum-like one) and an atom part of
    orders 1 and 2 per output: the element tables' covariance (B, 2, 2) equals nested autograd of the kernel on the full
    state for T-T, the kernel's derivative blocks for T-A, A-A and the sections, to rounding (EXACT)."""
    gen = _gen(5)
    kern = ElementKernel.chain(2).to(torch.float64)
    kern.lengthscale = torch.rand(kern.raw_lengthscale.shape[-1], generator=gen, dtype=torch.float64) + 0.7
    kern.requires_grad_(False)
    D, B, k = kern.dim, 2, 2
    gp = _gp(kern, _functionals(D, 10, 8, gen), torch.randn(8, generator=gen, dtype=torch.float64))
    x = 0.5 * torch.randn(B, D, generator=gen, dtype=torch.float64)
    atoms = _functionals(D, 3, B * k, gen)  # owner b * k + o: row b, output o
    s2 = gp.kernel.outputscale.detach()
    var = U.posterior_variance(gp, U.LinearisedQuantity(_quantity2, x, k, 3, atoms))
    with torch.enable_grad():
        TT = torch.stack([_apply2(gp, x, lambda xo: _apply2(gp, x, lambda y: s2 * kern.pointwise(xo, y))[:, o])
                          for o in range(k)], -1).detach()  # [b, o, o']

        def row_atoms(o):  # s2 A_{b,o}^t k(x_b, t) at each row's point
            def f(xo):
                out = xo.new_zeros(B)
                for A in atoms.atoms.values():
                    blk = kern.derivative_block(xo, xo.new_zeros(B, 0, D), A.points, A.dirs) * A.coef  # (B, atoms)
                    own = (A.owner[None] == torch.arange(B)[:, None] * k + o).to(blk.dtype)
                    out = out + (blk * own).sum(-1)
                return s2 * out
            return f
        X = torch.stack([_apply2(gp, x, row_atoms(o)) for o in range(k)], -1).detach()  # X[b, o, o'] = Cov(T_bo, A_bo')
    idx = torch.arange(B * k).reshape(B, k)
    AA = gp.kernel.forward(atoms, atoms)[idx[:, :, None], idx[:, None, :]]
    (KT,) = U._linearise(gp.mean, _quantity2, x, [U._Sections(gp, gp.train_functionals)], k)
    K = KT + gp.kernel.forward(atoms, gp.train_functionals).reshape(B, k, -1)
    V = torch.linalg.solve_triangular(gp._chol, K.reshape(B * k, -1).T, upper=False).reshape(-1, B, k)
    bf = TT + X + X.transpose(1, 2) + AA - torch.einsum("fbo,fbp->bop", V, V)
    diag = torch.diagonal(bf, dim1=1, dim2=2)
    assert bool((diag > 0.01 * torch.diagonal(TT + AA, dim1=1, dim2=2)).all())  # no cancellation to rounding
    scale = diag.sqrt()[:, :, None] * diag.sqrt()[:, None, :]  # each entry against its outputs' standard deviations
    assert float(((var - bf) / scale).abs().max()) <= EXACT


def test_a_table_above_the_bound_at_one_state_is_refused(monkeypatch):
    """One state's dense table (instances^2 x (p+1)^k x outputs) above MAX_STATE_TABLE: a typed refusal naming the size
    and the remedy, before any work (chain(2)'s largest group: 3 instances of 2 inputs, p = 3: 9 x 4^2 x 2 = 288)."""
    from learners.shadow import element_uncertainty as E

    layout = E.ElementLayout(ElementKernel.chain(2, correction=False).to(torch.float64), 4, 3)
    monkeypatch.setattr(E, "TABLE_ENTRIES", 100)
    monkeypatch.setattr(E, "MAX_STATE_TABLE", 288)
    assert layout.chunk_rows(2) == 1  # above the pass bound, at the state's: one state a pass
    monkeypatch.setattr(E, "MAX_STATE_TABLE", 287)
    with pytest.raises(BeaRuntimeError, match=r"needs 288 entries \(3 instances.*return_std=True"):
        layout.chunk_rows(2)


@pytest.mark.parametrize("structure", ["bodies_unequal", "bodies_identical", "chain_without_correction"])
def test_the_element_means_jet_table_is_its_taylor_polynomials_jet(monkeypatch, structure):
    r"""element_uncertainty.on_mean reads :math:`\mathrm{mod}_N`'s derivatives from the element mean's jet table
    (element_jet.ElementTaylorJet: the instances' Taylor coefficients through their maps, plus the correction's jet)
    instead of nested autograd on the mean's Taylor polynomial (ElementLayout.taylor_mean, made to raise here, so this
    fails where on_mean still takes it). Both exact, the same jet: the energy of mod_2 (jet order 5, unequal-mass
    bodies with the correction, n = 4) and an order-3 quantity with two outputs agree with the polynomial
    (on_taylor_mean) to 1e-12 relative (measured 9.8e-16 and 1.6e-16; a wrong map or factorial is O(1)). Above COMPOSE_ENTRIES
    on_mean keeps the polynomial: bit for bit. Also for identical bodies (one group of two instances) and a chain without
    the correction (no correction term in the table; the reviewer measured 1.6e-14 and 2.0e-15 on such structures)."""
    from integrators import modified
    from learners.shadow import element_jet
    from learners.shadow.element_uncertainty import ElementLayout, on_mean, on_taylor_mean

    gen = _gen(5)
    kern = {"bodies_unequal": lambda: ElementKernel.bodies(2, 2, identical=False),
            "bodies_identical": lambda: ElementKernel.bodies(2, 2),
            "chain_without_correction": lambda: ElementKernel.chain(2, correction=False)}[structure]().to(torch.float64)
    kern.lengthscale = torch.rand(kern.raw_lengthscale.shape[-1], generator=gen, dtype=torch.float64) + 0.7
    kern.requires_grad_(False)
    D = kern.dim
    gp = _gp(kern, _functionals(D, 10, 8, gen), torch.randn(8, generator=gen, dtype=torch.float64))
    x = 0.5 * torch.randn(3, D, generator=gen, dtype=torch.float64)
    energy = lambda L, q, v: bea.energy(modified.recovered_lagrangian(L, 2, 0.3, "midpoint"))(q, v)  # noqa: E731
    two = lambda L, q, v: torch.stack([_quantity(L, q, v), L(q, v)], -1)  # noqa: E731
    cases = [(energy, 5, 1), (two, 3, 2)]
    refs = [on_taylor_mean(gp, [f], x, p, k)[0] for f, p, k in cases]
    with monkeypatch.context() as patch:
        patch.setattr(ElementLayout, "taylor_mean", lambda *a: (_ for _ in ()).throw(AssertionError("polynomial taken")))
        got = [on_mean(gp, [f], x, p, k)[0] for f, p, k in cases]
    for g, r, (_, _, k) in zip(got, refs, cases):
        assert g.shape == r.shape == (3, k) and float(r.abs().min()) > 1e-3
        assert float(((g - r) / r).abs().max()) <= 1e-12
    monkeypatch.setattr(element_jet, "COMPOSE_ENTRIES", 0)
    assert torch.equal(on_mean(gp, [cases[1][0]], x, 3, 2)[0], refs[1])
