r"""Batched variational integrators for any torch Lagrangian and any :mod:`bea` scheme.

A scheme turns the Lagrangian :math:`L` into a discrete Lagrangian :math:`L_\Delta(a, b)`
(docs/theory/mechanics.md). With the discrete momenta

.. math::  p_j = D_2 L_\Delta(q_{j-1}, q_j) = -D_1 L_\Delta(q_j, q_{j+1}),

the discrete Euler--Lagrange equations :math:`D_2L_\Delta(q_{j-1}, q_j) + D_1L_\Delta(q_j, q_{j+1}) = 0`
become one position--momentum step: given :math:`(q_j, p_j)`, solve

.. math::  D_1 L_\Delta(q_j, q_{j+1}) + p_j = 0 \quad\text{for } q_{j+1}, \qquad
           p_{j+1} = D_2 L_\Delta(q_j, q_{j+1}).

The same step starts the initial value problem from :math:`(q_0, \dot q_0)` with
:math:`p_0 = \partial L/\partial v(q_0, \dot q_0)` (or the momentum of another Lagrangian, ``legendre=``).
:math:`D_1L_\Delta, D_2L_\Delta` and the Newton Jacobian :math:`D_{12}L_\Delta` all come from
automatic differentiation of the scheme's discrete Lagrangian: nothing here is scheme-specific.

All trajectories of a batch advance together: one vectorised Newton solve per time step
(:mod:`integrators.newton`), each trajectory with its own convergence test. This module drives the
march; one eager step, its retry and its failure reports are in :mod:`integrators._stepping`.

Two execution paths take the same steps: the *eager* path above (any torch Lagrangian), and the
*compiled* path (:mod:`integrators.compiled`: the march in C, for schemes with affine evaluation points
and Lagrangians with a C form (:func:`integrators.model_protocol.compiled_form`: SymPy systems, GP means,
ModLaNet, and other torch code traced by :mod:`integrators.traced`). They agree to rounding;
``execution=`` chooses, and the default ``"auto"`` compiles long runs when it can and otherwise says
why once (:class:`~integrators.model_protocol.CompiledPathWarning`). Stage schemes (:mod:`bea.stages`) have their
own compiled path, :mod:`integrators.compiled_stages` (one Newton solve on the interior points and the next
position, with derivatives compiled by ``torch.compile``), for runs of at least
:data:`~integrators.compiled_stages.STAGE_MIN_STEPS` steps.
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Tuple, Union

import torch

import bea
from bea.errors import BeaTypeError, BeaValueError

from ._admissible import check_regular_at, check_scheme
from ._checks import as_float64, check_finite, check_lagrangian_output, check_step_size, initial_data
from ._stepping import eager_step, solve_velocities, velocity_guess
from .compiled_func import func_stepper
from .compiled_stages import stage_stepper
from .newton import ConvergenceError, NewtonOptions, autograd_system, vmap_system
from .trajectory import Trajectory, positions
from .progress import progress_bar

__all__ = ["VariationalIntegrator", "ConvergenceError", "EXECUTIONS"]

TorchLagrangian = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

#: the progress bar appears (on a terminal) for runs of at least this many steps when progress=None
PROGRESS_MIN_STEPS = 2000

#: values of ``execution=``
EXECUTIONS = ("auto", "compiled", "eager")
#: with ``execution="auto"``, a run of fewer trajectory-steps than this stays eager unless the stepper
#: is already built (compiling takes about 0.3 s; an eager step about 1 ms)
AUTO_MIN_WORK = 500
#: the execution of integrators created with ``execution=None``
DEFAULT_EXECUTION = "auto"


class VariationalIntegrator:
    r"""The variational integrator of ``scheme`` for the Lagrangian ``lagrangian`` with step ``h``.

    The positions follow the initial data, which are converted to float64 and keep their device; the
    Lagrangian must accept tensors on that device. Every tensor returned (positions, ``valid``, momenta,
    velocities, energies) is on the device of the data given.

    Parameters
    ----------
    lagrangian : callable ``L(q, v) -> Tensor``, ``q, v`` of shape ``(..., n)``, result ``(...)``,
        computed pointwise over the leading dimensions (an exact Lagrangian, a
        :class:`~integrators.systems.System`, a :mod:`bea` series applied to a Lagrangian, a GP or a
        network).
    h : step size, > 0.
    scheme : a :class:`bea.Scheme` or its name (``"midpoint"``, ``"trapezoidal"``,
        ``"generalised_midpoint(alpha=0.3)"``, ...).
    xtol, ftol, maxiter : Newton tolerances (:class:`~integrators.newton.NewtonOptions`): a trajectory's
        step is accepted when the predicted correction is below ``xtol * (1 + |q|)`` or the residual
        below ``ftol``.
    jacobian : ``"autograd"`` (batched reverse mode; works with any pointwise torch code, including
        :mod:`bea` series) or ``"vmap"`` (:func:`torch.func.jacrev` under :func:`torch.func.vmap`; the
        Lagrangian must be functorch-compatible).
    progress : show a ``tqdm`` bar: ``True``, ``False``, or ``None`` (runs of at least
        :data:`PROGRESS_MIN_STEPS` steps; off a terminal, a line on stderr every 30 s with
        the time left, see :mod:`integrators.progress`).
    max_step : optional bound on one step's displacement :math:`\lVert q_{j+1} - q_j\rVert_\infty`. The
        step equation is implicit and can have several roots; Newton started from the extrapolated guess
        usually finds the one that tends to :math:`q_j` as :math:`h \to 0`, but for a poorly behaved
        Lagrangian (a learned one outside its data) it can land on a far root. A root beyond
        ``max_step`` counts as a failed step (an error, or the trajectory stops with
        ``on_failure="mask"``). ``None``: no bound.
    execution : ``None`` (default): :data:`DEFAULT_EXECUTION`, i.e. ``"auto"``: the compiled path (:mod:`integrators.compiled`) for runs of at
        least :data:`AUTO_MIN_WORK` trajectory-steps (or once it is built) when the Lagrangian and
        scheme have a C form and a C compiler is present, else the eager path, with a
        :class:`~integrators.model_protocol.CompiledPathWarning` giving the reason (once per integrator
        and ``n``; a stage scheme: :mod:`integrators.compiled_stages` for runs of at least
        :data:`~integrators.compiled_stages.STAGE_MIN_STEPS` steps); ``"compiled"``: always the compiled path,
        raising ``ValueError`` (with the reason) where it is unavailable;
        ``"eager"``: never compile. :attr:`last_execution` tells which path the latest run took,
        :attr:`compile_seconds` what building the compiled stepper cost (paid once per integrator
        and ``n``; the C library once per process and Lagrangian; with what the ``torch.compile`` path compiles
        later, during a run). The compiled path runs on the CPU:
        for data on another device (a GPU) ``"auto"`` takes the eager path, ``"compiled"`` raises
        ``ValueError``.

    """

    def __init__(self, lagrangian: TorchLagrangian, h: float, scheme: Union[str, bea.Scheme] = "midpoint", *,
                 xtol: float = 1e-16, ftol: float = 0.0, maxiter: int = 20, jacobian: str = "autograd",
                 progress: Optional[bool] = None, max_step: Optional[float] = None, execution: Optional[str] = None):
        if not callable(lagrangian):
            raise BeaTypeError(f"lagrangian must be a callable L(q, v) returning a tensor, got {type(lagrangian).__name__}")
        self.lagrangian = lagrangian
        # Schemes may pass the same tensor as a position and, through v = (b - a)/h, inside the
        # velocity (trapezoidal: L(a, (b - a)/h)). A Lagrangian that differentiates with respect to
        # its own inputs (a bea series: dL/dq by autograd) must see them as separate graph nodes,
        # or dL/dq picks up the path through v. A view is such a node and costs nothing.
        self._L = lambda q, v: lagrangian(q.view_as(q), v.view_as(v))
        self.h = check_step_size(h)
        self.scheme = bea.get_scheme(scheme)
        check_scheme(self.scheme)  # once per scheme object (integrators._admissible)
        self.options = NewtonOptions(xtol=xtol, ftol=ftol, maxiter=maxiter)
        if jacobian not in ("autograd", "vmap"):
            raise BeaValueError(f"jacobian must be 'autograd' or 'vmap', got {jacobian!r}")
        if jacobian == "vmap" and isinstance(self.scheme, bea.StageScheme):  # its Newton solve uses autograd
            raise BeaValueError(f"{self.scheme!r} solves its interior points with autograd, which vmap cannot wrap: use jacobian='autograd'")
        self.jacobian = jacobian
        self.progress = progress
        if max_step is not None and (isinstance(max_step, bool) or not isinstance(max_step, (int, float))
                                     or not (max_step > 0 and math.isfinite(max_step))):
            raise BeaValueError(f"max_step must be a positive finite number or None, got {max_step!r}")
        self.max_step = None if max_step is None else float(max_step)
        if execution is not None and execution not in EXECUTIONS:
            raise BeaValueError(f"execution must be one of {', '.join(map(repr, EXECUTIONS))}, got {execution!r}")
        self.execution = execution
        self._step_eval = self._make_step_evaluator()
        #: compiled steppers by n (None: tried, not available; the reason in _stepper_errors)
        self._steppers: dict = {}
        self._func_steppers: dict = {}  # n -> the torch.compile stepper (integrators.compiled_func), None: refused
        self._stepper_errors: dict = {}
        self.compile_seconds: float = 0.0
        #: "compiled", "torch.compile", "eager", or two joined by "+" (a fast loop handed some steps to the eager path)
        self.last_execution: Optional[str] = None

    def __repr__(self) -> str:
        return f"VariationalIntegrator({getattr(self.lagrangian, 'name', self.lagrangian)!r}, h={self.h}, scheme={self.scheme!r})"

    # ------------------------------------------------------------------ discrete Lagrangian
    def discrete_lagrangian(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        r""":math:`L_\Delta(a, b)` for ``a, b`` of shape ``(..., n)``."""
        return self.scheme(self._L, a, b, self.h)

    def _slot_derivatives(self, a: torch.Tensor, b: torch.Tensor, create_graph: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
        r""":math:`(D_1L_\Delta(a, b), D_2L_\Delta(a, b))` by autograd (per sample under ``vmap`` in that mode)."""
        if self.jacobian == "vmap" and not create_graph:
            n = a.shape[-1]
            g = torch.func.vmap(torch.func.grad(lambda a_, b_: self.discrete_lagrangian(a_, b_), argnums=(0, 1)))
            d1, d2 = g(a.reshape(-1, n).detach(), b.reshape(-1, n).detach())
            return d1.reshape(a.shape), d2.reshape(b.shape)
        with torch.enable_grad():
            a = a.detach().requires_grad_(True) if not a.requires_grad else a
            b = b.detach().requires_grad_(True) if not b.requires_grad else b
            Ld = check_lagrangian_output(self.discrete_lagrangian(a, b), a, "the discrete Lagrangian (i.e. the Lagrangian)")
            d1, d2 = torch.autograd.grad(Ld.sum(), (a, b), create_graph=create_graph, allow_unused=True)
        return (torch.zeros_like(a) if d1 is None else d1), (torch.zeros_like(b) if d2 is None else d2)

    def _make_step_evaluator(self):
        scheme, L, h = self.scheme, self._L, self.h
        if self.jacobian == "autograd":
            def fun(x, a, p):  # a: a leaf that requires grad (set once per step in _march)
                Ld = scheme(L, a, x, h)
                d1, d2 = torch.autograd.grad(Ld.sum(), (a, x), create_graph=True)
                return d1 + p, d2

            return autograd_system(fun)

        def fun_single(x, a, p):
            d1, d2 = torch.func.grad(lambda a_, b_: scheme(L, a_, b_, h), argnums=(0, 1))(a, x)
            return d1 + p, d2

        return vmap_system(fun_single)

    # ------------------------------------------------------------------ solving
    def solve(self, q0, qdot0, steps: int, *, legendre: Optional[TorchLagrangian] = None, on_failure: str = "raise",
              progress: Optional[bool] = None):
        r"""Integrate from positions ``q0`` and velocities ``qdot0`` (shape ``(batch..., n)``).

        The initial momentum is :math:`p_0 = \partial L/\partial v(q_0, \dot q_0)` with ``L`` the
        integrated Lagrangian, or ``legendre`` if given (e.g. the recovered Lagrangian
        :math:`\mathrm{mod}_N(L_{inv})` when integrating a learned :math:`L_{inv}`, docs/theory/lsi.md).

        Returns a :class:`~integrators.Trajectory`: the positions ``q``, shape ``(steps + 1, batch..., n)``,
        ``valid`` of shape ``(steps + 1, batch...)``, the times ``t = h j``, the momenta ``p`` (the shape of ``q``:
        :math:`p_0` above, then :math:`p_{j+1} = D_2L_\Delta(q_j, q_{j+1})` as each step computes it; they agree with
        :meth:`momenta` of ``q`` to Newton's tolerance) and Newton statistics (``stats``); ``v`` is left empty, as it
        costs a Newton solve per position (:meth:`velocities` takes these momenta as ``momenta=``).
        With ``on_failure="mask"`` a trajectory whose Newton solve fails is stopped instead of raising
        :class:`~integrators.newton.ConvergenceError`; ``q`` is NaN exactly where ``valid`` is False.
        """
        q0, qdot0, steps, on_failure = initial_data(q0, qdot0, ("q0", "qdot0"), steps, on_failure)
        batch, n = q0.shape[:-1], q0.shape[-1]
        qf, vf = q0.reshape(-1, n), qdot0.reshape(-1, n)
        legendre = self.lagrangian if legendre is None else legendre
        if not callable(legendre):
            raise BeaTypeError(f"legendre must be a callable Lagrangian L(q, v), got {type(legendre).__name__}")
        with torch.enable_grad():
            qq, vv = qf.detach().requires_grad_(True), vf.detach().requires_grad_(True)
            val = check_lagrangian_output(legendre(qq, vv), qq, "the Lagrangian giving the initial momentum")
            check_finite(val.detach(), "the Lagrangian at the initial data (q0, qdot0)")
            (p0,) = torch.autograd.grad(val.sum(), vv, allow_unused=True)
        if p0 is None:
            raise BeaValueError("the Lagrangian does not depend on the velocities: no momentum, no dynamics")
        check_finite(p0, "the initial momentum dL/dv(q0, qdot0)")
        check_regular_at(self._L, qf, vf, self.h, "initial states (q0, qdot0)", self._steppers.get(n) if qf.is_cpu else None)
        out = qf.new_full((steps + 1, qf.shape[0], n), float("nan"))
        out[0] = qf
        pout = torch.full_like(out, float("nan"))
        pout[0] = p0.detach()
        return self._march(out, pout, 0, first_guess=qf + self.h * vf, batch=batch, on_failure=on_failure, progress=progress)

    def solve_from_positions(self, q0, q1, steps: int, *, on_failure: str = "raise", progress: Optional[bool] = None):
        r"""Integrate from two positions :math:`q_0, q_1` (one step apart), shape ``(batch..., n)``:
        :math:`p_1 = D_2L_\Delta(q_0, q_1)`, then the discrete Euler--Lagrange equations.

        Returns a :class:`~integrators.Trajectory` whose ``q`` has the given ``q0, q1`` as its first two rows
        (``steps >= 1``), with momenta ``p`` from :math:`p_0 = -D_1L_\Delta(q_0, q_1)` on; ``on_failure`` as in solve."""
        q0, q1, steps, on_failure = initial_data(q0, q1, ("q0", "q1"), steps, on_failure)
        batch, n = q0.shape[:-1], q0.shape[-1]
        a, b = q0.reshape(-1, n), q1.reshape(-1, n)
        check_regular_at(self._L, (a + b) / 2, (b - a) / self.h, self.h, "initial midpoints ((q0 + q1)/2, (q1 - q0)/h)",
                         self._steppers.get(n) if a.is_cpu else None)
        d1, p1 = self._slot_derivatives(a, b)
        check_finite(p1, "the discrete momentum D2 L_d(q0, q1)")
        out = a.new_full((steps + 1, a.shape[0], n), float("nan"))
        out[0], out[1] = a, b
        pout = torch.full_like(out, float("nan"))
        pout[0], pout[1] = -d1.detach(), p1.detach()
        return self._march(out, pout, 1, first_guess=None, batch=batch, on_failure=on_failure, progress=progress)

    def _stepper(self, n: int, work: int, out: torch.Tensor):
        """The compiled stepper for ``n`` coordinates, or None for the eager path (see ``execution``)."""
        mode = self.execution or DEFAULT_EXECUTION
        if mode == "eager" or out.device.type != "cpu":
            if mode == "compiled":
                raise BeaValueError(f"execution='compiled' runs in C on the CPU, but the data are on {out.device}: move q0 "
                                 "and qdot0 with .cpu(), or use execution='auto' or 'eager' (the eager path runs on any device)")
            return None
        batch = out.shape[1]
        if n in self._steppers:
            return self._fits_auto(self._steppers[n], mode, batch, n, work)
        if isinstance(self.scheme, bea.StageScheme):  # one Newton solve on all its stages (integrators.compiled_stages)
            # counted as the docs say, the run's steps (solve_from_positions takes one fewer: its q1 is given)
            return stage_stepper(self, n, (out.shape[0] - 1) * batch, batch, mode)
        if mode == "auto" and work < AUTO_MIN_WORK:
            return None
        if n not in self._stepper_errors:
            from .ccompile import CompileError
            from .compiled import CompiledStepper, NotLowerable

            try:
                stepper = CompiledStepper(self.lagrangian, self.h, self.scheme, n)
            except (NotLowerable, CompileError) as err:
                self._stepper_errors[n] = str(err)
                if mode == "auto":  # torch.compile where tracing failed, else eager (said once: the errors are kept)
                    return func_stepper(self, n, str(err), work, batch)
            else:
                self._steppers[n] = stepper
                self.compile_seconds += stepper.compile_seconds + stepper.lower_seconds
                return self._fits_auto(stepper, mode, batch, n, work)
        if mode == "auto":
            return func_stepper(self, n, self._stepper_errors[n], work, batch)
        if mode == "compiled":
            raise BeaValueError(f"execution='compiled' is not available for this integrator: {self._stepper_errors[n]}; "
                             f"use execution='auto' or 'eager'")
        return None

    def _fits_auto(self, stepper, mode: str, batch: int, n: int, work: int):
        """``"auto"`` leaves batches larger than the C form's ``auto_max_batch`` to batched torch (a network's
        batched evaluation overtakes the per-element C loop there): the ``torch.compile`` path, else eager."""
        limit = stepper.auto_max_batch
        if mode == "auto" and limit is not None and batch > limit:
            return func_stepper(self, n, None, work, batch)
        return stepper

    def _march(self, out: torch.Tensor, pout: torch.Tensor, j0: int, first_guess: Optional[torch.Tensor], batch,
               on_failure: str, progress: Optional[bool]):
        """Steps ``j0 -> steps`` of ``out`` ``(steps + 1, B, n)``, from the momenta ``pout[j0]``; each step's momenta
        go to ``pout`` (the layout of ``out``) as they are computed, on either path."""
        steps = out.shape[0] - 1
        p = pout[j0]
        B, n = out.shape[1], out.shape[-1]
        show = progress if progress is not None else self.progress
        rows: Optional[torch.Tensor] = None  # trajectories still running, None = all
        valid_until = torch.full((B,), steps, dtype=torch.long, device=out.device)
        jac = None
        stepper = self._stepper(n, (steps - j0) * B, out)
        used = set()
        stats = {"newton_iterations": 0, "eager_steps": 0, "compiled_steps": 0}
        with progress_bar(steps - j0, "integrating", "step", show, long=steps - j0 >= PROGRESS_MIN_STEPS) as bar:
            j = j0
            while j < steps:
                if stepper is not None:
                    used.add(getattr(stepper, "label", "compiled"))
                    end = min(steps, j + stepper.chunk_steps(B if rows is None else rows.numel()))
                    built = stepper.compile_seconds  # a stepper may compile more during a run (torch.compile's newton())
                    j_stop, p, jac, _ = stepper.advance(out, j, end, p, jac, rows, first_guess, self.options, self.max_step,
                                                        pout)
                    self.compile_seconds += stepper.compile_seconds - built
                    bar.update(j_stop - j)
                    stats["compiled_steps"] += j_stop - j
                    j = j_stop
                    if j == end:
                        continue
                # one eager step (the whole run without a stepper; else the step where the compiled loop stopped)
                used.add("eager")
                rows, p, jac, stop = eager_step(self, out, j, p, jac, rows, first_guess, batch, on_failure, valid_until,
                                                stats)
                stats["eager_steps"] += 1
                if stop:
                    break
                if rows is None:
                    pout[j + 1] = p
                else:
                    pout[j + 1, rows] = p
                bar.update(1)
                j += 1
        self.last_execution = "+".join(sorted(used)) if used else None
        q = out.reshape(steps + 1, *batch, out.shape[-1])
        valid = torch.arange(steps + 1, device=out.device)[:, None] <= valid_until[None, :]
        t = self.h * torch.arange(steps + 1, dtype=q.dtype, device=q.device)
        return Trajectory(q, valid.reshape(steps + 1, *batch), t=t, p=pout.reshape(q.shape),
                          stats={**stats, "execution": self.last_execution})

    # ------------------------------------------------------------------ momenta, velocities, energies
    def _positions(self, qs, name: str = "qs") -> torch.Tensor:
        qs = as_float64(positions(qs), name)  # a Trajectory or its positions
        if qs.dim() < 2 or qs.shape[0] < 2:
            raise BeaValueError(f"{name} must have shape (steps + 1, batch..., n) with at least two positions, got {tuple(qs.shape)}")
        check_finite(qs, name)
        return qs

    def momenta(self, qs) -> torch.Tensor:
        r"""Discrete momenta :math:`p_0 = -D_1L_\Delta(q_0, q_1)`, :math:`p_j = D_2L_\Delta(q_{j-1}, q_j)`
        (:math:`j \ge 1`) of a discrete trajectory ``qs`` (a :class:`~integrators.Trajectory` or its positions,
        shape ``(steps + 1, batch..., n)``); same shape."""
        qs = self._positions(qs)
        d1, d2 = self._slot_derivatives(qs[:-1], qs[1:])
        return torch.cat([-d1[:1], d2], 0).detach()

    def velocities(self, qs, lagrangian: Optional[TorchLagrangian] = None, momenta: Optional[torch.Tensor] = None) -> torch.Tensor:
        r"""Velocities :math:`\dot q_j` solving :math:`\partial L/\partial v(q_j, \dot q_j) = p_j` (Newton,
        batched over all positions), with :math:`p_j` the discrete momenta (:meth:`momenta`, or
        ``momenta`` if given) and ``L`` the integrated Lagrangian or ``lagrangian`` (e.g. the
        recovered :math:`\mathrm{mod}_N(L_{inv})`). Same shape as ``qs``."""
        qs = self._positions(qs)
        L = self.lagrangian if lagrangian is None else lagrangian
        if not callable(L):
            raise BeaTypeError(f"lagrangian must be a callable L(q, v), got {type(L).__name__}")
        p = self.momenta(qs) if momenta is None else as_float64(momenta, "momenta")
        if p.shape != qs.shape:
            raise BeaValueError(f"momenta must have the shape of qs {tuple(qs.shape)}, got {tuple(p.shape)}")
        n = qs.shape[-1]
        v = solve_velocities(L, self.jacobian, qs.reshape(-1, n), p.reshape(-1, n), velocity_guess(qs, self.h).reshape(-1, n),
                             self.options, tuple(qs.shape[:-1]))
        return v.reshape(qs.shape)

    def energies(self, qs, lagrangian: Optional[TorchLagrangian] = None, momenta: Optional[torch.Tensor] = None) -> torch.Tensor:
        r"""Energy :math:`H = p\cdot\dot q - L(q, \dot q)` of ``lagrangian`` (default: the integrated one)
        along ``qs``, with :meth:`velocities` from the same Lagrangian; shape ``(steps + 1, batch...)``."""
        L = self.lagrangian if lagrangian is None else lagrangian
        qs = self._positions(qs)
        v = self.velocities(qs, L, momenta)
        return bea.energy(L)(qs, v).detach()

