r"""The ``torch.func`` / ``torch.compile`` path: compiled derivatives for torch Lagrangians that have no C form.

Used by ``execution="auto"`` of :class:`~integrators.variational.VariationalIntegrator` for Lagrangians that
declare no compiled form (plain callables, ``nn.Module`` s), (a) when tracing them into C fails
(:mod:`integrators.traced` refuses an operation or control flow) and (b) for networks at batches above the
traced form's ``auto_max_batch``, where batched matrix products beat the per-element C loop.

Mathematics. For a scheme :math:`L_\Delta(a, b) = \sum_k w_k L(y_k)`, :math:`y_k = o_k + A_k a + B_k b`
(:func:`integrators.compiled.scheme_points`), the Newton step of the discrete Euler--Lagrange equations
:math:`D_1L_\Delta(q_j, x) + p_j = 0` needs

.. math:: r(x) = \sum_k w_k A_k^\top \nabla L(y_k) + p_j, \qquad
          p_{j+1} = \sum_k w_k B_k^\top \nabla L(y_k), \qquad
          J = \sum_k w_k A_k^\top \nabla^2 L(y_k) B_k .

:math:`\nabla L` is :func:`torch.func.grad` of :math:`\sum_b L(y_b)` (``L`` acts pointwise over the batch,
so this is every element's gradient at once); column :math:`i` of :math:`J` needs only the Hessian-vector
products :math:`\nabla^2 L(y_k)\,B_k e_i` (``n`` of them, not ``2n``), each the gradient of
:math:`\nabla L\cdot u`. Graphs are compiled with ``torch.compile(fullgraph=True)`` for a few fixed batch sizes
(:func:`bucket`); the Newton iteration itself is :func:`integrators.newton.newton`, the one of the eager path (same chord steps
and tolerances), so the trajectories equal the eager ones to rounding. Its start is a higher-order extrapolation
(:data:`PREDICTOR_ORDER`) than the eager path's: from about 1e-13 away, the first (chord) correction with the
previous step's Jacobian already lands at rounding level, and the second gradient evaluation certifies it, so a
step costs two gradients and rarely a Hessian.

That common step is one compiled graph (:meth:`FuncStepper._chord_fn`): predictor, residual at the start
:math:`x_0`, chord correction :math:`x_1 = x_0 - J_{j-1}^{-1} r(x_0)`, residual at :math:`x_1`, and Newton's
acceptance test on both, per element, exactly as :func:`~integrators.newton.newton` takes them (accept
:math:`x_0` where its predicted correction is below ``xtol``, else :math:`x_1` where the chord was admissible,
:math:`\|J^{-1}r(x_0)\|` scaled :math:`\le 0.1`, and its own predicted correction is below ``xtol``), for
:data:`CHORD_STEPS` consecutive steps in a loop inside the graph (each from the positions accepted before it, with
the same :math:`J`, as Newton keeps it after a chord step). No Python Newton loop, and one call (with its guard
checks) per eight steps. Where any element fails that test, that step is taken by :func:`~integrators.newton.newton`
from the same start instead and the call's later steps are void, so the iterates are always Newton's (bit for bit
without compilation; the compiled graph may round differently). Only this graph is compiled at build time;
newton()'s own derivatives (the predictor's first steps, and steps the chord cannot certify) run by autograd until
newton() has done :data:`COMPILE_NEWTON_WORK` trajectory-steps, and are compiled then (benchmarks/RESULTS_speed.md).

Before use the compiled derivatives are checked against autograd (:func:`integrators.model_protocol.derivatives`)
at a few states (relative :data:`VERIFY_RTOL`). Anything that fails (``torch.compile`` refusing the code,
e.g. Python control flow on tensor values; a mismatch; no compiler) raises :class:`FuncPathError` with the
reason, and the integrator steps eagerly and says why once (:class:`~integrators.model_protocol.CompiledPathWarning`).
No global torch setting (default dtype, threads, RNG) is changed.
"""

from __future__ import annotations

import time
import types
import warnings
from typing import Optional, Tuple

import numpy as np
import torch

from .compiled import NotLowerable, scheme_points
from .newton import NewtonOptions, _solve, newton  # _solve: the same J^{-1} r (NaN where J is singular)
from ._stepping import extrapolate
from .model_protocol import declares_form
from . import _func_parts
from ._func_parts import autograd_derivatives, contract, pad as _pad, scan_steps, store as _store
from .traced import VERIFY_RTOL  # the same agreement with autograd as the traced C forms

__all__ = ["FuncStepper", "FuncPathError", "bucket", "declares_form", "func_stepper", "FUNC_MIN_WORK", "PREDICTOR_ORDER",
           "CHORD_STEPS", "UNROLLED_CHORD_STEPS", "COMPILE_NEWTON_WORK", "VERIFY_RTOL"]

#: ``execution="auto"`` builds this path only for runs of at least this many trajectory-steps: a build takes
#: seconds to minutes (one per batch-size bucket), and the speed-up it buys is a small factor (benchmarks/RESULTS_speed.md)
FUNC_MIN_WORK = 100_000
#: order of the polynomial predictor of each step's Newton start (:func:`integrators._stepping.extrapolate`).
#: Order 10 leaves about 1e-13 on smooth motion (order 6: 1e-8), so one chord correction with the previous step's
#: Jacobian reaches rounding level: 2 gradient evaluations per step and almost no Hessians, against 3 and one
#: Hessian with order 6 (MLP 2x64, batch 1000: benchmarks/RESULTS_speed.md). Higher orders amplify rounding (2^k).
PREDICTOR_ORDER = 10
#: time steps per call of the one-graph chord step (:meth:`FuncStepper._chord_fn`), a loop in the graph (torch's
#: ``scan``, :func:`integrators._func_parts.scan_steps`), so its compile time does not grow with it. Eight: 6% faster
#: than two unrolled steps at batch 1000 (one call's guard checks, wrappers and padding per eight steps; process CPU,
#: MLP 2x64), where a refusal voids at most seven steps' work (benchmarks/RESULTS_speed.md, session 7).
CHORD_STEPS = 8
#: time steps per call where torch has no ``scan``, or its ``scan`` cannot be compiled (:meth:`FuncStepper._verify_chord`):
#: the steps are then unrolled in Python, and the compile time grows with them (eight: about 4x that of two)
UNROLLED_CHORD_STEPS = 2
#: newton()'s own derivatives (the predictor's warm-up of PREDICTOR_ORDER - 1 steps per run, and steps the chord step
#: cannot certify) run by autograd until it has taken this many trajectory-steps with this stepper (warm-ups
#: included), then are compiled: the break-even of their compile (two graphs, about 8 s of CPU with a cold inductor
#: cache, MLP 2x64) against what they save, about 5 us a trajectory-step (a run's warm-up at batch 1000: about 0.11 s
#: by autograd against 0.07 s compiled, next to 1 s for its 391 chord steps). So a cold first build compiles the chord
#: graph alone (issue 28: <= 30 s), and runs whose steps the chord graph cannot certify compile the rest
COMPILE_NEWTON_WORK = 1_000_000


class FuncPathError(NotLowerable):
    """The ``torch.compile`` path cannot serve this Lagrangian (the message says why)."""


def _own_code(method):
    """``method`` with a code object of its own. torch.compile keeps its compiled versions per code object, so
    without this every stepper (every Lagrangian) would share one cache and its recompile limit."""
    f = method.__func__
    g = types.FunctionType(f.__code__.replace(), f.__globals__, f.__name__, f.__defaults__, f.__closure__)
    return types.MethodType(g, method.__self__)


def bucket(batch: int) -> int:
    """The batch size evaluated for ``batch`` elements: the next power of two (at least 2). torch.compile
    specialises the graph of a :func:`torch.func` transform to its batch size, so sizes are few and fixed:
    a run evaluates its whole batch padded to one bucket, and Newton's shrinking active set costs no recompile."""
    return max(2, 1 << (int(batch) - 1).bit_length())


class FuncStepper:
    """Steps of one Lagrangian, scheme, ``h`` and ``n`` with compiled :func:`torch.func` derivatives (module
    docstring); the interface of :class:`~integrators.compiled.CompiledStepper` that the march uses."""

    label = "torch.compile"
    auto_max_batch = None

    def __init__(self, lagrangian, h: float, scheme, n: int, *, compile: bool = True, batch: int = 4):
        t0 = time.perf_counter()
        self.n, self.L = n, lagrangian
        self._size = 2  # the bucket being evaluated (set per run by advance)
        self.failure: Optional[str] = None  # why a compiled evaluation failed during a run (then eager from there)
        pts = torch.from_numpy(scheme_points(h, scheme, n))
        D = 2 * n
        # separate tensors, not views of pts: torch's scan refuses closures whose inputs alias each other
        self.w = pts[:, 0].clone()
        self.o = pts[:, 1:1 + D].clone()
        self.A = pts[:, 1 + D:1 + D + D * n].reshape(-1, D, n).clone()
        self.B = pts[:, 1 + D + D * n:1 + D + 2 * D * n].reshape(-1, D, n).clone()
        wrap = (lambda f: torch.compile(_own_code(f), fullgraph=True, dynamic=False)) if compile else (lambda f: f)
        # newton()'s derivatives: autograd until it has taken COMPILE_NEWTON_WORK trajectory-steps (warm-ups count)
        self._residual = lambda x, a, p: autograd_derivatives(self, x, a, p, False)
        self._jacobian = lambda x, a: autograd_derivatives(self, x, a, None, True)[2]
        self._scan, self._chord, self._wrap = _func_parts.has_scan(), wrap(self._chord_fn), wrap  # no scan: unrolled
        self.chord_steps = CHORD_STEPS if self._scan else UNROLLED_CHORD_STEPS
        self.stats = {"chord_steps": 0, "newton_steps": 0}  # steps from the one-graph chord step, and newton()'s
        self._newton_work = self._refusals = self._skip = 0  # newton()'s trajectory-steps; see _back_off
        self._newton_compiled = False
        self.lower_seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        self._verify_chord(*self._verify(bucket(batch)), bucket(batch))
        self.compile_seconds = time.perf_counter() - t0

    def _compile_newton(self) -> None:
        """Before newton() runs: once it has taken :data:`COMPILE_NEWTON_WORK` trajectory-steps (counted as they are
        stored), compile its derivatives (checked against autograd, :class:`FuncPathError` otherwise)."""
        if self._newton_work >= COMPILE_NEWTON_WORK and not self._newton_compiled:
            self._newton_compiled, t0 = True, time.perf_counter()
            self._residual, self._jacobian = self._wrap(self._residual_fn), self._wrap(self._jacobian_fn)
            self._verify(self._size)
            self.compile_seconds += time.perf_counter() - t0

    # ------------------------------------------------------------------ the compiled functions
    def _grad(self, y: torch.Tensor) -> torch.Tensor:
        n = self.n
        return torch.func.grad(lambda z: self.L(z[..., :n], z[..., n:]).sum())(y)

    def _points(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """:math:`y_k = o_k + A_k a + B_k x`, shape ``(K, batch, 2n)``."""
        return self.o[:, None, :] + torch.einsum("kdn,bn->kbd", self.A, a) + torch.einsum("kdn,bn->kbd", self.B, x)

    def _residual_fn(self, x, a, p):
        g = self._grad(self._points(x, a))
        return contract(self.w, g, self.A) + p, contract(self.w, g, self.B)

    def _jacobian_fn(self, x, a):
        y = self._points(x, a)
        cols = []
        for i in range(self.n):  # J e_i = sum_k w_k A_k^T H(y_k) B_k e_i: one Hessian-vector product per column
            u = self.B[:, None, :, i].expand_as(y)
            hv = torch.func.grad(lambda z: (self._grad(z) * u).sum())(y)
            cols.append(contract(self.w, hv, self.A))
        return torch.stack(cols, -1)

    def _chord_fn(self, hist, a, p, J, xtol):
        """:data:`CHORD_STEPS` steps from the last :data:`PREDICTOR_ORDER` positions ``hist`` (oldest first), each
        with the Jacobian ``J``: ``(x, p_next, ok)`` stacked over the steps, ``ok[s]`` true where Newton would
        accept ``x[s]`` after at most this chord correction (module docstring; the first step with an element not
        ``ok`` must be taken by :func:`~integrators.newton.newton`, and the later ones are void). ``xtol`` has shape
        ``(1,)``: a 0-d tensor read inside the scan body becomes a symbolic float that inductor cannot keep, and Dynamo
        then traces and lowers the whole graph a second time (about 5 s of a cold build's CPU; RESULTS_speed.md)."""
        def step(carry, _):
            hist, a, p = carry
            x0 = extrapolate(hist, hist.shape[0] - 1, None, hist.shape[0])
            r0, p0 = self._residual_fn(x0, a, p)
            d0 = _solve(J, r0)
            x1 = x0 - d0
            r1, p1 = self._residual_fn(x1, a, p)
            # newton()'s test at iteration 0 and 1 (newton._convergence_test, ftol 0) and its chord admission
            # (newton._correction): they must stay in step (tests/test_integrators_compiled_func.py compares them)
            err0 = (d0.abs() / (1 + x0.abs())).amax(-1)
            err1 = (_solve(J, r1).abs() / (1 + x1.abs())).amax(-1)
            ok0 = err0 <= xtol
            finite0 = torch.isfinite(r0.abs().amax(-1)) & torch.isfinite(x0).all(-1)
            finite1 = torch.isfinite(r1.abs().amax(-1)) & torch.isfinite(x1).all(-1)
            ok = finite0 & (ok0 | ((err0 <= 0.1) & finite1 & (err1 <= xtol)))
            a, p = torch.where(ok0[:, None], x0, x1), torch.where(ok0[:, None], p0, p1)
            return (torch.cat([hist[1:], a[None]], 0), a, p), (a.clone(), p.clone(), ok)  # scan refuses aliased outputs
        return scan_steps(step, (hist, a, p), self.chord_steps, self._scan)

    def derivatives(self, x: torch.Tensor, a: torch.Tensor, p: torch.Tensor,
                    size: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(r, p_next, J)`` at ``x`` for the previous position ``a`` and momenta ``p`` (each ``(B, n)``), evaluated
        padded to ``size`` rows (default: ``bucket(B)``)."""
        B = x.shape[0]
        size = bucket(B) if size is None else size
        x, a, p = _pad(x.detach(), size), _pad(a.detach(), size), _pad(p.detach(), size)
        with torch.no_grad():  # grad() differentiates inside; no graph to the network's parameters
            r, p1 = self._residual(x, a, p)
            J = self._jacobian(x, a)
        return r[:B], p1[:B], J[:B]

    def _evaluate(self, x, a, p):
        B, size = x.shape[0], self._size
        xx, aa, pp = _pad(x.detach(), size), _pad(a.detach(), size), _pad(p.detach(), size)
        with torch.no_grad():
            r, p1 = self._residual(xx, aa, pp)

        def jacobian():
            with torch.no_grad():
                return self._jacobian(xx, aa)[:B]
        return r[:B], p1[:B], jacobian

    def _verify(self, size: int):
        """Compile newton()'s derivatives (when they are compiled) at one batch bucket ``size`` (the current run's: a
        build costs seconds per bucket, so none is built for verification alone) and check them, and the torch.func
        forms that the chord graph evaluates (eagerly, at the states alone), against autograd at random states padded
        to it: ``(x, a, p, J)`` of those states; :class:`FuncPathError` otherwise."""
        from .model_protocol import derivatives

        n, D, m = self.n, 2 * self.n, min(4, size)  # m states (a bucket has at least 2 rows)
        g = torch.Generator().manual_seed(7)
        a = 0.3 + 0.4 * torch.rand(m, n, generator=g, dtype=torch.float64)
        x = a + 0.05 * (torch.rand(m, n, generator=g, dtype=torch.float64) - 0.5)
        p = torch.rand(m, n, generator=g, dtype=torch.float64)
        try:
            with warnings.catch_warnings():  # torch's own deprecation notices while it compiles are not the caller's
                warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.")
                r, p1, J = self.derivatives(x, a, p, size)
                with torch.no_grad():
                    func = self._residual_fn(x, a, p) + (self._jacobian_fn(x, a),)
        except Exception as err:  # noqa: BLE001 - torch.compile raises many internal types; the reason is kept
            first = (str(err).strip().splitlines() or [""])[0][:300]
            raise FuncPathError(f"torch.compile could not compile its derivatives ({type(err).__name__}: {first})") from None
        y = self._points(x, a).reshape(-1, D)
        _, gr, H = derivatives(self.L, y)
        K = self.w.shape[0]
        gr, H = gr.reshape(K, m, D), H.reshape(K, m, D, D)
        refs = (contract(self.w, gr, self.A) + p, contract(self.w, gr, self.B),  # (the momentum is carried on)
                torch.einsum("kdi,kbde,kej->bij", self.A, self.w[:, None, None, None] * H, self.B))
        for kind, values in (("compiled", (r, p1, J)), ("torch.func", func)):
            for got, ref, name in zip(values, refs, ("gradient", "momentum", "Hessian")):
                scale = float(ref.abs().max()) + 1.0
                if not bool(torch.isfinite(got).all()) or float((got - ref).abs().max()) > VERIFY_RTOL * scale:
                    raise FuncPathError(f"the {kind} {name} differs from autograd's (relative {VERIFY_RTOL:g})")
        return x, a, p, J

    def _verify_chord(self, x, a, p, J, size: int) -> None:
        """Compile the one-graph step at bucket ``size`` and check it against the same function run eagerly (its
        torch.func residual was checked against autograd by :meth:`_verify`; where the graph does not compile with
        torch's ``scan``, it is rebuilt once with its steps unrolled), from a start ``x`` (every past position equal to
        it): positions, momenta, and the first step's acceptance verdicts where they are far from the thresholds, so that a
        miscompiled test cannot certify steps: false at momenta that put the predicted correction at ``J^{-1} r =
        2 (1 + |x|)`` (scaled 2 > 0.1, no chord), true at momenta that make ``x`` a root (about 1e-18 against 1e-8)."""
        hist, m = x.expand(PREDICTOR_ORDER, *x.shape), x.shape[0]
        with torch.no_grad():
            r0 = self._residual_fn(x, a, p)[0]
        for shift, tol in ((2.0, 1e-16), (0.0, 1e-8)):  # the residual at x is then J shift (1 + |x|)
            pp, xtol = p - r0 + torch.einsum("bij,bj->bi", J, shift * (1 + x.abs())), torch.tensor([tol], dtype=torch.float64)
            try:
                with torch.no_grad(), warnings.catch_warnings():
                    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.")
                    got = self._chord(_pad(hist, size, 1), _pad(a, size), _pad(pp, size), _pad(J, size), xtol)
            except Exception as err:  # noqa: BLE001 - as in _verify
                if self._scan:  # torch's scan is private and may not compile here: once more, unrolled in Python
                    self._scan, self.chord_steps, self._chord = False, UNROLLED_CHORD_STEPS, self._wrap(self._chord_fn)
                    return self._verify_chord(x, a, p, J, size)
                first = (str(err).strip().splitlines() or [""])[0][:300]
                raise FuncPathError(f"torch.compile could not compile its Newton step ({type(err).__name__}: {first})") from None
            with torch.no_grad():
                ref = self._chord_fn(hist, a, pp, J, xtol)
            for g, r, name in zip(got[:2], ref[:2], ("position", "momentum")):
                scale = float(r.abs().max()) + 1.0
                if not bool(torch.isfinite(g[:, :m]).all()) or float((g[:, :m] - r).abs().max()) > VERIFY_RTOL * scale:
                    raise FuncPathError(f"the compiled Newton step's {name} differs from the eager one's (relative {VERIFY_RTOL:g})")
            if not torch.equal(got[2][0, :m], ref[2][0]):
                raise FuncPathError("the compiled Newton step's acceptance test differs from the eager one's")

    # ------------------------------------------------------------------ the march's interface
    def chunk_steps(self, batch: int) -> int:
        """Steps per call (Python drives the steps here; the chunk only paces the progress bar, and a chunk's end
        inside a :data:`CHORD_STEPS` call voids the rest of that call)."""
        return 256

    def advance(self, out: torch.Tensor, j: int, j_end: int, p: torch.Tensor, jac: Optional[torch.Tensor],
                rows: Optional[torch.Tensor], first_guess: Optional[torch.Tensor], options: NewtonOptions,
                max_step: Optional[float], pout: Optional[torch.Tensor] = None):
        """As :meth:`integrators.compiled.CompiledStepper.advance`: steps ``j -> j_end`` while every element converges
        (within ``max_step``); stops before the first step where one does not, for the eager path to take it."""
        self._size = bucket(p.shape[0])
        chord = options.reuse_jacobian and options.ftol == 0  # newton()'s test is then the one-graph step's
        xtol = torch.tensor([float(options.xtol)], dtype=torch.float64)  # (1,), not 0-d: see _chord_fn
        refused = False  # the last call stopped at a step it could not certify: newton() takes that one
        if j < PREDICTOR_ORDER - 1:  # a run's start (j0 0 or 1): the last run's back-off (its dynamics) does not apply
            self._refusals = self._skip = 0
        while j < j_end and self.failure is None:
            a = out[j] if rows is None else out[j, rows]
            try:
                xs, via = (), "chord_steps"
                if chord and not refused and jac is not None and j >= PREDICTOR_ORDER - 1 and self._skip == 0:
                    xs, ps = self._chord_step(out, j, rows, a, p, jac, xtol)
                    refused = 0 < len(xs) < self.chord_steps  # (none kept: newton() takes step j right here)
                    self._back_off(2 * len(xs) >= self.chord_steps)  # fewer than half kept: a (partial) refusal
                else:
                    refused, self._skip = False, max(0, self._skip - 1)
                if not xs:
                    self._compile_newton()
                    guess = first_guess if j == 0 else extrapolate(out, j, rows, PREDICTOR_ORDER)
                    res = newton(self._evaluate, guess, (a, p), options=options, jac0=jac)
                    if not bool(res.converged.all()):
                        return j, p, jac, np.ones(1)
                    xs, ps, new_jac, via = [res.x], [res.aux], res.jacobian, None
            except Exception as err:  # noqa: BLE001 - e.g. torch.compile's recompile limit: the eager path goes on
                self._fail(err)
                break
            for x, pn in zip(xs[:j_end - j], ps):
                if max_step is not None and bool(((x - a).abs().amax(-1) > max_step).any()):  # as far_roots()
                    return j, p, jac, np.ones(1)  # the Jacobian of the last step taken, not of the root refused
                if via is None:  # (counted once stored: a root refused for max_step is no step taken)
                    jac, self._newton_work = new_jac, self._newton_work + x.shape[0]
                _store(out, j + 1, rows, x)
                _store(pout, j + 1, rows, pn)
                a, p, j = x, pn, j + 1
                self.stats[via or "newton_steps"] += 1
        return j, p, jac, (None if j == j_end else np.ones(1))

    def _back_off(self, certified: bool) -> None:
        """After the ``c``-th call in a row that kept fewer than half its steps, the next ``2^(c-1) - 1`` steps (at
        most 64; reset at each run's start) go to newton() without asking the graph: where the chord cannot work (a
        poor predictor, fast dynamics), a call's :data:`CHORD_STEPS` steps of evaluations are mostly wasted, and
        this keeps that to a few calls per hundred steps."""
        self._refusals = 0 if certified else self._refusals + 1
        self._skip = min(64, (1 << max(0, self._refusals - 1)) - 1)

    def _chord_step(self, out, j, rows, a, p, jac, xtol):
        """Steps ``j -> j + 1, ...`` by the one compiled graph :meth:`_chord_fn`: ``(xs, ps)``, the positions and
        momenta of the steps before the first one where an element needs more than its chord correction (empty:
        :func:`~integrators.newton.newton` takes step ``j``)."""
        B, size = a.shape[0], self._size
        hist = out[j - PREDICTOR_ORDER + 1:j + 1]  # one view of out (scan_steps copies it); a below is a copy, not a
        hist = hist if rows is None else hist[:, rows]  # second, overlapping view of out, which scan refuses
        with torch.no_grad():
            x, pn, ok = self._chord(_pad(hist.detach(), size, 1), _pad(hist[-1].detach().clone(), size),
                                    _pad(p.detach(), size), _pad(jac.detach(), size), xtol)
        good = ok[:, :B].all(-1).tolist()  # the real rows only: a padding row's verdict is no trajectory's
        k = good.index(False) if False in good else len(good)
        return [x[s, :B] for s in range(k)], [pn[s, :B] for s in range(k)]

    def _fail(self, err: BaseException) -> None:
        """A compiled evaluation failed during a run (not at build time): this stepper stops for good, the eager
        path takes every later step, and the reason is said once."""
        from .model_protocol import CompiledPathWarning

        self.failure = f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:300]}"
        warnings.warn(f"the torch.compile path failed during the run ({self.failure}); integrating eagerly from here",
                      CompiledPathWarning, 5)


def func_stepper(integ, n: int, c_reason: Optional[str], work: int, batch: int = 4) -> Optional[FuncStepper]:
    """The ``torch.compile`` stepper of the integrator ``integ`` for ``n`` coordinates (built once and kept on it),
    or None for the eager path. ``c_reason``: why the C path failed (None: it exists but the batch is too large
    for it); ``work``: trajectory-steps of this run (a build is tried only from :data:`FUNC_MIN_WORK`); ``batch``: its
    trajectories (the bucket compiled and verified first). Says once,
    with a :class:`~integrators.model_protocol.CompiledPathWarning`, why a run steps eagerly."""
    from .model_protocol import CompiledPathWarning

    kept = integ._func_steppers  # n -> stepper or None (refused); (n, "short") -> True once the short-run note is given
    if n in kept:  # built before (None: refused); one that failed during a run is not used again
        return None if kept[n] is None or kept[n].failure is not None else kept[n]
    L, why = integ.lagrangian, c_reason
    if declares_form(L):  # a declared form that failed (or is too slow here) is not second-guessed
        kept[n] = None
    elif work < FUNC_MIN_WORK:  # compiling costs seconds to minutes: not for a short run
        if c_reason is None or kept.get((n, "short")):
            return None
        kept[(n, "short")] = True
        why = f"{c_reason}; torch.compile is tried for runs of at least {FUNC_MIN_WORK} trajectory-steps"
    else:
        try:
            stepper = FuncStepper(L, integ.h, integ.scheme, n, batch=batch)
        except NotLowerable as err:
            why = f"{c_reason}; {err}" if c_reason else str(err)
            kept[n] = None
        else:
            kept[n] = stepper
            integ.compile_seconds += stepper.compile_seconds + stepper.lower_seconds
            return stepper
    if why is not None:
        warnings.warn(f"no compiled path for this Lagrangian ({why}); integrating eagerly", CompiledPathWarning, 5)
    return None
