"""Lowering rules of the tracer against torch's decompositions: for one small Lagrangian per operation, the size of
the traced program and its build CPU time with the tracer as it is, and with the named rules taken out (so that the
operation runs torch's decomposition under the trace, integrators/traced.py).

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/trace_decompositions.py [--without] [--builds N] [NAME ...]

Each row prints ``(program length, operations, table entries, workspace doubles)`` of the emitted C (the last:
the jet arrays ``W`` its function declares, the live jet memory) and the least and median build CPU
seconds of N builds (default 3). ``--without``: also the row with the case's rules removed (a rule kept in
integrators/_trace_aten.py should make its program smaller than the decomposition does; a deleted one prints the
same row twice). Run it in two trees to
compare a tree with a rule against one without it. NAME: only the cases whose name contains it.
"""

from __future__ import annotations

import re
import sys
import time

import torch

import bea
import integrators.traced as T
from integrators._trace_aten import RULES

SIZES = []
_emit = T.emit_c


def _recording_emit(prog, result, **kw):
    out = _emit(prog, result, **kw)
    workspace = sum(int(m) for m in re.findall(r"double W\d+\[(\d+)\]", out[0]))  # the jets' arrays, in doubles
    SIZES.append((len(prog.code), out[1], out[2], workspace))
    return out


def _grad_inside(f):
    """``|v|^2/2 + f(x) + |grad f(x)|^2 / 10``, ``x = (q, v)``: the backward operations of ``f`` are traced."""
    def L(q, v):
        x = torch.cat([q, v], -1)
        e = f(x)
        (g,) = torch.autograd.grad(e.sum(), x, create_graph=True)
        return (v ** 2).sum(-1) / 2 + e + 0.1 * (g ** 2).sum(-1)
    return L


def _net(width: int, act, inputs: int = 4, layers: int = 1):
    torch.manual_seed(0)
    mods = [torch.nn.Linear(inputs, width), act()]
    for _ in range(layers - 1):
        mods += [torch.nn.Linear(width, width), act()]
    return torch.nn.Sequential(*mods, torch.nn.Linear(width, 1)).double()


def cases() -> dict:
    """``{name: (rules the case exercises, L, n)}``."""
    nn, F = torch.nn, torch.nn.functional
    sp, sig, tanh, relu, tnet1 = (_net(64, nn.Softplus, layers=2), _net(32, nn.Sigmoid), _net(32, nn.Tanh),
                                  _net(32, nn.ReLU), _net(8, nn.Tanh, inputs=2))
    inv4 = bea.compile_torch("inverse_modified_lagrangian", "midpoint", 4)
    M = torch.tensor([[2.0, 0.3], [0.3, 1.0]], dtype=torch.float64)
    kin = lambda v: (v ** 2).sum(-1) / 2  # noqa: E731
    base = lambda q, v: kin(v) + torch.cos(q).sum(-1) + 0.05 * (q[..., :1] * q).sum(-1)  # noqa: E731
    return {
        "softplus MLP 2x64": ("softplus.default", lambda q, v: kin(v) + 0.1 * sp(torch.cat([q, v], -1))[..., 0], 2),
        "softplus beta=2": ("softplus.default", lambda q, v: kin(v) + F.softplus(q, beta=2.0).sum(-1), 2),
        "softplus_backward": ("softplus_backward.default", _grad_inside(lambda x: F.softplus(x).sum(-1)), 2),
        "sigmoid_backward": ("sigmoid_backward.default", _grad_inside(lambda x: sig(x)[..., 0]), 2),
        "tanh_backward": ("tanh_backward.default", _grad_inside(lambda x: tanh(x)[..., 0]), 2),
        "threshold_backward": ("threshold_backward.default", _grad_inside(lambda x: relu(x)[..., 0]), 2),
        "select/slice_backward": ("select_backward.default slice_backward.default select_scatter.default",
                                  _grad_inside(lambda x: x[..., 0] ** 2 * x[..., 2] + x[..., 1:].pow(3).sum(-1)), 2),
        "unbind/stack": ("unbind.int stack.default",
                         lambda q, v: kin(v) + torch.stack(torch.unbind(q, -1)[::-1], -1).pow(3).sum(-1), 2),
        "dot": ("dot.default", lambda q, v: torch.dot(v[0], M @ v[0])[None] / 2 + torch.cos(q).sum(-1), 2),
        "mv": ("mv.default", lambda q, v: (v[0] * torch.mv(M, v[0])).sum()[None] / 2 + torch.cos(q).sum(-1), 2),
        "rsub/square": ("rsub.Scalar rsub.Tensor square.default", lambda q, v: kin(v) - torch.square(1 - q).sum(-1), 2),
        "select_scatter": ("select_scatter.default",
                           lambda q, v: kin(v) + torch.select_scatter(q, torch.cos(q[..., 0]), 1, 0).pow(2).sum(-1), 2),
        "t/transpose": ("t.default transpose.int", lambda q, v: (q.t() * q.transpose(0, 1)).sum()[None] + kin(v), 2),
        "fill_": ("fill_.Scalar", lambda q, v: kin(v) + torch.empty_like(q).fill_(2.0).mul(q).sum(-1), 2),
        "inv_4 of a tanh network, n=1": ("tanh_backward.default t.default transpose.int",
                                         lambda q, v: inv4(lambda q, v: kin(v) + 0.1 * tnet1(torch.cat([q, v], -1))[..., 0],
                                                           q, v, 0.1), 1),
        "inv_4 of a softplus callable, n=1": ("softplus_backward.default",
                                              lambda q, v: inv4(lambda q, v: kin(v) - F.softplus(q).sum(-1), q, v, 0.1), 1),
        "inv_4 of a callable, n=2": ("select_backward.default slice_backward.default select_scatter.default stack.default",
                                     lambda q, v: inv4(base, q, v, 0.1), 2),  # benchmarks/codegen_sources.py's case
    }


def _row(name: str, rules: str, L, n: int, without: bool, builds: int) -> str:
    saved = {r: RULES.pop(r) for r in (f"aten.{o}" for o in rules.split()) if r in RULES and without}
    try:
        SIZES.clear()
        try:
            T.trace_lagrangian(L, n)
        except T.NotLowerable as err:
            return f"{name:36s} {'without' if without else 'as is'}: not lowerable ({err})"
        ts = []
        for _ in range(builds):
            t0 = time.process_time()
            T.trace_lagrangian(L, n)
            ts.append(time.process_time() - t0)
        return (f"{name:36s} {'without' if without else 'as is':8s} (length, ops, tables, workspace) = {SIZES[0]}  "
                f"build CPU s {min(ts):.4f} / {sorted(ts)[builds // 2]:.4f}")
    finally:
        RULES.update(saved)


def main():
    T.emit_c = _recording_emit
    args = sys.argv[1:]
    builds = int(args[args.index("--builds") + 1]) if "--builds" in args else 3
    only = [a for k, a in enumerate(args) if not a.startswith("--") and (k == 0 or args[k - 1] != "--builds")]
    for name, (rules, L, n) in cases().items():
        if not only or any(o in name for o in only):
            for without in (False, True) if "--without" in sys.argv else (False,):
                print(_row(name, rules, L, n, without, builds), flush=True)


if __name__ == "__main__":
    main()
