"""Intra-op threads for small tensors.

A time step of a small batch is hundreds of tiny tensor operations. With several intra-op threads,
each operation may open a parallel region, and on a busy machine the threads wait for each other:
the same loop runs up to ten times slower than on one thread. Integrations of small batches
therefore run with one intra-op thread (restored afterwards); large batches keep the setting.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

#: batches with fewer elements than this (batch size x n) run on one intra-op thread
SINGLE_THREAD_BELOW = 65536


@contextlib.contextmanager
def threads_for(numel: int) -> Iterator[None]:
    """Use one intra-op thread inside the block if ``numel < SINGLE_THREAD_BELOW``."""
    before = torch.get_num_threads()
    if numel >= SINGLE_THREAD_BELOW or before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
