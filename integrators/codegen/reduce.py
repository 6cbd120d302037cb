r"""A sum over run-time atoms: the IR construct of kernel expansions :math:`f(x) = \sum_b \sum_k \phi_b(x; a_{bk})`,
one program per kind ``b`` (a :class:`Block`) with the atom's numbers :func:`atom` (``A[j]``) and shared ones
:func:`shared` (``G[j]``); ``P = [n_0, .., n_{B-1}, G, rows of kind 0, ..]``. Each runtime rule is written out over
the coefficients that can be nonzero, ``exp`` of a sum of one-variable functions as a product of one-variable series
(:meth:`_Block._exp`), and each line runs once, per atom, or per atom and state (docs/theory/codegen.md).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Dict, List

from bea.errors import InternalError

from ..compiled import NotLowerable
from .emit import _live, _number
from .ir import Jet, Program, Val
from .runtime import monomials, size

__all__ = ["Block", "atom", "shared", "emit_sum", "EXP_SOURCE"]

#: exp without a library call, so that the lane loop vectorises: x = k ln2 + t, |t| <= ln2/2, sum_{j <= 13} t^j/j!
#: times 2^k (range and accuracy: docs/theory/codegen.md)
EXP_SOURCE = "\n".join([
    "#include <math.h>", "static inline double cg_exp(double x) {",
    "    const double shifter = 6755399441055744.0; /* 2^52 + 2^51: adding it rounds to an integer */",
    "    const double xc = x < -708.0 ? -708.0 : (x > 709.0 ? 709.0 : x), kd = (xc * 1.4426950408889634 + shifter) - shifter;",
    "    const double t = (xc - kd * 6.93147180369123816490e-01) - kd * 1.90821492927058770002e-10;",
    "    double p = 1.0 / 6227020800.0;"] + [f"    p = p * t + {1.0 / math.factorial(k)!r};" for k in range(12, -1, -1)] + [
    "    union { double d; unsigned long long i; } u;", "    u.d = kd + (shifter + 1023.0); /* low bits: k + 1023 */",
    "    u.i <<= 52;", "    return x < -708.0 ? 0.0 : (x > 709.0 ? INFINITY : p * u.d);", "}", ""])


def atom(j: int) -> Val:
    """The ``j``-th number of the current atom's row."""
    return Val(f"A[{int(j)}]")


def shared(j: int) -> Val:
    """The ``j``-th number shared by all atoms."""
    return Val(f"G[{int(j)}]")


@dataclass
class Block:
    """One kind of atom: ``result`` (a jet of ``prog``) is one atom's term; its rows have ``width`` numbers."""
    prog: Program
    result: Jet
    width: int


ONCE, ATOM, INNER = 0, 1, 2  # where an instruction runs: once, per atom, per atom and state
#: from TABLE_COLUMNS coefficients and order TABLE_ORDER, a product of TABLE_TERMS terms or more is a loop over an index
#: table, not code (the lane loop no longer vectorised, and compiled slowly: docs/theory/codegen.md, "Index tables")
TABLE_COLUMNS, TABLE_ORDER, TABLE_TERMS = 700, 4, 256
_ROW = re.compile(r"(s\d+_\d+)\[(\d+)\]\[w\]")  # a coefficient in a row of an array (see _Block._rows)


class _Block:
    """The C of one block: every jet as ``{coefficient: C name or literal}``, every line in its section."""

    def __init__(self, blk: Block, b: int, exp: str, lanes: int):
        self.b, self.exp, self.K, self.lanes, self.tables = b, exp, blk.prog.K, lanes, []
        self.mons = monomials(blk.prog.D, self.K)
        self.index = {m: k for k, m in enumerate(self.mons)}
        self.coef: Dict[int, Dict[int, str]] = {}
        self.names: Dict[int, str] = {}
        self.place: Dict[int, int] = {}
        self.sections: Dict[int, List[str]] = {ONCE: [], ATOM: [], INNER: []}

    def _where(self, a) -> int:
        if isinstance(a, (Jet, Val)) and id(a) in self.place:
            return self.place[id(a)]
        return ATOM if isinstance(a, Val) and a.name.startswith("A[") else ONCE

    def val(self, a) -> str:
        """A value operand: a number, a run-time value, or the value of a jet."""
        if isinstance(a, Jet):
            return self.coef[id(a)].get(0, "0.0")
        return self.names.get(id(a), a.name) if isinstance(a, Val) else _number(a)

    def named(self, tag: str, exprs: Dict[int, str], where: int) -> Dict[int, str]:
        """Each expression a named constant (literals and rows of arrays stay as they are)."""
        return {k: e if e in ("0.0", "1.0") or _ROW.fullmatch(e) else self.let(f"{tag}_{k}", e, where) for k, e in exprs.items()}

    def let(self, name: str, e: str, where: int) -> str:
        """``name = e``; with tables (``lanes``) a value per state is a row of lanes, which outlives its lane loop."""
        row = where == INNER and self.lanes
        self.sections[ATOM] += [f"double {name}[{self.lanes}];"] * bool(row)
        self.sections[where].append(f"{name}[w] = {e};" if row else f"const double {name} = {e};")
        return f"{name}[w]" if row else name

    def run(self, code: List[tuple]) -> None:
        for ins in code:
            op, out, args = ins[0], ins[1], ins[2:]
            where = max([self._where(a) for a in args] + [INNER if isinstance(out, Jet) else ONCE])
            self.place[id(out)] = where
            if isinstance(out, Jet):
                self.coef[id(out)] = self.named(f"j{self.b}_{out.k}", self._jet(op, out, args), where)
                continue
            name, e = f"v{self.b}_{out.name}", args[0].format(*[self.val(x) for x in args[1:]])
            self.names[id(out)] = self.let(name, e, where) if self.lanes and where == INNER else name
            self.sections[where] += [f"double {name};", f"{name} = {e};"] * (self.names[id(out)] == name)

    def _jet(self, op: str, out: Jet, a) -> Dict[int, str]:
        J = self.coef
        if op == "seed":
            return {0: f"xs[{a[0]}][w]", **({1 + a[0]: "1.0"} if self.K else {})}  # at K = 0 a value only
        if op in ("add", "sub"):
            x, y = J[id(a[0])], J[id(a[1])]
            o = {k: (f"{x[k]} {'+' if op == 'add' else '-'} {y[k]}" if k in y else x[k]) for k in x}
            o.update({k: (e if op == "add" else f"(-{e})") for k, e in y.items() if k not in x})
            return dict(sorted(o.items()))
        if op == "mul":
            return self._mul(J[id(a[0])], J[id(a[1])])
        if op == "lin":  # o = c + sum_t s_t j_t
            terms: Dict[int, List[str]] = {}
            for c, j in zip(a[1::2], a[2::2]):
                for k, e in J[id(j)].items():
                    c_ = self.val(c)
                    terms.setdefault(k, []).append(c_ if e == "1.0" else e if c_ == "1.0" else f"{c_} * {e}")
            o = {k: " + ".join(t) for k, t in sorted(terms.items())}
            if a[0] != 0.0:
                o[0] = f"{o[0]} + {self.val(a[0])}" if 0 in o else self.val(a[0])
            return dict(sorted(o.items()))
        if op == "fun" and a[1] == "exp":
            return self._exp(J[id(a[0])], out)
        raise NotLowerable(f"the instruction {op} {a[1] if op == 'fun' else ''} has no form in a sum over atoms")

    def _mul(self, x: Dict[int, str], y: Dict[int, str]) -> Dict[int, str]:
        """The runtime's truncated product (pairs in its order), over the nonzero coefficients only."""
        pairs: Dict[int, List[tuple]] = {}
        for i in x:
            for j in y:
                m = tuple(p + q for p, q in zip(self.mons[i], self.mons[j]))
                if sum(m) <= self.K:
                    pairs.setdefault(self.index[m], []).append((i, j))
        if self.lanes and sum(map(len, pairs.values())) >= TABLE_TERMS:
            return self._table(x, y, pairs)
        return {k: " + ".join(y[j] if x[i] == "1.0" else x[i] if y[j] == "1.0" else f"{x[i]} * {y[j]}" for i, j in t)
                for k, t in sorted(pairs.items())}  # (a factor 1.0 dropped: the same number)

    def _rows(self, n: int, loop: str = "", table: str = "") -> str:
        """A new array ``@`` of ``n`` rows of lanes (vectors); ``loop`` runs over all lanes between two lane loops of the
        straight-line code; ``table`` is its index table (``#``) at file scope."""
        name, tab = f"s{self.b}_{len(self.tables)}", f"cg_t{self.b}_{len(self.tables)}"
        self.tables.append(table.replace("#", tab))
        self.sections[ATOM] += [f"cg_v{self.lanes} {name}[{n}];"] * (n > 0)
        if loop:
            self.sections[INNER] += ["}", loop.replace("@", name).replace("#", tab), f"for (int w = 0; w < {self.lanes}; w++) {{"]
        return name

    def _array(self, x: Dict[int, str]) -> "tuple[str, Dict[int, int]]":
        """``x`` in the rows of one array: its name and each coefficient's row (copied there unless it is already)."""
        rows = [_ROW.fullmatch(e) for e in x.values()]
        if all(rows) and len({r.group(1) for r in rows}) == 1:
            return rows[0].group(1), {k: int(r.group(2)) for k, r in zip(x, rows)}
        name = self._rows(len(x))
        self.sections[INNER] += [f"{name}[{r}][w] = {e};" for r, e in enumerate(x.values())]
        return name, {k: r for r, k in enumerate(x)}

    def _table(self, x: Dict[int, str], y: Dict[int, str], pairs) -> Dict[int, str]:
        r"""The product as loops over an index table: :math:`\sum_t X_{i_t} Y_{j_t}` in the straight-line order (the same
        bits), each group of m sums of n terms ``[m, n, for each u < n the m pairs (i, j) of term u]`` side by side."""
        (X, rx), (Y, ry) = self._array(x), self._array(y)
        keys, groups, data = sorted(pairs, key=lambda k: (len(pairs[k]), k)), {}, []
        for k in keys:
            groups.setdefault(len(pairs[k]), []).append(pairs[k])
        for n, g in groups.items():
            data += [len(g), n] + [r for u in range(n) for t in g for r in (rx[t[u][0]], ry[t[u][1]])]
        term = f"{X}[#[t]] * {Y}[#[t + 1]]; "
        out = self._rows(len(keys), f"for (int g = 0, t = 0, c0 = 0; g < {len(groups)}; g++) {{ const int m = #[t], n = "
                         f"#[t + 1]; t += 2; for (int c = c0; c < c0 + m; c++, t += 2) @[c] = {term}for (int u = 1; u < n; u++) "
                         f"for (int c = c0; c < c0 + m; c++, t += 2) @[c] += {term}c0 += m; }}",
                         f"static const unsigned short #[{len(data)}] = {{{', '.join(map(str, data))}}};")
        return {k: f"{out}[{c}][w]" for c, k in sorted(enumerate(keys), key=lambda ck: ck[1])}

    def _exp(self, x: Dict[int, str], out: Jet) -> Dict[int, str]:
        r""":math:`e^{a} = e^{a_0} \prod_v \sum_q \delta_v^q/q!`, :math:`\delta = a - a_0 = \sum_v \delta_v` grouped by the
        one variable of each coefficient (one group: the runtime's series); :math:`e^{a_0}` multiplies last."""
        groups: Dict[int, Dict[int, str]] = {}
        for k, e in x.items():
            if k:
                support = [i for i, p in enumerate(self.mons[k]) if p]
                groups.setdefault(support[0] if len(support) == 1 else -1, {})[k] = e
        if -1 in groups:
            groups = {0: {k: e for k, e in x.items() if k}}
        tag, prod = f"p{self.b}_{out.k}", {0: "1.0"}
        e0 = self.let(f"{tag}_e", f"{self.exp}({x.get(0, '0.0')})", INNER)
        for v, delta in sorted(groups.items()):
            powers, series = delta, {0: ["1.0"], **{k: [e] for k, e in delta.items()}}
            for q in range(2, self.K + 1):
                powers = self.named(f"{tag}_v{v}_{q}", self._mul(powers, delta), INNER)
                for k, e in powers.items():
                    series.setdefault(k, []).append(f"{1.0 / math.factorial(q)!r} * {e}")
            factor = self.named(f"{tag}_v{v}_s", {k: " + ".join(t) for k, t in sorted(series.items())}, INNER)
            prod = self.named(f"{tag}_v{v}_x", self._mul(prod, factor), INNER)
        if self.lanes:  # a table of one term each (a product commutes exactly)
            return self._mul(prod, {0: e0})
        return {k: e0 if e == "1.0" else f"{e0} * {e}" for k, e in prod.items()}


def emit_sum(blocks: List[Block], n_shared: int, *, name: str = "atom_sum", lanes: int = 8, exp: str = "cg_exp") -> str:
    r"""C of ``void <name>(const double *X, long N, const double *P, double *T)``: at each of the ``N`` states ``X``
    (``N x D``, ``N`` a multiple of ``lanes``) :math:`\partial^\beta f/\beta!`, :math:`|\beta| \le K`; ``exp``:
    ``cg_exp`` (:data:`EXP_SOURCE`, included by the caller: it vectorises) or the C library's (one state at a time)."""
    D, K = blocks[0].prog.D, blocks[0].prog.K
    if any((b.prog.D, b.prog.K) != (D, K) for b in blocks):
        raise InternalError("the blocks of one sum must share D and K")
    M, nb, tables = size(D, K), len(blocks), TABLE_COLUMNS <= size(D, K) < 2**16 and K >= TABLE_ORDER  # entries <= M: 16 bits
    parts = [_Block(blk, b, exp, lanes if tables else 0) for b, blk in enumerate(blocks)]
    for p, blk in zip(parts, blocks):
        if blk.prog.guards:  # a guard hands a state back to the eager path, which a sum over atoms cannot do
            raise NotLowerable("a guarded program cannot be a term of a sum over atoms")
        p.run(_live(blk.prog, [blk.result]))
    lines = [f"typedef double cg_v{lanes} __attribute__((vector_size({8 * lanes})));"] * tables
    lines += [f"void {name}(const double *X, long N, const double *P, double *T) {{", f"    const double *G = P + {nb}; (void)G;"]
    lines += ["    " + s for p in parts for s in p.sections[ONCE]]
    lines += [f"    for (long b0 = 0; b0 < N; b0 += {lanes}) {{", f"        double acc[{M}][{lanes}];",
              f"        for (int c = 0; c < {M}; c++) for (int w = 0; w < {lanes}; w++) acc[c][w] = 0.0;",
              f"        double xs[{D}][{lanes}]; /* the states by variable: the lanes of one variable side by side */",
              f"        for (int i = 0; i < {D}; i++) for (int w = 0; w < {lanes}; w++) xs[i][w] = X[(b0 + w) * {D} + i];",
              f"        const double *A = P + {nb + n_shared};"]
    for b, (p, blk) in enumerate(zip(parts, blocks)):
        res = p.coef[id(blk.result)]
        if p.lanes:  # the term's rows added to their columns by an index table
            src, rows = p._array(res)
            p._rows(0, f"for (int r = 0; r < {len(rows)}; r++) for (int w = 0; w < {lanes}; w++) acc[#[r]][w] += {src}[r][w];",
                    f"static const unsigned short #[{len(rows)}] = {{{', '.join(map(str, sorted(rows, key=rows.get)))}}};")
            res = {}
        lines += [f"        for (long k = 0; k < (long)P[{b}]; k++, A += {blk.width}) {{"]
        lines += ["            " + s for s in p.sections[ATOM]] + [f"            for (int w = 0; w < {lanes}; w++) {{"]
        lines += ["                " + s for s in p.sections[INNER]]
        lines += [f"                acc[{c}][w] += {e};" for c, e in res.items()]
        lines += ["            }", "        }"]
    lines += [f"        for (int w = 0; w < {lanes}; w++)",
              f"            for (int c = 0; c < {M}; c++) T[(b0 + w) * {M} + c] = acc[c][w];", "    }", "}", ""]
    return "\n".join([t for p in parts for t in p.tables if t] + lines)
