r"""A sum over run-time atoms: the IR construct of kernel expansions :math:`f(x) = \sum_b \sum_{k} \phi_b(x; a_{bk})`.

A front-end (a GP posterior mean, :mod:`learners.shadow.compiled_mean`) writes the contribution of *one* atom
of each block ``b`` as a straight-line program of :mod:`integrators.codegen.ir` (a :class:`Block`: ``D``
variables, degree ``K``), whose run-time numbers are the atom's parameters :func:`atom` (``A[j]``, the ``j``-th
number of its row) and the parameters all atoms share, :func:`shared` (``G[j]``). The atoms are data, not code:
one C function serves every fitted model of the same shape. ``P`` is laid out as

    ``[n_0, .., n_{B-1}`` (atoms per block) ``, G (n_shared), block 0's rows (n_0 x width_0), block 1's rows, ..]``.

:func:`emit_sum` prints ``void <name>(const double *X, long N, const double *P, double *T)``: for each of the ``N``
states ``X`` (row-major ``N x D``, ``N`` a multiple of ``lanes``) the Taylor coefficients :math:`\partial^\beta
f/\beta!`, :math:`|\beta| \le K`, in :func:`~integrators.codegen.runtime.monomials` order.

Every operation is the runtime's rule (:mod:`integrators.codegen.runtime`: the truncated product, the series
:math:`\phi(a) = \sum_q f_q \delta^q` with the runtime's coefficients :math:`f_q`), written out over the
coefficients that can be nonzero: a jet carries its *pattern* (a seed :math:`x_i` has two coefficients, a
function of :math:`x_i` alone only the powers of :math:`x_i`), and a product sums only the pairs of nonzero
coefficients. A product of functions of disjoint variables then costs one multiplication per coefficient, and
a product with a quadratic a handful: the closed forms of a kernel's derivatives (Hermite polynomials for the
RBF) fall out of the rules instead of being derived by hand. The instructions are placed by what they read:
those of the shared numbers once, of an atom's numbers once per atom, of the state alone once per state
(hoisted out of the atom loop), and the rest per atom and state, ``lanes`` states side by side in a loop
without calls or branches, which the compiler vectorises (``exp`` is :data:`EXP_SOURCE`, inline).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, List, Tuple

from ..compiled import NotLowerable
from .emit import _live, _number
from .ir import Jet, Program, Val
from .runtime import _COEF, FUNCTIONS, monomials, size

__all__ = ["Block", "atom", "shared", "emit_sum", "EXP_SOURCE"]

#: exp without a library call, so that the lane loop vectorises: Cody--Waite reduction x = k ln2 + t,
#: |t| <= ln2/2, Taylor polynomial to t^13 (truncation < 1e-17 relative), 2^k assembled in the exponent bits;
#: 0 below -708 (where exp is subnormal). For arguments <= 709 (a Gaussian's are <= 0).
EXP_SOURCE = r"""
static inline double cg_exp(double x) {
    const double shifter = 6755399441055744.0; /* 2^52 + 2^51: adding it rounds to an integer */
    const double xc = x < -708.0 ? -708.0 : x;
    const double kd = (xc * 1.4426950408889634 + shifter) - shifter;
    const double t = (xc - kd * 6.93147180369123816490e-01) - kd * 1.90821492927058770002e-10;
    double p = 1.0 / 6227020800.0;
    p = p * t + 1.0 / 479001600.0;
    p = p * t + 1.0 / 39916800.0;
    p = p * t + 1.0 / 3628800.0;
    p = p * t + 1.0 / 362880.0;
    p = p * t + 1.0 / 40320.0;
    p = p * t + 1.0 / 5040.0;
    p = p * t + 1.0 / 720.0;
    p = p * t + 1.0 / 120.0;
    p = p * t + 1.0 / 24.0;
    p = p * t + 1.0 / 6.0;
    p = p * t + 0.5;
    p = p * t + 1.0;
    p = p * t + 1.0;
    union { double d; long long i; } u;
    u.d = kd + (shifter + 1023.0); /* low bits: k + 1023 */
    u.i <<= 52;
    return x < -708.0 ? 0.0 : p * u.d;
}
"""


def atom(j: int) -> Val:
    """The ``j``-th number of the current atom's row."""
    return Val(f"A[{int(j)}]")


def shared(j: int) -> Val:
    """The ``j``-th number shared by all atoms."""
    return Val(f"G[{int(j)}]")


@dataclass
class Block:
    """One kind of atom: ``result`` (a jet of ``prog``) is one atom's contribution; rows of ``width`` numbers."""
    prog: Program
    result: Jet
    width: int


@lru_cache(maxsize=32)
def _index(D: int, K: int) -> Dict[Tuple[int, ...], int]:
    return {m: k for k, m in enumerate(monomials(D, K))}


# placement of an instruction: once, per atom, per state (hoisted), per atom and state
GLOBAL, ATOM, STATE, INNER = 0, 1, 2, 3


class _Block:
    """The C of one block: every jet as ``{coefficient: C expression}``, every line in its section."""

    def __init__(self, blk: Block, b: int, exp: str):
        self.prog, self.b, self.exp = blk.prog, b, exp
        self.D, self.K = blk.prog.D, blk.prog.K
        self.mons = monomials(self.D, self.K)
        self.index = _index(self.D, self.K)
        self.coef: Dict[int, Dict[int, str]] = {}
        self.names: Dict[int, str] = {}
        self.place: Dict[int, int] = {}
        self.sections: Dict[int, List[str]] = {GLOBAL: [], ATOM: [], STATE: [], INNER: []}
        self.hoisted: List[str] = []  # arrays of LANES doubles, declared before the lane loops

    # ------------------------------------------------------------------ operands
    def _where(self, a) -> int:
        if isinstance(a, (Jet, Val)) and id(a) in self.place:
            return self.place[id(a)]
        if isinstance(a, Val):
            return ATOM if a.name.startswith("A[") else GLOBAL
        return GLOBAL

    def val(self, a) -> str:
        """A value operand: a number, a run-time value, or the value of a jet."""
        if isinstance(a, Jet):
            return self.coef[id(a)].get(0, "0.0")
        if isinstance(a, Val):
            return self.names.get(id(a), a.name)
        return _number(a)

    def _store(self, out, where: int, exprs: Dict[int, str]) -> None:
        """Names for the nonzero coefficients (literals stay literals)."""
        names = {}
        for c, e in exprs.items():
            if e in ("0.0", "1.0"):
                names[c] = e
                continue
            name = f"j{self.b}_{out.k}_{c}"
            if where == STATE:
                self.hoisted.append(name)
                self.sections[STATE].append(f"{name}[w] = {e};")
                name += "[w]"
            else:
                self.sections[where].append(f"const double {name} = {e};")
            names[c] = name
        self.coef[id(out)] = {c: n for c, n in names.items() if n != "0.0"}

    # ------------------------------------------------------------------ instructions
    def run(self, code: List[tuple]) -> None:
        for ins in code:
            op, out, args = ins[0], ins[1], ins[2:]
            state = op == "seed" or any(isinstance(a, Jet) for a in args) or any(self._where(a) >= STATE for a in args)
            atomic = any(self._where(a) in (ATOM, INNER) for a in args)
            where = (INNER if atomic else STATE) if state else (ATOM if atomic else GLOBAL)
            self.place[id(out)] = where
            if isinstance(out, Val):
                self._value(op, out, args, where)
            else:
                self._store(out, where, self._jet(op, out, args))

    def _value(self, op: str, out: Val, args, where: int) -> None:
        name = f"v{self.b}_{out.name}"
        ref = name + "[w]" if where == STATE else name
        if op == "val":
            line = f"{ref} = {args[0].format(*[self.val(x) for x in args[1:]])};"
        elif op == "vfun":
            line = f"{{ const double a = {self.val(args[1])}; {ref} = {FUNCTIONS[args[0]]}; }}"
        else:
            raise NotLowerable(f"internal: unknown value instruction {op}")
        if where == STATE:
            self.hoisted.append(name)
        else:
            self.sections[where].append(f"double {name};")
        self.sections[where].append(line)
        self.names[id(out)] = ref

    def _jet(self, op: str, out: Jet, a) -> Dict[int, str]:
        J = self.coef
        if op == "seed":
            return {0: f"x[{a[0]}]", 1 + a[0]: "1.0"}
        if op in ("addc", "rsubc"):
            x, c = J[id(a[0])], self.val(a[1])
            o = {k: (e if op == "addc" else f"(-{e})") for k, e in x.items() if k}
            o[0] = (f"{x[0]} + {c}" if op == "addc" else f"{c} - {x[0]}") if 0 in x else c
            return dict(sorted(o.items()))
        if op in ("scale", "divc"):
            x, c = J[id(a[0])], self.val(a[1])
            return {k: (f"{e} / {c}" if op == "divc" else c if e == "1.0" else f"{c} * {e}") for k, e in x.items()}
        if op in ("add", "sub"):
            x, y = J[id(a[0])], J[id(a[1])]
            sign = "+" if op == "add" else "-"
            o = {k: (f"{x[k]} {sign} {y[k]}" if k in y else x[k]) for k in x}
            o.update({k: (e if op == "add" else f"(-{e})") for k, e in y.items() if k not in x})
            return dict(sorted(o.items()))
        if op == "mul":
            return self._mul(J[id(a[0])], J[id(a[1])])
        if op == "lin":
            terms: Dict[int, List[str]] = {}
            for c, j in zip(a[0::2], a[1::2]):
                for k, e in J[id(j)].items():
                    terms.setdefault(k, []).append(f"{self.val(c)} * {e}")
            return {k: " + ".join(t) for k, t in sorted(terms.items())}
        if op == "fun":
            return self._fun(J[id(a[0])], a[1], out)
        raise NotLowerable(f"the instruction {op} has no form in a sum over atoms")

    def _mul(self, x: Dict[int, str], y: Dict[int, str]) -> Dict[int, str]:
        """The runtime's truncated product (pairs in its order), over the nonzero coefficients only."""
        terms: Dict[int, List[str]] = {}
        for i, ei in x.items():
            for j, ej in y.items():
                m = tuple(p + q for p, q in zip(self.mons[i], self.mons[j]))
                if sum(m) <= self.K:  # (a factor 1.0 dropped: the same number)
                    terms.setdefault(self.index[m], []).append(ej if ei == "1.0" else ei if ej == "1.0" else f"{ei} * {ej}")
        return {k: " + ".join(t) for k, t in sorted(terms.items())}

    def _fun(self, x: Dict[int, str], name: str, out: Jet) -> Dict[int, str]:
        r""":math:`\phi(a) = f_0 + \sum_q f_q \delta^q` (the runtime's ``fun``), its ``f_q`` by the runtime's rule."""
        where = self.place[id(out)]
        if where == STATE:
            raise NotLowerable("a function of the state alone has no form inside a sum over atoms (compute it outside)")
        f = [f"f{self.b}_{out.k}_{q}" for q in range(self.K + 1)]
        a0 = x.get(0, "0.0")
        if name == "exp":  # the runtime's rule f_q = f_{q-1} / q, written out, as products with 1/q (no division)
            lines = [f"const double {f[0]} = {self.exp}({a0});"]
            lines += [f"const double {f[q]} = {f[q - 1]} * {1.0 / q!r};" if q > 1 else f"const double {f[1]} = {f[0]};"
                      for q in range(1, self.K + 1)]
        elif "ode(" not in _COEF[name]:
            lines = [f"double {', '.join(f)};", f"{{ const int K = {self.K}; double f[K + 1], u[K + 1], w[K + 1]; int k;",
                     "  const double a = " + a0 + ", e = 0.0; (void)e; (void)u; (void)w;",
                     "  for (k = 0; k <= K; k++) f[k] = u[k] = w[k] = 0.0;",
                     f"  f[0] = {FUNCTIONS[name]}; {_COEF[name]}",
                     "  " + " ".join(f"{f[q]} = f[{q}];" for q in range(self.K + 1)) + " }"]
        else:
            raise NotLowerable(f"the function {name} has no form in a sum over atoms")
        self.sections[where].extend(lines)
        delta = {k: e for k, e in x.items() if k}
        groups: Dict[int, Dict[int, str]] = {}
        for k, e in delta.items():
            support = [i for i, p in enumerate(self.mons[k]) if p]
            groups.setdefault(support[0] if len(support) == 1 else -1, {})[k] = e
        if name != "exp" or -1 in groups or len(groups) < 2:
            return self._series(delta, f, f"p{self.b}_{out.k}", where)
        # exp of a sum of functions of one variable each: exp(a_0) times the product of their exps (each a series in
        # one variable), one multiplication per coefficient and factor instead of the powers of the sum; exp(a_0)
        # last, so that the rest does not wait for it
        unit = ["1.0", "1.0"] + [repr(1.0 / math.factorial(q)) for q in range(2, self.K + 1)]
        prod: Dict[int, str] = {0: "1.0"}
        for i, part in sorted(groups.items()):
            tag = f"p{self.b}_{out.k}_v{i}"
            factor = self._named(f"{tag}_s", self._series(part, unit, tag, where), where)
            prod = self._named(f"{tag}_x", self._mul(prod, factor), where)
        return {k: f[0] if e == "1.0" else f"{f[0]} * {e}" for k, e in prod.items()}

    def _named(self, tag: str, exprs: Dict[int, str], where: int) -> Dict[int, str]:
        """Each expression a named constant (literals stay literals)."""
        out = {}
        for k, e in exprs.items():
            if e in ("0.0", "1.0"):
                out[k] = e
            else:
                out[k] = f"{tag}_{k}"
                self.sections[where].append(f"const double {out[k]} = {e};")
        return out

    def _series(self, delta: Dict[int, str], f: List[str], tag: str, where: int) -> Dict[int, str]:
        r""":math:`f_0 + \sum_{q \le K} f_q \delta^q` (``f``: C names or literals; ``delta`` without a constant term)."""
        def term(c: str, e: str) -> str:
            return e if c == "1.0" else f"{c} * {e}"
        powers, terms = [delta], {k: [term(f[1], e)] for k, e in delta.items()}
        for q in range(2, self.K + 1):
            names = self._named(f"{tag}_{q}", self._mul(powers[-1], delta), where)
            for k, e in names.items():
                terms.setdefault(k, []).append(term(f[q], e))
            powers.append(names)
        o = {k: " + ".join(t) for k, t in terms.items()}
        o[0] = f[0]
        return dict(sorted(o.items()))


def emit_sum(blocks: List[Block], n_shared: int, *, name: str = "atom_sum", lanes: int = 8, exp: str = "cg_exp") -> str:
    """C of ``void <name>(const double *X, long N, const double *P, double *T)`` (module docstring); ``lanes``: states
    side by side; ``exp``: the C function of ``exp`` (``cg_exp`` of :data:`EXP_SOURCE`, which the caller includes and
    which vectorises, or ``exp`` of the C library, faster one state at a time)."""
    D, K = blocks[0].prog.D, blocks[0].prog.K
    if any((b.prog.D, b.prog.K) != (D, K) for b in blocks):
        raise NotLowerable("internal: the blocks of one sum must share D and K")
    M, nb = size(D, K), len(blocks)
    parts = []
    for b, blk in enumerate(blocks):
        part = _Block(blk, b, exp)
        part.run(_live(blk.prog, [blk.result]))
        parts.append(part)
    lines = [f"void {name}(const double *X, long N, const double *P, double *T) {{",
             f"    const double *G = P + {nb}; (void)G;"]
    lines += ["    " + s for p in parts for s in p.sections[GLOBAL]]
    lines += [f"    for (long b0 = 0; b0 < N; b0 += {lanes}) {{", f"        double acc[{M}][{lanes}];"]
    lines += [f"        double {h}[{lanes}];" for p in parts for h in p.hoisted]
    lines += [f"        for (int w = 0; w < {lanes}; w++) {{", f"            const double *x = X + (b0 + w) * {D}; (void)x;"]
    lines += ["            " + s for p in parts for s in p.sections[STATE]]
    lines += [f"            for (int c = 0; c < {M}; c++) acc[c][w] = 0.0;", "        }",
              f"        const double *A = P + {nb + n_shared};"]
    for b, (p, blk) in enumerate(zip(parts, blocks)):
        lines += [f"        for (long k = 0; k < (long)P[{b}]; k++, A += {blk.width}) {{"]
        lines += ["            " + s for s in p.sections[ATOM]]
        lines += [f"            for (int w = 0; w < {lanes}; w++) {{"]
        lines += ["                " + s for s in p.sections[INNER]]
        lines += [f"                acc[{c}][w] += {e};" for c, e in p.coef[id(blk.result)].items()]
        lines += ["            }", "        }"]
    lines += [f"        for (int w = 0; w < {lanes}; w++)",
              f"            for (int c = 0; c < {M}; c++) T[(b0 + w) * {M} + c] = acc[c][w];", "    }", "}", ""]
    return "\n".join(lines)


def factorials(D: int, K: int) -> List[float]:
    r""":math:`\beta!` for each coefficient: a Taylor coefficient times it is the partial derivative :math:`\partial^\beta f`."""
    return [float(math.prod(math.factorial(e) for e in m)) for m in monomials(D, K)]
