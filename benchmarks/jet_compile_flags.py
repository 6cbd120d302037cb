"""First-use cost of the RBF jet library (learners.shadow.compiled_mean.RBFJet) under several flag sets and both C
forms of reduce.emit_sum (``JET_FORMS``: ``code``, every product straight-line, the source before index tables;
``tables``, the library's, index tables from reduce.TABLE_COLUMNS coefficients): compile seconds (wall and the
compiler's CPU), evaluation seconds (best of repeats), its ratio to the first build and whether the outputs are
bit-identical to it.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python3 benchmarks/jet_compile_flags.py 8:5 8:4 4:5
    PYTHONPATH=$PWD OMP_NUM_THREADS=1 JET_LANES=4 JET_OPT=O1 JET_FORMS="code tables code tables" python3 \
        benchmarks/jet_compile_flags.py 8:5
"""

from __future__ import annotations

import os
import resource
import sys
import time

os.environ["BEA_C_CACHE"] = "0"  # every build is a cold build

import numpy as np  # noqa: E402

from integrators import ccompile  # noqa: E402
from integrators.codegen import reduce, size  # noqa: E402
from learners.shadow.compiled_mean import LANES, rbf_blocks  # noqa: E402

REPEATS = int(os.environ.get("JET_REPEATS", "3"))
#: the library's own flags without their level (each flag set below names one) and with the vector flags
BASE = tuple(f for f in ccompile.CFLAGS if not f.startswith("-O")) + ccompile.VECTOR_FLAGS
FLAG_SETS = {t: (t and "-" + t,) + BASE for t in os.environ.get("JET_OPT", "O2 O1").split()}
for extra in os.environ.get("JET_FLAGS", "").split(";"):
    if extra.strip():
        FLAG_SETS[extra.strip()] = tuple(extra.split()) + BASE


def params(D: int, atoms: int, rng) -> np.ndarray:
    """P = [K1, K2, ell (D), sigma_f^2, K1 rows (y, v, c), K2 rows (y, v, c, c2, u, d)] with random numbers."""
    rows1 = rng.normal(size=(atoms, 2 * D + 1))
    rows2 = rng.normal(size=(atoms, 4 * D + 2))
    head = np.array([atoms, atoms] + [1.0] * D + [1.0])
    return np.ascontiguousarray(np.concatenate([head, rows1.ravel(), rows2.ravel()]))


def main(cases):
    """Each (D, K) under every lane count of ``JET_LANES`` (default 8) and flag set; bits compared with the first build."""
    rng = np.random.default_rng(0)
    print("| D | K | form | lines | lanes | flags | compile s (wall) | compile s (CPU) | eval s (256 states, 200 atoms, best "
          "of JET_REPEATS) | eval / first | bit-identical to the first | load (1 min) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    columns = reduce.TABLE_COLUMNS
    for D, K in cases:
        P, X = params(D, 100, rng), np.ascontiguousarray(rng.normal(size=(256, D)) * 0.7)
        ref = first = None
        for form, lanes, (tag, flags) in ((fo, la, f) for fo in os.environ.get("JET_FORMS", "code tables").split()
                                          for la in map(int, os.environ.get("JET_LANES", str(LANES)).split())
                                          for f in FLAG_SETS.items()):
            reduce.TABLE_COLUMNS = columns if form == "tables" else 10 ** 9
            source = reduce.EXP_SOURCE + reduce.emit_sum(rbf_blocks(D, K), D + 1, name="rbf_jet", lanes=lanes)
            ccompile._cache.clear()  # a repeated source is built again, not taken from the in-process LRU
            cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            lib = ccompile._load(source, flags)
            cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime
            fn = lib.function("rbf_jet", None, ccompile.F64P, ccompile.ctypes.c_long, ccompile.F64P, ccompile.F64P)
            out = np.empty((X.shape[0], size(D, K)))
            best = float("inf")
            for _ in range(REPEATS):
                t0 = time.perf_counter()
                fn(ccompile.ptr(X), X.shape[0], ccompile.ptr(P), ccompile.ptr(out))
                best = min(best, time.perf_counter() - t0)
            ref, first = (out.copy(), best) if ref is None else (ref, first)
            same = bool(np.array_equal(out.view(np.int64), ref.view(np.int64)))
            print(f"| {D} | {K} | {form} | {source.count(chr(10))} | {lanes} | {tag} | {lib.compile_seconds:.1f} | {cpu:.1f} | "
                  f"{best:.4f} | {best / first:.2f} | {same} | {os.getloadavg()[0]:.1f} |", flush=True)
    reduce.TABLE_COLUMNS = columns


if __name__ == "__main__":
    main([tuple(map(int, a.split(":"))) for a in sys.argv[1:]] or [(8, 5)])
