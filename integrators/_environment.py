"""torch's first import of ``torch._dynamo`` writes ``TORCHINDUCTOR_CACHE_DIR`` into ``os.environ``.

That import happens lazily, the first time a :mod:`torch.func` transform (``jvp``, ``grad``) meets an operation with a
decomposition, or an optimiser is built. The library's entry points must leave the caller's environment as they found
it (tests/test_reliability2_side_effects.py), so the sites that may trigger the import go through :func:`dynamo_imported`
(a dictionary lookup once the module is loaded), and blocks that may write more go through :func:`environment_kept`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from types import ModuleType
from typing import Iterator

__all__ = ["environment_kept", "dynamo_imported"]


@contextlib.contextmanager
def environment_kept() -> Iterator[None]:
    """Undo what the block writes into ``os.environ``: variables it adds are removed, values it changes are put back
    (the block runs in the caller's thread, so what it changes is torch's doing)."""
    before = dict(os.environ)
    try:
        yield
    finally:
        for k in [k for k in os.environ if k not in before]:
            del os.environ[k]
        for k, v in before.items():
            if os.environ.get(k) != v:
                os.environ[k] = v


def dynamo_imported() -> ModuleType:
    """``torch._dynamo``, imported now with the environment kept unless it is loaded already (then only looked up)."""
    if "torch._dynamo" not in sys.modules:
        with environment_kept():
            import torch._dynamo as loaded
        return loaded
    return sys.modules["torch._dynamo"]
