"""The element-structured kernel (issue 27, first milestone): closed-form blocks, structures, symmetry, coordinates,
a learned fit and its model file."""

import math

import pytest
import torch

from bea.errors import BeaTypeError, BeaValueError
from learners.shadow import ElementKernel
from learners.shadow.kernels import _autograd_block

# rounding of the closed form against nested autograd: 1e-15 relative measured on every case below; 1e-12 leaves
# room for other BLAS orders while any wrong term (a missing instance pair, a sign) is O(1)
ROUNDING = 1e-12


def _random_scales(kernel, seed=0):
    gen = torch.Generator().manual_seed(seed)
    kernel.lengthscale = torch.rand(kernel.raw_lengthscale.shape[-1], generator=gen, dtype=torch.float64) + 0.5
    return kernel.requires_grad_(False)


@pytest.mark.parametrize("kernel", [ElementKernel.bodies(2, 2), ElementKernel.bodies(3, 2, degree=2),
                                    ElementKernel.chain(4), ElementKernel.chain(3, "periodic", identical=False, degree=4),
                                    ElementKernel.chain(4, window=3), ElementKernel.chain(3, "periodic", degree=2, window=2)],
                         ids=["bodies2-rbf", "bodies3-mech2", "chain4-rbf", "chain3-periodic-mech4", "chain4-window3",
                              "chain3-periodic-window2-mech2"])
def test_closed_form_blocks_match_autograd(kernel):
    kernel = _random_scales(kernel.to(torch.float64))
    gen = torch.Generator().manual_seed(1)
    D = kernel.dim
    for a, b in [(0, 0), (1, 0), (1, 1), (2, 1), (0, 2), (2, 2)]:
        X, Y = torch.randn(5, D, generator=gen, dtype=torch.float64), torch.randn(4, D, generator=gen, dtype=torch.float64)
        U = torch.randn(5, a, D, generator=gen, dtype=torch.float64)
        V = torch.randn(4, b, D, generator=gen, dtype=torch.float64)
        closed, auto = kernel.derivative_block(X, U, Y, V).detach(), _autograd_block(kernel, X, U, Y, V).detach()
        assert float((closed - auto).abs().max()) <= ROUNDING * float(auto.abs().max()), (a, b)


def _plain_block(kern, X, U, Y, V):
    """Every instance pair's base block summed, as the kernel computed its blocks before session 13 (the reference
    for the reduced sums)."""
    groups, corr = kern._layout()
    total = X.new_zeros(X.shape[0], Y.shape[0])
    for i, (scales, var) in enumerate(groups):
        M, b = kern._projected(i, scales)
        Mt = M.transpose(1, 2)
        Xe, Ue, Ye, Ve = X @ Mt + b[:, None], U @ Mt[:, None], Y @ Mt + b[:, None], V @ Mt[:, None]
        m = M.shape[0]
        total = total + var * sum(kern._bases[i].derivative_block(Xe[e], Ue[e], Ye[f], Ve[f]) for e in range(m) for f in range(m))
    s = corr[0]
    return total + corr[1] * kern._bases[-1].derivative_block(X / s, U / s, Y / s, V / s)


def _coordinate_atoms(gen, count, order, D, h=0.2):
    """Atoms like the DEL functionals': every direction along one coordinate k, (h/2 e_k, e_k) in (q, v)."""
    n = D // 2
    dirs = torch.zeros(count, order, D, dtype=torch.float64)
    k = torch.randint(0, n, (count, order), generator=gen)
    for r in range(order):
        dirs[torch.arange(count), r, k[:, r]] = h / 2
        dirs[torch.arange(count), r, n + k[:, r]] = 1.0
    return torch.randn(count, D, generator=gen, dtype=torch.float64), dirs


@pytest.mark.parametrize("kernel", [ElementKernel.bodies(3, 2), ElementKernel.bodies(3, 2, degree=2),
                                    ElementKernel.chain(4), ElementKernel.chain(3, "periodic", identical=False, degree=2),
                                    ElementKernel.chain(4, window=3)],
                         ids=["bodies3-rbf", "bodies3-mech2", "chain4-rbf", "chain3-periodic-mech2", "chain4-window3"])
def test_reduced_blocks_equal_every_instance_pair(kernel):
    """The blocks with active instances only, one orientation of the pairs and one triangle of the same atoms equal
    the sum over every instance pair (_plain_block) to rounding, bound to standardised coordinates with a centre (so
    the offsets are non-zero and their negation must be exact), for coordinate directions (the DEL functionals':
    most instances inactive) and dense ones; the pointwise kernel too. A dropped instance pair or a wrong factor 2
    is O(1) against ROUNDING."""
    from learners.shadow.element_blocks import same_atoms

    kernel = _random_scales(kernel.to(torch.float64))
    gen = torch.Generator().manual_seed(5)
    D = kernel.dim
    kernel.bind(torch.randn(D // 2, generator=gen, dtype=torch.float64), 1.7, 0.6, None)
    halves = [kernel._half(i) for i in range(len(kernel.groups))]
    paired = kernel.groups[-1]["name"] == "pair"  # bodies' pairs: both orientations; sites, bodies, bonds: none
    assert [h is not None for h in halves] == [False] * (len(halves) - 1) + [paired]
    if paired:
        assert len(halves[-1]) == kernel.groups[-1]["maps"].shape[0] // 2
    for a, b in [(0, 0), (1, 0), (1, 1), (2, 1), (2, 2)]:
        for coordinate in (True, False):
            if coordinate:
                (X, U), (Y, V) = _coordinate_atoms(gen, 30, a, D), _coordinate_atoms(gen, 20, b, D)
            else:
                X, U = (torch.randn(6, *s, D, generator=gen, dtype=torch.float64) for s in ((), (a,)))
                Y, V = (torch.randn(5, *s, D, generator=gen, dtype=torch.float64) for s in ((), (b,)))
            cases = [(X, U, Y, V)] + ([(X, U, X, U), (X, U, X[:], U[:])] if a == b else [])  # same atoms: object or view
            assert a != b or same_atoms(X, U, X[:], U[:])
            for case in cases:
                ref = _plain_block(kernel, *case)
                got = kernel.derivative_block(*case)
                assert float((got - ref).abs().max()) <= ROUNDING * float(ref.abs().max()), (a, b, coordinate)
                if case[2] is case[0]:
                    assert float((got - got.T).abs().max()) <= ROUNDING * float(ref.abs().max())
    x, y = torch.randn(7, D, generator=gen, dtype=torch.float64), torch.randn(7, D, generator=gen, dtype=torch.float64)
    ref = torch.stack([_plain_block(kernel, x[j:j + 1], x.new_zeros(1, 0, D), y[j:j + 1], x.new_zeros(1, 0, D))[0, 0]
                       for j in range(7)])
    assert float((kernel.pointwise(x, y) - ref).abs().max()) <= ROUNDING * float(ref.abs().max())


def test_reduced_blocks_are_differentiable_in_the_scales():
    """The gradient in the hyperparameters (the likelihood's path, FunctionalKernel._pair on one atom set with itself:
    the symmetric triangle with the orientation halving) equals the plain sum's to rounding."""
    gen = torch.Generator().manual_seed(6)
    for kern in (ElementKernel.bodies(3, 2, degree=2), ElementKernel.chain(4)):
        kern = _random_scales(kern.to(torch.float64)).requires_grad_(True)
        X, U = _coordinate_atoms(gen, 25, 1, kern.dim)
        W = torch.randn(25, 25, generator=gen, dtype=torch.float64)
        grads = [torch.autograd.grad((f(kern, X, U, X, U) * W).sum(), kern.raw_lengthscale)[0]
                 for f in (_plain_block, ElementKernel.derivative_block)]
        assert float((grads[0] - grads[1]).abs().max()) <= ROUNDING * float(grads[0].abs().max())


def test_reduced_blocks_between_different_atoms_are_differentiable_twice():
    """X != Y (the cross-covariance's path, ColumnCache): the gradient in the scales and in the column atoms equals the
    plain sum's to rounding, and a second call with the same atoms (a cache hit without grad) is differentiated again
    (a cached graph raised "backward through the graph a second time"); under inference mode (no version counters) the
    blocks are the no-grad ones (bit for bit: the same sums in the same order)."""
    gen = torch.Generator().manual_seed(8)
    kern = _random_scales(ElementKernel.bodies(3, 2, degree=2).to(torch.float64)).requires_grad_(True)
    X, U = _coordinate_atoms(gen, 20, 1, kern.dim)
    Y, V = _coordinate_atoms(gen, 15, 1, kern.dim)
    W = torch.randn(20, 15, generator=gen, dtype=torch.float64)
    Y.requires_grad_(True)
    for scales in (True, False):  # with the scales' graph, and with the atoms' alone (the maps then need no grad)
        kern.requires_grad_(scales)
        wrt = (kern.raw_lengthscale, Y) if scales else (Y,)
        ref = torch.autograd.grad((_plain_block(kern, X, U, Y, V) * W).sum(), wrt)
        for _ in range(2):
            got = torch.autograd.grad((kern.derivative_block(X, U, Y, V) * W).sum(), wrt)
            for g, r in zip(got, ref):
                assert float((g - r).abs().max()) <= ROUNDING * float(r.abs().max())
    Y = Y.detach()
    with torch.no_grad():
        plain = kern.derivative_block(X, U, Y, V)
    with torch.inference_mode():
        Yi, Vi = Y.clone(), V.clone()  # inference tensors
        for _ in range(2):
            assert torch.equal(kern.derivative_block(X, U, Yi, Vi), plain)
            assert torch.equal(kern.derivative_block(X, U, Y, V), plain)
    assert "_columns" in kern.__dict__ and "_columns" not in kern.to(torch.float64).__dict__  # .to() drops the caches


def test_chunked_energy_gradients_of_what_is_asked():
    """_ChunkedEnergy: an energy that ignores v (or q) gives zero derivatives there, not an error; only inputs that
    require grad get one; each equals the closed form (2 q) exactly (one multiplication)."""
    from learners.shadow.element_energy import _ChunkedEnergy

    gen = torch.Generator().manual_seed(9)
    q, v = (torch.randn(7, 2, generator=gen, dtype=torch.float64) for _ in range(2))
    q.requires_grad_(True)
    e = _ChunkedEnergy.apply(q, v, lambda a, b: (a ** 2).sum(-1), 3)
    assert torch.equal(torch.autograd.grad(e.sum(), q)[0], 2 * q.detach())
    v.requires_grad_(True)
    gq, gv = torch.autograd.grad(_ChunkedEnergy.apply(q, v, lambda a, b: (a ** 2).sum(-1), 3).sum(), (q, v))
    assert torch.equal(gq, 2 * q.detach()) and torch.equal(gv, torch.zeros_like(v))


def test_assemblies_reuse_the_gathered_columns(monkeypatch):
    """Without gradients an assembly's row chunks reuse the columns gathered once (ColumnCache), the triangle's chunks
    as suffixes of them: the covariance of DEL functionals (random walks, many row chunks) equals the one assembled
    with gradients (no cache, every block on the whole atom sets) to rounding, both triangles and the full matrix."""
    from learners.shadow import element_blocks, kernels
    from learners.shadow.functionals import snapshot_functionals
    from learners.shadow.kernels import FunctionalKernel

    monkeypatch.setattr(kernels, "CHUNK_ATOMS", 24)  # rows of 16 atoms a chunk: dozens of chunks per atom set
    gathered = []
    real = element_blocks._gather
    monkeypatch.setattr(element_blocks, "_gather", lambda *a, **k: gathered.append(1) or real(*a, **k))
    gen = torch.Generator().manual_seed(7)
    F = snapshot_functionals(0.3 * torch.randn(3, 6, 6, generator=gen, dtype=torch.float64).cumsum(1), 0.2, "midpoint")[0]
    for kern in (ElementKernel.bodies(3, 2), ElementKernel.chain(6)):
        fk = FunctionalKernel(_random_scales(kern.to(torch.float64)))
        ref = fk.requires_grad_(True).forward(F, F).detach()
        fk.requires_grad_(False)
        gathered.clear()
        with torch.no_grad():
            sym, full = fk.forward(F, F, symmetric=True), fk.forward(F, F)
        chunks, g = -(-F.atoms[1].points.shape[0] // 16), len(kern.groups)
        assert set(F.atoms) == {1}
        # rows gathered per chunk and group in both assemblies, the columns once per group and assembly (no cache: as
        # often as the rows)
        assert 2 * chunks * g < len(gathered) <= 2 * chunks * g + 2 * g
        for got in (sym, full):
            assert float((got - ref).abs().max()) <= ROUNDING * float(ref.abs().max())


def test_orientation_halving_needs_an_exact_negation():
    """A group whose instances do not pair up under negation exactly (one map perturbed) is summed over every
    instance: no factor 2 from a near-miss."""
    from learners.shadow.element_blocks import negation_half

    pair = ElementKernel.bodies(3, 2).groups[1]
    assert negation_half(pair["maps"], pair["offsets"]).tolist() == [0, 2, 4]
    M = pair["maps"].clone()
    M[1, 0, 0] += 1e-12
    assert negation_half(M, pair["offsets"]) is None
    b = pair["offsets"].clone()
    b[3, 1] = 1.0
    assert negation_half(pair["maps"], b) is None


def test_structure_maps():
    """bodies: (q_i, v_i) per body, pairs (q_i - q_j, v_i - v_j) in both orientations; chain with fixed ends: the
    bonds q_1 - 0, q_{i+1} - q_i, 0 - q_n."""
    body, pair = ElementKernel.bodies(2, 2).groups
    z = torch.arange(1.0, 9.0, dtype=torch.float64)  # (x1, y1, x2, y2, u1, w1, u2, w2)
    assert (body["maps"] @ z).tolist() == [[1, 2, 5, 6], [3, 4, 7, 8]]
    assert (pair["maps"] @ z).tolist() == [[-2, -2, -2, -2], [2, 2, 2, 2]]
    assert [g["name"] for g in ElementKernel.bodies(3, 2, identical=False).groups] == ["body0", "body1", "body2", "pair"]
    assert ElementKernel.bodies(3, 2).groups[1]["maps"].shape == (6, 4, 12)
    site, bond = ElementKernel.chain(3).groups
    z = torch.tensor([1.0, 3.0, 7.0, 10.0, 20.0, 40.0], dtype=torch.float64)
    assert (bond["maps"] @ z).tolist() == [[1, 10], [2, 10], [4, 20], [-7, -40]]
    assert (site["maps"] @ z).tolist() == [[1, 10], [3, 20], [7, 40]]
    assert ElementKernel.bodies(2, 2).equal_masses() and ElementKernel.chain(3).equal_masses()  # one shared kinetic element
    assert not ElementKernel.bodies(2, 2, identical=False).equal_masses()
    assert not ElementKernel.chain(3, identical=False).equal_masses()
    assert len(ElementKernel.chain(3, "periodic").groups[1]["maps"]) == 3
    assert len(ElementKernel.chain(3, "free").groups[1]["maps"]) == 2


def test_exchange_symmetry_and_rotations():
    """Identical bodies: the kernel (without the correction, which is not symmetric) is invariant under exchanging two
    bodies, in one argument; every structure's kernel is invariant under one rotation of all bodies' space."""
    gen = torch.Generator().manual_seed(2)
    x, y = torch.randn(6, 8, generator=gen, dtype=torch.float64), torch.randn(6, 8, generator=gen, dtype=torch.float64)
    swap = torch.tensor([2, 3, 0, 1, 6, 7, 4, 5])
    k = _random_scales(ElementKernel.bodies(2, 2, correction=False).to(torch.float64))
    base = k.pointwise(x, y).detach()
    assert float((k.pointwise(x[:, swap], y).detach() - base).abs().max()) <= ROUNDING * float(base.abs().max())
    with_corr = _random_scales(ElementKernel.bodies(2, 2).to(torch.float64))
    assert float((with_corr.pointwise(x[:, swap], y) - with_corr.pointwise(x, y)).abs().max()) > 1e-6  # the test can fail
    c, s = math.cos(0.7), math.sin(0.7)
    Q = torch.block_diag(*[torch.tensor([[c, -s], [s, c]], dtype=torch.float64)] * 4)
    for kern in (with_corr, _random_scales(ElementKernel.bodies(2, 2, degree=2).to(torch.float64))):
        ref = kern.pointwise(x, y)
        assert float((kern.pointwise(x @ Q.T, y @ Q.T) - ref).abs().max()) <= ROUNDING * float(ref.abs().max())


def test_bind_carries_the_maps_into_standardised_coordinates():
    """Bound to q = sigma R q' + c, v = s R v' (any rotation R of all coordinates), the kernel at standardised states
    equals the unbound kernel at the data's states with its lengthscales in the data's units (position ones times
    sigma, velocity ones times s); the correction lives on the GP's inputs and is switched off here."""
    gen = torch.Generator().manual_seed(3)
    n, sigma, speed = 4, 2.5, 0.3
    R, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    center = torch.randn(n, generator=gen, dtype=torch.float64)
    bound = _random_scales(ElementKernel.bodies(2, 2, correction=False).to(torch.float64))
    bound.bind(center, sigma, speed, R)
    plain = ElementKernel.bodies(2, 2, correction=False).to(torch.float64).requires_grad_(False)
    units = torch.tensor([sigma, speed, 1.0, sigma, speed, 1.0], dtype=torch.float64)
    plain.lengthscale = bound.lengthscale.detach().reshape(-1) * units
    zs, ys = torch.randn(5, 2 * n, generator=gen, dtype=torch.float64), torch.randn(5, 2 * n, generator=gen, dtype=torch.float64)

    def data(z):
        return torch.cat([sigma * z[:, :n] @ R.T + center, speed * z[:, n:] @ R.T], -1)
    ref = plain.pointwise(data(zs), data(ys))
    assert float((bound.pointwise(zs, ys) - ref).abs().max()) <= ROUNDING * float(ref.abs().max())


def test_errors_are_typed():
    with pytest.raises(BeaValueError, match="dimension 8"):
        ElementKernel.bodies(2, 2).build(12, True)
    with pytest.raises(BeaValueError, match="ends"):
        ElementKernel.chain(4, ends="open")
    unbound = ElementKernel.bodies(2, 2).build(8, True)  # a model that does not bind it (LagrangianGP): refused
    with pytest.raises(BeaValueError, match="InverseModifiedLagrangianGP"):
        unbound.pointwise(torch.zeros(1, 8, dtype=torch.float64), torch.zeros(1, 8, dtype=torch.float64))
    groups = ElementKernel.bodies(2, 2).groups
    groups[0] = dict(groups[0], positions=1, degree=2)
    with pytest.raises(BeaValueError, match="mechanical base"):
        ElementKernel(groups)
    body, pair = ElementKernel.bodies(2, 2).groups
    with pytest.raises(BeaValueError, match="distinct"):  # the hyperparameters are keyed by the names
        ElementKernel([body, dict(pair, name="body")])
    with pytest.raises(BeaValueError, match="finite"):
        ElementKernel([body, dict(pair, offsets=torch.full_like(pair["offsets"], math.nan))])


def test_options_the_element_kernel_cannot_take():
    """One lengthscale= for the named scales (it set them all, group scales included), an element kernel used as
    given (its maps never carried into the fit's coordinates), an objective other than positions (the likelihood's
    search collapsed the outputscale to 1e-21): typed errors that name the fix, before any search."""
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP
    from learners.shadow import FunctionalKernel
    from tests.test_learners_shadow_auto import two_body4

    with pytest.raises(BeaValueError, match="leave lengthscale= out"):
        InverseModifiedLagrangianGP(0.2, kernel=ElementKernel.bodies(2, 2), lengthscale=1.0)
    with pytest.raises(BeaValueError, match="leave lengthscale= out"):
        InverseModifiedLagrangianGP(0.2, kernel=ElementKernel.bodies(2, 2), epsilon=1.0)
    with pytest.raises(BeaTypeError, match="cannot be used as given"):
        InverseModifiedLagrangianGP(0.2, kernel=FunctionalKernel(ElementKernel.bodies(2, 2)))
    data = snapshots(two_body4(), 0.2, 4, 5, seed=0)
    for name in ("mll", "heldout"):
        model = InverseModifiedLagrangianGP(0.2, kernel=ElementKernel.bodies(2, 2), objective=name, progress=False)
        with pytest.raises(BeaValueError, match="objective='positions'"):
            model.fit(data)


def test_closed_form_mean_matches_the_generic_path():
    """The posterior mean's closed form (ElementExpansion, per group the base kernel's own) against the generic
    blocks through autograd: values, gradients and a Hessian row to rounding."""
    from learners.shadow.functionals import AtomSet
    from learners.shadow.kernels import AtomExpansion, FunctionalKernel

    gen = torch.Generator().manual_seed(4)
    for kern in (ElementKernel.bodies(2, 2), ElementKernel.chain(3, degree=2)):
        kern = _random_scales(kern.to(torch.float64))
        D, fk = kern.dim, FunctionalKernel(kern)
        fk.outputscale = 1.7
        atoms = {m: AtomSet(torch.randn(7, D, generator=gen, dtype=torch.float64),
                            torch.randn(7, m, D, generator=gen, dtype=torch.float64),
                            torch.randn(7, generator=gen, dtype=torch.float64), torch.arange(7)) for m in (0, 1, 2)}
        X = torch.randn(5, D, generator=gen, dtype=torch.float64, requires_grad=True)
        closed = AtomExpansion(fk, atoms)
        assert type(closed._custom).__name__ == "ElementExpansion"
        for f in (closed, AtomExpansion(fk, atoms, differentiable=True)):
            val = f(X)
            (grad,) = torch.autograd.grad(val.sum(), X, create_graph=True)
            (hess,) = torch.autograd.grad(grad[:, 0].sum(), X)
            if f is closed:
                ref = [val.detach(), grad.detach(), hess]
            else:
                for a, b in zip(ref, [val.detach(), grad.detach(), hess]):
                    assert float((a - b).abs().max()) <= ROUNDING * float(b.abs().max())


@pytest.fixture(scope="module")
def two_body_fit(two_body_element_fit):
    """The softened two-body problem of the acceptance tests (two unit masses in the plane, n = 4) at CI size:
    30 trajectories of 5 steps, h = 0.2; fitted with ElementKernel.bodies(2, 2) (about 13 s of CPU) once per session
    (tests/conftest.py); this module's own deep copy (tests/conftest.two_body_element_fit), since its tests calibrate
    it and patch its entries."""
    return two_body_element_fit


def test_fit_meets_0_2_where_the_default_measured_0_248(two_body_fit):
    """Energy differences (N = 2, after the best scale) on the acceptance test's held-out states: 0.132 relative with the
    element kernel. The default kernel is not fitted here: on the same data it gave 0.248 (measured once, branch elem;
    its held-out one-step error -6.2 against the element kernel's -12.9, and it warns). The bound 0.2 is 1.5x the
    element kernel's value and below that measured default, so a structure that helps no more than the default did
    fails. The structure's equal masses fix the whole mass matrix (the normalisation is not searched). The first
    group's scale is the fixed overall one: reported as 1 (relative scales are dimensionless, not in the data's units)."""
    from tests.test_learners_shadow_auto import energy_differences

    system, _, model = two_body_fit
    assert model.objective_used == "positions" and model.history["normalisation_candidates"] == ["matrix"]
    rel, _ = energy_differences(model, system, 2, return_std=False)
    assert rel <= 0.2, rel
    assert model.hyperparameters["lengthscale"]["body:scale"] == 1.0


def test_hyperparameters_of_a_fit_read_without_warnings(two_body_fit):
    """``model.hyperparameters`` reads trained scales (tensors that require grad) as floats without torch's
    "converting a tensor with requires_grad=True to a scalar" UserWarning, which it raised for element fits."""
    import warnings

    model = two_body_fit[2]
    params = list(model.gp.kernel.parameters())
    flags = [q.requires_grad for q in params]
    try:
        for q in params:  # as a fit through kernel="auto" leaves them
            q.requires_grad_(True)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            hp = model.hyperparameters
    finally:
        for q, f in zip(params, flags):
            q.requires_grad_(f)
    assert hp["outputscale"] > 0 and hp["noise"] > 0


def test_mean_differences_on_the_taylor_mean_equal_the_mod_n_mean(two_body_fit, monkeypatch):
    """The distant-difference calibration's means for an element model (on the mean's jet table at each state,
    element_uncertainty.on_mean) equal the path they replace (bea.energy of mod_N of the mean itself) at a few random
    standardised pairs: both exact, so to rounding -- measured 1.7e-9 of the largest difference (mod_N's nested
    derivatives of the mean's cancelling atom sums); 1e-7 leaves room for other BLAS orders, while the values of a jet
    one order too low differ by far more (p = 2 instead of 3: 1.8e-3 of the values, measured)."""
    from learners.shadow.difference_calibration import _mean_differences

    model = two_body_fit[2]
    gen = torch.Generator().manual_seed(4)
    x, x_ref = (0.7 * torch.randn(3, 2 * model.n, generator=gen, dtype=torch.float64) for _ in range(2))
    taylor = _mean_differences(model, model.gp, x, x_ref, 2)
    monkeypatch.setattr(model, "_element_entries", lambda: 0)  # the default kernels' branch: mod_N on the mean
    plain = _mean_differences(model, model.gp, x, x_ref, 2)
    assert float(plain.abs().max()) > 1e-3
    assert float((taylor - plain).abs().max()) <= 1e-7 * float(plain.abs().max())


def test_rotated_data_give_the_rotated_model(two_body_fit):
    """Both bodies' plane turned by 0.9 rad: the data are standardised with a rotated centre, the maps carried along,
    the kernel isotropic, so the learned scales agree to rounding and the energy differences at the turned states to
    1e-4 of their spread (measured 3.5e-6 absolute; the fit's own error is 0.13, so a broken map shows at O(0.1))."""
    from learners import InverseModifiedLagrangianGP
    from tests.test_learners_shadow_auto import held_out_states

    system, data, model = two_body_fit
    c, s = math.cos(0.9), math.sin(0.9)
    Q = torch.block_diag(*[torch.tensor([[c, -s], [s, c]], dtype=torch.float64)] * 2)
    turned = InverseModifiedLagrangianGP(0.2, kernel=ElementKernel.bodies(2, 2), progress=False).fit(data @ Q.T)
    a, b = model.hyperparameters["lengthscale"], turned.hyperparameters["lengthscale"]
    # two discrete searches on rotated rounding: 1e-6 leaves room for a near-tie decided the other way by rounding
    assert all(math.isclose(a[k], b[k], rel_tol=1e-6) for k in a)
    q, v = held_out_states(system, 10)
    H, Ht = model.energy(2), turned.energy(2)
    dH = (H(q, v) - H(q[:1], v[:1])).detach()
    dHt = (Ht(q @ Q.T, v @ Q.T) - Ht(q[:1] @ Q.T, v[:1] @ Q.T)).detach()
    assert float((dH - dHt).abs().max()) <= 1e-4 * float(dH.abs().max())


def test_saving_velocities_and_the_std(two_body_fit, tmp_path):
    """A model file gives the same Lagrangian bit for bit; velocities work. The std (learners.shadow.element_uncertainty):
    its first demand calibrates, and at CI size (30 trajectories, held-out energy error 0.13 relative,
    test_fit_meets_0_2_where_the_default_measured_0_248) the energy resolution warning fires (measured: calibrated std
    3.5e-2 of the differences, limit 1e-2) -- before the std existed this fit was silent. The calibration's own held-out
    z-scores: RMS within [0.5, 1.5] (measured 1.05 / 1.00 / 0.99 for the DEL, distant-difference and conservation
    scales). Then energies' and velocities' stds: finite and positive."""
    from learners import InverseModifiedLagrangianGP
    from learners.shadow.hyperparameters import IdentifiabilityWarning
    from tests.test_learners_shadow_auto import held_out_states

    system, data, model = two_body_fit
    q, v = held_out_states(system, 5)
    with pytest.warns(IdentifiabilityWarning) as caught:  # with it, the orders check (H_rec[4] cannot beat H_rec[2])
        calibration = model.calibration  # (a model file carries the calibration: saving would run it)
    assert any("energy is poorly determined" in str(w.message) for w in caught)
    loaded = InverseModifiedLagrangianGP.load(model.save(tmp_path / "m.pt"))
    assert torch.equal(loaded.lagrangian(q, v), model.lagrangian(q, v))
    for name in ("del", "energy_differences", "energy"):
        assert 0.5 <= calibration[name].rms_z <= 1.5, (name, calibration[name])
    _, std = model.energy(2, return_std=True, reference=(q[0], v[0]))(q[1:], v[1:])
    # the velocities with their std: the mean is the one a call without the std returns (the same solve, then the
    # std's passes; the chunked velocities' test runs at order 0, so order 2 without the std is checked here)
    vel, vstd = model.velocities(data[0], 2, return_std=True)
    assert vel.shape == vstd.shape == data[0].shape and bool(torch.isfinite(vel).all())
    assert torch.equal(vel, model.velocities(data[0], 2))
    assert bool(torch.isfinite(std).all() and (std > 0).all() and torch.isfinite(vstd).all() and (vstd > 0).all())
    assert set(model.hyperparameters["lengthscale"]) == set(model.gp.kernel.base_kernel.parameter_names())


def test_energies_in_bounded_chunks(two_body_fit, monkeypatch):
    """The energies come in chunks of states whose kernel entries count the instances and the atoms they see (5 atoms'
    worth here, ~985 atoms: 8 states a pass against the default rule's 40): equal to one unchunked pass to rounding
    (each state's energy is its own; 1e-12 of the spread as in ROUNDING), differences to a reference too, and refused
    with a typed error where one state alone is too large."""
    import bea
    from bea.errors import BeaRuntimeError
    from learners.shadow import element_energy
    from learners.shadow.element_kernel import ElementExpansion
    from learners.shadow.recovery import AUTOGRAD_ENTRIES
    from tests.test_learners_shadow_auto import held_out_states

    system, _, model = two_body_fit
    atoms = sum(A.points.shape[0] for A in model.gp.train_functionals.atoms.values())
    # per state: body 2 instances x 1 of each order-1 atom's projections, pair 1 orientation x 2, correction 1 (the 9
    # instance pairs before session 13); the mass normalisation's order-2 atoms on two bodies are seen by no body
    entries = model._element_entries()
    kernel = model.gp.kernel.base_kernel
    assert entries == ElementExpansion(kernel, model.gp.train_functionals.atoms, 1.0).entries
    assert 5 * len(model.gp.train_functionals.atoms[1]) <= entries <= 5 * atoms
    assert model._autograd_chunk() == AUTOGRAD_ENTRIES // entries < AUTOGRAD_ENTRIES // atoms
    q, v = held_out_states(system, 10)
    H = bea.energy(model.recovered_lagrangian(2))
    chunked, whole = model.energy(2)(q, v), H(q, v).detach()
    # a state's energy rounds differently in batches of other sizes (the mean cancels large terms): measured up to
    # 1.4e-9 of the spread (one state against a batch); a state dropped or shifted by the chunks is O(1)
    spread = float((whole - whole.mean()).abs().max())
    assert float((chunked - whole).abs().max()) <= 1e-8 * spread
    # differences without the std (raised on branch elem): the same chunks less one state's own pass
    diff = model.energy(2, reference=(q[0], v[0]))(q[1:], v[1:])
    assert float((diff - (model.energy(2)(q[1:], v[1:]) - H(q[:1], v[:1]).detach())).abs().max()) <= ROUNDING * spread
    assert float((diff - (whole[1:] - whole[0])).abs().max()) <= 1e-8 * spread
    monkeypatch.setattr(element_energy, "MAX_STATE_ENTRIES", entries - 1)
    with pytest.raises(BeaRuntimeError, match="not practical at this size"):
        model.energy(2)


def test_velocities_and_energies_in_bounded_chunks(two_body_fit, monkeypatch):
    """Along positions, velocities and energies come in passes of at most the energy's states per pass (at least two):
    windows of time steps as long as that allows, and as many trajectories as fit with them (budgets 3: windows of 3
    steps, one trajectory; 13: whole trajectories, two at a time, then the third alone; the fit's own), equal to one
    pass over all steps to 1e-7 of their size (each state's solve is its own, but the mean rounds differently in
    batches of other sizes, as in test_energies_in_bounded_chunks: measured up to 4.8e-9 for the velocities, 1.3e-8 for
    the energies over windows of 2 to 6 steps and 1 to 4 trajectories at order 2, before Session 22; a state dropped or
    shifted by a step or a trajectory moves a velocity by O(0.1) and an energy by its spread). Three trajectories
    since Session 18: the budget of 13 then leaves a remainder group of one. At order 0 since Session 22: the passes
    are the same at every order while the element kernel has no closed-form jet (asserted: a jet could make passes
    of other sizes take another path at order 2 only; the order is only passed through, and every pass is checked
    to get 0, not the default), while order 2's nested derivatives made this test ~25x dearer (47 s of the CI run);
    measured at order 0 up to 2.7e-9 for the velocities and 1.6e-8 for the energies (budget 3), 6x below
    the bound. The energies H(L_inv) vary by 1.1e-2 of their size along a trajectory
    (O(h^2), not conserved as H_rec[2] is), so a shifted state fails by far more."""
    from learners.shadow.recovery import RecoveryMixin

    _, data, model = two_body_fit
    assert model._closed_form_jet() is None  # the order-0 premise above
    qs = data[:3].transpose(0, 1)  # (6 snapshots, 3 trajectories, n)
    whole = {f: f(qs, 0, chunk=qs.shape[0]) for f in (model.velocities, model.energies)}
    passes, orders = [], set()
    for name in ("velocities", "energies"):
        def spy(self, q, order=2, chunk=None, *a, _real=getattr(RecoveryMixin, name), **k):
            passes.append((min(chunk, q.shape[0]), q.shape[1]))  # (time steps a window, trajectories) of a pass
            orders.add(order)
            return _real(self, q, order, chunk, *a, **k)
        monkeypatch.setattr(RecoveryMixin, name, spy)
    assert model._velocity_chunk() >= model._autograd_chunk()  # the Newton solves' own, larger passes
    for budget in (3, 13, model._autograd_chunk()):
        monkeypatch.setattr(model, "_autograd_chunk", lambda b=budget: b)
        monkeypatch.setattr(model, "_velocity_chunk", lambda b=budget: b)
        for f in (model.velocities, model.energies):
            passes.clear()
            got = f(qs, 0)
            size = float(whole[f].abs().max())  # (the energies vary along a trajectory by ~1e-2 of it at order 0)
            assert got.shape == whole[f].shape and float((got - whole[f]).abs().max()) <= 1e-7 * size
            assert sum(c for _, c in passes) == 3 and max(t * c for t, c in passes) <= max(2, budget)
            assert min(t for t, _ in passes) == min(qs.shape[0], max(2, budget))  # windows as long as the bound allows
    assert orders == {0}


def test_innovation_means_from_the_variances_linearisation(two_body_fit):
    """The distant-difference calibration takes each posterior's mean differences from its variances' linearisation
    passes (the quantity at the mean, the columns at weight 0; Session 21) instead of another pass of the mean's Taylor
    polynomial (_mean_differences): the values of on_taylor_mean (that polynomial; on_mean now reads the mean's jet
    table, its atom sums grouped by its own passes) over the same rows (bit for bit measured; 1e-12 bounds it,
    while another state's or order's energy is O(1) off). _mean_differences takes both states of every pair in one
    pass, whose atom sums are grouped by its rows: the mean's sums cancel ~8 digits, so it differs by up to ~5e-9 of
    the largest difference (measured 1.7e-8 of 3.4 over all 60 pairs; 8.9e-16 of 2.1 over the 8 pairs here): the
    calibration's innovations move by that rounding. 8 pairs: no claim depends on their count (10.8 -> 1.0 s)."""
    from learners.shadow.difference_calibration import _mean_differences, _raw_variances, data_pairs
    from learners.shadow.element_uncertainty import on_taylor_mean
    from learners.shadow.uncertainty import LinearisedQuantity, _feature_map, _kernel

    model = two_body_fit[2]
    x, x_ref = (z[:8] for z in data_pairs(model))  # a few pairs: no claim depends on their count, the cost does
    Q, p = model._quantity("energy", 2), model._jet_order("energy", 2)
    G = LinearisedQuantity(Q, x, 1, p)
    means = [[]]
    _raw_variances([model.gp], [torch.arange(model.gp.train_functionals.count)], G, x_ref, means)
    got = torch.cat(means[0])
    rows = _feature_map(_kernel(model.gp)[0], x.shape[-1], p).split().chunk_rows(1)
    assert rows >= x.shape[0]  # one pass of the variances: on_mean over the same rows
    ref = (on_taylor_mean(model.gp, [Q], x, p)[0] - on_taylor_mean(model.gp, [Q], x_ref, p)[0])[:, 0]
    assert got.shape == ref.shape == (x.shape[0],) and float(ref.abs().max()) > 0
    assert float((got - ref).abs().max()) <= 1e-12 * float(ref.abs().max()), (got - ref).abs().max()
    together = _mean_differences(model, model.gp, x, x_ref, 2)
    assert float((got - together).abs().max()) <= 1e-7 * float(ref.abs().max())


@pytest.mark.slow
def test_two_body_acceptance_with_the_element_kernel():
    """Issue 23's bound on the softened two-body problem (150 trajectories, h = 0.2, the acceptance test's data), which the
    default kernel misses (2.14e-2): energy differences within 3e-3 at N = 2 and 4. Measured with the element kernel
    2.93e-4 / 2.40e-4 (seed 0), 2.32e-4 / 2.04e-4 on seed 1 (benchmarks/RESULTS_identification.md, Session 12, branch
    elem); about 60 s of CPU for the fit."""
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP
    from tests.test_learners_shadow_auto import energy_differences, two_body4

    system = two_body4()
    model = InverseModifiedLagrangianGP(0.2, kernel=ElementKernel.bodies(2, 2), progress=False).fit(
        snapshots(system, 0.2, 150, 5, seed=0))
    for N in (2, 4):
        rel, _ = energy_differences(model, system, N, return_std=False)
        assert rel <= 3e-3, (N, rel)


def test_energy_is_differentiable_and_the_std_is_refused_before_any_calibration(two_body_fit, monkeypatch):
    """Gradients of the energy (level sets, learners.metrics) flow through the element model's energy where the
    inputs require them (in chunks beyond one chunk of states): equal to the recovered Lagrangian's energy's gradient
    to rounding; where the kernel has no std (mechanical bases: element_uncertainty.unsupported, here made to say so) it
    raises before any calibration runs (no calibration outcome recorded by the refused call: before the fix it ran
    three failing calibrations first, 8 s at CI size)."""
    import bea
    from learners.shadow import element_uncertainty
    from tests.test_learners_shadow_auto import held_out_states

    system, _, model = two_body_fit
    q, v = held_out_states(system, 4)
    q = q.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(model.energy(2)(q, v).sum(), q)
    q2 = q.detach().clone().requires_grad_(True)
    (g0,) = torch.autograd.grad(bea.energy(model.recovered_lagrangian(2))(q2, v).sum(), q2)
    assert float((g - g0).abs().max()) <= ROUNDING * float(g0.abs().max())
    # more states than a chunk (8 here): per chunk, graphs freed, the same gradients (to the batch rounding of
    # test_energies_in_bounded_chunks, ~1e-9) and no second derivative (it raises rather than being wrong)
    q, v = held_out_states(system, 20)
    assert q.shape[0] > model._autograd_chunk()
    q = q.clone().requires_grad_(True)
    E = model.energy(2)(q, v)
    (g,) = torch.autograd.grad(E.sum(), q, create_graph=True)
    q2 = q.detach().clone().requires_grad_(True)
    (g0,) = torch.autograd.grad(bea.energy(model.recovered_lagrangian(2))(q2, v).sum(), q2)
    assert float((g - g0).abs().max()) <= 1e-8 * float(g0.abs().max())
    with pytest.raises(RuntimeError, match="once_differentiable|does not require grad"):
        torch.autograd.grad(g.sum(), q)
    before = dict(model.history)
    monkeypatch.setattr(element_uncertainty, "unsupported", lambda base: "no std here: build it with degree=None")
    for call in (lambda: model.energy(2, return_std=True), lambda: model.energies(q.detach()[None], 2, return_std=True),
                 lambda: model.velocities(q.detach()[None].expand(3, -1, -1), 2, return_std=True)):
        with pytest.raises(BeaTypeError, match="degree=None"):
            call()
    assert {k for k in model.history if k not in before} == set()


def test_an_unfitted_default_model_still_says_it_is_not_fitted():
    """The element hooks look for an element kernel without assuming a fitted GP: the mixin's own error stands."""
    from bea.errors import BeaRuntimeError
    from learners import InverseModifiedLagrangianGP

    for return_std in (False, True):
        with pytest.raises(BeaRuntimeError, match="not fitted"):
            InverseModifiedLagrangianGP(0.2).energy(2, return_std=return_std)
