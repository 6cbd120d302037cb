"""The code generator of the compiled path: one intermediate representation (:mod:`.ir`), one C runtime of Taylor
arithmetic (:mod:`.runtime`), one emitter (:mod:`.emit`), sums over atoms (:mod:`.reduce`); docs/theory/codegen.md.
"""

from .emit import emit_c
from .from_sympy import lower_sympy, lower_terms
from .ir import OPAQUE, Jet, Program, Val
from .runtime import FUNCTIONS, header, monomials, size

__all__ = ["Program", "Jet", "Val", "OPAQUE", "emit_c", "lower_sympy", "lower_terms", "header", "monomials", "size", "FUNCTIONS"]
