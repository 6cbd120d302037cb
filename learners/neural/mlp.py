r"""The one multilayer perceptron of the learners (ModLaNet's element networks and the neural baselines).

:math:`x \mapsto W_{L+1}\,\sigma(\cdots\sigma(W_1 x + b_1)\cdots) + b_{L+1}` with ``layers`` hidden layers
of width ``width``, float64, a smooth activation (``tanh`` or ``softplus``, so that the second
derivatives a Lagrangian needs exist), and :meth:`MLP.tangent`, the Jacobian--vector product by
forward propagation, :math:`dz \mapsto W dz` then :math:`\sigma'(\cdot)\odot`.

Initialisations (building a model never draws from, or changes, torch's global generator):

``"uniform"`` (ModLaNet)
    weights and biases uniform in :math:`\pm 1/\sqrt{\text{fan-in}}` (torch's default scale) from
    ``generator`` (or a generator seeded with ``seed``);
``"xavier"`` (the paper's HNN / baseline)
    Xavier-normal weights, torch's default biases, from ``seed`` in a forked random state;
``"lnn"`` (Cranmer et al. 2020, App. C, as the paper's LNN)
    weight standard deviations :math:`2.2/\sqrt{d_{in}}`, :math:`0.58\,(i+1)/\sqrt{(d_{in}+d_{out})/2}`
    for hidden layer ``i`` and :math:`\sqrt{d_{out}}` for the last one.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple, Union

import torch
from torch import nn

from bea.errors import BeaValueError

__all__ = ["MLP", "activation", "positive_int"]

DTYPE = torch.float64
ACTIVATIONS = ("tanh", "softplus")
INITS = ("uniform", "xavier", "lnn")


def positive_int(x, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < 1:
        raise BeaValueError(f"{what} must be a positive integer, got {x!r}")
    return x


def activation(name: str):
    """``(f, f')`` with ``f'`` written in terms of the pre-activation ``z`` and the value ``y = f(z)``."""
    if name == "tanh":
        return torch.tanh, lambda z, y: 1 - y * y
    if name == "softplus":
        return nn.functional.softplus, lambda z, y: torch.sigmoid(z)
    raise BeaValueError(f"activation must be one of {ACTIVATIONS} (smooth, so that second derivatives exist), got {name!r}")


class MLP(nn.Module):
    """``d_in → width → … → width → d_out`` (``layers`` hidden layers); see the module docstring."""

    def __init__(self, d_in: int, d_out: int, width: int = 50, layers: int = 2, activation: str = "tanh",
                 init: str = "uniform", bias_out: bool = True, seed: Optional[int] = None,
                 generator: Optional[torch.Generator] = None, device: Union[str, torch.device, None] = None):
        super().__init__()
        self.in_dim, self.out_dim = positive_int(d_in, "d_in"), positive_int(d_out, "d_out")
        width, layers = positive_int(width, "width"), positive_int(layers, "layers")
        if init not in INITS:
            raise BeaValueError(f"init must be one of {INITS}, got {init!r}")
        self.activation = activation
        self._act, self._dact = _activation(activation)
        dims = [d_in] + [width] * layers + [d_out]
        bias = [True] * layers + [bias_out]
        if init == "uniform":
            if generator is None and seed is not None:
                generator = torch.Generator().manual_seed(seed)
            self.linears = _uniform_layers(dims, bias, generator, device)
        else:
            self.linears = _normal_layers(dims, bias, init, seed, device)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        last = len(self.linears) - 1
        for k, lin in enumerate(self.linears):
            z = lin(z)
            if k < last:
                z = self._act(z)
        return z

    def tangent(self, z: torch.Tensor, dz: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        r"""``(MLP(z), J_MLP(z) dz)`` by forward propagation."""
        last = len(self.linears) - 1
        for k, lin in enumerate(self.linears):
            z = lin(z)
            dz = dz @ lin.weight.T
            if k < last:
                y = self._act(z)
                dz = self._dact(z, y) * dz
                z = y
        return z, dz


_activation = activation


def _uniform_layers(dims, bias, generator, device) -> nn.ModuleList:
    # skip_init: no draw from torch's global generator (nn.Linear's own reset_parameters would); the draws
    # are made on the CPU generator and moved, so a seed gives the same network on every device
    linears = nn.ModuleList(nn.utils.skip_init(nn.Linear, a, b, bias=c, dtype=DTYPE, device=device or "cpu")
                            for a, b, c in zip(dims[:-1], dims[1:], bias))
    with torch.no_grad():
        for lin in linears:
            bound = 1.0 / math.sqrt(lin.in_features)
            lin.weight.copy_(torch.rand(lin.weight.shape, generator=generator, dtype=DTYPE, device="cpu") * 2 * bound - bound)
            if lin.bias is not None:
                lin.bias.copy_(torch.rand(lin.bias.shape, generator=generator, dtype=DTYPE, device="cpu") * 2 * bound - bound)
    return linears


def _normal_layers(dims, bias, init: str, seed: Optional[int], device) -> nn.ModuleList:
    # the paper's initialisations: torch's default draws for the layers (biases kept), then the weights
    # re-drawn; in a forked random state, so the global generator is untouched
    with torch.random.fork_rng(enabled=seed is not None, devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        # drawn on the CPU (whose generator the seed sets) and moved: the same network on every device
        linears = nn.ModuleList(nn.Linear(a, b, bias=c, dtype=DTYPE, device="cpu") for a, b, c in zip(dims[:-1], dims[1:], bias))
        with torch.no_grad():
            for i, lin in enumerate(linears):
                out_f, in_f = lin.weight.shape
                if init == "xavier":
                    nn.init.xavier_normal_(lin.weight)
                elif i == 0:
                    lin.weight.normal_(0.0, 2.2 / math.sqrt(in_f))
                elif i == len(linears) - 1:
                    lin.weight.normal_(0.0, math.sqrt(out_f))
                else:
                    lin.weight.normal_(0.0, 0.58 * (i + 1) / math.sqrt((in_f + out_f) / 2))
    return linears.to(device) if device is not None else linears
