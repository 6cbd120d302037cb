r"""The ``torch.compile`` path for stage schemes: one Newton solve on the interior points and the next position.

A stage scheme (:mod:`bea.stages`) has the discrete Lagrangian :math:`L_\Delta(a, b) = \Phi(a, Q^*, b)` with
:math:`\partial_Q\Phi(a, Q^*, b) = 0`. The eager path (:mod:`bea.stage_torch`) nests two Newton iterations: every
evaluation of :math:`L_\Delta` and its derivatives solves for :math:`Q^*`. Here one step from :math:`(q_j, p_j)`
solves for all unknowns :math:`U = (Q_1, \dots, Q_m, b)` together,

.. math:: r(U) = \begin{pmatrix} \partial_Q \Phi(q_j, Q, b) \\ \partial_a \Phi(q_j, Q, b) + p_j \end{pmatrix} = 0,
          \qquad p_{j+1} = \partial_b\Phi(q_j, Q, b),

which is the same step: at the root, :math:`Q = Q^*(q_j, b)`, and by stationarity
:math:`D_1L_\Delta = \partial_a\Phi`, :math:`D_2L_\Delta = \partial_b\Phi` (envelope theorem).

The stage action of every built-in scheme evaluates ``L`` at points affine in :math:`X = (a, Q_1, \dots, Q_m, b)`
and weighs the values by constants: :math:`\Phi = \sum_k W_k L(y_k)`, :math:`y_k = M_k X` with
:math:`M_k = (\alpha_k \otimes I_n;\ \beta_k \otimes I_n)` (:func:`stage_points` reads :math:`W, \alpha, \beta` off
the scheme by probing). Then

.. math:: \nabla_X\Phi = \sum_k W_k M_k^\top \nabla L(y_k), \qquad
          \nabla_X^2\Phi = \sum_k W_k M_k^\top \nabla^2 L(y_k) M_k,

and the Newton Jacobian :math:`\partial r/\partial U` is the block of :math:`\nabla_X^2\Phi` with rows
:math:`(Q, a)` and columns :math:`(Q, b)`. :math:`\nabla L` is :func:`torch.func.grad` of :math:`\sum L`
over all points of the batch, :math:`\nabla^2 L` its ``2n`` Hessian-vector products; both are compiled with
``torch.compile(fullgraph=True)`` for a few batch buckets (:func:`integrators.compiled_func.bucket`).

Newton's start: the next position extrapolated from the previous ones, and the interior points extrapolated from
those of the previous steps (kept in a ring of :data:`~integrators.compiled_func.PREDICTOR_ORDER` steps; the
straight line from :math:`q_j` to the guess of :math:`b` where there are none, as the eager path starts). Both are
smooth functions of time; at h = 0.1 the start is about 1e-8 off (pendulum, Henon-Heiles) and a step costs three
residual evaluations and one Jacobian.

The probed form is checked against the stage action with a nonlinear Lagrangian, and before use the compiled
derivatives against autograd through the scheme's own stage action; a scheme or Lagrangian that does not fit raises
:class:`~integrators.compiled_func.FuncPathError` and the integrator steps eagerly, saying why once.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
import weakref
from typing import Optional, Tuple

import numpy as np
import torch

from .compiled_func import PREDICTOR_ORDER, VERIFY_RTOL, FuncPathError, FuncStepper, _own_code, bucket
from .newton import NewtonOptions, newton
from ._stepping import extrapolate, far_roots

__all__ = ["StageStepper", "stage_points", "stage_stepper", "STAGE_MIN_STEPS"]

#: ``execution="auto"`` builds this path for stage-scheme runs of at least this many steps (at any batch: an eager
#: step costs about the same for one trajectory as for a thousand), and compiles a further batch bucket only for such
#: a run. The break-even (benchmarks/RESULTS_speed.md, stage schemes): the smallest saving per step measured,
#: pendulum galerkin2 on one trajectory, is 1/10.3 - 1/95.3 = 0.087 s; the builds measured took 2-27 s (break-even
#: at most about 310 steps) except the first of a process on an empty inductor cache, 112.9 s (1,300 steps). At
#: 1,500 steps the compiled path wins in every measured case, the coldest build included
STAGE_MIN_STEPS = 1500


def stage_points(h: float, scheme) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""``(W, alpha, beta)``: :math:`\Phi(X) = \sum_k W_k L(\alpha_k X, \beta_k X)` for the stage action of
    ``scheme`` at step ``h``, shapes ``(K,)``, ``(K, m + 2)``, ``(K, m + 2)`` (float64).

    Read off by probing: the slots :math:`X_j` are the unit vectors :math:`e_j` of :math:`\mathbb R^{m+2}`, so a
    probe Lagrangian receives the coefficient rows themselves; a second pass returns :math:`e_k` from the
    ``k``-th call, which makes :math:`\Phi` the vector of weights. The form is then checked against the stage action
    itself with a nonlinear Lagrangian (:class:`~integrators.compiled_func.FuncPathError` if it differs)."""
    m = scheme.n_interior
    E = torch.eye(m + 2, dtype=torch.float64)
    calls = []

    def record(q, v):
        calls.append((q.detach().clone(), v.detach().clone()))
        return torch.zeros((), dtype=torch.float64)

    try:
        scheme.stage_action(record, E[0], list(E[1:m + 1]), E[m + 1], h)
        K = len(calls)
        count = iter(range(K))
        W = scheme.stage_action(lambda q, v: torch.eye(K, dtype=torch.float64)[next(count)], E[0], list(E[1:m + 1]),
                                E[m + 1], h)
    except Exception as err:  # noqa: BLE001 - a user's stage action may do anything on probe tensors
        raise FuncPathError(f"the stage action of {scheme!r} could not be probed ({type(err).__name__})") from None
    if not K or not isinstance(W, torch.Tensor) or W.shape != (K,):
        raise FuncPathError(f"the stage action of {scheme!r} is not a weighted sum of values of L")
    alpha = torch.stack([q for q, _ in calls])
    beta = torch.stack([v for _, v in calls])
    if alpha.shape != (K, m + 2) or beta.shape != (K, m + 2):
        raise FuncPathError(f"the stage action of {scheme!r} evaluates L at points of unexpected shape")
    _check_form(scheme, h, W, alpha, beta)
    return W.detach().to(torch.float64), alpha, beta


def _check_form(scheme, h: float, W, alpha, beta) -> None:
    """The probed form against the stage action itself, with a Lagrangian that is neither linear nor quadratic, at
    random points ``X`` (two coordinates); :class:`~integrators.compiled_func.FuncPathError` if they differ."""
    def L(q, v):
        return (torch.cos(q) * v * v).sum(-1) + (q ** 3).sum(-1) + (q[..., :1] * v[..., 1:]).sum(-1)

    m = scheme.n_interior
    X = 0.5 + torch.rand(3, m + 2, 2, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    try:
        phi = scheme.stage_action(L, X[:, 0], list(X[:, 1:m + 1].unbind(1)), X[:, m + 1], h)
    except Exception as err:  # noqa: BLE001 - as in the probe
        raise FuncPathError(f"the stage action of {scheme!r} could not be evaluated ({type(err).__name__})") from None
    form = sum(W[k] * L(torch.einsum("j,sjn->sn", alpha[k], X), torch.einsum("j,sjn->sn", beta[k], X))
               for k in range(W.shape[0]))
    if not isinstance(phi, torch.Tensor) or phi.shape != form.shape or \
            float((phi - form).abs().max()) > 1e-12 * (1 + float(form.abs().max())):
        raise FuncPathError(f"the stage action of {scheme!r} is not a weighted sum of L at points affine in the end and "
                            "interior points, which the compiled stage path needs")


class _Ring:
    """Index ``k`` of a ring of the last ``R`` steps' interior points, seen as rows ``k + shift`` of a trajectory
    (the indexing :func:`integrators._stepping.extrapolate` uses)."""

    def __init__(self, buf: torch.Tensor, shift: int):
        self.buf, self.shift = buf, shift

    def __getitem__(self, key):
        k, rows = key if isinstance(key, tuple) else (key, None)
        row = self.buf[(k + self.shift) % self.buf.shape[0]]
        return row if rows is None else row[rows]


class StageStepper(FuncStepper):
    """Steps of one Lagrangian, stage scheme, ``h`` and ``n`` by one Newton solve on all unknowns with compiled
    :func:`torch.func` derivatives (module docstring). The gradient of ``L``, the padded evaluation, the pacing and
    the failure note are :class:`~integrators.compiled_func.FuncStepper`'s; the points, the residual (with the
    interior equations), the check and the predictor are the stage scheme's.

    ``reference``: the Lagrangian as the eager path evaluates it (default ``lagrangian``), the autograd reference of
    the check. ``buckets``: the batch buckets whose graphs are compiled (the first by the build, later ones by the
    first run at that size)."""

    def __init__(self, lagrangian, h: float, scheme, n: int, *, compile: bool = True, batch: int = 4,
                 reference=None):
        t0 = time.perf_counter()
        self.n, self.L, self.h, self.scheme = n, lagrangian, h, scheme
        self._reference = lagrangian if reference is None else reference
        self.buckets: set = set()
        self.m = m = scheme.n_interior
        self._size = 2  # the bucket being evaluated (set per run by advance)
        self.failure: Optional[str] = None  # why a compiled evaluation failed during a run (then eager from there)
        W, alpha, beta = stage_points(h, scheme)
        eye = torch.eye(n, dtype=torch.float64)
        self.M = torch.stack([torch.cat([torch.kron(alpha[k:k + 1], eye), torch.kron(beta[k:k + 1], eye)])
                              for k in range(W.shape[0])])  # (K, 2n, (m + 2) n): y_k = M_k X
        self.WM = W[:, None, None] * self.M
        # equations (Q, a) x unknowns (Q, b) of the Hessian of Phi in X = (a, Q, b)
        self.rows = torch.cat([torch.arange(n, (m + 1) * n), torch.arange(n)])
        self.cols = torch.arange(n, (m + 2) * n)
        self._ring: Optional[torch.Tensor] = None  # interior points of the last steps, (R, B, m n)
        self._filled, self._ring_step = 0, -1  # consecutive steps held, and the latest one
        self._run = lambda: None  # the run (its positions tensor, weakly) whose steps the ring holds
        wrap = (lambda f: torch.compile(_own_code(f), fullgraph=True, dynamic=False)) if compile else (lambda f: f)
        self._residual, self._jacobian = wrap(self._residual_fn), wrap(self._jacobian_fn)
        self.lower_seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        self._verify(bucket(batch))
        self.buckets.add(bucket(batch))
        self.compile_seconds = time.perf_counter() - t0

    # ------------------------------------------------------------------ the compiled functions (_grad: FuncStepper's)
    def _points(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """:math:`y_k = M_k X`, ``X = (a, x)``: shape ``(K, batch, 2n)``."""
        return torch.einsum("kdx,bx->kbd", self.M, torch.cat([a, x], -1))

    def _residual_fn(self, x, a, p):
        n, m = self.n, self.m
        gX = torch.einsum("kdx,kbd->bx", self.WM, self._grad(self._points(x, a)))
        return torch.cat([gX[:, n:(m + 1) * n], gX[:, :n] + p], -1), gX[:, (m + 1) * n:]

    def _jacobian_fn(self, x, a):
        y = self._points(x, a)
        cols = []
        for i in range(2 * self.n):  # column i of every point's Hessian: one Hessian-vector product
            u = torch.zeros_like(y)
            u[..., i] = 1.0
            cols.append(torch.func.grad(lambda z: (self._grad(z) * u).sum())(y))
        HX = torch.einsum("kdx,kbde,key->bxy", self.WM, torch.stack(cols, -1), self.M)
        return HX[:, self.rows][:, :, self.cols]

    def _verify(self, size: int) -> None:
        """Compile the graphs of one batch bucket ``size`` and check them against autograd of the scheme's own stage
        action at random states padded to it (relative :data:`~integrators.traced.VERIFY_RTOL`);
        :class:`~integrators.compiled_func.FuncPathError` otherwise."""
        n, m, s = self.n, self.m, min(4, size)
        g = torch.Generator().manual_seed(7)
        a = 0.3 + 0.4 * torch.rand(s, 1, n, generator=g, dtype=torch.float64)
        X = a + 0.05 * (torch.rand(s, m + 2, n, generator=g, dtype=torch.float64) - 0.5)
        X[:, 0] = a[:, 0]
        p = torch.rand(s, n, generator=g, dtype=torch.float64)
        x = X[:, 1:].reshape(s, -1)
        # the reference first, eagerly: a Lagrangian's lazy set-up (a System builds its torch code) then runs outside
        # torch.compile, which cannot trace it
        with torch.enable_grad():
            Xv = X.clone().requires_grad_(True)
            phi = self.scheme.stage_action(self._reference, Xv[:, 0], list(Xv[:, 1:m + 1].unbind(1)), Xv[:, m + 1], self.h)
            (gX,) = torch.autograd.grad(phi.sum(), Xv, create_graph=True)
            gX = gX.reshape(s, -1)
            H = torch.stack([torch.autograd.grad(gX[:, c].sum(), Xv, retain_graph=True)[0].reshape(s, -1)
                             for c in range(gX.shape[1])], 1).detach()
        gX = gX.detach()
        try:
            with warnings.catch_warnings():  # torch's own deprecation notices while it compiles are not the caller's
                warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.")
                r, p1, J = self.derivatives(x, X[:, 0], p, size)
        except Exception as err:  # noqa: BLE001 - torch.compile raises many internal types; the reason is kept
            first = (str(err).strip().splitlines() or [""])[0][:300]
            raise FuncPathError(f"torch.compile could not compile its derivatives ({type(err).__name__}: {first})") from None
        refs = (torch.cat([gX[:, n:(m + 1) * n], gX[:, :n] + p], -1), gX[:, (m + 1) * n:], H[:, self.rows][:, :, self.cols])
        for got, ref, name in zip((r, p1, J), refs, ("gradient", "momentum", "Hessian")):
            scale = float(ref.abs().max()) + 1.0
            if not bool(torch.isfinite(got).all()) or float((got - ref).abs().max()) > VERIFY_RTOL * scale:
                raise FuncPathError(f"the compiled {name} of the stage action differs from autograd's (relative "
                                    f"{VERIFY_RTOL:g}): the Lagrangian's torch.func derivatives are not its autograd ones")

    # ------------------------------------------------------------------ the march's interface
    def _guess(self, out: torch.Tensor, j: int, rows, first_guess) -> torch.Tensor:
        """Newton's start ``(B, (m + 1) n)``: the next position extrapolated, the interior points extrapolated from
        the ring where it holds the steps before ``j`` (else the straight line to the next position's guess)."""
        b = first_guess if j == 0 else extrapolate(out, j, rows, PREDICTOR_ORDER)
        if self.m == 0:  # no interior points (galerkin_lobatto(1)): the unknown is the next position alone
            return b
        if self._ring_step == j and self._filled >= 2 and self._run() is out:
            held = min(self._filled, self._ring.shape[0])
            Z = extrapolate(_Ring(self._ring, j - (held - 1)), held - 1, rows, PREDICTOR_ORDER)
        else:
            a = out[j] if rows is None else out[j, rows]
            Z = torch.cat(self.scheme.interior_guess(a, b), -1)
        return torch.cat([Z, b], -1)

    def _keep(self, out: torch.Tensor, j: int, Z: torch.Tensor, rows) -> None:
        """Store the interior points of step ``j`` of the run ``out`` in the ring (restarted when it holds another
        run's, or not those of step ``j - 1``)."""
        if self.m == 0:
            return
        B = out.shape[1]
        if self._ring is None or self._ring.shape[1] != B or self._ring_step != j - 1 or self._run() is not out:
            self._ring = Z.new_zeros((PREDICTOR_ORDER, B, Z.shape[-1]))
            self._filled, self._run = 0, weakref.ref(out)
        if rows is None:
            self._ring[j % PREDICTOR_ORDER] = Z
        else:
            self._ring[j % PREDICTOR_ORDER, rows] = Z
        self._filled, self._ring_step = self._filled + 1, j

    def advance(self, out: torch.Tensor, j: int, j_end: int, p: torch.Tensor, jac: Optional[torch.Tensor],
                rows: Optional[torch.Tensor], first_guess: Optional[torch.Tensor], options: NewtonOptions,
                max_step: Optional[float], pout: Optional[torch.Tensor] = None):
        """As :meth:`integrators.compiled_func.FuncStepper.advance`: steps ``j -> j_end`` while every element
        converges (within ``max_step``); stops before the first step where one does not, for the eager path to take
        it (handing back no Jacobian: the eager one is of the next position alone)."""
        self._size = bucket(p.shape[0])
        n = self.n
        if jac is not None and jac.shape[-1] != (self.m + 1) * n:
            jac = None  # the eager path's
        while j < j_end and self.failure is None:
            a = out[j] if rows is None else out[j, rows]
            try:
                res = newton(self._evaluate, self._guess(out, j, rows, first_guess), (a, p), options=options, jac0=jac)
            except Exception as err:  # noqa: BLE001 - e.g. torch.compile's recompile limit: the eager path goes on
                self._fail(err)
                break
            b = res.x[:, -n:]
            if not bool(res.converged.all()) or far_roots(dataclasses.replace(res, x=b), a, max_step) is not None:
                return j, p, None, np.ones(1)
            self.buckets.add(self._size)  # its graphs compiled by now
            self._keep(out, j + 1, res.x[:, :-n], rows)
            p, jac = res.aux, res.jacobian
            for t, value in ((out, b), (pout, p)):
                if t is not None:
                    t[j + 1 if rows is None else (j + 1, rows)] = value
            j += 1
        return j, p, (jac if j == j_end else None), (None if j == j_end else np.ones(1))


def stage_stepper(integ, n: int, work: int, batch: int, mode: str) -> Optional[StageStepper]:
    """The stage stepper of the integrator ``integ`` (a stage scheme) for ``n`` coordinates, built once and kept on
    it, or None for the eager path. ``mode="auto"`` builds it, and uses it at a batch bucket not compiled yet, only
    for runs of at least :data:`STAGE_MIN_STEPS` steps (``work``: the run's ``steps`` times its ``batch``
    trajectories), and says once why it could not; ``"compiled"`` always, raising
    :class:`~bea.errors.BeaValueError` with the reason where it cannot."""
    from bea.errors import BeaValueError

    from .model_protocol import CompiledPathWarning

    kept, errors = integ._func_steppers, integ._stepper_errors
    long_run = mode == "compiled" or work >= STAGE_MIN_STEPS * max(batch, 1)
    if n not in kept and long_run:
        try:  # the reference of the check: L as the eager path evaluates it (with its inputs as views)
            stepper = StageStepper(integ.lagrangian, integ.h, integ.scheme, n, batch=batch, reference=integ._L)
        except FuncPathError as err:
            kept[n], errors[n] = None, str(err)
            if mode == "auto":  # stacklevel: the caller of solve / solve_from_positions
                warnings.warn(f"no compiled path for this stage scheme ({err}); integrating eagerly", CompiledPathWarning, 5)
        else:
            kept[n] = stepper
            integ.compile_seconds += stepper.compile_seconds + stepper.lower_seconds
    stepper = kept.get(n)
    if stepper is not None and stepper.failure is None:
        # a new batch bucket compiles its graphs (seconds to minutes): not for a short run
        return stepper if long_run or bucket(batch) in stepper.buckets else None
    if mode == "compiled" and n in kept:
        raise BeaValueError(f"execution='compiled' is not available for this integrator: "
                            f"{errors.get(n) or stepper.failure}; use execution='auto' or 'eager'")
    return None
