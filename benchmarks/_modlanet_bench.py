"""ModLaNet rollouts on the compiled and the eager integrator path, measured in the same run
(``python benchmarks/shadow.py --modlanet-only``; part of the full ``benchmarks/shadow.py`` run).

The model: a double pendulum ModLaNet with known rods and learned (randomly initialised, seed 1) one-body
and pair cells of the default size (2 x 50 tanh; 5 605 parameters): the per-step cost is the networks';
a random learned transform (the paper's setting) gives a mass matrix that is not a pendulum's and its
motions leave any region of interest, so it is timed on derivatives only. Midpoint rule, h = 0.05."""

from __future__ import annotations

import time

import torch

H = 0.05


def _rate(vi, q0, v0, steps):
    t = time.perf_counter()
    sol = vi.solve(q0, v0, steps)
    dt = time.perf_counter() - t
    return sol, q0.shape[0] * steps / dt


def modlanet_rows(quick: bool = False):
    """Rows ``(label, value)``: compiled vs eager rates at batch 1 x 300 steps, batch 100 and 1000, their ratio,
    the max difference, and the one-off lowering + compile time."""
    from integrators import VariationalIntegrator
    from integrators.compiled import CompiledStepper
    from learners import ModLaNet
    import bea

    model = ModLaNet.pendulum_chain(2, transform="rod", seed=1)
    model.requires_grad_(False)
    n_par = sum(p.numel() for p in model.parameters())
    rows = [("ModLaNet double pendulum (rods known, cells 2 x 50 tanh)", f"{n_par} parameters, midpoint, h = {H}")]
    t0 = time.perf_counter()
    vc = VariationalIntegrator(model, H, execution="compiled")
    vc.solve(torch.tensor([[0.5, -0.3]]), torch.zeros(1, 2), 2)
    rows.append(("  lower to C + compile (once per process and model structure)",
                 f"{vc.compile_seconds:.2f} s (first solve {time.perf_counter() - t0:.2f} s)"))
    ve = VariationalIntegrator(model, H, execution="eager")
    from learners.modlanet.lowering import AUTO_MAX_BATCH

    for B, steps in ((1, 300), (100, 10 if quick else 30), (1000, 3 if quick else 10)):
        q0 = torch.stack([torch.linspace(-0.8, 0.8, B), torch.linspace(0.5, -0.5, B)], -1) if B > 1 else torch.tensor([[0.5, -0.3]])
        v0 = torch.zeros(B, 2)
        sc, rc = _rate(vc, q0, v0, steps)
        se, re = _rate(ve, q0, v0, steps)
        rows.append((f"  batch {B} x {steps} steps: compiled / eager (trajectory-steps/s)",
                     f"{rc:,.0f} / {re:,.0f} = {rc / re:.1f}x; max |q_compiled - q_eager| = {float((sc.q - se.q).abs().max()):.1e}"
                     f"; execution='auto' takes the {'compiled' if B <= AUTO_MAX_BATCH else 'eager'} path"))
    paper = ModLaNet.pendulum_chain(2)  # learned transform too: L, g, H per state
    st = CompiledStepper(paper, bea.get_scheme("midpoint"), H, 2)
    x = torch.rand(1000, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 2 - 1
    st.lagrangian_derivatives(x[:2])
    t = time.perf_counter()
    st.lagrangian_derivatives(x)
    t_c = (time.perf_counter() - t) / 1000
    rows.append(("  paper's model (learned transform, 5 959 parameters): g, H of L in C",
                 f"{t_c * 1e6:.0f} us per state (compile {st.compile_seconds:.2f} s)"))
    return rows
