"""Batched Newton solver: per-sample convergence, failures, both Jacobian modes."""

import pytest
import torch

from integrators.newton import NewtonOptions, autograd_system, newton, vmap_system


def _cubic(x, c):
    # r_b(x) = x^3 + x - c_b, componentwise; pointwise over the batch
    return x**3 + x - c, None


def test_newton_solves_every_element_to_rounding_level():
    c = torch.linspace(-5, 5, 11)[:, None].repeat(1, 2)
    res = newton(autograd_system(_cubic), torch.zeros_like(c), (c,))
    assert bool(res.converged.all()) and not bool(res.failed.any())
    assert float((res.x**3 + res.x - c).abs().max()) < 1e-13
    # quadratic convergence: from x = 0 to |c| <= 5 in a handful of Jacobians
    assert res.iterations <= 10


def test_vmap_and_autograd_jacobians_agree():
    c = torch.linspace(-3, 3, 7)[:, None]

    def single(x, cc):
        return x**3 + x - cc, None

    a = newton(autograd_system(_cubic), torch.zeros_like(c), (c,))
    b = newton(vmap_system(single), torch.zeros_like(c), (c,))
    assert torch.allclose(a.x, b.x, rtol=0, atol=1e-14)
    assert torch.allclose(a.jacobian, b.jacobian, rtol=0, atol=1e-12)


def test_per_sample_failure_is_reported_not_raised():
    # element 1 has no real root of x^2 + 1 = 0: it cannot converge; the others must
    def fun(x, c):
        return x**2 - c, None

    c = torch.tensor([[4.0], [-1.0], [9.0]])
    res = newton(autograd_system(fun), torch.ones_like(c), (c,), options=NewtonOptions(maxiter=15))
    assert res.converged.tolist() == [True, False, True]
    assert torch.allclose(res.x[[0, 2]], torch.tensor([[2.0], [3.0]]), atol=1e-14)
    assert float(res.residual[1]) > 0.1


def test_singular_jacobian_marks_failure():
    def fun(x, c):
        return (x - c) ** 2 + 1.0, None  # no root; J = 0 at x = c

    c = torch.tensor([[0.0]])
    res = newton(autograd_system(fun), c.clone(), (c,))
    assert not bool(res.converged.any())
    assert bool(res.failed.all())


@pytest.mark.parametrize("kwargs", [dict(xtol=-1.0), dict(maxiter=0), dict(xtol=0.0, ftol=0.0), dict(xtol=float("nan"))])
def test_bad_options(kwargs):
    with pytest.raises(ValueError):
        NewtonOptions(**kwargs)
