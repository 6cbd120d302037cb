"""Code generation: generic formulas compiled to torch against concrete SymPy derivations."""

import numpy as np
import pytest
import sympy
import torch

import bea

torch.set_default_dtype(torch.float64)
RNG = np.random.default_rng(0)


def _systems():
    q, v = sympy.symbols("q v", real=True)
    pend = (v**2 / 2 + sympy.cos(q), [q], [v], lambda Q, V: 0.5 * (V**2).sum(-1) + torch.cos(Q).sum(-1))
    coupled = (
        (1 + q**2) * v**2 / 2 + sympy.cos(q) + q * v,
        [q], [v],
        lambda Q, V: (0.5 * (1 + Q[..., 0] ** 2) * V[..., 0] ** 2 + torch.cos(Q[..., 0]) + Q[..., 0] * V[..., 0]),
    )
    poly = (  # constant mass: takes the independent polynomial path
        v**2 / 2 + q * v + q**2 * v / 3 - q**4 / 4,
        [q], [v],
        lambda Q, V: (0.5 * V[..., 0] ** 2 + Q[..., 0] * V[..., 0] + Q[..., 0] ** 2 * V[..., 0] / 3 - Q[..., 0] ** 4 / 4),
    )
    x, y, u, w = sympy.symbols("x y u w", real=True)
    two_d = (
        (1 + x**2 / 4) * u**2 / 2 + w**2 / 2 + u * w / 3 + sympy.cos(x) - y**2 / 2 + x * y / 5 + x * w / 7,
        [x, y], [u, w],
        lambda Q, V: ((1 + Q[..., 0] ** 2 / 4) * V[..., 0] ** 2 / 2 + V[..., 1] ** 2 / 2 + V[..., 0] * V[..., 1] / 3
                      + torch.cos(Q[..., 0]) - Q[..., 1] ** 2 / 2 + Q[..., 0] * Q[..., 1] / 5 + Q[..., 0] * V[..., 1] / 7),
    )
    return {"pendulum": pend, "qv-coupled": coupled, "polynomial": poly, "2d": two_d}


CASES = [
    ("pendulum", "midpoint", 6), ("qv-coupled", "midpoint", 6), ("qv-coupled", "trapezoidal", 4),
    ("polynomial", "midpoint", 6), ("polynomial", "generalised_midpoint:0.3", 3), ("2d", "midpoint", 2),
    ("2d", "trapezoidal", 2),
]


@pytest.mark.parametrize("kind", ["modified_lagrangian", "inverse_modified_lagrangian", "modified_equation"])
@pytest.mark.parametrize("system,scheme,order", CASES)
def test_generic_torch_equals_concrete_sympy(system, scheme, order, kind):
    Ls, q, v, Lt = _systems()[system]
    n = len(q)
    generic = getattr(bea, kind)(scheme, order, n=n)
    f = generic.to_torch()
    concrete = getattr(bea, kind)(scheme, order, lagrangian=Ls, q=q, v=v)
    args = [*q, *v, concrete.h]
    expr = concrete.expr
    g = sympy.lambdify(args, list(expr) if kind == "modified_equation" else expr, "numpy")
    Q = torch.tensor(RNG.uniform(-1, 1, (20, n)))
    V = torch.tensor(RNG.uniform(-1, 1, (20, n)))
    hval = 0.3
    got = f(Lt, Q, V, hval).detach().numpy()
    cols = [Q[:, i].numpy() for i in range(n)] + [V[:, i].numpy() for i in range(n)] + [hval]
    want = np.array(g(*cols), dtype=float)
    if kind == "modified_equation":
        want = np.stack([np.broadcast_to(w, (20,)) for w in want], -1)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    # and the concrete series compiles to torch itself
    np.testing.assert_allclose(concrete.to_torch()(Q, V, hval).numpy(), want, rtol=1e-10, atol=1e-10)


def test_gradcheck_through_generated_code():
    f = bea.modified_lagrangian("midpoint", 4, n=2).to_torch()
    k = torch.tensor([1.3, 0.7], requires_grad=True)

    def L(q, v):
        return 0.5 * (v**2).sum(-1) + 0.1 * v[..., 0] * q[..., 1] ** 2 + (k * torch.cos(q)).sum(-1)

    q = torch.randn(3, 2, requires_grad=True)
    v = torch.randn(3, 2, requires_grad=True)
    assert torch.autograd.gradcheck(lambda q, v, k_: f(lambda a, b: 0.5 * (b**2).sum(-1) + 0.1 * b[..., 0] * a[..., 1] ** 2
                                                       + (k_ * torch.cos(a)).sum(-1), q, v, 0.2), (q, v, k))
    # gradient with respect to a parameter of L (as in a training loss)
    out = f(L, q.detach(), v.detach(), 0.2).sum()
    (gk,) = torch.autograd.grad(out, k)
    assert torch.isfinite(gk).all() and gk.abs().sum() > 0


def test_energy_of_torch_lagrangian():
    H = bea.energy(lambda q, v: 0.5 * (1 + q[..., 0] ** 2) * v[..., 0] ** 2 - q[..., 0] ** 2)
    q = torch.tensor([[0.5], [1.0]])
    v = torch.tensor([[2.0], [-1.0]])
    expected = 0.5 * (1 + q[:, 0] ** 2) * v[:, 0] ** 2 + q[:, 0] ** 2
    torch.testing.assert_close(H(q, v), expected, rtol=1e-14, atol=1e-14)


def test_singular_hessian_at_evaluation_time():
    f = bea.modified_lagrangian("midpoint", 2, n=1).to_torch()
    with pytest.raises(ValueError, match="not regular"):
        f(lambda q, v: (q * v).sum(-1), torch.ones(4, 1), torch.ones(4, 1), 0.1)
    g = bea.modified_lagrangian("midpoint", 2, n=2).to_torch()
    with pytest.raises(ValueError, match="not regular"):
        g(lambda q, v: 0.5 * (v.sum(-1)) ** 2 + torch.cos(q).sum(-1), torch.ones(4, 2), torch.ones(4, 2), 0.1)


def test_shape_errors_at_evaluation_time():
    f = bea.modified_lagrangian("midpoint", 2, n=2).to_torch()
    L = lambda q, v: 0.5 * (v**2).sum(-1)  # noqa: E731
    with pytest.raises(ValueError, match="dimension n=2"):
        f(L, torch.ones(3, 1), torch.ones(3, 1), 0.1)
    with pytest.raises(ValueError, match="same shape"):
        f(L, torch.ones(3, 2), torch.ones(4, 2), 0.1)
    with pytest.raises(ValueError, match="one value per state"):
        f(lambda q, v: (v**2), torch.ones(3, 2), torch.ones(3, 2), 0.1)


def test_derivatives_are_partial_when_v_is_computed_from_q():
    """The trapezoidal rule calls L(a, (b - a)/h): dL/dq must not pick up the path through v."""
    f = bea.modified_lagrangian("midpoint", 2, n=1).to_torch()
    L = lambda q, v: 0.5 * (v**2).sum(-1) + torch.cos(q).sum(-1) + q.sum(-1) * v.sum(-1) ** 2  # noqa: E731
    a = torch.tensor([[0.3], [-0.2]], requires_grad=True)
    b = torch.tensor([[0.5], [0.1]])
    v = (b - a) / 0.1
    coupled = f(L, a, v, 0.1)
    independent = f(L, a.detach(), v.detach(), 0.1)
    torch.testing.assert_close(coupled, independent, rtol=1e-14, atol=1e-14)
    H = bea.energy(L)
    torch.testing.assert_close(H(a, v), H(a.detach(), v.detach()), rtol=1e-14, atol=1e-14)


def test_non_finite_points_propagate_nan_instead_of_raising():
    # a diverged Newton iterate gives NaN inputs at some batch points: the integrators mask those trajectories,
    # so the series must return NaN there (and regular values elsewhere) rather than raise for the whole batch
    f = bea.modified_lagrangian("midpoint", 2, n=2).to_torch()
    L = lambda q, v: 0.5 * (v ** 2).sum(-1) + torch.cos(q).sum(-1)
    q = torch.tensor([[0.1, 0.2], [float("nan"), 0.0], [0.3, -0.1]], dtype=torch.float64)
    v = torch.tensor([[0.5, -0.4], [0.1, 0.2], [0.0, 1.0]], dtype=torch.float64)
    out = f(L, q, v, 0.1)
    assert torch.isnan(out[1]) and torch.isfinite(out[[0, 2]]).all()
    ref = f(L, q[[0, 2]], v[[0, 2]], 0.1)
    torch.testing.assert_close(out[[0, 2]], ref, rtol=0, atol=0)
    # a finite singular Hessian is still an error
    with pytest.raises(ValueError, match="not regular"):
        f(lambda q, v: 0.5 * (v.sum(-1)) ** 2 + torch.cos(q).sum(-1), q, v, 0.1)


@pytest.mark.parametrize("system", ["qv-coupled", "2d"])
def test_closed_form_midpoint_series_equal_the_generated_code(system):
    # mod_2 = L + h^2/24 (A'MA - v'L_qq v), inv_2 = L - the same: any n, no symbolic derivation
    _, q, _, Lt = _systems()[system]
    n = len(q)
    Q = torch.tensor(RNG.uniform(-1, 1, (20, n)))
    V = torch.tensor(RNG.uniform(-1, 1, (20, n)))
    h = 0.3
    for kind, closed in (("modified_lagrangian", bea.midpoint_mod2), ("inverse_modified_lagrangian", bea.midpoint_inv2)):
        generic = getattr(bea, kind)("midpoint", 2, n=n).to_torch()
        want = generic(Lt, Q, V, h)
        got = closed(Lt, h)(Q, V)
        # the h^2 term is ~1e-2 here; both evaluate it in double precision
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        assert (got - Lt(Q, V)).abs().max() > 1e-4  # the correction is really there
        torch.testing.assert_close(bea.momentum(closed(Lt, h))(Q, V), bea.momentum(lambda a, b: generic(Lt, a, b, h))(Q, V),
                                   rtol=1e-12, atol=1e-12)
        with torch.no_grad():  # builds its own graph, returns a detached result
            out = closed(Lt, h)(Q, V)
        assert not out.requires_grad
        torch.testing.assert_close(out, want.detach(), rtol=1e-12, atol=1e-12)


def test_closed_form_bad_input():
    L = lambda q, v: 0.5 * (v ** 2).sum(-1) + torch.cos(q).sum(-1)  # noqa: E731
    for bad in (0.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="h must be"):
            bea.midpoint_mod2(L, bad)
    with pytest.raises(TypeError, match="h must be"):
        bea.midpoint_inv2(L, "0.1")
    with pytest.raises(TypeError, match="callable"):
        bea.midpoint_mod2(3.0, 0.1)
    with pytest.raises(ValueError, match="not regular"):
        bea.midpoint_mod2(lambda q, v: 0.5 * v.sum(-1) ** 2 + torch.cos(q).sum(-1), 0.1)(torch.ones(3, 2), torch.ones(3, 2))
    with pytest.raises(ValueError, match="same shape"):
        bea.midpoint_inv2(L, 0.1)(torch.ones(3, 2), torch.ones(2, 2))
