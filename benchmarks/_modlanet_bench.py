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
    st = CompiledStepper(paper, H, bea.get_scheme("midpoint"), 2)
    x = torch.rand(1000, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 2 - 1
    st.lagrangian_derivatives(x[:2])
    t = time.perf_counter()
    st.lagrangian_derivatives(x)
    t_c = (time.perf_counter() - t) / 1000
    rows.append(("  paper's model (learned transform, 5 959 parameters): g, H of L in C",
                 f"{t_c * 1e6:.0f} us per state (compile {st.compile_seconds:.2f} s)"))
    return rows + inverse_rows(model, paper, quick)


def _per_state_us(L, n: int, h: float) -> tuple:
    """(us per evaluation of L_inv, g, H in C over 1000 states, lowering + compile seconds)."""
    from integrators.compiled import CompiledStepper
    import bea

    t0 = time.perf_counter()
    st = CompiledStepper(L, h, bea.get_scheme("midpoint"), n)
    build = time.perf_counter() - t0
    x = torch.rand(1000, 2 * n, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 2 - 1
    t = time.perf_counter()
    st.lagrangian_derivatives(x)
    return (time.perf_counter() - t) / 1000 * 1e6, build


def inverse_rows(model, paper, quick: bool = False):
    """The position-only rollouts: the midpoint rule on inv_2(M) (integrators.series_c: M's Taylor polynomials to
    degree 4 in C, the formula on second-order jets), compiled against eager in the same run, rates compared
    (eager runs only a few steps: about 30 nested autograd passes per step). Batch 1 on the rod model (h = 0.05), and
    batch 100 with the paper's learned-transform model at h = 0.1, the size and step of the position-only pipeline
    (10 steps: its random weights let one trajectory fail at step 18)."""
    from integrators import VariationalIntegrator
    from integrators.modified import inverse_lagrangian

    rows = [("position-only rollouts: midpoint rule on inv_2(M), compiled vs eager (same run)", "")]
    for label, m, h, B, n_c, n_e in (("rod model", model, H, 1, 300, 10 if quick else 20),
                                     ("paper's model", paper, 0.1, 100, 5 if quick else 10, 1 if quick else 2)):
        m.requires_grad_(False)
        L = inverse_lagrangian(m, 2, h)
        us, build = _per_state_us(L, 2, h)
        q0 = torch.stack([torch.linspace(-0.8, 0.8, B), torch.linspace(0.5, -0.5, B)], -1) if B > 1 else torch.tensor([[0.5, -0.3]])
        v0 = torch.zeros(B, 2)
        sc, rc = _rate(VariationalIntegrator(L, h, execution="compiled"), q0, v0, n_c)
        se, re = _rate(VariationalIntegrator(L, h, execution="eager"), q0, v0, n_e)
        dq = float((sc.q[: n_e + 1] - se.q).abs().max())
        rows.append((f"  {label}, h = {h}, batch {B}: compiled {n_c} / eager {n_e} steps (steps/s)",
                     f"{rc / B:,.1f} / {re / B:,.2f} = {rc / re:.0f}x; max |dq| = {dq:.1e} over {n_e} steps; "
                     f"L_inv, g, H in C {us:.0f} us per state (lower + compile {build:.2f} s)"))
    return rows
