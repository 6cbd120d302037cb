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


@pytest.fixture(params=["eager", "compiled"])
def execution_path(request, monkeypatch):
    """Run a test twice: on the eager path, and with the compiled path wherever it applies (every
    integrator created without ``execution=`` compiles, whatever the length of the run)."""
    import integrators.variational as V

    if request.param == "compiled":
        from integrators.ccompile import find_compiler

        if find_compiler() is None:
            pytest.skip("no C compiler on this machine: the compiled path falls back to the eager one")
        monkeypatch.setattr(V, "DEFAULT_EXECUTION", "auto")
        monkeypatch.setattr(V, "AUTO_MIN_WORK", 0)
    else:
        monkeypatch.setattr(V, "DEFAULT_EXECUTION", "eager")
    return request.param
