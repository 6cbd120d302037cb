r"""C for a traced jet program (:mod:`integrators._trace_ops`): dead-code removal, slot reuse, printing.

Only instructions that reach the result or a guard are kept. Jets live in a work array of slots of
``J2S = 1 + D + D^2`` doubles; a slot is reused once the last instruction reading it has run (an
instruction's output never shares a slot with its inputs, so the helpers need not handle aliasing).
The printed function is the ``lag_derivs(x, P, g, H)`` of :class:`~integrators.compiled.CLagrangian`;
a failed guard sets ``g[0]`` to NaN, which makes the compiled march hand that step to the eager path.
"""

from __future__ import annotations

import math
from typing import Dict, List, Tuple

from ._trace_ops import UNARY, Jet, Program, Val
from .compiled import NotLowerable
from .series_c import J2

__all__ = ["emit_c", "MAX_WORK_DOUBLES"]

#: largest work array (doubles, on the C stack) a traced program may use
MAX_WORK_DOUBLES = 1 << 16

#: jet helpers beyond :data:`integrators.series_c.J2` (const, seed, axpy, mul, pow)
HELPERS = r"""
static void j2_copy(const double *a, double *o) { for (int k = 0; k < J2S; k++) o[k] = a[k]; }
static void j2_add(const double *a, const double *b, double *o) { for (int k = 0; k < J2S; k++) o[k] = a[k] + b[k]; }
static void j2_sub(const double *a, const double *b, double *o) { for (int k = 0; k < J2S; k++) o[k] = a[k] - b[k]; }
static void j2_scale(const double *a, double c, double *o) { for (int k = 0; k < J2S; k++) o[k] = c * a[k]; }
static void j2_addc(const double *a, double c, double *o) { j2_copy(a, o); o[0] = a[0] + c; }
static void j2_rsubc(const double *a, double c, double *o) { for (int k = 1; k < J2S; k++) o[k] = -a[k]; o[0] = c - a[0]; }
static void j2_divc(const double *a, double c, double *o) { for (int k = 0; k < J2S; k++) o[k] = a[k] / c; }
/* o = phi(a) from phi(a0), phi'(a0), phi''(a0) */
static void j2_fun(const double *a, double f0, double f1, double f2, double *o) {
    const int D = J2D;
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) o[1 + D + i * D + j] = f1 * a[1 + D + i * D + j] + f2 * a[1 + i] * a[1 + j];
    for (int i = 0; i < D; i++) o[1 + i] = f1 * a[1 + i];
    o[0] = f0;
}
/* o = a / b: value, (grad a - o grad b) / b, (H a - o H b - grad o grad b^T - grad b grad o^T) / b */
static void j2_div(const double *a, const double *b, double *o) {
    const int D = J2D;
    o[0] = a[0] / b[0];
    for (int i = 0; i < D; i++) o[1 + i] = (a[1 + i] - o[0] * b[1 + i]) / b[0];
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++)
            o[1 + D + i * D + j] = (a[1 + D + i * D + j] - o[0] * b[1 + D + i * D + j] - o[1 + i] * b[1 + j]
                                    - b[1 + i] * o[1 + j]) / b[0];
}
/* o = c / b */
static void j2_cdiv(const double *b, double c, double *o) {
    const double f0 = c / b[0], f1 = -f0 / b[0], f2 = -2.0 * f1 / b[0];
    j2_fun(b, f0, f1, f2, o);
}
/* o = sum_k P[T[2k+1]] W_{T[2k]}: a linear combination with run-time coefficients (a network's weights) */
static void j2_lin_p(const int *T, int m, const double *P, double *W, double *o) {
    const double *a = W + T[0] * J2S, c0 = P[T[1]];
    for (int k = 0; k < J2S; k++) o[k] = c0 * a[k];
    for (int t = 1; t < m; t++) {  /* j2_axpy written out: one call per layer row, not per weight */
        const double *b = W + T[2 * t] * J2S, c = P[T[2 * t + 1]];
        for (int k = 0; k < J2S; k++) o[k] += c * b[k];
    }
}
static void j2_sel(double c, const double *a, const double *b, double *o) { j2_copy(c != 0.0 ? a : b, o); }
"""


def _number(x: float) -> str:
    if math.isnan(x):
        return "NAN"
    if math.isinf(x):
        return "INFINITY" if x > 0 else "(-INFINITY)"
    return repr(float(x))


def _live(prog: Program, roots: List[object]) -> List[tuple]:
    """The instructions that the roots depend on, in program order."""
    defining: Dict[int, tuple] = {}
    for ins in prog.code:
        defining[id(ins[1])] = ins
    needed, stack = set(), [r for r in roots if isinstance(r, (Jet, Val))]
    while stack:
        ins = defining.get(id(stack.pop()))
        if ins is None or id(ins) in needed:
            continue
        needed.add(id(ins))
        stack.extend(a for a in ins[2:] if isinstance(a, (Jet, Val)))
    return [ins for ins in prog.code if id(ins) in needed]


def _slots(code: List[tuple], roots) -> Tuple[Dict[int, int], int]:
    last: Dict[int, int] = {}
    for k, ins in enumerate(code):
        for a in ins[2:]:
            if isinstance(a, Jet):
                last[a.k] = k
    for r in roots:
        if isinstance(r, Jet):
            last[r.k] = len(code)
    slot: Dict[int, int] = {}
    free: List[int] = []
    count = 0
    for k, ins in enumerate(code):
        out = ins[1]
        if isinstance(out, Jet):
            if free:
                slot[out.k] = free.pop()
            else:
                slot[out.k] = count
                count += 1
        for a in {a.k for a in ins[2:] if isinstance(a, Jet)}:
            if last.get(a) == k:
                free.append(slot[a])
    return slot, count


def emit_c(prog: Program, result: Jet) -> Tuple[str, int, int]:
    """``(source, number of jet operations, number of weighted terms in table form)`` of ``lag_derivs``
    computing the jet ``result``."""
    roots = [result] + [g for g, _ in prog.guards]
    code = _live(prog, roots)
    slot, count = _slots(code, roots)
    D = prog.D
    J2S = 1 + D + D * D
    if count * J2S > MAX_WORK_DOUBLES:
        raise NotLowerable(f"the traced program needs {count} live jets of {J2S} doubles (more than the "
                           f"{MAX_WORK_DOUBLES} doubles allowed); the eager path runs it")

    def arg(a) -> str:
        if isinstance(a, Jet):
            return f"S({slot[a.k]})"
        if isinstance(a, Val):
            return a.name
        return _number(a)

    def val(a) -> str:
        return f"S({slot[a.k]})[0]" if isinstance(a, Jet) else arg(a)

    # helpers stay calls (noinline): inlined into thousands of straight-line calls they make gcc take minutes
    lines = [f"#define J2D {D}", "#define NOINLINE __attribute__((noinline))",
             J2.replace("static void", "static NOINLINE void"), HELPERS.replace("static void", "static NOINLINE void"),
             "static void lag_derivs(const double *x, const double *P, double *g, double *H) {",
             f"    double Wk[{max(1, count) * J2S}];", "    int bad = 0;", "    (void)P; (void)bad;",
             "#define S(s) (Wk + (s) * J2S)"]
    ops = tables = 0
    for ins in code:
        lines.append("    " + _statement(ins, arg, val))
        ops += isinstance(ins[1], Jet)
        tables += (len(ins) - 2) // 2 if "j2_lin_p" in lines[-1] else 0
    for g, expected in prog.guards:
        test = f"!isnan({val(g)})" if math.isnan(expected) else f"{val(g)} != {_number(expected)}"
        lines.append(f"    if ({test}) bad = 1;")
    r = arg(result)
    lines += [f"    for (int i = 0; i < {D}; i++) g[i] = {r}[1 + i];",
              f"    for (int i = 0; i < {D * D}; i++) H[i] = {r}[1 + {D} + i];",
              "    if (bad) g[0] = NAN;", "#undef S", "}"]
    return "\n".join(lines), ops, tables


def _statement(ins: tuple, arg, val) -> str:
    op, out = ins[0], ins[1]
    a = ins[2:]
    if op == "seed":
        return f"j2_seed(x[{a[0]}], {a[0]}, {arg(out)});"
    if op in ("add", "sub", "mul", "div"):
        return f"j2_{op}({arg(a[0])}, {arg(a[1])}, {arg(out)});"
    if op in ("addc", "scale", "divc", "cdiv", "rsubc", "pow"):
        return f"j2_{op}({arg(a[0])}, {val(a[1])}, {arg(out)});"
    if op == "lin" and len(a) >= 16 and all(isinstance(c, Val) and c.name.startswith("P[") for c in a[0::2]):
        table = ", ".join(f"{arg(j)[2:-1]}, {c.name[2:-1]}" for c, j in zip(a[0::2], a[1::2]))
        # a table and a loop, not one call per term: the straight-line form takes gcc minutes for a 64x64 layer
        return f"{{ static const int T[] = {{{table}}}; j2_lin_p(T, {len(a) // 2}, P, Wk, {arg(out)}); }}"
    if op == "lin":
        terms = [f"j2_scale({arg(a[1])}, {val(a[0])}, {arg(out)});"]
        terms += [f"j2_axpy({val(a[k])}, {arg(a[k + 1])}, {arg(out)});" for k in range(2, len(a), 2)]
        return " ".join(terms)
    if op == "sel":
        return (f"{{ double ta[J2S], tb[J2S]; const double *pa = {_jet_or_const(a[1], arg, val, 'ta')}, "
                f"*pb = {_jet_or_const(a[2], arg, val, 'tb')}; j2_sel({val(a[0])}, pa, pb, {arg(out)}); }}")
    if op == "fun":
        f0, f1, f2 = UNARY[a[1]]
        return (f"{{ const double a = {val(a[0])}; const double f0 = {f0}; const double f1 = {f1}; "
                f"const double f2 = {f2}; j2_fun({arg(a[0])}, f0, f1, f2, {arg(out)}); }}")
    if op == "vfun":
        return f"double {out.name}; {{ const double a = {val(a[1])}; {out.name} = {UNARY[a[0]][0]}; }}"
    if op == "val":
        return f"const double {out.name} = {a[0].format(*[val(x) for x in a[1:]])};"
    raise NotLowerable(f"internal: unknown traced instruction {op}")


def _jet_or_const(x, arg, val, tmp: str) -> str:
    if isinstance(x, Jet):
        return arg(x)
    return f"(j2_const({val(x)}, {tmp}), {tmp})"
