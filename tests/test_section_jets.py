"""The Gaussian kernel sections' directional derivatives in closed form (learners/shadow/section_jets.py) against the
forward-mode route they replace (feature_jets._directional over _gaussian_section, torch.func.jvp): the same
numbers to rounding, every component and every input count (n <= 2 plain products, n > 2 the products in halves)."""

import itertools

import pytest
import torch

from bea.errors import BeaValueError
from learners.shadow.feature_jets import _directional, _gaussian_section, monomial_exponents
from learners.shadow.section_jets import gaussian_directional

EPS = torch.finfo(torch.float64).eps


def _case(n, m, seed=5):
    g = torch.Generator().manual_seed(seed)
    xb, y = torch.randn(3, n, generator=g, dtype=torch.float64), torch.randn(6, n, generator=g, dtype=torch.float64)
    scales = 0.5 + torch.rand(n, generator=g, dtype=torch.float64)
    W = torch.randn(6, m, n, generator=g, dtype=torch.float64)
    return xb, y, scales, W


@pytest.mark.parametrize("n, m", list(itertools.product([1, 2, 3, 5], [0, 1, 2])))
def test_matches_forward_mode(n, m):
    """Each component (the section, its first derivatives along each direction, the mixed second) equals jvp's to 16 eps
    of the component's largest entry: the same products of one-dimensional factors, summed in another order (measured
    up to 3.4 eps at these sizes; a wrong lift sqrt((a+1)...(a+k)) or sign is O(1) off)."""
    xb, y, scales, W = _case(n, m)
    alphas = monomial_exponents(n, 4)
    ref = _directional(lambda yy: _gaussian_section(xb, yy, scales, alphas), y, W)
    got = gaussian_directional(xb, y, scales, alphas, W)
    assert got.keys() == ref.keys() and len(got) == 2 ** m
    for key, value in ref.items():
        assert got[key].shape == value.shape
        assert float((got[key] - value).abs().max()) <= 16 * EPS * float(value.abs().max()), key


def test_mixed_second_derivative_closed_form():
    r"""n = 1, alpha = 0: :math:`\partial_{y}^2 e^{-z^2/2} u w = (z^2 - 1) e^{-z^2/2} u w / s^2`, z = (x - y)/s."""
    xb, y, scales, W = _case(1, 2, seed=8)
    got = gaussian_directional(xb, y, scales, torch.zeros(1, 1, dtype=torch.long), W)[(0, 1)][..., 0]
    z = ((xb[:, None] - y[None]) / scales)[..., 0]
    exact = (z * z - 1) * torch.exp(-0.5 * z * z) * W[:, 0, 0] * W[:, 1, 0] / scales[0] ** 2
    assert torch.allclose(got, exact, rtol=1e-13, atol=0)


def test_three_directions_refused():
    xb, y, scales, W = _case(2, 3)
    with pytest.raises(BeaValueError, match="at most 2 directions"):
        gaussian_directional(xb, y, scales, monomial_exponents(2, 2), W)
