r"""The one C emitter of the code generator: a program of :mod:`integrators.codegen.ir` as C.

Only instructions that reach the result or a guard are kept. Jets live in a work array of slots of
``S = binom(D + K, K)`` doubles; a slot is reused once the last instruction reading it has run (an
instruction's output never shares a slot with its inputs, so the runtime need not handle aliasing). Every
instruction is one call of the runtime (:mod:`integrators.codegen.runtime`, prefix ``jt``), included in
the source. The printed function is either

* ``lag_derivs(x, P, g, H)`` of :class:`~integrators.compiled.CLagrangian` (``K >= 2``): the gradient and
  the Hessian, :math:`\partial_i\partial_j f = (1 + \delta_{ij})\,c_{e_i + e_j}`; or
* ``lag_taylor(x, P, T)`` of :class:`~integrators.series_c.CTaylor`: all coefficients.

A failed guard sets ``g[0]`` (``T[0]``) to NaN, which makes the compiled march hand that step to the eager path.
"""

from __future__ import annotations

import math
from typing import Dict, List, Tuple

from ..compiled import NotLowerable
from .ir import Jet, Program, Val
from .runtime import FUNCTIONS, UNROLL, header, monomial_index, size
from .spaces import split

__all__ = ["emit_c", "derivs_of_taylor", "MAX_WORK_DOUBLES"]

#: largest work array (doubles, on the C stack) a program may use
MAX_WORK_DOUBLES = 1 << 16
#: the C name prefix of the emitted jets' runtime (a model's own Taylor form may use "tp" in the same file)
PREFIX = "jt"
#: programs of at most this many instructions get the runtime inlined (see emit_c)
INLINE_MAX = 100
_FN = {name: k for k, name in enumerate(FUNCTIONS)}


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


def _derivs(D: int, K: int, T: str) -> List[str]:
    r"""C lines writing ``g`` and ``H`` from the Taylor coefficients ``T`` (:math:`\partial_i\partial_j f =
    (1 + \delta_{ij}) c_{e_i + e_j}`). Unrolled, the index table folds into constant offsets, so that a small
    program's jets can stay in registers."""
    index = monomial_index(D, K)
    idx = [index[tuple((k == i) + (k == j) for k in range(D))] for i in range(D) for j in range(D)]
    fac = ["2.0" if i == j else "1.0" for i in range(D) for j in range(D)]
    return [f"    static const int HI[] = {{{', '.join(map(str, idx))}}};",
            f"    static const double HF[] = {{{', '.join(fac)}}};",
            f"    BEA_UNROLL for (int i = 0; i < {D}; i++) g[i] = {T}[1 + i];",
            f"    BEA_UNROLL for (int i = 0; i < {D * D}; i++) H[i] = HF[i] * {T}[HI[i]];"]


def derivs_of_taylor(D: int, K: int) -> str:
    """C of ``lag_derivs(x, P, g, H)`` reading the gradient and Hessian off ``lag_taylor`` (degree ``K >= 2``)."""
    return "\n".join([*UNROLL, "static void lag_derivs(const double *x, const double *P, double *g, double *H) {",
                      f"    double T[{size(D, K)}];", "    lag_taylor(x, P, T);", *_derivs(D, K, "T"), "}", ""])


def emit_c(prog: Program, result: Jet, *, taylor: bool = False, prelude: str = "",
           prefix: str = PREFIX) -> Tuple[str, int, int]:
    """``(source, number of jet operations, number of weighted terms in table form)`` of ``lag_derivs`` (or, with
    ``taylor``, ``lag_taylor``) computing the jet ``result``; ``prelude``: C lines run first (they may define
    the arrays that ``gather`` instructions read); ``prefix``: of the runtime's C names (two programs of
    different sizes in one file need two)."""
    code = _live(prog, [result] + [g for g, _ in prog.guards])
    D, K, S = prog.D, prog.K, size(prog.D, prog.K)
    code, spaces, result = split(code, result, D, K)
    roots = [result] + [g for g, _ in prog.guards]
    slot, count = _slots(code, roots)
    if count * S > MAX_WORK_DOUBLES:
        raise NotLowerable(f"the program needs {count} live jets of {S} doubles (more than the "
                           f"{MAX_WORK_DOUBLES} doubles allowed); the eager path runs it")

    def arg(a) -> str:
        if isinstance(a, Jet):
            return f"S({slot[a.k]})"
        if isinstance(a, Val):
            return a.name
        return _number(a)

    def val(a) -> str:
        return f"S({slot[a.k]})[0]" if isinstance(a, Jet) else arg(a)

    def pfx(d: int) -> str:  # the runtime of polynomials in d variables
        return prefix if d == D else f"{prefix}s{d}"

    sizes = sorted({len(sp) for sp in spaces.values()} | {D})
    sig = "double *T" if taylor else "double *g, double *H"
    # the runtime stays calls in large programs: inlined into thousands of calls it makes gcc take minutes; in
    # small ones (a SymPy system's) inlined, with its unrolled loops, the jets stay in registers (3x faster)
    lines = [header(d, K, pfx(d), noinline=len(code) > INLINE_MAX) for d in sizes]
    lines += [f"static void lag_{'taylor' if taylor else 'derivs'}(const double *x, const double *P, {sig}) {{",
              f"    double Wk[{max(1, count) * S}];", "    int bad = 0;", "    (void)P; (void)bad; (void)x;",
              f"#define SLOT {S}", "#define S(s) (Wk + (s) * SLOT)", prelude]
    ops = tables = 0
    for ins in code:
        lines.append("    " + _statement(ins, arg, val, pfx(len(spaces[ins[1].k])) if isinstance(ins[1], Jet) else prefix))
        ops += isinstance(ins[1], Jet)
        tables += (len(ins) - 2) // 2 if "_lin_p" in lines[-1] else 0
    for g, expected in prog.guards:
        test = f"!isnan({val(g)})" if math.isnan(expected) else f"{val(g)} != {_number(expected)}"
        lines.append(f"    if ({test}) bad = 1;")
    r = arg(result)
    if taylor:
        lines += [f"    for (int k = 0; k < {S}; k++) T[k] = {r}[k];", "    if (bad) T[0] = NAN;"]
    else:
        lines += _derivs(D, K, r) + ["    if (bad) g[0] = NAN;"]
    return "\n".join(lines + ["#undef S", "#undef SLOT", "}", ""]), ops, tables


def _statement(ins: tuple, arg, val, p: str) -> str:
    op, out, a = ins[0], ins[1], ins[2:]
    if op == "seed":
        return f"{p}_seed(x[{a[0]}], {a[1]}, {arg(out)});"
    if op == "embed":
        return (f"{{ static const int M[] = {{{', '.join(map(str, a[1]))}}}; "
                f"{p}_embed({arg(a[0])}, M, {len(a[1])}, {arg(out)}); }}")
    if op == "gather":
        return (f"{{ static const int I[] = {{{', '.join(map(str, a[1]))}}}; static const double F[] = "
                f"{{{', '.join(map(_number, a[2]))}}}; {p}_gather({a[0]}, I, F, {arg(out)}); }}")
    if op in ("add", "sub", "mul", "div"):
        return f"{p}_{op}({arg(a[0])}, {arg(a[1])}, {arg(out)});"
    if op in ("addc", "scale", "divc", "cdiv", "rsubc"):
        return f"{p}_{op}({arg(a[0])}, {val(a[1])}, {arg(out)});"
    if op == "lin" and len(a) >= 16 and all(isinstance(c, Val) and c.name.startswith("P[") for c in a[0::2]):
        table = ", ".join(f"{arg(j)[2:-1]} * SLOT, {c.name[2:-1]}" for c, j in zip(a[0::2], a[1::2]))
        # a table and a loop, not one call per term: the straight-line form takes gcc minutes for a 64x64 layer
        return f"{{ static const int T[] = {{{table}}}; {p}_lin_p(T, {len(a) // 2}, P, Wk, {arg(out)}); }}"
    if op == "lin":
        terms = [f"{p}_scale({arg(a[1])}, {val(a[0])}, {arg(out)});"]
        terms += [f"{p}_axpy({val(a[k])}, {arg(a[k + 1])}, {arg(out)});" for k in range(2, len(a), 2)]
        return " ".join(terms)
    if op == "sel":
        return (f"{{ double ta[{p.upper()}_S], tb[{p.upper()}_S]; const double *pa = {_jet_or_const(a[1], arg, val, 'ta', p)}, "
                f"*pb = {_jet_or_const(a[2], arg, val, 'tb', p)}; {p}_sel({val(a[0])}, pa, pb, {arg(out)}); }}")
    if op in ("fun", "pow"):
        fn, e = (_FN[a[1]], "0.0") if op == "fun" else (_FN["pow"], val(a[1]))
        return (f"{{ double f[{p.upper()}_K + 1]; {p}_coef({fn}, {val(a[0])}, {e}, f); "
                f"{p}_fun({arg(a[0])}, f, {arg(out)}); }}")
    if op == "vfun":
        return f"double {out.name}; {{ const double a = {val(a[1])}; {out.name} = {FUNCTIONS[a[0]]}; }}"
    if op == "val":
        return f"const double {out.name} = {a[0].format(*[val(x) for x in a[1:]])};"
    raise NotLowerable(f"internal: unknown instruction {op}")


def _jet_or_const(x, arg, val, tmp: str, p: str) -> str:
    if isinstance(x, Jet):
        return arg(x)
    return f"({p}_const({val(x)}, {tmp}), {tmp})"
