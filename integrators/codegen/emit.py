r"""The one C emitter of the code generator: a program of :mod:`integrators.codegen.ir` as C, each jet in the smallest
space of its variables (:func:`_split`) and a reused slot of a work array, each instruction one call of the runtime
(prefix ``jt``). It prints ``lag_taylor(x, P, T)`` (all coefficients) or ``lag_derivs(x, P, g, H)``,
:math:`g_i = c_{e_i}`, :math:`H_{ij} = (1 + \delta_{ij})\,c_{e_i + e_j}` of one jet or of a sum :math:`\sum_k c_k f_k`
added term by term. Each guard is tested right after the instruction computing it; a failed one sets every entry of
``g`` and ``H`` (every ``T[k]``) to NaN, so that any reader hands the state to the eager path (docs/theory/codegen.md).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from typing import Dict, List, Tuple

from bea.errors import InternalError

from ..compiled import NotLowerable
from .ir import Jet, Program, Val
from .runtime import FUNCTIONS, UNROLL, header, monomial_index, monomials, size

__all__ = ["emit_c", "derivs_of_taylor", "MAX_WORK_DOUBLES"]

#: largest work array (doubles, on the C stack) a program may use
MAX_WORK_DOUBLES = 1 << 16
#: the C name prefix of the emitted jets' runtime (a model's own Taylor form may use "tp" in the same file)
PREFIX = "jt"
#: programs of at most this many instructions get the runtime inlined (see _inlining)
INLINE_MAX = 100
#: the runtime of one size is always inlined when its instructions times its coefficients are at most this
INLINE_BUDGET = 2000
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
    return _sink_seeds([ins for ins in prog.code if id(ins) in needed])


def _sink_seeds(code: List[tuple]) -> List[tuple]:
    """The code with every ``seed`` moved to just before its first reader: a front-end seeds all variables
    first, which would keep them all live from the start."""
    first: Dict[int, int] = {}
    for k, ins in enumerate(code):
        for a in ins[2:]:
            if isinstance(a, Jet):
                first.setdefault(a.k, k)
    seeds = {k: ins for k, ins in enumerate(code) if ins[0] == "seed"}
    before: Dict[int, List[tuple]] = {}
    for k, ins in seeds.items():
        before.setdefault(first.get(ins[1].k, k), []).append(ins)
    out: List[tuple] = []
    for k, ins in enumerate(code):
        out += before.get(k, [])
        if k not in seeds:
            out.append(ins)
    return out


# Smaller spaces: a jet in the variables V is carried in binom(|V|+K, K) coefficients, not binom(D+K, K); an instruction
# runs in the union of its inputs' spaces, a smaller input first embedded (the same monomials, zeros elsewhere: no
# number changes; docs/theory/codegen.md, "Smaller spaces").
#: most space sizes below D one program uses
MAX_SIZES = 3
#: a program of fewer than MIN_D variables keeps every jet in its full space (measured: docs/theory/codegen.md)
MIN_D = 4

Space = Tuple[int, ...]


def _natural(code: List[tuple], D: int, keep=None) -> Dict[int, Space]:
    """The space of every jet (by number): seeds their variable, ``gather`` all, others the union of their inputs';
    with ``keep``, a space whose size is not kept is the full one."""
    full = tuple(range(D))
    spaces: Dict[int, Space] = {}
    for ins in code:
        op, out, args = ins[0], ins[1], ins[2:]
        if not isinstance(out, Jet):
            continue
        if op == "seed":
            sp: Space = (args[0],)
        elif op == "gather":
            sp = full
        else:
            sp = tuple(sorted(set().union(*[spaces[a.k] for a in args if isinstance(a, Jet)])))
        spaces[out.k] = sp if keep is None or len(sp) in keep else full
    return spaces


def _embedding(src: Space, dst: Space, K: int) -> Tuple[int, ...]:
    """For each coefficient of a polynomial in the variables ``src``, its index among those in ``dst``."""
    pos = [dst.index(v) for v in src]
    index = monomial_index(len(dst), K)
    out = []
    for m in monomials(len(src), K):
        e = [0] * len(dst)
        for p, c in zip(pos, m):
            e[p] = c
        out.append(index[tuple(e)])
    return tuple(out)


def _split(code: List[tuple], results: List[Jet], D: int, K: int, full: bool = True
          ) -> Tuple[List[tuple], Dict[int, Space], List[Jet]]:
    """``(code, spaces, results)``: the instructions with ``embed`` ones inserted where an input's space is smaller
    than the instruction's, the space of every jet, and the results (embedded in the full space if ``full``)."""
    sizes = Counter(len(sp) for sp in _natural(code, D).values())
    keep = {D} | {s for s, _ in sizes.most_common() if s < D}
    keep = {D} | set(sorted(keep - {D}, key=lambda s: -sizes[s])[:MAX_SIZES if D >= MIN_D else 0])
    spaces = _natural(code, D, keep)
    fresh = itertools.count(1 + max([ins[1].k for ins in code if isinstance(ins[1], Jet)] + [r.k for r in results]))
    memo: Dict[Tuple[int, Space], Jet] = {}
    out_code: List[tuple] = []

    def to(a, sp: Space):
        if not isinstance(a, Jet) or spaces[a.k] == sp:
            return a
        key = (a.k, sp)
        if key not in memo:
            memo[key] = Jet(next(fresh))
            spaces[memo[key].k] = sp
            out_code.append(("embed", memo[key], a, _embedding(spaces[a.k], sp, K)))
        return memo[key]

    for ins in code:
        op, out, args = ins[0], ins[1], ins[2:]
        if op == "seed":
            args = (args[0], spaces[out.k].index(args[0]))  # the variable and its direction in the space
        elif isinstance(out, Jet) and op != "gather":
            args = tuple(to(a, spaces[out.k]) for a in args)
        out_code.append((op, out, *args))
    return out_code, spaces, [to(r, tuple(range(D))) if full else r for r in results]


def _slots(code: List[tuple], roots, spaces) -> Tuple[Dict[int, Tuple[int, int]], Dict[int, int]]:
    """``({jet: (size, slot)}, {size: slots})``: one pool of slots per space size (a jet in few variables takes a
    small slot); a slot is reused once the last instruction reading its jet has run. ``roots``: ``{jet:
    position}`` of reads after the code (a result) or right after an instruction (a term added into the output)."""
    last: Dict[int, int] = {}
    for k, ins in enumerate(code):
        for a in ins[2:]:
            if isinstance(a, Jet):
                last[a.k] = k
    for r, at in roots.items():
        last[r] = max(last.get(r, at), at)
    slot: Dict[int, Tuple[int, int]] = {}
    free: Dict[int, List[int]] = {}
    count: Dict[int, int] = {}
    for k, ins in enumerate(code):
        out = ins[1]
        if isinstance(out, Jet):
            d = len(spaces[out.k])
            if free.get(d):
                slot[out.k] = (d, free[d].pop())
            else:
                slot[out.k] = (d, count.get(d, 0))
                count[d] = count.get(d, 0) + 1
            if last.get(out.k, k) <= k:  # read by nothing later (a term added at once): its slot is free again
                free.setdefault(d, []).append(slot[out.k][1])
        for a in {a.k for a in ins[2:] if isinstance(a, Jet)}:
            if last.get(a) == k:
                free.setdefault(slot[a][0], []).append(slot[a][1])
    return slot, count


def _hessian(d: int, K: int) -> List[Tuple[int, int, int, float]]:
    r"""``[(i, j, k, f)]`` over the ``d x d`` entries, row-major: :math:`\partial_i\partial_j f = f\,c_k`, ``c_k`` the
    coefficient of the monomial :math:`x_i x_j` among those in ``d`` variables to degree ``K``, :math:`f = 1 + \delta_{ij}`."""
    index = monomial_index(d, K)
    return [(i, j, index[tuple((m == i) + (m == j) for m in range(d))], 1.0 + (i == j)) for i in range(d) for j in range(d)]


def _derivs(D: int, K: int, T: str) -> List[str]:
    r"""C lines writing ``g`` and ``H`` from the Taylor coefficients ``T`` (:func:`_hessian`). Unrolled, the index
    table folds into constant offsets, so that a small program's jets can stay in registers."""
    hess = _hessian(D, K)
    return [f"    static const int HI[] = {{{', '.join(str(k) for _, _, k, _ in hess)}}};",
            f"    static const double HF[] = {{{', '.join(repr(f) for _, _, _, f in hess)}}};",
            f"    BEA_UNROLL for (int i = 0; i < {D}; i++) g[i] = {T}[1 + i];",
            f"    BEA_UNROLL for (int i = 0; i < {D * D}; i++) H[i] = HF[i] * {T}[HI[i]];"]


#: a term in at most this many variables is added into g and H by straight-line statements, a larger one by a loop
SCATTER_UNROLL = 8


def _scatter(D: int, K: int, T: str, c: float, sp) -> str:
    r"""C adding ``c`` times the gradient and Hessian of the jet ``T`` in the variables ``sp`` into ``g`` and
    ``H`` (the sum of a Lagrangian's terms formed at the output: each term keeps its small space)."""
    d = len(sp)
    gs = [(sp[i], 1 + i, c) for i in range(d)]
    hs = [(sp[i] * D + sp[j], k, c * f) for i, j, k, f in _hessian(d, K)]
    if d <= SCATTER_UNROLL:
        return " ".join([f"g[{o}] += {_number(f)} * {T}[{t}];" for o, t, f in gs]
                        + [f"H[{o}] += {_number(f)} * {T}[{t}];" for o, t, f in hs])
    tables = {"GO": [o for o, _, _ in gs], "HO": [o for o, _, _ in hs], "HT": [t for _, t, _ in hs]}
    decl = " ".join(f"static const int {k}[] = {{{', '.join(map(str, v))}}};" for k, v in tables.items())
    hf = ", ".join(_number(f) for _, _, f in hs)
    return (f"{{ {decl} static const double HF[] = {{{hf}}}; for (int i = 0; i < {d}; i++) g[GO[i]] += "
            f"{_number(c)} * {T}[1 + i]; for (int i = 0; i < {d * d}; i++) H[HO[i]] += HF[i] * {T}[HT[i]]; }}")


def derivs_of_taylor(D: int, K: int) -> str:
    """C of ``lag_derivs(x, P, g, H)`` reading the gradient and Hessian off ``lag_taylor`` (degree ``K >= 2``)."""
    return "\n".join([*UNROLL, "static void lag_derivs(const double *x, const double *P, double *g, double *H) {",
                      f"    double T[{size(D, K)}];", "    lag_taylor(x, P, T);", *_derivs(D, K, "T"), "}", ""])


def _layout(prog: Program, result, taylor: bool):
    """``(code, spaces, slots, counts, result, terms)``: the live instructions in their spaces and slots; ``terms``
    ``{position: [(c, jet)]}``, the terms of a sum to add into the output after the instruction at ``position``."""
    guards = [g for g, _ in prog.guards]
    if isinstance(result, list):
        if taylor:
            raise NotLowerable("internal: a sum of terms is added into derivatives only")
        pairs = [(float(c), j) for c, j in result if isinstance(j, Jet)]  # a constant term has no derivative
        code = _live(prog, [j for _, j in pairs] + guards)
        code, spaces, _ = _split(code, [j for _, j in pairs], prog.D, prog.K, full=False)
        where = {ins[1].k: k for k, ins in enumerate(code) if isinstance(ins[1], Jet)}
        terms: Dict[int, List[tuple]] = {}
        for c, j in pairs:
            terms.setdefault(where[j.k], []).append((c, j))
        roots = {j.k: where[j.k] for _, j in pairs}
        result = None
    else:
        code = _live(prog, [result] + guards)
        code, spaces, (result,) = _split(code, [result], prog.D, prog.K)
        terms, roots = {}, {result.k: len(code)}
    slot, counts = _slots(code, roots, spaces)
    return code, spaces, slot, counts, result, terms


def emit_c(prog: Program, result, *, taylor: bool = False, prelude: str = "",
           prefix: str = PREFIX) -> Tuple[str, int, int]:
    """``(source, number of jet operations, number of weighted terms in table form)`` of ``lag_derivs`` (or, with
    ``taylor``, ``lag_taylor``) of the jet ``result``, or (``lag_derivs`` only) of a sum of terms ``[(c, scalar)]``;
    ``prelude``: C lines run first (arrays that ``gather`` reads); ``prefix``: of the runtime's C names."""
    D, K = prog.D, prog.K
    code, spaces, slot, counts, result, terms = _layout(prog, result, taylor)
    work = sum(n * size(d, K) for d, n in counts.items())
    if work > MAX_WORK_DOUBLES:
        raise NotLowerable(f"the program needs {work} doubles of live jets (more than the {MAX_WORK_DOUBLES} "
                           f"allowed); the eager path runs it")

    def arg(a) -> str:
        if isinstance(a, Jet):
            d, s = slot[a.k]
            return f"(W{d} + {s * size(d, K)})"
        return a.name if isinstance(a, Val) else _number(a)

    def val(a) -> str:
        return f"{arg(a)}[0]" if isinstance(a, Jet) else arg(a)

    def pfx(d: int) -> str:  # the runtime of polynomials in d variables
        return prefix if d == D else f"{prefix}s{d}"

    sizes = sorted({len(sp) for sp in spaces.values()} | ({D} if taylor or result is not None else set()))
    sig = "double *T" if taylor else "double *restrict g, double *restrict H"  # restrict: += into g and H in registers
    per_size = Counter(len(spaces[ins[1].k]) for ins in code if isinstance(ins[1], Jet))
    lines = [header(d, K, pfx(d), **_inlining(len(code), per_size[d], size(d, K), result is None)) for d in sizes]
    lines += [f"static void lag_{'taylor' if taylor else 'derivs'}(const double *x, const double *P, {sig}) {{",
              *[f"    double W{d}[{max(1, counts.get(d, 0)) * size(d, K)}];" for d in sizes],
              "    int bad = 0;", "    (void)P; (void)bad; (void)x;", prelude]
    if result is None:
        lines += [f"    for (int i = 0; i < {D}; i++) g[i] = 0.0;", f"    for (int i = 0; i < {D * D}; i++) H[i] = 0.0;"]
    # each guard is tested right after the instruction that computes it: its jet's slot is free again at once
    defined = {id(ins[1]): k for k, ins in enumerate(code)}
    tests: Dict[int, List[str]] = {}
    for g, expected in prog.guards:
        test = (f"!({val(g)} != 0.0)" if expected is None else f"!isnan({val(g)})" if math.isnan(expected)
                else f"{val(g)} != {_number(expected)}")  # None: the scalar must be nonzero (a divisor of 0 / j)
        tests.setdefault(defined.get(id(g), -1), []).append(f"    if ({test}) bad = 1;")
    lines += tests.get(-1, [])
    ops = tables = 0
    for k, ins in enumerate(code):
        p = pfx(len(spaces[ins[1].k])) if isinstance(ins[1], Jet) else prefix
        lines.append("    " + _statement(ins, arg, val, p, slot))
        ops += isinstance(ins[1], Jet)
        tables += (len(ins) - 3) // 2 if "_lin_p" in lines[-1] else 0
        lines += ["    " + _scatter(D, K, arg(j), c, spaces[j.k]) for c, j in terms.get(k, [])] + tests.get(k, [])
    if taylor:  # a failed guard: every coefficient NaN, since readers use any of them (the gradient T[1..D])
        lines += [f"    for (int k = 0; k < {size(D, K)}; k++) T[k] = bad ? NAN : {arg(result)}[k];"]
    else:
        lines += (_derivs(D, K, arg(result)) if result is not None else []) + [
            f"    if (bad) {{ for (int i = 0; i < {D}; i++) g[i] = NAN; for (int i = 0; i < {D * D}; i++) H[i] = NAN; }}"]
    return "\n".join(lines + ["}", ""]), ops, tables


def _inlining(instructions: int, of_size: int, S: int, terms: bool) -> dict:
    """How the runtime of polynomials of ``S`` coefficients, used by ``of_size`` of the ``instructions``, is compiled:
    in a sum of terms always inlined when ``of_size * S <= INLINE_BUDGET``, else calls in a program of more than
    :data:`INLINE_MAX` instructions (measurements: docs/theory/codegen.md)."""
    if terms and of_size * S <= INLINE_BUDGET:
        return {"inline": True}
    return {"noinline": instructions > INLINE_MAX}


#: the C of each instruction but ``lin`` and ``val``: ``{o}`` the output's array, ``{p}``/``{P}`` the runtime's prefix,
#: ``{jN}`` argument N as a jet's array, ``{vN}`` as a value, ``{rN}`` as is, ``{tN}`` a table, ``{nN}`` its length,
#: ``{cN}`` a jet or a constant as an array, ``{fN}`` a function's number (``_Fields``)
_C = {"seed": "{p}_seed(x[{r0}], {r1}, {o});",
      "embed": "{{ static const int M[] = {{{t1}}}; {p}_embed({j0}, M, {n1}, {o}); }}",
      "gather": "{{ static const int I[] = {{{t1}}}; static const double F[] = {{{t2}}}; {p}_gather({r0}, I, F, {o}); }}",
      **{op: f"{{p}}_{op}({{j0}}, {{j1}}, {{o}});" for op in ("add", "sub", "mul", "div")},
      "sel": "{{ double ta[{P}_S], tb[{P}_S]; const double *pa = {c1}, *pb = {c2}; {p}_sel({v0}, pa, pb, {o}); }}",
      "fun": "{{ double f[{P}_K + 1]; {p}_coef({f1}, {v0}, {v2}, f); {p}_fun({j0}, f, {o}); }}"}


class _Fields(dict):
    """The fields of an instruction's format in :data:`_C`, each printed when the format asks for it."""

    def __init__(self, a: tuple, arg, val, p: str, **known):
        super().__init__(p=p, P=p.upper(), **known)
        self.a, self.arg, self.val = a, arg, val

    def __missing__(self, key: str) -> str:
        kind, x = key[0], self.a[int(key[1:])]
        if kind == "c":  # a constant branch of sel: in a temporary array ta or tb
            tmp = "t" + "_ab"[int(key[1:])]
            return self.arg(x) if isinstance(x, Jet) else f"({self['p']}_const({self.val(x)}, {tmp}), {tmp})"
        if kind == "t":
            return ", ".join(_number(y) if isinstance(y, float) else str(y) for y in x)
        if kind == "f" and x not in _FN:
            raise InternalError(f"the function {x} has no number in the runtime (FUNCTIONS)")
        return {"j": self.arg, "v": self.val, "r": str, "n": len, "f": _FN.__getitem__}[kind](x)


def _statement(ins: tuple, arg, val, p: str, slot) -> str:
    op, out, a = ins[0], ins[1], ins[2:]
    if op == "lin":
        const = "" if a[0] == 0.0 else f" {arg(out)}[0] += {val(a[0])};"
        return _lin(a[1:], arg, val, p, slot, out) + const
    if op == "val":
        return f"const double {out.name} = {a[0].format(*[val(x) for x in a[1:]])};"
    if op not in _C:
        raise InternalError(f"the instruction {op} has no C form in the emitter (_C)")
    return _C[op].format_map(_Fields(a, arg, val, p, o=arg(out)))


def _lin(a: tuple, arg, val, p: str, slot, out) -> str:
    """``o = sum_t a[2t] a[2t+1]`` (coefficient, jet): a table and a loop for many run-time coefficients ``P[i]``
    (gcc's time: docs/theory/codegen.md), else one call per term (a coefficient 1.0 a copy)."""
    if len(a) >= 16 and all(isinstance(c, Val) and c.name.startswith("P[") for c in a[0::2]):
        d = slot[out.k][0]
        table = ", ".join(f"{slot[j.k][1]} * {p.upper()}_S, {c.name[2:-1]}" for c, j in zip(a[0::2], a[1::2]))
        return f"{{ static const int T[] = {{{table}}}; {p}_lin_p(T, {len(a) // 2}, P, W{d}, {arg(out)}); }}"
    first = f"{p}_copy({arg(a[1])}, {arg(out)});" if a[0] == 1.0 else f"{p}_scale({arg(a[1])}, {val(a[0])}, {arg(out)});"
    return " ".join([first] + [f"{p}_axpy({val(a[k])}, {arg(a[k + 1])}, {arg(out)});" for k in range(2, len(a), 2)])
