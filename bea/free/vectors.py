r"""Argument vectors of a discrete Lagrangian, for every dimension at once.

A scheme evaluates ``L`` at points such as :math:`\tfrac{a+b}{2}` and :math:`\tfrac{b-a}{h}` with
:math:`a = q(t - h/2)`, :math:`b = q(t + h/2)`. Expanded in ``h`` these are linear combinations
of the vectors :math:`q, v, q^{(2)}, q^{(3)}, \dots` (and the variation :math:`\varepsilon`)
with rational coefficients. :class:`VecSeries` is that object: per power of ``h`` a ``dict``
from a leaf code (see :mod:`bea.free.trees`; ``0`` is the base point :math:`q`) to a rational.
It supports exactly the arithmetic a scheme may use -- ``+``, ``-``, multiplication and
division by exact numbers and by constant series in ``h`` -- so a scheme written once for
tensors runs unchanged on it.
"""

from __future__ import annotations

from typing import Dict, List

from ..errors import InconsistentSchemeError, SeriesError, UnsupportedSchemeError
from ..field_element import coefficient
from ..hseries import EXACT, ONE, HSeries, Q

POSITION = 0

Coeffs = List[Dict[int, object]]


def _clean(c: Coeffs) -> Coeffs:
    c = [{k: x for k, x in d.items() if x} for d in c]
    while c and not c[-1]:
        c.pop()
    return c


class VecSeries:
    r"""Truncated series :math:`\sum_k h^k \sum_\ell c_{k\ell}\, e_\ell` of vectors, known to ``order``."""

    __slots__ = ("c", "order")

    def __init__(self, c: Coeffs, order: int):
        self.c = _clean(list(c[: order + 1]))
        self.order = order

    @classmethod
    def taylor(cls, shift, order: int, eps_power: int = -1) -> "VecSeries":
        r""":math:`q(t + c h) = \sum_{k \le order} (c h)^k q^{(k)}/k!`, plus :math:`h^{p}\varepsilon`
        when ``eps_power = p >= 0`` (the variation of the discrete action)."""
        from .trees import OPEN

        cq = Q(shift)
        out: Coeffs = []
        fact = Q(1)
        for k in range(order + 1):
            if k:
                fact *= k
            out.append({k: cq**k / fact})
        if eps_power >= 0:
            out[eps_power] = dict(out[eps_power])
            out[eps_power][OPEN] = Q(1)
        return cls(out, order)

    def __getitem__(self, k: int) -> Dict[int, object]:
        if k > self.order:
            raise SeriesError(f"vector series known only to h^{self.order}")
        return self.c[k] if k < len(self.c) else {}

    def _same(self, o: "VecSeries", sign) -> "VecSeries":
        order = min(self.order, o.order)
        n = min(order + 1, max(len(self.c), len(o.c)))
        out = []
        for k in range(n):
            d = dict(self.c[k]) if k < len(self.c) else {}
            for leaf, x in (o.c[k].items() if k < len(o.c) else ()):
                d[leaf] = d.get(leaf, 0) + sign * x
            out.append(d)
        return VecSeries(out, order)

    def __add__(self, o):
        if isinstance(o, VecSeries):
            return self._same(o, 1)
        return NotImplemented

    def __sub__(self, o):
        if isinstance(o, VecSeries):
            return self._same(o, -1)
        return NotImplemented

    def __neg__(self):
        return VecSeries([{k: -x for k, x in d.items()} for d in self.c], self.order)

    def _scale_series(self, s: HSeries) -> "VecSeries":
        for p in s.c:
            if any(m != ONE for m in p):
                raise UnsupportedSchemeError("a position can only be multiplied by numbers and powers of h, not by L")
        vs = s.valuation()
        if vs == EXACT:
            return VecSeries([], EXACT)
        vself = next((k for k, d in enumerate(self.c) if d), EXACT)
        order = min(self.order + vs, s.order + (vself if vself < EXACT else 0), EXACT)
        out: Coeffs = [{} for _ in range(min(order + 1, len(self.c) + len(s.c)))]
        for i, p in enumerate(s.c):
            a = p.get(ONE)
            if not a:
                continue
            for j, d in enumerate(self.c):
                if i + j >= len(out):
                    break
                for leaf, x in d.items():
                    out[i + j][leaf] = out[i + j].get(leaf, 0) + a * x
        return VecSeries(out, order)

    def __mul__(self, o):
        if isinstance(o, HSeries):
            return self._scale_series(o)
        try:
            r = coefficient(o)
        except TypeError:
            return NotImplemented
        return VecSeries([{k: r * x for k, x in d.items()} for d in self.c], self.order)

    __rmul__ = __mul__

    def __truediv__(self, o):
        if isinstance(o, HSeries):
            k = o.valuation()
            if k == EXACT:
                raise ZeroDivisionError("division of a position by a zero series")
            lead = o.c[k]
            if list(lead) != [ONE] or len(o.c) > k + 1:
                raise SeriesError("a position can only be divided by a number times a power of h")
            if any(self.c[j] for j in range(min(k, len(self.c)))):
                raise InconsistentSchemeError(
                    f"cannot divide by h^{k}: the argument has a term of lower order in h "
                    "(is the discrete Lagrangian consistent?)"
                )
            inv = 1 / lead[ONE]
            order = min(self.order - k, o.order - 2 * k + next((j for j, d in enumerate(self.c) if d), 0))
            return VecSeries([{l: inv * x for l, x in d.items()} for d in self.c[k:]], order)
        try:
            r = coefficient(o)
        except TypeError:
            return NotImplemented
        if not r:
            raise ZeroDivisionError("division of a position by zero")
        return self * (1 / r)

    def __repr__(self) -> str:
        return f"VecSeries(order={self.order}, {self.c})"
