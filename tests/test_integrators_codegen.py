"""The code generator (integrators.codegen): every Taylor rule of the runtime at degree 4 against nested autograd,
the space pass (smaller polynomials for jets of fewer variables) changing no number, a traced model's Taylor form,
and the size of the code-generation source (issue 28)."""

import ctypes
from math import factorial
from pathlib import Path

import numpy as np
import pytest
import torch

import integrators.codegen.emit as emit
from integrators.ccompile import find_compiler, load_library
from integrators.codegen import FUNCTIONS, Program, emit_c, monomials

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no C compiler on this machine")

ROOT = Path(__file__).resolve().parent.parent

#: the code-generation source, in one place: generators (the tracer and its rules, the SymPy front-end, the
#: series formula, the RBF atoms), C templates and runtime, the emitter, lowering modules, and the one
#: compile/ctypes/cache path. Not counted: the model protocol's dispatch (model_protocol.py), which
#: generates nothing. The same roles held 3,842 lines before the IR (issue 28; 3,990 with model_protocol.py).
CODEGEN_FILES = (
    "integrators/ccompile.py", "integrators/_march_c.py", "integrators/compiled.py",
    "integrators/series_c.py", "integrators/traced.py", "integrators/_trace_aten.py", "integrators/_trace_linalg.py",
    "integrators/codegen/__init__.py", "integrators/codegen/ir.py", "integrators/codegen/runtime.py",
    "integrators/codegen/emit.py", "integrators/codegen/from_sympy.py",
    "integrators/codegen/reduce.py", "learners/modlanet/lowering.py", "learners/shadow/compiled_mean.py",
)
#: the count and a small margin. Every generator is a front-end of the one IR, emitter and runtime: SymPy Lagrangians
#: and series formulas (codegen/from_sympy.py), torch code (traced.py and its rules), the GP means as sums over atoms
#: (codegen/reduce.py; compiled_mean.py); learners/shadow/rbf_jet.py generates nothing and is not listed. The issue's
#: 1,800 is not met; the count's history and what was measured and kept is in benchmarks/RESULTS_speed.md.
#: 3,336 -> 3,227 (sessions 6-7, dedup) -> 3,263 (features) -> 3,146 (session 13 cgtrim: one GP-mean module, rule tables)
#: -> 2,887 (session 16 cgdocs: derivations and measurements to docs/theory/codegen.md, compiled_mean's tail to units.py)
#: -> 2,851 (session 16 cgir S2: one binary dispatch, a smaller op set) -> 2,851 (S3: spaces.py into emit.py)
#: -> 2,886 (cgir fix pass: IEEE folds of 0 / jet, nan / 0, pow; j / c refused without a normal 1/c; typed errors)
#: -> 2,845 (session 16 cgtrace: tracer rules from torch's decompositions, derivations to docs/theory/tracing.md)
#: -> 2,902 (its fix pass: in-place writes through views refused, pivot guards, wider verification, casts refused)
#: -> 2,921 (the lead's review mends: the blank line after each module docstring back, formulas stated in the code)
#: -> 2,933 (session 16 cgfix: a failed guard NaNs every output, guards tested at once, verification skips declined states)
#: -> 2,934 (the lead's last review mends, ebd2123)
#: -> 2,911 (session 17 cgslim: module-level imports, -19; the TRACEABLE tuple, ~4, moved to the uncounted elements.py;
#: learners + integrators as a whole -2; same C) -> 2,914 (its fix pass: plan keys on the class object, documented)
#: -> 2,916 (session 17 mlp7: why the chord graph's xtol has shape (1,)) -> 2,928 (the lead's review mends: a traced
#: cell's tensor attributes, also inside lists, tuples and dicts, enter plan() by identity -- were stale silently)
#: -> 2,954 (session 19 cc9: ccompile's build under the cross-process lock, digest_of, the -O1 policy of large sources;
#: compiled_mean's 4 lanes for large jets) -> 2,990 (its fix pass: the compiler's process group killed on a timeout and
#: no retry after one, +26 in ccompile; jet_build deciding lanes and level together, +10 in compiled_mean)
#: -> 3,054 (session 25 cg15: the large RBF jets' products as loops over index tables in reduce.py; the D = 8, K = 5
#: jet's compile 12-14 s -> 1.5 s of compiler CPU, the same bits: a bound raised for the issue's compile-time target)
CODEGEN_LINES = 3060


def test_code_generation_source_stays_within_its_bound():
    lines = {f: (ROOT / f).read_text().count("\n") for f in CODEGEN_FILES}
    assert sum(lines.values()) <= CODEGEN_LINES, lines
    # every module of the code generator is listed (a new one cannot escape the count)
    assert {p.relative_to(ROOT).as_posix() for p in (ROOT / "integrators/codegen").glob("*.py")} <= set(CODEGEN_FILES)


def _taylor_fns(programs):
    """For each ``(program, result)``, a callable x -> all Taylor coefficients of ``result`` (the emitted
    lag_taylor, through ctypes); one library for all of them (each program its own C prefix)."""
    parts, f64p = ["#include <math.h>", "#include <string.h>"], ctypes.POINTER(ctypes.c_double)
    for i, (prog, result) in enumerate(programs):
        source, _, _ = emit_c(prog, result, taylor=True, prefix=f"p{i}")
        parts.append(source.replace("lag_taylor(", f"lag_taylor_{i}(")
                     + f"void entry_{i}(const double *x, double *T) {{ lag_taylor_{i}(x, 0, T); }}")
    lib = load_library("\n".join(parts)).lib

    def fn(i, n):
        def run(x):
            x, out = np.ascontiguousarray(x, dtype=np.float64), np.zeros(n)
            getattr(lib, f"entry_{i}")(x.ctypes.data_as(f64p), out.ctypes.data_as(f64p))
            return out
        return run
    return [fn(i, len(monomials(prog.D, prog.K))) for i, (prog, _) in enumerate(programs)]


def _autograd_taylor(f, x, K):
    """Coefficients d^beta f(x)/beta! over monomials(len(x), K), by nested forward-mode autograd."""
    out, tensors = [], [f(x)]
    g = f
    for _ in range(K):
        g = torch.func.jacfwd(g)
        tensors.append(g(x))
    for m in monomials(len(x), K):
        idx = tuple(i for i, c in enumerate(m) for _ in range(c))
        fac = 1
        for c in m:
            fac *= factorial(c)
        out.append(float(tensors[len(idx)][idx]) / fac)
    return np.array(out)


#: a point in every function's domain (sqrt, log, ... of 0.7 + ...), and one past softplus' threshold
FUNCTION_CASES = [(name, 0.7) for name in FUNCTIONS if name not in ("pow",)] + [("softplus", 21.0), ("pow", 0.7)]
TORCH = {"rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal, "relu": torch.relu, "abs": torch.abs,
         "softplus": torch.nn.functional.softplus, "pow": lambda a: a ** 2.5}


def _function_program(name, base):
    prog = Program(2, 4)
    x0, x1 = prog.seed(0), prog.seed(1)
    a = prog.add(prog.add(prog.add(base, prog.mul(0.3, x0)), prog.mul(-0.2, x1)), prog.mul(0.1, prog.mul(x0, x1)))
    return prog, (prog.pow(a, 2.5) if name == "pow" else prog.unary(name, a))


@pytest.fixture(scope="module")
def function_rules():
    return dict(zip(FUNCTION_CASES, _taylor_fns([_function_program(*case) for case in FUNCTION_CASES])))


@pytest.mark.parametrize("name,base", FUNCTION_CASES)
def test_every_function_rule_to_degree_4_equals_autograd(name, base, function_rules):
    """phi(a) for a = base + 0.3 x0 - 0.2 x1 + 0.1 x0 x1 at x = (0.05, -0.02): all 15 coefficients of degree <= 4.
    The rules are recurrences in float64 (a few operations per coefficient): measured agreement with nested
    autograd ~1e-16 relative; 1e-12 of the largest coefficient (plus 1e-14) leaves a wide margin."""
    x = np.array([0.05, -0.02])
    got = function_rules[(name, base)](x)
    fn = TORCH.get(name) or getattr(torch, name)
    ref = _autograd_taylor(lambda y: fn(base + 0.3 * y[0] - 0.2 * y[1] + 0.1 * y[0] * y[1]),
                           torch.tensor(x, dtype=torch.float64), 4)
    assert np.abs(ref).max() > 0.01
    assert np.abs(got - ref).max() <= 1e-12 * np.abs(ref).max() + 1e-14


def test_one_binary_dispatch_folds_identities_and_lowers_constants_to_lin():
    """Program._binary: identities with literals give no instruction (x * 1, x + 0, x - 0, x / 1 are x; x * 0 and
    0 / x are 0.0, the latter with a guard that a jet x is nonzero), a jet with a literal or a run-time constant is
    one affine ``lin`` (j / c as j * (1/c)), c / j is c * reciprocal(j). The nine mixed forms summed in 2 variables
    to degree 3 equal nested autograd to 1e-13 of the largest coefficient (measured ~1e-16: a few roundings per
    coefficient, one more for j * (1/c))."""
    from integrators.codegen import Val

    prog = Program(2, 3)
    x0, x1 = prog.seed(0), prog.seed(1)
    c, n = Val("(0.7)"), len(prog.code)  # a run-time number (any C expression of values)
    assert all(r is x0 for r in (prog.mul(x0, 1.0), prog.mul(1.0, x0), prog.add(0.0, x0), prog.sub(x0, 0.0),
                                 prog.div(x0, 1.0), prog.add(x0, 0.0)))
    assert prog.mul(x0, 0.0) == 0.0 and prog.mul(0.0, c) == 0.0 and prog.div(0.0, x1) == 0.0 and len(prog.code) == n
    assert prog.guards == [(x1, None)]  # 0 / x1: 0 where x1 is nonzero, else the eager path
    forms = [prog.div(x0, 3.0), prog.div(2.0, x1), prog.div(c, x1), prog.sub(x1, c), prog.sub(c, x0),
             prog.mul(x0, c), prog.neg(x1), prog.add(x0, c), prog.div(x0, c)]
    r = forms[0]
    for f in forms[1:]:
        r = prog.add(r, f)
    assert {ins[0] for ins in prog.code} == {"seed", "lin", "fun", "add", "val"}, prog.code
    (fn,) = _taylor_fns([(prog, r)])
    x = np.array([0.4, 0.9])
    ref = _autograd_taylor(lambda y: y[0] / 3 + 2 / y[1] + 0.7 / y[1] + (y[1] - 0.7) + (0.7 - y[0]) + 0.7 * y[0] - y[1]
                           + (y[0] + 0.7) + y[0] / 0.7, torch.tensor(x, dtype=torch.float64), 3)
    assert np.abs(fn(x) - ref).max() <= 1e-13 * np.abs(ref).max()


def test_folds_are_ieee_where_eager_is_not_finite():
    """0 / x with a jet x is 0 with a guard that x is nonzero: at x = 0, where eager's 0 / x is NaN in every
    coefficient, the state is marked for the eager path (every T[k] NaN); elsewhere exactly 0 + x. Literal folds give C's
    results where Python raises (nan / 0, pow(0, -1), an overflow, a negative base to a fractional power, nan also
    where its magnitude overflows); a division
    by a literal with no normal reciprocal and pow through unary are refused; an unknown function or instruction in
    the emitter is an InternalError."""
    from bea.errors import InternalError
    from integrators.codegen.ir import _fdiv
    from integrators.compiled import NotLowerable

    prog = Program(1, 2)
    x = prog.seed(0)
    r = prog.add(prog.div(0.0, x), x)
    (fn,) = _taylor_fns([(prog, r)])
    eager = _autograd_taylor(lambda y: 0.0 / y[0] + y[0], torch.zeros(1, dtype=torch.float64), 2)
    assert np.isnan(eager).all() and np.isnan(fn(np.zeros(1))).all() and np.array_equal(fn(np.array([0.3])), [0.3, 1, 0])
    assert np.isnan(_fdiv(np.nan, 0.0)) and np.isnan(_fdiv(0.0, -0.0)) and _fdiv(-2.0, -0.0) == np.inf
    pows = [prog.pow(a, e) for a, e in ((0.0, -1.0), (-0.0, -3.0), (10.0, 400.0), (-10.0, 401.0), (-8.0, 1 / 3),
                                             (-10.0, 400.5), (-np.inf, 0.5), (-np.inf, -0.5))]
    assert pows[:4] == [np.inf, -np.inf, np.inf, -np.inf] and np.isnan(pows[4]) and np.isnan(pows[5])
    assert pows[6:] == [np.inf, 0.0]  # C's pow(-inf, +-1/2)
    for c in (0.0, 1e-310, 1e308):
        with pytest.raises(NotLowerable):
            prog.div(x, c)
    with pytest.raises(InternalError):
        prog.unary("pow", x)
    with pytest.raises(InternalError):
        emit._C["fun"].format_map(emit._Fields((x, "no_such_function", 0.0), str, str, "jt"))
    with pytest.raises(InternalError):
        emit._statement(("no_such_instruction", x), str, str, "jt", {})


def test_quotient_and_smaller_spaces_change_no_number(monkeypatch):
    """(sin(x0) x0 + x1^3) / (2 + x0 x1) + x2 x3 in 4 variables to degree 3: the parts in x0 alone, in x1 alone, in
    (x0, x1) run on smaller polynomials (embed instructions are inserted), with the numbers of everything in the
    full space (1e-15: only the order of additions differs) and of nested autograd (1e-14)."""
    prog = Program(4, 3)
    x0, x1, x2, x3 = (prog.seed(i) for i in range(4))
    num = prog.add(prog.mul(prog.unary("sin", x0), x0), prog.pow(x1, 3.0))
    r = prog.add(prog.div(num, prog.add(2.0, prog.mul(x0, x1))), prog.mul(x2, x3))
    source, _, _ = emit_c(prog, r, taylor=True)
    assert "_embed(" in source
    x = np.array([0.3, -0.4, 0.2, 0.1])
    (split,) = _taylor_fns([(prog, r)])
    monkeypatch.setattr(emit, "MAX_SIZES", 0)
    (full,) = _taylor_fns([(prog, r)])
    split, full = split(x), full(x)
    ref = _autograd_taylor(lambda y: (torch.sin(y[0]) * y[0] + y[1] ** 3) / (2 + y[0] * y[1]) + y[2] * y[3],
                           torch.tensor(x, dtype=torch.float64), 3)
    assert np.abs(split - full).max() <= 1e-15 and np.abs(split - ref).max() <= 1e-14


def test_traced_taylor_form_of_a_plain_callable():
    """trace_taylor of L = v^2/2 (1 + q^2/4) + cos(q) for n = 1, degree 4: its lag_taylor equals nested autograd
    to 1e-13 (measured ~1e-16: the same operations in another order)."""
    from integrators.traced import trace_taylor

    def L(q, v):
        return 0.5 * v[..., 0] ** 2 * (1 + 0.25 * q[..., 0] ** 2) + torch.cos(q[..., 0])

    form = trace_taylor(L, 1, 4)
    lib = load_library("#include <math.h>\n#include <string.h>\n" + form.source
                       + "void entry(const double *x, const double *P, double *T) { lag_taylor(x, P, T); }\n").lib
    x, out, f64p = np.array([0.4, -0.7]), np.zeros(15), ctypes.POINTER(ctypes.c_double)
    params = np.ascontiguousarray(form.params, dtype=np.float64)
    lib.entry(x.ctypes.data_as(f64p), params.ctypes.data_as(f64p), out.ctypes.data_as(f64p))
    ref = _autograd_taylor(lambda y: L(y[:1], y[1:]), torch.tensor(x, dtype=torch.float64), 4)
    assert np.abs(out - ref).max() <= 1e-13


def _atom_sum_blocks(D: int, K: int):
    """Two kinds of atom: a Gaussian with a shared width times a linear-plus-cubic polynomial (the exponent a sum of
    functions of one variable each: the factored exp), and exp of a product of two variables (the plain series)."""
    from integrators.codegen.reduce import Block, atom, shared

    blocks = []
    prog = Program(D, K)
    x = [prog.seed(i) for i in range(D)]
    sq = 0.0
    for i in range(D):
        r = prog.sub(x[i], atom(i))
        sq = prog.add(sq, prog.mul(r, r))
    e = prog.unary("exp", prog.mul(prog.neg(shared(0)), sq))
    poly = prog.dot([atom(D), atom(D + 1)], [x[0], prog.mul(x[1], prog.mul(x[2], x[2]))], start=atom(D + 2))
    blocks.append(Block(prog, prog.mul(e, poly), D + 3))
    prog = Program(D, K)
    x = [prog.seed(i) for i in range(D)]
    e = prog.unary("exp", prog.mul(prog.mul(atom(0), 0.5), prog.mul(x[0], x[1])))
    blocks.append(Block(prog, prog.mul(e, prog.add(x[2], atom(1))), 2))
    return blocks


def test_sum_over_atoms_against_autograd():
    """integrators.codegen.reduce: every Taylor coefficient (D = 3, K = 4) of a sum over run-time atoms against nested
    autograd of the same function (terms O(1): measured 2e-16 of the largest, asserted at 1e-13); 8 lanes and
    one state at a time give the same bits; an operation without a rule there is refused."""
    from integrators.codegen.reduce import EXP_SOURCE, Block, emit_sum
    from integrators.compiled import NotLowerable

    D, K, gen = 3, 4, torch.Generator().manual_seed(0)
    blocks = _atom_sum_blocks(D, K)
    g = 0.7
    rows0, rows1 = torch.randn(4, D + 3, generator=gen, dtype=torch.float64), torch.randn(3, 2, generator=gen, dtype=torch.float64)
    P = np.concatenate([[4.0, 3.0, g], rows0.reshape(-1).numpy(), rows1.reshape(-1).numpy()])
    lib = load_library("#include <math.h>\n" + EXP_SOURCE + emit_sum(blocks, 1, name="s8")
                       + emit_sum(blocks, 1, name="s1", lanes=1), vectorise=True).lib
    X = np.ascontiguousarray(0.6 * torch.randn(8, D, generator=gen, dtype=torch.float64).numpy())
    f64p, M = ctypes.POINTER(ctypes.c_double), len(monomials(D, K))
    T8, T1 = np.empty((8, M)), np.empty((8, M))
    lib.s8(X.ctypes.data_as(f64p), 8, P.ctypes.data_as(f64p), T8.ctypes.data_as(f64p))
    for b in range(8):
        lib.s1(X[b:].ctypes.data_as(f64p), 1, P.ctypes.data_as(f64p), T1[b:].ctypes.data_as(f64p))
    assert np.array_equal(T8, T1)

    def f(x):
        a, c = rows0, rows1
        poly = a[:, D + 2] + a[:, D] * x[0] + a[:, D + 1] * x[1] * x[2] ** 2
        gauss = ((-g * ((x - a[:, :D]) ** 2).sum(-1)).exp() * poly).sum()
        return gauss + ((c[:, 0] * 0.5 * x[0] * x[1]).exp() * (x[2] + c[:, 1])).sum()
    for b in range(3):
        ref = _autograd_taylor(f, torch.from_numpy(X[b]), K)
        assert np.abs(T8[b] - ref).max() <= 1e-13 * np.abs(ref).max()
    prog = Program(D, K)
    bad = Block(prog, prog.unary("sin", prog.seed(0)), 1)
    with pytest.raises(NotLowerable):
        emit_sum([bad], 0)


@pytest.mark.parametrize("terms", [1, 3, 40])
def test_index_tables_give_the_straight_line_bits(monkeypatch, terms):
    """reduce's index tables (jets of TABLE_COLUMNS coefficients or more: their products of TABLE_TERMS terms or more,
    both lowered here so that the small sum of the test above takes them) add the same products in the same order as
    the straight-line code: the same bits, at 8 lanes and one state at a time (one-lane vectors)."""
    from integrators.codegen import reduce

    D, K, gen = 3, 4, torch.Generator().manual_seed(1)
    blocks = _atom_sum_blocks(D, K)
    P = np.concatenate([[4.0, 3.0, 0.7], torch.randn(4 * (D + 3) + 3 * 2, generator=gen, dtype=torch.float64).numpy()])
    X = np.ascontiguousarray(0.6 * torch.randn(8, D, generator=gen, dtype=torch.float64).numpy())
    plain = reduce.emit_sum(blocks, 1, name="s8") + reduce.emit_sum(blocks, 1, name="s1", lanes=1)
    monkeypatch.setattr(reduce, "TABLE_COLUMNS", 0)
    monkeypatch.setattr(reduce, "TABLE_ORDER", 0)
    monkeypatch.setattr(reduce, "TABLE_TERMS", terms)
    tabled = reduce.emit_sum(blocks, 1, name="t8") + reduce.emit_sum(blocks, 1, name="t1", lanes=1).replace("cg_t", "cg_u")
    assert "cg_t0_" in tabled and "cg_t" not in plain
    lib = load_library("#include <math.h>\n" + reduce.EXP_SOURCE + plain + tabled, vectorise=True).lib
    f64p, out = ctypes.POINTER(ctypes.c_double), {}
    for fn in ("s8", "s1", "t8", "t1"):
        out[fn] = np.empty((8, len(monomials(D, K))))
        for b in range(0, 8, 1 if fn.endswith("1") else 8):
            getattr(lib, fn)(X[b:].ctypes.data_as(f64p), 1 if fn.endswith("1") else 8, P.ctypes.data_as(f64p),
                             out[fn][b:].ctypes.data_as(f64p))
    for fn in ("s1", "t8", "t1"):
        assert np.array_equal(out[fn].view(np.int64), out["s8"].view(np.int64)), fn


def test_the_one_binding_refuses_arrays_the_c_side_would_overrun():
    from bea.errors import InternalError
    from integrators.ccompile import I32P, ptr

    assert ptr(None) is None
    assert ptr(np.zeros(3)) is not None
    with pytest.raises(InternalError):
        ptr(np.zeros(3, dtype=np.float32))  # 4-byte items as double*
    with pytest.raises(InternalError):
        ptr(np.zeros((3, 4))[:, ::2])  # not contiguous
    with pytest.raises(InternalError):
        ptr(np.zeros(3, dtype=np.int64), I32P)

