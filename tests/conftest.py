import os

import pytest
import torch

torch.set_default_dtype(torch.float64)


def _worker_threads() -> int:
    """torch threads for one pytest-xdist worker: OMP_NUM_THREADS where the caller set it, else the worker's share of
    the CPUs this process may run on (its affinity, not the machine's count)."""
    if os.environ.get("OMP_NUM_THREADS", "").isdigit() and int(os.environ["OMP_NUM_THREADS"]) > 0:
        return int(os.environ["OMP_NUM_THREADS"])
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cpus // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))


if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    # the suite's command runs one pytest-xdist worker per core: each worker takes its share of the cores for torch's
    # threads, and so do the notebooks' kernels and the demo it starts, since OpenMP threads beyond the cores spin
    # and slow every fit (this process is the test harness, not a user's)
    _threads = _worker_threads()
    torch.set_num_threads(_threads)
    os.environ["OMP_NUM_THREADS"] = str(_threads)


#: what takes minutes in the suite (the CI run's --durations): under ``--dist loadfile`` these units go to the
#: pytest-xdist workers first, longest first, so that the workers finish together rather than one of them running a
#: notebook alone at the end; each notebook's execution is a unit of its own (they share no fixture). Only the order of
#: the work depends on this list: a file missing from it, or a stale entry, costs time, never a result.
LONGEST_FIRST = ("tests/test_notebooks.py::test_notebook_executes[06_identification.ipynb]",
                 "tests/test_learners_element_kernel.py", "tests/test_learners_rotation.py",
                 # 07 after 06 has started building the compiled jets both may need (a worker waits on the other's build)
                 "tests/test_notebooks.py::test_notebook_executes[07_elements.ipynb]",
                 "tests/test_learners_structure_choice.py",
                 "tests/test_learners_modlanet_experiments.py", "tests/test_learners_shadow_auto.py",
                 "tests/test_notebooks.py::test_notebook_executes[03_pendulum_shadow.ipynb]",
                 "tests/test_element_extension.py", "tests/test_integrators_orders_free.py",
                 "tests/test_learners_modlanet_inverse_compiled.py",
                 "tests/test_notebooks.py::test_notebook_executes[05_modlanet.ipynb]",
                 "tests/test_notebooks.py::test_notebook_executes[02_convergence_orders.ipynb]")
_NOTEBOOK_RUN = "tests/test_notebooks.py::test_notebook_executes["


def _work_unit(nodeid: str) -> str:
    """A test's unit of work for the workers: its file, or the test itself for a notebook's execution."""
    return nodeid if nodeid.startswith(_NOTEBOOK_RUN) else nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config, items):
    rank = {unit: i for i, unit in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(_work_unit(item.nodeid), len(rank)))  # stable: the rest keep their order


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with :func:`_work_unit`'s units, handed out in collection order (longest first, above)
    instead of pytest-xdist's order by number of tests (the option ``loadscopereorder``: pytest-xdist >= 3.8)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LongestFirst(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

    config.option.loadscopereorder = False
    return LongestFirst(config, log)


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    """Every test session derives into its own cache (CI machines start empty too), one for all the workers of a
    pytest-xdist run, unless BEA_TEST_CACHE is set to reuse one between local runs."""
    if os.environ.get("BEA_TEST_CACHE"):
        os.environ["BEA_CACHE_DIR"] = os.environ["BEA_TEST_CACHE"]
    elif os.environ.get("PYTEST_XDIST_WORKER"):
        # one cache for the run's workers (each has its own basetemp below the run's): a C library or series built
        # by one is usually not built again by the other (both build it where both miss at once) -- the cache's
        # writes and its key are safe between processes
        directory = tmp_path_factory.getbasetemp().parent / "bea-cache"
        directory.mkdir(mode=0o700, exist_ok=True)
        os.environ["BEA_CACHE_DIR"] = str(directory)
    else:
        os.environ["BEA_CACHE_DIR"] = str(tmp_path_factory.mktemp("bea-cache"))
    yield


class _RayInstances:
    """At most one Ray instance per test session at a time: ``local()`` (2 CPUs) or ``cluster()`` (two
    simulated nodes of 1 CPU); switching shuts the other down (one process cannot hold two). Started on
    first use, so that sessions without Ray tests never pay for it; workers inherit this process's
    environment (the session's BEA_CACHE_DIR)."""

    def __init__(self):
        self.mode, self._cluster = None, None

    def stop(self):
        import ray

        if ray.is_initialized():
            ray.shutdown()
        if self._cluster is not None:
            self._cluster.shutdown()
            self._cluster = None
        self.mode = None

    def local(self):
        import ray

        if self.mode != "local":
            self.stop()
            # address="local": always a new instance, never one that another pytest-xdist worker's cluster recorded
            ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=100 * 2**20, log_to_driver=False,
                     logging_level="ERROR")
            self.mode = "local"

    def cluster(self):
        import ray
        from ray.cluster_utils import Cluster

        if self.mode != "cluster":
            self.stop()
            self._cluster = Cluster(initialize_head=True, head_node_args={
                "num_cpus": 1, "object_store_memory": 75 * 2**20, "include_dashboard": False})
            self._cluster.add_node(num_cpus=1, object_store_memory=75 * 2**20)
            ray.init(address=self._cluster.address, log_to_driver=False, logging_level="ERROR")
            self.mode = "cluster"
        return self._cluster


@pytest.fixture(scope="session")
def ray_instances():
    """Ray for the sweep tests, started once per session (see :class:`_RayInstances`)."""
    inst = _RayInstances()
    yield inst
    inst.stop()


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


#: the devices of this machine: the CPU always, CUDA when present (issue 14: the same suite passes on a GPU)
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request):
    """Run a test once per available device (a ``torch.device``); tests check that every tensor they get
    back is on the device, and has the dtype, of the data they gave."""
    return torch.device(request.param)


@pytest.fixture(scope="session")
def gp_file(tmp_path_factory):
    """A small fitted pendulum GP saved to disk (the model-file reliability tests edit copies of it)."""
    import integrators as I
    from learners import InverseModifiedLagrangianGP

    snaps = I.data.snapshots(I.systems.pendulum(), 0.5, n_traj=8, n_steps=4, seed=0)
    gp = InverseModifiedLagrangianGP(0.5, lengthscale=1.0, noise=1e-10, progress=False).fit(snaps)
    return gp.save(tmp_path_factory.mktemp("gp") / "gp.pt")


@pytest.fixture(scope="session")
def _two_body_element_fit():
    """The softened two-body problem (tests/test_learners_shadow_auto.two_body4, n = 4) at CI size: 30 trajectories of 5
    steps, h = 0.2, fitted with ElementKernel.bodies(2, 2) -- once per session, for the two modules that fit exactly
    this (tests/test_learners_element_kernel.py, tests/test_learners_structure_choice.py). Never handed out: users get
    :func:`two_body_element_fit`'s deep copy, so no test sees another's calibration or patches."""
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP
    from learners.shadow import ElementKernel
    from tests.test_learners_shadow_auto import two_body4

    system = two_body4()
    data = snapshots(system, 0.2, 30, 5, seed=0)
    model = InverseModifiedLagrangianGP(0.2, kernel=ElementKernel.bodies(2, 2), progress=False).fit(data)
    return system, data, model


@pytest.fixture(scope="module")
def two_body_element_fit(_two_body_element_fit):
    """``(system, data, model)``: a deep copy of the session's two-body element fit (about 0.02 s), one per module."""
    import copy

    return copy.deepcopy(_two_body_element_fit)
