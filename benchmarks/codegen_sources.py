"""The C every front-end of the code generator emits, as hashes, and the CPU time to build it: to check that a
refactoring of integrators/codegen and its front-ends changes no byte of the generated C, and no build time.

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/codegen_sources.py [--out hashes.json] [--time] [--count]

One row per case (SymPy systems through the march, traced callables and networks, traced Taylor forms, traced
series with LU solves, the GP means (RBF, its jets, mechanical), a ModLaNet and its series): the first 16 hex digits
of the SHA-256 of every source handed to the compiler while the case is built, with the numbers it returns
(parameters, evaluation points, an RBF jet's values). Run it in two trees and compare the ``--out`` files: equal
hashes are the same C, parameters and points. ``--time``: for the cases that trace or lower, the least and median
CPU time of 7 builds (libraries from the in-process cache: this is the Python side, tracing, lowering, emitting and
the traced form's verification). ``--count``: the live instructions of the programs each case emits, jet
instructions and values (what runs per evaluation: a refactoring of the IR must not grow them) and the jets'
work arrays in doubles, summed over the case's sources.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import time
from collections import Counter

import numpy as np
import torch

import bea
from integrators import ccompile
from integrators import systems as S
from integrators.compiled import CompiledStepper
from integrators.traced import trace_lagrangian, trace_taylor

_SEEN = []
_load = ccompile._load


def _recording_load(source, flags):
    _SEEN.append(source)
    return _load(source, flags)


def _counting_live(live, counts):
    """``live`` (the emitter's liveness pass) adding each kept instruction's op to ``counts``."""
    def counted(prog, roots):
        code = live(prog, roots)
        counts.update(ins[0] for ins in code)
        return code
    return counted


def _digest(result) -> str:
    parts = list(_SEEN)
    for r in result if isinstance(result, (list, tuple)) else [result]:
        for x in (getattr(r, "source", None), getattr(r, "params", None), r):
            if isinstance(x, str):
                parts.append(x)
            elif isinstance(x, np.ndarray):
                parts.append(x.tobytes().hex())
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _rbf(D: int):
    from learners import FunctionalKernel, RBFKernel
    from learners.shadow.functionals import AtomSet
    from learners.shadow.kernels import AtomExpansion

    g = torch.Generator().manual_seed(0)
    base = RBFKernel(ard_num_dims=D)
    kernel = FunctionalKernel(base).to(torch.float64)
    base.lengthscale, kernel.outputscale = 0.6 + torch.rand(1, D, generator=g, dtype=torch.float64), 1.7
    for p in kernel.parameters():
        p.requires_grad_(False)
    return AtomExpansion(kernel, {m: AtomSet(torch.randn(k, D, generator=g, dtype=torch.float64),
                                             torch.randn(k, m, D, generator=g, dtype=torch.float64),
                                             torch.randn(k, generator=g, dtype=torch.float64), torch.zeros(k, dtype=torch.long))
                                  for m, k in ((0, 7), (1, 9), (2, 11))})


def _mechanical(d: int):
    from learners import FunctionalKernel
    from learners.shadow.functionals import AtomSet
    from learners.shadow.kernels import AtomExpansion
    from learners.shadow.mechanical import MechanicalKernel

    g = torch.Generator().manual_seed(6)
    k = MechanicalKernel(d, ard_num_dims=4).to(torch.float64)
    k.lengthscale = torch.tensor([[0.7, 1.3, 0.9, 1.6]], dtype=torch.float64)
    kernel = FunctionalKernel(k).to(torch.float64)
    kernel.outputscale = 0.7
    return AtomExpansion(kernel, {m: AtomSet(0.4 * torch.randn(20, 4, generator=g, dtype=torch.float64),
                                             torch.randn(20, m, 4, generator=g, dtype=torch.float64),
                                             torch.randn(20, generator=g, dtype=torch.float64),
                                             torch.zeros(20, dtype=torch.long)) for m in (0, 1, 2)})


def cases():
    """``{name: (build, timed)}``."""
    from learners import ModLaNet
    from learners.modlanet.lowering import c_lagrangian, c_taylor
    from learners.shadow.compiled_mean import RBFJet, c_lagrangian_of_expansion
    from integrators.series_c import series_c_lagrangian

    mid = bea.get_scheme("midpoint")
    out = {f"system {name}": ((lambda s=s, n=n, sch=sch: CompiledStepper(s(), 0.1, bea.get_scheme(sch), n).points), False)
           for name, s, n, sch in [("pendulum", S.pendulum, 1, "midpoint"), ("kepler", S.kepler, 2, "midpoint"),
                                   ("kepler trapezoidal", S.kepler, 2, "trapezoidal"),
                                   ("n_pendulum(3)", lambda: S.n_pendulum(3), 3, "midpoint"),
                                   ("coupled_oscillators(6)", lambda: S.coupled_oscillators(6), 6, "midpoint"),
                                   ("fpu_chain(8)", lambda: S.fpu_chain(8), 8, "midpoint"),
                                   ("henon_heiles", S.henon_heiles, 2, "midpoint"), ("n_body", S.n_body, 6, "midpoint")]}
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                              torch.nn.Linear(64, 1)).double()
    inv4 = bea.compile_torch("inverse_modified_lagrangian", "midpoint", 4)
    plain = lambda q, v: v[..., 0] ** 2 / 2 + torch.cos(q[..., 0])  # noqa: E731
    kepler = lambda q, v: (v ** 2).sum(-1) / 2 + 1 / q.norm(dim=-1)  # noqa: E731
    mixed = lambda q, v: ((v ** 2).sum(-1) / 2 - torch.clamp(q, -2.0, 1.5).pow(2).sum(-1)  # noqa: E731
                          + torch.nn.functional.softplus(q).sum(-1) + torch.sigmoid(v[..., :1] * q[..., 1:]).sum(-1)
                          + torch.where(q[..., 0] > -5, torch.exp(q[..., 1]) * 0.1, q[..., 0]))
    mlp = lambda q, v: (v ** 2).sum(-1) / 2 - (q ** 2).sum(-1) / 2 + 0.1 * net(torch.cat([q, v], -1))[..., 0]  # noqa: E731
    base = lambda q, v: (v ** 2).sum(-1) / 2 + torch.cos(q).sum(-1) + 0.05 * (q[..., :1] * q).sum(-1)  # noqa: E731
    model = ModLaNet.pendulum_chain(2, transform="rod", hidden=12, seed=1)
    X = torch.randn(5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    out.update({
        "traced pendulum": (lambda: trace_lagrangian(plain, 1), False),
        "traced pendulum, stepper": (lambda: CompiledStepper(plain, 0.1, mid, 1).points, False),
        "traced Kepler": (lambda: trace_lagrangian(kepler, 2), False),
        "traced clamp/softplus/sigmoid/where": (lambda: trace_lagrangian(mixed, 2), False),
        "traced MLP 2x64": (lambda: trace_lagrangian(mlp, 2), True),
        "traced Taylor(4) pendulum": (lambda: trace_taylor(plain, 1, 4), False),
        "traced Taylor(4) Kepler": (lambda: trace_taylor(kepler, 2, 4), True),
        "traced inv_4 of a callable, n=1": (lambda: trace_lagrangian(lambda q, v: inv4(base, q, v, 0.1), 1), False),
        "traced inv_4 of a callable, n=2": (lambda: trace_lagrangian(lambda q, v: inv4(base, q, v, 0.1), 2), True),
        "GP mean RBF, n=2": (lambda: c_lagrangian_of_expansion(_rbf(4), 2), True),
        "GP mean RBF jet, K=4": (lambda: RBFJet(_rbf(4))(X, 4).numpy(), False),
        "GP mean mechanical d=2": (lambda: c_lagrangian_of_expansion(_mechanical(2), 2), False),
        "GP mean mechanical d=5": (lambda: c_lagrangian_of_expansion(_mechanical(5), 2), True),
        "ModLaNet lag_derivs": (lambda: c_lagrangian(model), False),
        "ModLaNet Taylor(4)": (lambda: c_taylor(model, 4), False),
        "ModLaNet inv_2": (lambda: series_c_lagrangian("inverse_modified_lagrangian", 2, 0.05, mid, model), False),
        "System n_pendulum(3) lowered": (lambda: CompiledStepper(S.n_pendulum(3), 0.1, mid, 3).points, True),
    })
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write {case: hash} as JSON")
    ap.add_argument("--time", action="store_true", help="CPU seconds per build of the timed cases (least, median of 7)")
    ap.add_argument("--count", action="store_true", help="live instructions per case: jets, values, by op")
    args = ap.parse_args()
    ccompile._load = _recording_load
    hashes, counts = {}, Counter()
    if args.count:
        from integrators.codegen import emit, reduce
        emit._live = reduce._live = _counting_live(emit._live, counts)
    for name, (build, timed) in cases().items():
        _SEEN.clear()
        counts.clear()
        hashes[name] = _digest(build())
        line = f"{name:40s} {hashes[name]}"
        if args.count:
            jets = sum(n for op, n in counts.items() if op not in ("val", "vfun"))
            work = sum(int(m) for src in _SEEN for m in re.findall(r"double W\d+\[(\d+)\]", src))  # jets' arrays, doubles
            line += f"   jet {jets:5d} val {counts['val'] + counts['vfun']:4d} work {work:6d} {dict(sorted(counts.items()))}"
        if args.time and timed:
            ts = []
            for _ in range(7):
                t0 = time.process_time()
                build()
                ts.append(time.process_time() - t0)
            line += f"   build CPU s: least {min(ts):.4f}, median {sorted(ts)[3]:.4f}"
        print(line, flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(hashes, f, indent=1)


if __name__ == "__main__":
    main()
