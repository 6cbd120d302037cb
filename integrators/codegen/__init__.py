"""The code generator of the compiled path: one intermediate representation, one C runtime, one emitter.

* :mod:`~integrators.codegen.ir`: straight-line programs over truncated Taylor values in ``D`` variables to
  degree ``K`` (the front-ends build them: :mod:`integrators.traced` from torch code,
  :mod:`integrators.series_c` from a :mod:`bea` series formula, both of whose SymPy expressions go through
  :mod:`~integrators.codegen.from_sympy`, as do SymPy Lagrangians);
* :mod:`~integrators.codegen.runtime`: the C of Taylor arithmetic, each operation written once;
* :mod:`~integrators.codegen.emit`: the program as the C function a compiled form needs;
* :mod:`~integrators.codegen.reduce`: a sum over run-time atoms of one program each (kernel expansions: the GP mean).

Compiling and loading (one ctypes path, one in-process cache) is :mod:`integrators.ccompile`.
"""

from .emit import emit_c
from .from_sympy import lower_sympy, lower_terms
from .ir import OPAQUE, Jet, Program, Val
from .runtime import FUNCTIONS, header, monomials, size

__all__ = ["Program", "Jet", "Val", "OPAQUE", "emit_c", "lower_sympy", "lower_terms", "header", "monomials", "size", "FUNCTIONS"]
