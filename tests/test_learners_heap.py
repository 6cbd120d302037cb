"""Freed memory kept in the heap during a fit (learners/shadow/heap.py): fewer fresh pages, the same numbers bit for bit."""

import pytest
import torch

from learners.shadow import heap
from learners.shadow.functionals import snapshot_functionals
from learners.shadow.kernels import FunctionalKernel, RBFKernel
from learners.shadow.mechanical import MechanicalKernel
from learners.shadow.symmetric_covariance import symmetric_covariance

glibc = pytest.mark.skipif(heap._glibc() is None, reason="the allocator setting exists on glibc only")


_PROBE = """
import resource, sys, torch
from learners.shadow import heap

def faults(repeats, entries):  # minor page faults of allocations of entries doubles, each written whole and freed
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(repeats):
        torch.ones(entries, dtype=torch.float64)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

entries = 8 << 20
outside = faults(8, entries)
with heap.kept_heap() as kept:
    faults(1, entries)  # the first block is faulted in once either way
    inside = faults(7, entries)
print(kept, outside, inside)
"""


@glibc
def test_kept_heap_reuses_freed_blocks():
    # a 64 MB block is above glibc's largest dynamic mmap threshold (32 MB): outside, each allocation maps and faults in
    # its 16,384 pages afresh; inside, the first one's pages are reused by the next 7 (measured: 0 faults after it). In
    # a fresh interpreter (a large process's heap layout, pytest's, can move the numbers; measured there: 6 blocks).
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    env.pop("BEA_KEEP_HEAP", None)
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, check=True, cwd=root)
    kept, outside, inside = out.stdout.split()
    pages = (8 << 20) * 8 // 4096
    assert kept == "True"
    assert int(outside) >= 6 * pages  # 8 fresh blocks (a lower bound: some pages may be mapped huge, 1/512 the faults)
    assert int(inside) < pages  # less than one block's worth for 7 blocks


def test_kept_heap_same_numbers(monkeypatch):
    # the setting changes where memory comes from, never the arithmetic: bit for bit the same covariance, both kernels
    gen = torch.Generator().manual_seed(1)
    F = snapshot_functionals(0.3 * torch.randn(3, 6, 4, generator=gen, dtype=torch.float64).cumsum(1), 0.2, "midpoint")[0]
    for base in (RBFKernel(ard_num_dims=8), MechanicalKernel(4, ard_num_dims=8)):
        base = base.to(torch.float64)
        base.lengthscale = torch.rand(8, generator=gen, dtype=torch.float64) + 0.5
        fk = FunctionalKernel(base.requires_grad_(False)).requires_grad_(False)
        plain = symmetric_covariance(fk, F)
        with heap.kept_heap():
            kept = symmetric_covariance(fk, F)
        assert torch.equal(plain, kept)
    monkeypatch.setenv("BEA_KEEP_HEAP", "0")  # the user's switch: the allocator left alone
    with heap.kept_heap() as kept:
        assert not kept


@glibc
def test_kept_heap_nested_restores_once(monkeypatch):
    calls = []
    libc = heap._glibc()

    class Recording:  # mallopt and malloc_trim recorded, passed through
        def mallopt(self, what, value):
            calls.append(("mallopt", what, value))
            return libc.mallopt(what, value)

        def malloc_trim(self, pad):
            calls.append(("trim", pad))
            return libc.malloc_trim(pad)

    monkeypatch.setattr(heap, "_glibc", lambda: Recording())
    with heap.kept_heap():
        with heap.kept_heap():
            pass
        assert len(calls) == 2  # set once, at the outermost; the inner block's exit restores nothing
    assert calls[2:] == [("mallopt", -3, 32 << 20), ("mallopt", -1, 64 << 20), ("trim", 0)]
