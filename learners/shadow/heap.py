r"""Freed memory kept in the process heap while a fit runs (issue 23 item 5: the default fit's cost at n = 6).

A covariance assembly allocates many short-lived temporaries: each row chunk of a closed-form block holds a few dozen
(chunk, atoms) float64 arrays of about 2 MB (:data:`~learners.shadow.kernels.CHUNK_ATOMS`), and every solve a few
:math:`F \times F` matrices (120 MB at :math:`F = 3{,}868`). glibc's allocator serves a request above its mmap
threshold (128 kB, raised to the largest block freed so far, at most 32 MB) with a fresh ``mmap`` and returns it with
``munmap`` when freed, and trims the heap's top whenever more than twice that threshold is free there. Every
temporary's pages are then faulted in and zeroed by the kernel again on each use: measured on the fpu6 fit's
mechanical-kernel covariance (3,868 functionals, one thread, a loaded machine), 1,378,625 and 1,396,854 minor page
faults and 10.3 and 11.3 CPU s for two assemblies, against 141,448 and 21,030 faults and 3.81 and 3.24 s within
:func:`kept_heap` (benchmarks/RESULTS_identification.md, Session 17).

:func:`kept_heap` raises both thresholds (``mallopt``) for the duration of a block: the mmap threshold to
:data:`KEPT_MMAP_THRESHOLD`, or to 32 MB where glibc refuses that (before about 2.35 it refuses values above half its
64 MB heap size; the review of this module emulated it on one mechanical-kernel assembly at 3,800 functionals: 8.3 CPU
s plain, 2.5 s at 1 GiB, 3.45 s at 32 MB -- not measured on a whole fit nor on an old glibc), and the trim threshold
to :data:`KEPT_TRIM_THRESHOLD`. If glibc refuses 32 MB too, it sets nothing: a trim threshold alone would freeze the
mmap threshold at its current dynamic value and make the fit slower. The arithmetic is untouched -- torch aligns every
array to 64 bytes whichever way it was obtained -- so every result is bit for bit the same.

glibc has no getter for these thresholds, so their previous state cannot be restored. After the outermost block the
mmap threshold is fixed at 32 MB and the trim threshold at 64 MB -- the values glibc's dynamic rule reaches once a
32 MB block has been freed -- and that rule stays off for the rest of the process; the free memory at the heap's top
is returned to the system (``malloc_trim``). This is a process-wide allocator setting. It is left alone entirely
where the C library is not glibc (macOS, Windows, musl), where ``BEA_KEEP_HEAP=0`` is set, and where the user has
set the allocator: any of ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_TOP_PAD_``,
``MALLOC_MMAP_MAX_`` in the environment, or ``GLIBC_TUNABLES`` naming ``glibc.malloc.mmap_threshold``,
``trim_threshold``, ``top_pad`` or ``mmap_max``.
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
#: trim threshold within :func:`kept_heap` (``mallopt`` takes a C int: its largest value, 2 GiB - 1 byte): freed
#: memory up to this much stays in the heap for the next temporary
KEPT_TRIM_THRESHOLD = 2**31 - 1
# glibc's own limits after its dynamic rule has met a 32 MB block: DEFAULT_MMAP_THRESHOLD_MAX (64-bit) and twice it.
# 32 MB is also the mmap threshold that every 64-bit glibc accepts, the fallback when it refuses KEPT_MMAP_THRESHOLD.
_AFTER_MMAP, _AFTER_TRIM = 32 << 20, 64 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
# the user's own allocator settings, which kept_heap must not override
_USER_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")
_USER_TUNABLES = ("mmap_threshold", "trim_threshold", "top_pad", "mmap_max")

_lock = threading.Lock()
_depth = 0
_kept = False  # whether the outermost open block's thresholds were accepted


def _user_allocator() -> bool:
    """Whether the user has set glibc's allocator thresholds in the environment (then :func:`kept_heap` leaves them)."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    return any(name in os.environ for name in _USER_VARIABLES) or any(
        "glibc.malloc." + name in tunables for name in _USER_TUNABLES)


def _glibc() -> Optional[ctypes.CDLL]:
    """The C library when it is glibc on Linux (the one with these parameters), else None."""
    if not sys.platform.startswith("linux"):
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


def _raise_thresholds(libc) -> bool:
    """Raise the mmap threshold (KEPT_MMAP_THRESHOLD, else 32 MB), then the trim threshold; whether the mmap threshold
    was set (then the block's end must fix it again).

    mallopt returns 0 for a refused value. The trim threshold is set only after an accepted mmap threshold: alone, it
    would end glibc's dynamic rule with the mmap threshold wherever it stands (measured 2.3x slower). glibc accepts any
    trim threshold."""
    for mmap_threshold in (KEPT_MMAP_THRESHOLD, _AFTER_MMAP):
        if libc.mallopt(_M_MMAP_THRESHOLD, mmap_threshold):
            libc.mallopt(_M_TRIM_THRESHOLD, KEPT_TRIM_THRESHOLD)
            return True
    return False


@contextmanager
def kept_heap() -> Iterator[bool]:
    """Within the block, freed memory stays in the heap (module docstring); yields whether glibc accepted the raised
    thresholds (False where the allocator is left alone). Nested blocks (a fit within a fit) set the thresholds once,
    at the outermost, and fix them at 32 MB / 64 MB when it ends."""
    global _depth, _kept
    if os.environ.get("BEA_KEEP_HEAP", "1") == "0" or _user_allocator():
        yield False
        return
    libc = _glibc()
    if libc is None:
        yield False
        return
    entered = False
    try:  # the count is raised within the try, and lowered only if this block raised it (another thread's stays)
        with _lock:
            _depth += 1
            entered = True
            if _depth == 1:
                # True first: an interrupt within the mallopt calls still ends at the fixed 32 MB / 64 MB, not at 1 GiB
                _kept = True
                _kept = _raise_thresholds(libc)
            kept = _kept
        yield kept
    finally:
        with _lock:
            _depth -= entered
            if entered and _depth == 0 and _kept:
                _kept = False
                libc.mallopt(_M_MMAP_THRESHOLD, _AFTER_MMAP)
                libc.mallopt(_M_TRIM_THRESHOLD, _AFTER_TRIM)
                libc.malloc_trim(0)
