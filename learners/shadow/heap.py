r"""Freed memory kept in the process heap while a fit runs (issue 23 item 5: the default fit's cost at n = 6).

A covariance assembly allocates many short-lived temporaries: each row chunk of a closed-form block holds a few dozen
(chunk, atoms) float64 arrays of about 2 MB (:data:`~learners.shadow.kernels.CHUNK_ATOMS`), and every solve a few
:math:`F \times F` matrices (120 MB at :math:`F = 3{,}868`). glibc's allocator serves a request above its mmap
threshold (128 kB, raised to the largest block freed so far, at most 32 MB) with a fresh ``mmap`` and returns it with
``munmap`` when freed, and trims the heap's top whenever more than twice that threshold is free there. Every
temporary's pages are then faulted in and zeroed by the kernel again on each use: measured on the fpu6 fit's
mechanical-kernel covariance (3,868 functionals, one thread), 1.38 million minor page faults and 10.3 CPU s per
assembly, against 40 thousand and 3.9 s with the memory kept (benchmarks/RESULTS_identification.md, Session 17).

:func:`kept_heap` raises both thresholds (``mallopt``) for the duration of a block, then sets the values glibc's own
dynamic rule would have reached after freeing a 32 MB block (mmap threshold 32 MB, trim threshold 64 MB) and returns
the free memory at the heap's top to the system (``malloc_trim``). The arithmetic is untouched -- torch aligns every
array to 64 bytes whichever way it was obtained -- so every result is bit for bit the same. Where the C library is not
glibc (macOS, Windows, musl) it does nothing. This is a process-wide allocator setting, changed only while the block
runs and left at glibc's own dynamic end state afterwards; set ``BEA_KEEP_HEAP=0`` in the environment to leave the
allocator alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import threading
from contextlib import contextmanager
from typing import Iterator, Optional

__all__ = ["kept_heap", "KEPT_MMAP_THRESHOLD", "KEPT_TRIM_THRESHOLD"]

#: mmap threshold within :func:`kept_heap`: above every block of the default fits (an F x F matrix at F = 5,000: 200 MB)
KEPT_MMAP_THRESHOLD = 1 << 30
#: trim threshold within :func:`kept_heap`: freed memory up to this much stays in the heap for the next temporary
KEPT_TRIM_THRESHOLD = 1 << 31
# glibc's own limits after its dynamic rule has met a 32 MB block: DEFAULT_MMAP_THRESHOLD_MAX and twice it
_AFTER_MMAP, _AFTER_TRIM = 32 << 20, 64 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)

_lock = threading.Lock()
_depth = 0


def _glibc() -> Optional[ctypes.CDLL]:
    """The C library when it is glibc on Linux (the one with these parameters), else None."""
    if not sys.platform.startswith("linux") or os.environ.get("BEA_KEEP_HEAP", "1") == "0":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        libc.gnu_get_libc_version()
        libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
        return libc
    except (OSError, AttributeError):  # not glibc (musl has no gnu_get_libc_version), or no C library found
        return None


@contextmanager
def kept_heap() -> Iterator[bool]:
    """Within the block, freed memory stays in the heap (module docstring); yields whether the allocator was set. Nested
    blocks (a fit within a fit) set and restore it once, at the outermost."""
    global _depth
    libc = _glibc()
    if libc is None:
        yield False
        return
    with _lock:
        _depth += 1
        if _depth == 1:
            # the mmap threshold first: setting it takes it out of glibc's dynamic rule, then nothing is mmapped below it
            libc.mallopt(_M_MMAP_THRESHOLD, min(KEPT_MMAP_THRESHOLD, 2**31 - 1))
            libc.mallopt(_M_TRIM_THRESHOLD, min(KEPT_TRIM_THRESHOLD, 2**31 - 1))
    try:
        yield True
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                libc.mallopt(_M_MMAP_THRESHOLD, _AFTER_MMAP)
                libc.mallopt(_M_TRIM_THRESHOLD, _AFTER_TRIM)
                libc.malloc_trim(0)
