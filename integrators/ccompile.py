"""Compile C source generated in this process into a shared library and load it with ctypes (an in-process LRU
over :mod:`integrators.ccache`'s authenticated disk cache). Why the source is safe to compile, and the flags' reasons:
docs/theory/codegen.md.
"""

from __future__ import annotations

import collections
import ctypes
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Optional
from bea.errors import BeaError, InternalError

from . import ccache

__all__ = ["CompileError", "CompiledLibrary", "find_compiler", "load_library", "digest_of", "LIBRARY_CACHE_SIZE", "ptr", "F64P",
           "I64P", "I32P", "QUICK_LEVEL"]

#: libraries kept loaded per process (least recently used beyond this are forgotten)
LIBRARY_CACHE_SIZE = 32

#: no fused multiply-add (-ffp-contract=off): the arithmetic is the one written
CFLAGS = ("-O2", "-shared", "-fPIC", "-ffp-contract=off", "-fno-math-errno", "-std=c99")

#: the level of ``load_library(..., quick=True)``: the first-use policy (issue 28) of the largest RBF jets
#: (learners.shadow.compiled_mean.jet_build): with 4 lanes 1.3-2x less compiler CPU (benchmarks/RESULTS_speed.md, Session 19)
QUICK_LEVEL = "-O1"

#: longest compiler run (s); a slower one is killed with every process it started (its cc1 and as) and raises
COMPILE_SECONDS = 300.0

#: extra flags for loops written to vectorise (``load_library(..., vectorise=True)``); none changes a result
VECTOR_FLAGS = ("-march=native", "-ftree-vectorize", "-fno-trapping-math")


class CompileError(BeaError, RuntimeError):
    """The C compiler is missing or rejected the generated source."""


class _Rejected(CompileError):
    """The compiler ran and exited non-zero (flags it does not know, or the source): the one failure worth a retry."""


#: ctypes pointer types of the generated functions' array arguments (double, long, int)
F64P, I64P, I32P = ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_long), ctypes.POINTER(ctypes.c_int)


def ptr(a, kind=F64P):
    """The ctypes pointer to the data of the contiguous NumPy array ``a`` (None: NULL). An array that is not
    C-contiguous, or whose items are not the size of ``kind``'s, is refused: the C side would read or write past it."""
    if a is None:
        return None
    if not a.flags.c_contiguous or a.dtype.itemsize != ctypes.sizeof(kind._type_):
        raise InternalError(f"a {a.dtype} array (contiguous: {a.flags.c_contiguous}) passed as {kind._type_.__name__}*")
    return a.ctypes.data_as(kind)


@dataclass(frozen=True)
class CompiledLibrary:
    """A loaded library and how long building it took (seconds; 0 when it came from the LRU)."""

    lib: ctypes.CDLL
    digest: str
    compile_seconds: float

    def function(self, name: str, restype, *argtypes):
        """The C function ``name`` with its ctypes signature (the one place generated functions are bound)."""
        fn = getattr(self.lib, name)
        fn.restype, fn.argtypes = restype, list(argtypes)
        return fn


_lock = threading.Lock()
_cache: "collections.OrderedDict[str, CompiledLibrary]" = collections.OrderedDict()


def find_compiler() -> Optional[str]:
    """Path of the C compiler (``$CC``, else ``cc``, ``gcc``, ``clang`` on ``PATH``), or None."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name:
            path = shutil.which(name)
            if path:
                return path
    return None


def load_library(source: str, vectorise: bool = False, quick: bool = False) -> CompiledLibrary:
    """Compile ``source`` (or take it from the LRU) and load it. Raises :class:`CompileError`.

    ``source`` must be C this process generated (never text read from disk or from a user): loading runs it.
    ``vectorise``: add :data:`VECTOR_FLAGS`; a compiler that rejects them builds without them. ``quick``: build at
    :data:`QUICK_LEVEL` instead of -O2 (the same operations, so the same bits; the level is a flag, hence in the digest)."""
    flags = tuple(QUICK_LEVEL if f == "-O2" else f for f in CFLAGS) if quick else CFLAGS
    if vectorise:
        try:
            return _load(source, flags + VECTOR_FLAGS)
        except _Rejected:  # not after a timeout: the same source would take as long again
            pass
    return _load(source, flags)


def digest_of(source: str, flags) -> str:
    """The SHA-256 of ``flags`` and ``source``: the library's name in the LRU and (with the compiler) on disk."""
    return hashlib.sha256(("\0".join(flags) + "\0" + source).encode()).hexdigest()


def _load(source: str, flags) -> CompiledLibrary:
    digest = digest_of(source, flags)
    with _lock:
        hit = _cache.get(digest)
        if hit is not None:
            _cache.move_to_end(digest)
            return CompiledLibrary(hit.lib, digest, 0.0)
    cc = find_compiler()
    if cc is None:
        raise CompileError("no C compiler found (set $CC or install gcc/clang); the eager path is used instead")
    t0 = time.perf_counter()
    lib = ccache.fetch(digest, cc)  # built by an earlier process: loaded only once its HMAC verifies
    if lib is None:
        with ccache.building(digest, cc):
            lib = ccache.fetch(digest, cc)  # stored meanwhile by the process that held the lock (or finished first)
            if lib is None:
                return _remember(_build(source, flags, digest, cc, t0))
    return _remember(CompiledLibrary(lib, digest, 0.0))


def _build(source: str, flags, digest: str, cc: str, t0: float) -> CompiledLibrary:
    """Run ``cc`` on ``source`` in a private directory, load the library and store it in the disk cache."""
    with tempfile.TemporaryDirectory(prefix="bea-cc-") as tmp:  # created with mode 0700
        src, out = os.path.join(tmp, "step.c"), os.path.join(tmp, "step.so")
        with open(src, "w") as f:
            f.write(source)
        code, text = _run([cc, *flags, "-o", out, src, "-lm"])
        if code != 0:
            first = text.strip().splitlines()[:5]
            raise _Rejected(f"the C compiler {cc} rejected the generated step code: " + " | ".join(first))
        lib = ctypes.CDLL(out)  # the mapping stays valid after the file is removed
        ccache.store(digest, cc, out)
    return CompiledLibrary(lib, digest, time.perf_counter() - t0)


def _run(cmd) -> "tuple[int, str]":
    """Run the compiler ``cmd``: its return code and its error output (else its output). It runs in a session of its
    own, so that a timeout or an interrupt kills the whole group: killing the driver alone leaves its cc1 running."""
    group = hasattr(os, "killpg")
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=group)
    except OSError as err:
        raise CompileError(f"running the C compiler {cmd[0]} failed: {err}") from err
    try:
        out, err = proc.communicate(timeout=COMPILE_SECONDS)
    except BaseException as exc:
        try:
            os.killpg(proc.pid, signal.SIGKILL) if group else proc.kill()
        except OSError:  # the group is gone already
            pass
        proc.communicate()
        if isinstance(exc, subprocess.TimeoutExpired):
            raise CompileError(f"the C compiler {cmd[0]} ran longer than COMPILE_SECONDS = {COMPILE_SECONDS:g} s and "
                               "was stopped; the eager path is used instead") from exc
        raise
    return proc.returncode, err or out


def _remember(entry: CompiledLibrary) -> CompiledLibrary:
    with _lock:
        _cache[entry.digest] = entry
        _cache.move_to_end(entry.digest)
        while len(_cache) > LIBRARY_CACHE_SIZE:
            _cache.popitem(last=False)
    return entry
