r"""Example mechanical systems, each defined once as a SymPy Lagrangian.

Every system is a :class:`System` (a :class:`~integrators.symbolic.SymbolicLagrangian`): calling it
on torch tensors ``(q, v)`` of shape ``(..., n)`` evaluates the Lagrangian, ``.expr`` is the SymPy
expression, ``.energy`` the exact energy :math:`H = p\cdot v - L` (torch) and ``.energy_expr`` its
SymPy form. ``.domain`` is a default box of initial conditions ``[(low, high)] * 2n`` (positions,
then velocities) for :func:`integrators.data.snapshots`.

=========================  ===========================================================================
:func:`pendulum`           :math:`\tfrac12 m l^2 v^2 + m g l \cos q` (default :math:`v^2/2 + \cos q`)
:func:`variable_mass_pendulum` :math:`\tfrac12(1 + c q^2) v^2 + \cos q`, position-dependent mass
:func:`n_pendulum`         planar chain of ``n`` pendula in absolute angles from the downward vertical
:func:`coupled_oscillators` chain of ``n`` unit masses, springs to the origin and between neighbours
:func:`fpu_chain`          FPU-:math:`\beta` chain of ``n`` unit masses with fixed ends
:func:`henon_heiles`       :math:`\tfrac12|v|^2 - \tfrac12|q|^2 - \lambda(x^2 y - y^3/3)`
:func:`kepler`             :math:`\tfrac12|v|^2 + \mu/|q|` in the plane
:func:`n_body`             planar gravitational ``N``-body problem, :math:`q = (x_1, y_1, x_2, \dots)`;
                           default domain near the rotating regular polygon
:func:`from_sympy`         any SymPy Lagrangian
=========================  ===========================================================================
"""

from __future__ import annotations

import math
from typing import Callable, List, Optional, Sequence, Tuple, Union

import sympy
import torch

from bea.errors import BeaTypeError, BeaValueError

from .symbolic import SymbolicLagrangian

__all__ = [
    "System",
    "pendulum",
    "variable_mass_pendulum",
    "n_pendulum",
    "coupled_oscillators",
    "fpu_chain",
    "henon_heiles",
    "kepler",
    "n_body",
    "from_sympy",
]

Number = Union[int, float]
Box = List[Tuple[float, float]]


class System(SymbolicLagrangian):
    """A named example system: a SymPy Lagrangian plus a default domain of initial conditions.

    ``torch_form``: an optional vectorised torch ``L(q, v)`` equal to ``expr`` (tested), used when the
    system is called on tensors: a few tensor operations instead of one per term of the expanded
    expression, which matters under nested autograd (a :mod:`bea` series applied to the system)."""

    def __init__(self, expr, q, v, name: str, domain: Optional[Sequence[Tuple[float, float]]] = None, params=(), values=None,
                 torch_form: Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = None):
        super().__init__(expr, q, v, params=params, name=name, values=values)
        if torch_form is not None and params:
            raise BeaValueError("a torch_form cannot take the parameters of the SymPy expression; give it without params")
        self._torch_form = torch_form
        if domain is None:
            domain = [(-1.0, 1.0)] * (2 * self.n)
        domain = [(float(lo), float(hi)) for lo, hi in domain]
        if len(domain) != 2 * self.n:
            raise BeaValueError(f"the domain of {name} needs {2 * self.n} intervals (positions, then velocities), got {len(domain)}")
        self.domain: Box = domain

    #: its ``__call__`` computes ``expr`` (the torch form is the same function, vectorised), so the
    #: compiled path may lower ``expr``
    computes_expr = True

    def __call__(self, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self._torch_form is None:
            return super().__call__(q, v)
        if not isinstance(q, torch.Tensor) or not isinstance(v, torch.Tensor):
            raise BeaTypeError("q and v must be torch tensors of shape (..., n)")
        if q.shape[-1:] != (self.n,) or v.shape != q.shape:
            raise BeaValueError(f"{self.name} needs q and v of the same shape (..., {self.n}); "
                             f"got {tuple(q.shape)} and {tuple(v.shape)}")
        return self._torch_form(q, v)

    def __repr__(self) -> str:
        return f"<System {self.name} (n={self.n}): L = {self.expr}>"


def _num(x, what: str) -> sympy.Expr:
    if isinstance(x, bool) or not isinstance(x, (int, float, sympy.Expr)):
        raise BeaTypeError(f"{what} must be a number, got {x!r}")
    if isinstance(x, float) and not math.isfinite(x):
        raise BeaValueError(f"{what} must be finite, got {x}")
    if isinstance(x, float):
        return sympy.nsimplify(x)
    return sympy.Integer(x) if isinstance(x, int) else x


def _positive(x, what: str) -> sympy.Expr:
    e = _num(x, what)
    if not e.is_positive:
        raise BeaValueError(f"{what} must be positive, got {x}")
    return e


def _count(n, what: str, minimum: int = 1) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise BeaTypeError(f"{what} must be an integer, got {n!r}")
    if n < minimum:
        raise BeaValueError(f"{what} must be >= {minimum}, got {n}")
    return n


def _coords(n: int, q: str = "q", v: str = "v"):
    if n == 1:
        return [sympy.Symbol(q, real=True)], [sympy.Symbol(v, real=True)]
    return list(sympy.symbols(f"{q}1:{n + 1}", real=True)), list(sympy.symbols(f"{v}1:{n + 1}", real=True))


def pendulum(m: Number = 1, length: Number = 1, g: Number = 1) -> System:
    r"""Mathematical pendulum, angle ``q`` from the downward vertical:
    :math:`L = \tfrac12 m l^2 v^2 + m g l \cos q`. Energy :math:`\tfrac12 m l^2 v^2 - m g l\cos q`."""
    m, length, g = _positive(m, "m"), _positive(length, "length"), _positive(g, "g")
    (q,), (v,) = _coords(1)
    L = m * length**2 * v**2 / 2 + m * g * length * sympy.cos(q)
    return System(L, [q], [v], "pendulum", domain=[(-math.pi, math.pi), (-1.2, 1.2)])


def variable_mass_pendulum(c: Number = sympy.Rational(1, 4)) -> System:
    r""":math:`L = \tfrac12 (1 + c q^2) v^2 + \cos q`: a position-dependent mass, so the
    :math:`h^1` term of a non-symmetric scheme is not a total derivative (default ``c = 1/4``)."""
    c = _num(c, "c")
    if c.is_negative:
        raise BeaValueError(f"c must be >= 0 (else the mass 1 + c q^2 vanishes somewhere), got {c}")
    (q,), (v,) = _coords(1)
    L = (1 + c * q**2) * v**2 / 2 + sympy.cos(q)
    return System(L, [q], [v], "variable_mass_pendulum", domain=[(-2.0, 2.0), (-1.0, 1.0)])


def n_pendulum(n: int = 2, masses: Union[Number, Sequence[Number]] = 1, lengths: Union[Number, Sequence[Number]] = 1,
               g: Number = 1) -> System:
    r"""Planar chain of ``n`` pendula; :math:`q_i` is the angle of link ``i`` from the downward
    vertical. Bob ``i`` is at :math:`(\sum_{k\le i} l_k\sin q_k, -\sum_{k\le i} l_k\cos q_k)`;
    :math:`L = \sum_i \tfrac12 m_i |\dot x_i|^2 - m_i g\, y_i`."""
    n = _count(n, "n")
    ms = [masses] * n if not isinstance(masses, (list, tuple)) else list(masses)
    ls = [lengths] * n if not isinstance(lengths, (list, tuple)) else list(lengths)
    if len(ms) != n or len(ls) != n:
        raise BeaValueError(f"give one mass and one length per link: n={n}, got {len(ms)} masses and {len(ls)} lengths")
    ms = [_positive(m, "mass") for m in ms]
    ls = [_positive(lk, "length") for lk in ls]
    g = _positive(g, "g")
    q, v = _coords(n, "theta", "omega")
    # |velocity of bob i|^2 = sum_{k,l <= i} l_k l_l cos(q_k - q_l) v_k v_l
    T = sum(ms[i] * sum(ls[k] * ls[j] * sympy.cos(q[k] - q[j]) * v[k] * v[j] for k in range(i + 1) for j in range(i + 1)) / 2
            for i in range(n))
    U = -sum(ms[i] * g * sum(ls[k] * sympy.cos(q[k]) for k in range(i + 1)) for i in range(n))
    return System(T - U, q, v, f"{n}-pendulum", domain=[(-math.pi / 2, math.pi / 2)] * n + [(-1.0, 1.0)] * n,
                  torch_form=_pendulum_chain_torch([float(m) for m in ms], [float(lk) for lk in ls], float(g)))


def _pendulum_chain_torch(ms: List[float], ls: List[float], g: float):
    r""":math:`\tfrac12 v^T M(q) v + g\sum_k l_k S_k\cos q_k` with :math:`M_{jk} = l_j l_k S_{\max(j,k)}
    \cos(q_j - q_k)`, :math:`S_k = \sum_{i \ge k} m_i` (the mass below joint ``k``)."""
    n = len(ms)
    S = torch.tensor([sum(ms[k:]) for k in range(n)], dtype=torch.float64)
    lt = torch.tensor(ls, dtype=torch.float64)
    idx = torch.arange(n)
    weight = lt[:, None] * lt[None, :] * S[torch.maximum(idx[:, None], idx[None, :])]

    def L(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        M = weight.to(q) * torch.cos(q[..., :, None] - q[..., None, :])
        return 0.5 * (v[..., :, None] * M * v[..., None, :]).sum((-1, -2)) + g * ((lt * S).to(q) * torch.cos(q)).sum(-1)

    return L


def coupled_oscillators(n: int = 2, k: Number = 1, coupling: Number = sympy.Rational(1, 2)) -> System:
    r"""Chain of ``n`` unit masses: :math:`L = \tfrac12|v|^2 - \tfrac k2|q|^2 - \tfrac\kappa2
    \sum_i (q_{i+1} - q_i)^2` (linear; each normal mode is a harmonic oscillator)."""
    n = _count(n, "n")
    k = _positive(k, "k")
    kappa = _num(coupling, "coupling")
    q, v = _coords(n)
    L = sum(vi**2 for vi in v) / 2 - k * sum(qi**2 for qi in q) / 2 - kappa * sum((q[i + 1] - q[i]) ** 2 for i in range(n - 1)) / 2
    return System(L, q, v, f"{n}-coupled-oscillators", domain=[(-1.0, 1.0)] * (2 * n))


def fpu_chain(n: int = 8, beta: Number = 1, k: Number = 1) -> System:
    r"""Fermi--Pasta--Ulam--Tsingou :math:`\beta` chain of ``n`` unit masses with fixed ends
    (:math:`q_0 = q_{n+1} = 0`): :math:`L = \tfrac12|v|^2 - \sum_{i=0}^{n} \big(\tfrac k2 d_i^2 +
    \tfrac\beta4 d_i^4\big)`, :math:`d_i = q_{i+1} - q_i`. Linear frequencies
    :math:`2\sqrt k\sin(j\pi/(2n+2))`, :math:`j = 1..n`."""
    n = _count(n, "n")
    k, beta = _positive(k, "k"), _num(beta, "beta")
    if beta.is_negative:
        raise BeaValueError(f"beta must be >= 0 (else the potential is unbounded below), got {beta}")
    q, v = _coords(n)
    ext = [sympy.Integer(0), *q, sympy.Integer(0)]
    d = [ext[i + 1] - ext[i] for i in range(n + 1)]
    L = sum(vi**2 for vi in v) / 2 - sum(k * di**2 / 2 + beta * di**4 / 4 for di in d)
    kf, bf = float(k), float(beta)

    def L_torch(qt: torch.Tensor, vt: torch.Tensor) -> torch.Tensor:
        dt = torch.diff(torch.nn.functional.pad(qt, (1, 1)), dim=-1)
        return 0.5 * (vt * vt).sum(-1) - (kf / 2 * dt**2 + bf / 4 * dt**4).sum(-1)

    return System(L, q, v, f"{n}-fpu-beta", domain=[(-0.5, 0.5)] * (2 * n), torch_form=L_torch)


def henon_heiles(lam: Number = 1) -> System:
    r"""Hénon--Heiles: :math:`L = \tfrac12(v_x^2 + v_y^2) - \tfrac12(x^2 + y^2) - \lambda(x^2 y - y^3/3)`
    (bounded motion for energies below :math:`1/(6\lambda^2)`)."""
    lam = _num(lam, "lam")
    x, y = sympy.symbols("x y", real=True)
    vx, vy = sympy.symbols("v_x v_y", real=True)
    L = (vx**2 + vy**2) / 2 - (x**2 + y**2) / 2 - lam * (x**2 * y - y**3 / 3)
    return System(L, [x, y], [vx, vy], "henon_heiles", domain=[(-0.3, 0.3), (-0.3, 0.3), (-0.3, 0.3), (-0.3, 0.3)])


def kepler(mu: Number = 1) -> System:
    r"""Kepler problem in the plane: :math:`L = \tfrac12|v|^2 + \mu/|q|`; angular momentum
    :math:`q_1 v_2 - q_2 v_1` is conserved."""
    mu = _positive(mu, "mu")
    x, y = sympy.symbols("x y", real=True)
    vx, vy = sympy.symbols("v_x v_y", real=True)
    L = (vx**2 + vy**2) / 2 + mu / sympy.sqrt(x**2 + y**2)
    return System(L, [x, y], [vx, vy], "kepler", domain=[(0.8, 1.2), (-0.2, 0.2), (-0.2, 0.2), (0.8, 1.2)])


def n_body(masses: Sequence[Number] = (1, 1, 1), G: Number = 1) -> System:
    r"""Planar gravitational ``N``-body problem, :math:`q = (x_1, y_1, \dots, x_N, y_N)`:
    :math:`L = \sum_i \tfrac12 m_i|\dot x_i|^2 + \sum_{i<j} G m_i m_j/|x_i - x_j|`."""
    if isinstance(masses, (int, float)):
        raise BeaTypeError("masses must be a sequence with one mass per body, e.g. (1, 1, 1)")
    ms = [_positive(m, "mass") for m in masses]
    N = _count(len(ms), "number of bodies", 2)
    G = _positive(G, "G")
    q = [s for i in range(N) for s in sympy.symbols(f"x{i + 1} y{i + 1}", real=True)]
    v = [s for i in range(N) for s in sympy.symbols(f"vx{i + 1} vy{i + 1}", real=True)]
    T = sum(ms[i] * (v[2 * i] ** 2 + v[2 * i + 1] ** 2) / 2 for i in range(N))
    U = -sum(G * ms[i] * ms[j] / sympy.sqrt((q[2 * i] - q[2 * j]) ** 2 + (q[2 * i + 1] - q[2 * j + 1]) ** 2)
             for i in range(N) for j in range(i + 1, N))
    # default domain: near the rotating regular polygon of radius 1 (the relative equilibrium for
    # equal masses, here with the mean mass): omega^2 = G m / 4 * sum_k 1/sin(pi k/N)
    m_mean = float(sum(ms)) / N
    omega = math.sqrt(float(G) * m_mean / 4 * sum(1 / math.sin(math.pi * k / N) for k in range(1, N)))
    pos, vel = [], []
    for i in range(N):
        c, s = math.cos(2 * math.pi * i / N), math.sin(2 * math.pi * i / N)
        pos += [(c - 0.05, c + 0.05), (s - 0.05, s + 0.05)]
        vel += [(-omega * s - 0.05, -omega * s + 0.05), (omega * c - 0.05, omega * c + 0.05)]
    return System(T - U, q, v, f"{N}-body", domain=pos + vel)


def from_sympy(expr, q: Sequence, v: Sequence, name: str = "custom", domain=None) -> System:
    """A :class:`System` from any SymPy Lagrangian in the symbols ``q`` and ``v``."""
    return System(expr, q, v, name, domain=domain)
