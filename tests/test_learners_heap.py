"""Freed memory kept in the heap during a fit (learners/shadow/heap.py): the thresholds glibc accepts, the user's
settings respected, mmapped blocks avoided, the same numbers bit for bit."""

import ctypes
import os

import pytest
import torch

from learners.shadow import heap
from learners.shadow.functionals import snapshot_functionals
from learners.shadow.kernels import FunctionalKernel, RBFKernel
from learners.shadow.mechanical import MechanicalKernel
from learners.shadow.symmetric_covariance import symmetric_covariance

_LIBC = heap._glibc()
glibc = pytest.mark.skipif(_LIBC is None or heap._user_allocator(),
                           reason="the allocator setting exists on glibc only, and is off under the user's MALLOC_ settings")
GIB, MB32, MB64, TRIM = 1 << 30, 32 << 20, 64 << 20, 2**31 - 1


class FakeLibc:
    """mallopt refuses an mmap threshold above `largest` (glibc before ~2.35: above 32 MB), else passes the call
    `through` to the real C library if given; calls and answers are recorded."""

    def __init__(self, largest, through=None):
        self.largest, self.through, self.calls = largest, through, []

    def mallopt(self, what, value):
        accepted = int(what != -3 or value <= self.largest)
        if accepted and self.through is not None:  # then the real answer is recorded
            accepted = self.through.mallopt(what, value)
        self.calls.append(("mallopt", what, value, accepted))
        return accepted

    def malloc_trim(self, pad):
        self.calls.append(("trim", pad))
        return self.through.malloc_trim(pad) if self.through is not None else 1


_END = [("mallopt", -3, MB32, 1), ("mallopt", -1, MB64, 1), ("trim", 0)]


@pytest.fixture
def no_user_settings(monkeypatch):
    for name in heap._USER_VARIABLES + ("GLIBC_TUNABLES", "BEA_KEEP_HEAP"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("largest, kept, calls", [
    (GIB, True, [("mallopt", -3, GIB, 1), ("mallopt", -1, TRIM, 1)] + _END),  # accepted at once
    (MB32, True, [("mallopt", -3, GIB, 0), ("mallopt", -3, MB32, 1), ("mallopt", -1, TRIM, 1)] + _END),  # old glibc
    (MB32 - 1, False, [("mallopt", -3, GIB, 0), ("mallopt", -3, MB32, 0)]),  # both refused: no trim threshold alone
])
def test_kept_heap_thresholds_glibc_accepts(monkeypatch, no_user_settings, largest, kept, calls):
    fake = FakeLibc(largest)
    monkeypatch.setattr(heap, "_glibc", lambda: fake)
    with heap.kept_heap() as flag:
        assert flag is kept
    assert fake.calls == calls
    assert heap._depth == 0


@pytest.mark.parametrize("name, value", [("BEA_KEEP_HEAP", "0"), ("MALLOC_MMAP_THRESHOLD_", "65536"),
                                         ("MALLOC_TRIM_THRESHOLD_", "1"), ("MALLOC_TOP_PAD_", "0"),
                                         ("MALLOC_MMAP_MAX_", "0"),
                                         ("GLIBC_TUNABLES", "glibc.malloc.arena_max=2:glibc.malloc.top_pad=0")])
def test_kept_heap_leaves_the_users_allocator_alone(monkeypatch, no_user_settings, name, value):
    fake = FakeLibc(GIB)
    monkeypatch.setattr(heap, "_glibc", lambda: fake)
    monkeypatch.setenv(name, value)
    with heap.kept_heap() as flag:
        assert flag is False
    assert fake.calls == []
    monkeypatch.delenv(name)
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")  # a tunable that is not a threshold: set as usual
    with heap.kept_heap() as flag:
        assert flag is True
    assert fake.calls[0] == ("mallopt", -3, GIB, 1)


def _mallinfo(libc):
    """glibc's mallinfo2 (2.33 on), else mallinfo: `hblks` counts the chunks currently obtained by mmap."""
    ctype = ctypes.c_size_t if hasattr(libc, "mallinfo2") else ctypes.c_int
    fields = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
    info = type("Mallinfo", (ctypes.Structure,), {"_fields_": [(name, ctype) for name in fields]})
    function = libc.mallinfo2 if hasattr(libc, "mallinfo2") else libc.mallinfo
    function.argtypes, function.restype = [], info
    return function


def _mapped_chunks(libc, count):
    """How many more chunks are mmapped while ``count`` blocks are held (untouched: no page is faulted), each 48 MB or
    1 MB more than all the heap's free memory (glibc serves a request from a free heap chunk before it considers mmap,
    so earlier tests that freed large blocks must not decide the count)."""
    libc.malloc.argtypes, libc.malloc.restype = [ctypes.c_size_t], ctypes.c_void_p
    libc.free.argtypes, libc.free.restype = [ctypes.c_void_p], None
    mallinfo = _mallinfo(libc)
    size = max(48 << 20, int(mallinfo().fordblks) + (1 << 20))
    if size >= GIB:
        pytest.skip(f"the heap holds {size >> 20} MB free: no block size lies between it and the 1 GiB threshold")
    before = mallinfo().hblks
    blocks = [libc.malloc(size) for _ in range(count)]
    held = mallinfo().hblks
    for block in blocks:
        libc.free(block)
    assert all(blocks)
    return held - before


@glibc
def test_kept_heap_keeps_blocks_out_of_mmap(monkeypatch, no_user_settings):
    # a block of 48 MB or more (and larger than the heap's free memory) is above every mmap threshold glibc has outside
    # the block (its dynamic rule stops at 32 MB, and kept_heap's end fixes 32 MB), so each of 3 is mmapped; within the
    # 1 GiB threshold none is. Counted, not timed: independent of transparent huge pages and of the machine's load.
    count = 3
    assert _mapped_chunks(_LIBC, count) == count
    fake = FakeLibc(GIB, through=_LIBC)  # records which threshold glibc accepted, passes everything through
    monkeypatch.setattr(heap, "_glibc", lambda: fake)
    with heap.kept_heap() as kept:
        assert kept
        if fake.calls[0][3] == 0:
            pytest.skip("this glibc refuses a 1 GiB mmap threshold (32 MB set): test_kept_heap_thresholds covers it")
        assert _mapped_chunks(_LIBC, count) == 0
    assert _mapped_chunks(_LIBC, count) == count  # after the block: 32 MB again


def test_kept_heap_same_numbers():
    # the setting changes where memory comes from, never the arithmetic: bit for bit the same covariance, both kernels.
    # F = 1,520 functionals: each row chunk's temporaries are ~2 MB, above glibc's initial 128 kB mmap threshold, so
    # inside the block they come from the heap and, in a fresh process, outside from mmap (after any earlier kept_heap
    # the threshold outside is 32 MB: then both come from the heap, and the check is of the arithmetic only)
    gen = torch.Generator().manual_seed(1)
    F = snapshot_functionals(0.3 * torch.randn(10, 40, 4, generator=gen, dtype=torch.float64).cumsum(1), 0.2,
                             "midpoint")[0]
    for base in (RBFKernel(ard_num_dims=8), MechanicalKernel(4, ard_num_dims=8)):
        base = base.to(torch.float64)
        base.lengthscale = torch.rand(8, generator=gen, dtype=torch.float64) + 0.5
        fk = FunctionalKernel(base.requires_grad_(False)).requires_grad_(False)
        plain = symmetric_covariance(fk, F)
        with heap.kept_heap() as flag:
            kept = symmetric_covariance(fk, F)
        if _LIBC is not None and not heap._user_allocator() and os.environ.get("BEA_KEEP_HEAP") != "0":
            assert flag  # glibc accepted the thresholds: the kept covariance was made under them
        assert torch.equal(plain, kept)


def test_kept_heap_nested_sets_once(monkeypatch, no_user_settings):
    fake = FakeLibc(GIB)
    monkeypatch.setattr(heap, "_glibc", lambda: fake)
    with heap.kept_heap() as outer:
        with heap.kept_heap() as inner:
            assert heap._depth == 2
        # set once, at the outermost, to the kept values; the inner block's end fixes nothing
        assert fake.calls == [("mallopt", -3, GIB, 1), ("mallopt", -1, TRIM, 1)]
    assert outer is inner is True
    assert fake.calls[2:] == _END and heap._depth == 0


def test_kept_heap_ends_after_an_exception(monkeypatch, no_user_settings):
    fake = FakeLibc(GIB)
    monkeypatch.setattr(heap, "_glibc", lambda: fake)
    with pytest.raises(KeyboardInterrupt):
        with heap.kept_heap():
            raise KeyboardInterrupt
    assert fake.calls[2:] == _END and heap._depth == 0
