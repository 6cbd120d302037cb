r"""Each instruction in the smallest space of variables: a jet that depends on the variables :math:`V` is carried in
:math:`\binom{|V|+K}{K}` coefficients instead of :math:`\binom{D+K}{K}`; an instruction runs in the union of its
inputs' spaces, a smaller input first embedded (the same monomials, zeros elsewhere: no number changes). At most
:data:`MAX_SIZES` sizes below ``D``, none below :data:`MIN_D` variables (docs/theory/codegen.md, "Smaller spaces").
"""
from __future__ import annotations

import itertools
from collections import Counter
from typing import Dict, List, Tuple

from .ir import Jet
from .runtime import monomial_index, monomials

__all__ = ["split", "MAX_SIZES"]

#: most space sizes below D one program uses
MAX_SIZES = 3
#: programs in fewer variables stay in the full space (measured: docs/theory/codegen.md)
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


def embedding(src: Space, dst: Space, K: int) -> Tuple[int, ...]:
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


def split(code: List[tuple], results: List[Jet], D: int, K: int, full: bool = True
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
            out_code.append(("embed", memo[key], a, embedding(spaces[a.k], sp, K)))
        return memo[key]

    for ins in code:
        op, out, args = ins[0], ins[1], ins[2:]
        if op == "seed":
            args = (args[0], spaces[out.k].index(args[0]))  # the variable and its direction in the space
        elif isinstance(out, Jet) and op != "gather":
            args = tuple(to(a, spaces[out.k]) for a in args)
        out_code.append((op, out, *args))
    return out_code, spaces, [to(r, tuple(range(D))) if full else r for r in results]
