r"""Torch evaluation of dimension-free series for any dimension ``n``.

A tree is evaluated from its leaves to its root without forming any derivative tensor beyond the
mass matrix :math:`M`:

* a node :math:`L^{(a,b)}[d_1, \dots, d_k]` is a chain of directional derivatives
  :math:`\varphi_j = \langle \nabla \varphi_{j-1}, d_j \rangle` (one autograd pass each, with
  ``create_graph=True``), starting from :math:`\varphi_0 = L`;
* the direction given by an edge is :math:`M^{-1}g`, where the covector :math:`g` is the gradient
  of the hanging subtree's chain with respect to its joining slot -- one linear solve with the
  LU factors of :math:`M`, formed once per point;
* a vector-valued term is :math:`M^{-1}` applied to the gradient of its scalar form with respect to
  a placeholder direction at its free slot.

Partial derivatives must not see the dependence of the directions on the point. Each node is
therefore differentiated with respect to a perturbation :math:`(t_q, t_v)` of the point that belongs
to its *height* in the tree (nodes whose subtrees are leaves have height 0), while its directions
come from strictly lower heights. Nodes of equal height share the perturbation, the value of
:math:`L` and every common prefix of their chains, so shared subterms are computed once. The cost
per point is polynomial in ``n``: a few evaluations of :math:`L`, one backward pass per distinct
chain prefix, ``n`` passes and an LU factorisation for :math:`M`, and one triangular solve per edge.

The result stays in the caller's autograd graph: derivatives flow to ``q``, ``v``, ``h`` and the
parameters of ``L``; under ``torch.no_grad()`` the result is computed and returned detached.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

import torch

from ..autodiff import _evaluate, check_call, check_finite_result, check_regular, overflow_is_typed
from ..errors import InternalError, NotRegularError
from ..hseries import Poly
from .trees import A, UPPER, V, Tree

_DIR_V, _DIR_W, _DIR_A = 0, 1, 2


def _height(t: tuple, memo: Dict[tuple, int]) -> int:
    if t in memo:
        return memo[t]
    kids = [ch for group in (t[-2], t[-1]) for ch in group if ch[0] == 1]
    h = 0 if not kids else 1 + max(_height(ch, memo) for ch in kids)
    memo[t] = h
    return h


class _Point:
    """Everything computed at one batch of points ``(q, v)`` (``(B, n)``), shared between trees."""

    def __init__(self, L, q: torch.Tensor, v: torch.Tensor):
        self.L, self.q, self.v = L, q, v
        self.levels: Dict[int, list] = {}
        self.dirs: Dict[tuple, torch.Tensor] = {}
        self.dir_ids: Dict[tuple, int] = {}
        self.heights: Dict[tuple, int] = {}
        self.w = torch.zeros_like(q).requires_grad_(True)
        self._lu = None
        self._accel = None

    # ------------------------------------------------------------------ M
    def lu(self):
        if self._lu is None:
            q, v = self.q, self.v
            tq = torch.zeros_like(q).requires_grad_(True)
            ts = torch.zeros_like(v).requires_grad_(True)
            val = _evaluate(self.L, q + tq, v + ts)
            gq, gv = torch.autograd.grad(val.sum(), (tq, ts), create_graph=True, allow_unused=True) if val.requires_grad else (None, None)
            if gv is None or not gv.requires_grad:
                raise NotRegularError(
                    "the Lagrangian is not regular: it is at most linear in the velocity, so d^2L/dv^2 = 0 and "
                    "the Euler-Lagrange equations do not determine the acceleration"
                )
            rows = []
            for i in range(q.shape[-1]):
                (r,) = torch.autograd.grad(gv[..., i].sum(), ts, create_graph=True, allow_unused=True)
                rows.append(torch.zeros_like(v) if r is None else r)
            M = torch.stack(rows, -2)
            # n >= 2: the spread of M's eigenvalues is the test, and check_regular's absolute floor catches a
            # uniformly tiny M (L = sum v^4/12 + sum cos q at v = 1e-100: M = 1e-200 I); anything between that
            # over- or underflows is caught by the output check. Comparing M with L's first derivatives at n >= 2
            # would call a regular M singular wherever a learned L has large forces (|L_q| ~ 1e11 against M ~ 0.1
            # in a briefly trained ModLaNet). n = 1 has no spread, so there M is compared with them.
            scale = None
            if q.shape[-1] == 1:
                scale = gv.detach().abs().amax(-1) if gq is None else torch.maximum(gv.detach().abs().amax(-1), gq.detach().abs().amax(-1))
            check_regular(M, scale)
            # one dimension: a division is an order of magnitude cheaper than LU for small batches
            self._lu = (M[..., 0, :],) if M.shape[-1] == 1 else torch.linalg.lu_factor(M)
        return self._lu

    def accel(self) -> torch.Tensor:
        r"""The Euler-Lagrange acceleration :math:`A = M^{-1}(L_q - L_{qv}[v])` at the point
        (a direction like :math:`v`: it depends on ``(q, v)`` only through the caller's graph)."""
        if self._accel is None:
            q, v = self.q, self.v
            tq = torch.zeros_like(q).requires_grad_(True)
            tv = torch.zeros_like(v).requires_grad_(True)
            val = _evaluate(self.L, q + tq, v + tv)
            gq = torch.autograd.grad(val.sum(), tq, create_graph=True, allow_unused=True)[0] if val.requires_grad else None
            if gq is None:
                gq = torch.zeros_like(q)
            # L_qv[v]_i = sum_j d^2 L / dq_j dv_i v_j: the v-gradient of the directional q-derivative along v
            mixed = torch.autograd.grad((gq * v).sum(), tv, create_graph=True, allow_unused=True)[0] if gq.requires_grad else None
            self._accel = self.solve(gq if mixed is None else gq - mixed)
        return self._accel

    def solve(self, g: torch.Tensor) -> torch.Tensor:
        lu = self.lu()
        if len(lu) == 1:
            return g / lu[0]
        return torch.linalg.lu_solve(lu[0], lu[1], g.unsqueeze(-1)).squeeze(-1)

    # ------------------------------------------------------------------ chains
    def _level(self, h: int) -> list:
        lev = self.levels.get(h)
        if lev is None:
            tq = torch.zeros_like(self.q).requires_grad_(True)
            tv = torch.zeros_like(self.v).requires_grad_(True)
            phi0 = _evaluate(self.L, self.q + tq, self.v + tv)
            lev = [{(): phi0}, {}, tq, tv]
            self.levels[h] = lev
        return lev

    def phi(self, h: int, prefix: tuple) -> torch.Tensor:
        memo = self._level(h)[0]
        out = memo.get(prefix)
        if out is None:
            kind, key = prefix[-1]
            g = self.grad(h, prefix[:-1])[kind]
            out = (g * self.direction(key)).sum(-1)
            memo[prefix] = out
        return out

    def grad(self, h: int, prefix: tuple) -> Tuple[torch.Tensor, torch.Tensor]:
        lev = self._level(h)
        out = lev[1].get(prefix)
        if out is None:
            val = self.phi(h, prefix)
            tq, tv = lev[2], lev[3]
            if val.requires_grad:
                gq, gv = torch.autograd.grad(val.sum(), (tq, tv), create_graph=True, allow_unused=True)
            else:
                gq = gv = None
            out = (torch.zeros_like(self.q) if gq is None else gq, torch.zeros_like(self.v) if gv is None else gv)
            lev[1][prefix] = out
        return out

    def _key(self, ch: tuple) -> int:
        if ch[0] == 0:
            if ch[1] == V:
                return _DIR_V
            if ch[1] == UPPER:
                return _DIR_W
            if ch[1] == A:
                return _DIR_A
            raise InternalError(f"internal: leaf {ch[1]} cannot be evaluated")
        i = self.dir_ids.get(ch)
        if i is None:
            i = len(self.dir_ids) + 3
            self.dir_ids[ch] = i
        return i

    def direction(self, key) -> torch.Tensor:
        if key == _DIR_V:
            return self.v
        if key == _DIR_W:
            return self.w
        if key == _DIR_A:
            return self.accel()
        return self.dirs[key]

    def _prefix(self, qs, vs) -> tuple:
        items = [(0, self._key(ch)) for ch in qs] + [(1, self._key(ch)) for ch in vs]
        for ch in (*qs, *vs):
            if ch[0] == 1:
                self._child_direction(ch)
        return tuple(sorted(items, key=lambda kv: (kv[1], kv[0])))

    def _child_direction(self, ch: tuple) -> None:
        key = self._key(ch)
        if key in self.dirs:
            return
        _, kind, qs, vs = ch
        h = _height(ch, self.heights)
        cov = self.grad(h, self._prefix(qs, vs))[kind]
        self.dirs[key] = self.solve(cov)

    # ------------------------------------------------------------------ trees
    def tree(self, t: Tree) -> torch.Tensor:
        """Scalar tree ``(B,)``; vector tree ``(B, n)``."""
        if t[0] == 3:
            if t[1] not in (V, A):
                raise InternalError("internal: a bare jet cannot be evaluated")
            return self.v if t[1] == V else self.accel()
        h = _height(t, self.heights)
        val = self.phi(h, self._prefix(t[1], t[2]))
        if _has_upper(t):
            if not val.requires_grad:
                return torch.zeros_like(self.q)
            (g,) = torch.autograd.grad(val.sum(), self.w, create_graph=True, allow_unused=True)
            return torch.zeros_like(self.q) if g is None else self.solve(g)
        return val


def _has_upper(t: tuple) -> bool:
    for group in (t[-2], t[-1]):
        for ch in group:
            if (ch[0] == 0 and ch[1] == UPPER) or (ch[0] == 1 and _has_upper(ch)):
                return True
    return False


class TreeFunction:
    r"""``f(L, q, v, h)``: a dimension-free series applied to a torch Lagrangian.

    ``L(q, v) -> (...)`` for ``q, v`` of shape ``(..., n)`` with any ``n``; ``h`` a number or a
    tensor broadcastable to the batch shape. Returns ``(...)`` (Lagrangians) or ``(..., n)`` (the
    modified equation). Built from data only (trees and rational coefficients): nothing is compiled
    or executed from text.
    """

    def __init__(self, kind: str, trees: List[Tree], coeffs: Dict[int, Poly], description: str = ""):
        self.kind = kind
        self.vector = kind == "modified_equation"
        self.trees = trees
        self.terms: List[Tuple[int, List[Tuple[Tuple[int, ...], float]]]] = []
        used = set()
        for k, p in sorted(coeffs.items()):
            if p:
                self.terms.append((k, [(m, float(c)) for m, c in p.items()]))
                for m in p:
                    used.update(m)
        self.used = sorted(used)
        self.__doc__ = (description + "\n\n" + (TreeFunction.__doc__ or "")).strip()
        self._typed = overflow_is_typed(self._apply)  # h**k overflowing: a BeaValueError naming h

    def __call__(self, L, q: torch.Tensor, v: torch.Tensor, h) -> torch.Tensor:
        return self._typed(L, q, v, h)

    def _apply(self, L, q: torch.Tensor, v: torch.Tensor, h) -> torch.Tensor:
        hh = check_call(L, q, v, h, None)  # the checks of the generated functions (bea.autodiff)
        batch = q.shape[:-1]
        n = q.shape[-1]
        if isinstance(hh, torch.Tensor):  # one step per flattened state
            hh = hh.to(q.dtype).expand(batch).reshape(-1)
        if torch.is_grad_enabled():
            out = self._evaluate(L, q.reshape(-1, n), v.reshape(-1, n), hh)
        else:
            with torch.enable_grad():
                out = self._evaluate(L, q.reshape(-1, n), v.reshape(-1, n), hh).detach()
        out = out.reshape(*batch, n) if self.vector else out.reshape(batch)
        return check_finite_result(L, q, v, h, out)  # h as given: hh is flattened

    def _evaluate(self, L, q, v, h):
        pt = _Point(L, q, v)
        vals = {i: pt.tree(self.trees[i]) for i in self.used}
        total = None
        for k, terms in self.terms:
            acc = None
            for m, c in terms:
                vec = None
                prod = None
                for x in m:
                    t = vals[x]
                    if self.vector and t.dim() == 2:
                        vec = t
                    else:
                        prod = t if prod is None else prod * t
                term = vec if prod is None else (prod if vec is None else prod.unsqueeze(-1) * vec)
                term = c * term
                acc = term if acc is None else acc + term
            if acc is None:
                continue
            if k:
                hk = h**k
                acc = acc * (hk.unsqueeze(-1) if isinstance(hk, torch.Tensor) and self.vector else hk)
            total = acc if total is None else total + acc
        if total is None:
            total = torch.zeros_like(q) if self.vector else torch.zeros_like(q[:, 0])
        return total
