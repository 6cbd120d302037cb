"""Issue 24, class 9: no hidden side effects. The public load/train/fit/predict entry points leave the global random
generators (torch, NumPy, Python) and the environment exactly as they found them.

Before the fix ``ModLaNet.load`` advanced torch's global generator (the constructor's default initial draws, which
the file's weights then replace). Each entry point runs between two snapshots of every global generator state and
of ``os.environ``; the snapshots must be equal, and the loaded/trained models must still give the numbers of the
originals (so the check is not vacuous: the calls did their work)."""

import os
import random

import numpy as np
import pytest
import torch

import integrators as I
from learners import HNN, LNN, InverseModifiedLagrangianGP, MLPBaseline, ModLaNet, train
from learners.neural.options import TrainOptions
from learners.modlanet.elements import UniformGravity


def _globals():
    return (torch.get_rng_state().clone(), np.random.get_state()[1].copy(), random.getstate(), dict(os.environ),
            torch.get_default_dtype(), torch.get_num_threads())


def _assert_unchanged(before, what):
    after = _globals()
    assert torch.equal(before[0], after[0]), f"{what} advanced torch's global generator"
    assert np.array_equal(before[1], after[1]), f"{what} advanced NumPy's global generator"
    assert before[2] == after[2], f"{what} advanced Python's random generator"
    assert before[3] == after[3], f"{what} changed os.environ: {set(after[3].items()) ^ set(before[3].items())}"
    assert before[4:] == after[4:], f"{what} changed torch's default dtype or thread count"


@pytest.mark.parametrize("make", [
    lambda: ModLaNet.pendulum_chain(2, hidden=8),  # seed None: the constructor draws from the global generator
    lambda: ModLaNet.pendulum_chain(2, transform="rod", lengths=[1.0, 0.5], potential=UniformGravity(9.8), pair=None),
    lambda: LNN(2, 8), lambda: HNN(2, 8), lambda: MLPBaseline(2, 8),
], ids=["modlanet-mlp", "modlanet-rod", "lnn", "hnn", "mlp"])
def test_load_leaves_global_state_alone(make, tmp_path):
    model = make()
    path = model.save(tmp_path / "m.pt")
    before = _globals()
    loaded = type(model).load(path)
    _assert_unchanged(before, f"{type(model).__name__}.load")
    q = torch.linspace(-1, 1, 2 * model.n, dtype=torch.float64).reshape(2, model.n)
    assert float((loaded.acceleration(q, q) - model.acceleration(q, q)).detach().abs().max()) <= 1e-14


def test_train_fit_predict_and_gp_load_leave_global_state_alone(tmp_path):
    pend = I.systems.pendulum()
    snaps = I.data.snapshots(pend, 0.5, n_traj=12, n_steps=4, seed=0)
    before = _globals()
    gp = InverseModifiedLagrangianGP(0.5, iterations=3, max_train_functionals=40, progress=False).fit(snaps)
    q0 = torch.tensor([[0.3]], dtype=torch.float64)
    qs = gp.predict(q0, torch.zeros_like(q0), 5, on_extrapolation="ignore").q
    _assert_unchanged(before, "InverseModifiedLagrangianGP.fit/predict")
    before = _globals()
    loaded = InverseModifiedLagrangianGP.load(gp.save(tmp_path / "gp.pt"))
    _assert_unchanged(before, "InverseModifiedLagrangianGP.load")
    assert float((loaded.predict(q0, torch.zeros_like(q0), 5, on_extrapolation="ignore").q - qs).abs().max()) <= 1e-14
    net = LNN(1, 8, seed=0)
    w0 = [p.detach().clone() for p in net.parameters()]
    before = _globals()
    res = train(net, snaps, loss="del", h=0.5, options=TrainOptions(epochs=2, batch_size=16, progress=False))
    _assert_unchanged(before, "train")
    assert res.n_train > 0 and any(not torch.equal(a, b) for a, b in zip(w0, net.parameters())), "train did nothing"


def test_library_code_has_no_global_seeding_or_environment_writes():
    """A static guard for the same class: library code never seeds or configures the global generators or
    torch, and never writes os.environ. Allowed, each inside a context that restores what it changes: the sweep
    executor (a task's seed, threads and dtype), ``integrators._environment.environment_kept`` (puts back what
    torch's import writes into os.environ) and the seeded initialisation in ``learners.neural.mlp`` (in
    ``torch.random.fork_rng``)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    allowed = {"pipelines/sweep/execute.py": 7, "integrators/_environment.py": 1, "learners/neural/mlp.py": 1}
    bad = re.compile(r"(?<![\w.])(torch\.manual_seed|np\.random\.seed|random\.seed|torch\.set_default_dtype|"
                     r"torch\.set_num_threads|torch\.use_deterministic_algorithms)\(|os\.environ\[[^]]+\]\s*=|"
                     r"os\.environ\.(setdefault|update|pop)\(|os\.putenv\(")
    hits = []
    for pkg in ("bea", "integrators", "learners", "pipelines"):
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            for no, line in enumerate(path.read_text().splitlines(), 1):
                if bad.search(line):
                    hits.append(f"{rel}:{no}: {line.strip()}")
    assert [h for h in hits if h.split(":")[0] not in allowed] == [], hits
    counts = {f: sum(h.startswith(f + ":") for h in hits) for f in allowed}
    assert counts == allowed, counts  # no new ones in the allowed files either
    assert bad.search("torch.manual_seed(0)") and bad.search("os.environ['X'] = '1'")  # the pattern can fire
