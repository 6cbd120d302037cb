import os

import pytest
import torch

torch.set_default_dtype(torch.float64)


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    """Every test session derives into its own cache (CI machines start empty too), unless
    BEA_TEST_CACHE is set to reuse one between local runs."""
    if os.environ.get("BEA_TEST_CACHE"):
        os.environ["BEA_CACHE_DIR"] = os.environ["BEA_TEST_CACHE"]
    else:
        os.environ["BEA_CACHE_DIR"] = str(tmp_path_factory.mktemp("bea-cache"))
    yield
