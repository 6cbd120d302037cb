"""Gradient + Hessian of SymPy Lagrangians: the jet program of :func:`integrators.compiled.lower_lagrangian`
against a reference printed in this script from SymPy's own derivatives (``diff``, ``cse``, ``ccode``: the form
the compiled path used before the IR), both in the same C harness, in one process.

Prints CPU nanoseconds per evaluation (process time, best of ``--repeat``; the 2-core box is shared, which
makes wall-clock ratios swing) and the ratio new/old, and checks the two agree to 1e-12 (relative to the
entries' scale) at random states of each system's domain.

    python3 benchmarks/sympy_derivs.py [--repeat 5] [--trajectories]
"""

from __future__ import annotations

import argparse
import ctypes
import time

import numpy as np
import sympy

import integrators
from integrators._march_c import march_source
from integrators.ccompile import F64P, load_library, ptr
from integrators.compiled import lower_lagrangian

S = integrators.systems
SYSTEMS = {"pendulum": lambda: S.pendulum(), "kepler": lambda: S.kepler(), "n_pendulum(3)": lambda: S.n_pendulum(3),
           "fpu_chain(8)": lambda: S.fpu_chain(8), "fpu_chain(16)": lambda: S.fpu_chain(16),
           "coupled_oscillators(16)": lambda: S.coupled_oscillators(16), "n_body(5)": lambda: S.n_body((1,) * 5),
           "fpu_chain(32)": lambda: S.fpu_chain(32)}


def printed_source(L) -> str:
    """``lag_derivs`` printed from SymPy's derivatives of ``L.expr`` (gradient and upper Hessian, one ``cse``)."""
    D = 2 * L.n
    X = [sympy.Symbol(f"X{i}", real=True) for i in range(D)]
    P = [sympy.Symbol(f"P{i}", real=True) for i in range(len(L.params))]
    expr = L.expr.xreplace(dict(zip((*L.q, *L.v, *L.params), (*X, *P))))
    grad = [sympy.diff(expr, x) for x in X]
    hess = [sympy.diff(grad[i], X[j]) for i in range(D) for j in range(i, D)]
    temps, reduced = sympy.cse(grad + hess, symbols=sympy.numbered_symbols("t"), optimizations="basic")
    lines = ["static void lag_derivs(const double *x, const double *P, double *g, double *H) {"]
    lines += [f"    const double X{i} = x[{i}];" for i in range(D)]
    lines += [f"    const double P{i} = P[{i}];" for i in range(len(P))] + ["    (void)P;"]
    lines += [f"    const double {s} = {sympy.ccode(e)};" for s, e in temps]
    lines += [f"    g[{i}] = {sympy.ccode(reduced[i])};" for i in range(D)]
    k = D
    for i in range(D):
        for j in range(i, D):
            lines.append(f"    H[{i * D + j}] = H[{j * D + i}] = {sympy.ccode(reduced[k])};")
            k += 1
    return "\n".join(lines + ["}"])


def _entry(source: str, n: int):
    return load_library(march_source(source, n)).function("bea_lag_derivs", None, ctypes.c_int, ctypes.c_int, F64P, F64P,
                                                           F64P, F64P)


def measure(L, repeat: int, m: int = 128, calls: int = 200):
    """``(ns old, ns new, largest relative difference)`` per gradient + Hessian."""
    D = 2 * L.n
    params = np.array(L._param_values() or (0.0,), dtype=np.float64)
    lo, hi = np.array([d[0] for d in L.domain]), np.array([d[1] for d in L.domain])
    x = np.ascontiguousarray(lo + (hi - lo) * np.random.default_rng(0).random((m, D)))
    fns = {"old": _entry(printed_source(L), L.n), "new": _entry(lower_lagrangian(L).source, L.n)}
    out = {k: (np.empty((m, D)), np.empty((m, D, D))) for k in fns}
    best = {k: float("inf") for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():  # alternating, so that a change of load hits both
            g, H = out[k]
            t0 = time.process_time()
            for _ in range(calls):
                fn(m, D, ptr(x), ptr(params), ptr(g), ptr(H))
            best[k] = min(best[k], (time.process_time() - t0) / (calls * m) * 1e9)
    scale = max(1.0, float(np.abs(out["old"][1]).max()))
    diff = max(float(np.abs(out["old"][0] - out["new"][0]).max()), float(np.abs(out["old"][1] - out["new"][1]).max()))
    return best["old"], best["new"], diff / scale


class _Printed:
    """``L`` whose compiled form is the printed reference (its eager path is ``L``'s own)."""

    def __init__(self, L):
        self.L = L

    def __call__(self, q, v):
        return self.L(q, v)

    def compiled_form(self, n):
        from integrators.compiled import CLagrangian

        return CLagrangian(n=n, source=printed_source(self.L), params=np.array(self.L._param_values() or (0.0,)))


def trajectory_difference(L, steps: int = 1000, h: float = 0.02) -> float:
    """Largest difference of two compiled trajectories (old and new derivatives) from random states of the domain."""
    import torch

    lo, hi = (torch.tensor([d[k] for d in L.domain], dtype=torch.float64) for k in (0, 1))
    x = lo + (hi - lo) * torch.rand(2, 2 * L.n, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    q = [integrators.VariationalIntegrator(lag, h, execution="compiled").solve(
        x[:, :L.n], x[:, L.n:], steps, on_failure="mask").q for lag in (_Printed(L), L)]
    return float((q[0] - q[1]).abs().nan_to_num(0.0).max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--systems", nargs="*", default=list(SYSTEMS))
    ap.add_argument("--trajectories", action="store_true", help="also compare 1,000 compiled steps (h = 0.02)")
    args = ap.parse_args()
    print("| System | old ns | new ns | new/old | max rel. diff |" + (" trajectories |" if args.trajectories else ""))
    print("|---|---:|---:|---:|---:|" + ("---:|" if args.trajectories else ""))
    for name in args.systems:
        old, new, diff = measure(SYSTEMS[name](), args.repeat)
        row = f"| {name} | {old:,.0f} | {new:,.0f} | {new / old:.2f} | {diff:.1e} |"
        print(row + (f" {trajectory_difference(SYSTEMS[name]()):.1e} |" if args.trajectories else ""), flush=True)


if __name__ == "__main__":
    main()
