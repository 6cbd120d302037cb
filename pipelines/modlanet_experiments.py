r"""The ModLaNet experiments of docs/theory/modlanet.md (paper Table 2 and §5.3) as one function.

:func:`run` executes a :class:`ModLaNetConfig` for ``"double_pendulum"`` or ``"three_body"``:

1. **data** -- ``(q, v, a)`` samples of the exact flow (:mod:`learners.modlanet.data`, the paper's
   settings at full size: 10 100 / 20 200 samples);
2. **training** -- ModLaNet on the acceleration loss :math:`\operatorname{mean}|\hat{\ddot q} - \ddot q|^2`
   and the baselines (light LNN, HNN, MLP; :func:`~learners.neural.baselines.paper_baseline`) in the
   same loop (:func:`learners.neural.training.train`); HNN on its whole canonical vector field
   :math:`(\dot q, \dot p)` as the paper (:class:`~learners.neural.baselines.VectorFieldModel`);
3. **rollouts** -- ``n_states`` random initial states (:func:`~learners.neural.rollout.random_initial_states`),
   ``t_rollout`` seconds, RK4 with step ``dt_out / substeps`` against the exact flow (DOP853, 1e-13);
   ModLaNet also with the midpoint variational integrator (step ``variational_h``, :math:`p_0 = \partial_vL`);
4. **metrics** -- :math:`\mathrm{MSE}_q` (angles mod :math:`2\pi` for the pendulum, see
   :func:`~learners.neural.rollout.mse_q`) and :math:`\mathrm{MSE}_E` with the *true* energy, both averaged
   over time and over the states that did not fail (:func:`~learners.neural.rollout.rollout_metrics`); the same
   rollouts in :func:`~learners.neural.rollout.paper_statistic` (``stat q``, ``stat E``: what the paper's code prints
   as "MSE", a norm over the 601 time points divided by 601 -- the numbers to hold against its Table 2);
   parameter counts and the wall time of every stage;
5. **position-only** (``position_only=True``) -- ModLaNet trained as the inverse modified Lagrangian
   :math:`L_{inv}` of the midpoint rule with the DEL loss on snapshots at ``h = 0.1`` (no velocities,
   no accelerations), rolled out with the midpoint rule on :math:`L_{inv}` with
   :math:`p_0 = \partial_v\,\mathrm{mod}_2(L_{inv})(q_0, \dot q_0)`, velocities by the Legendre map of
   :math:`\mathrm{mod}_2(L_{inv})`. Identification: the level-set error
   (:func:`learners.metrics.level_set_error`,
   :math:`\mu = \sin\angle(\nabla H_{true}, \nabla H_{rec}[N])`, mean over states of the exact flow)
   of :math:`H_{rec}[0] = H(L_{inv})` and :math:`H_{rec}[2] = H(\mathrm{mod}_2 L_{inv})`, and their relative band
   along the prediction (:func:`_relative_band`: variation in time over spread between states). With
   ``del_inverse_order=2`` (full size) the model is one of the true :math:`L` and is also rolled out like the
   acceleration-trained one (RK4, and the midpoint rule at ``variational_h``), see :func:`_position_only`;
6. **extension** (paper §5.3) -- the trained model :meth:`~learners.modlanet.ModLaNet.extend`\ ed to
   more elements (3, 4 pendula; 4, 5, 6 bodies) without retraining, rolled out for ``extension_t``
   seconds (the paper: 10 s), then fine-tuned on ``1/10`` of the training data size of the larger
   system for ``1/5`` of the epochs, and rolled out again (MSE_q, MSE_E before and after, and the
   largest energy deviation :math:`\max_t |E(t) - E(0)|` as the "bounded energy error").

:func:`table` prints the rows next to the paper's numbers (:data:`PAPER_TABLE`). Command line::

    python -m pipelines.modlanet_experiments --small                       # reduced size (~1 min)
    python -m pipelines.modlanet_experiments --system double_pendulum      # full size (hours on 2 cores)
    python -m pipelines.modlanet_experiments --system three_body --epochs 3000 --no-baselines --no-extension

Measured numbers at full size: ``docs/results/modlanet_log.md``.

The stages live in :mod:`pipelines.modlanet_stages` and :mod:`pipelines.modlanet_position_only`, the settings in
:mod:`pipelines.modlanet_config`, the table in :mod:`pipelines.modlanet_table`; their names are re-exported here.
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from typing import Any, Callable, Dict, Optional, Sequence

import torch

from bea.cli import OneLineParser
from bea.files import atomic_save
from bea.errors import BeaValueError
from integrators import reference_flow
from learners.neural.baselines import parameter_count
from learners.neural.training import train

# the stages' private names too: tests and notebooks reach them here, where they were defined before the split
from .modlanet_config import _LABELS, FULL, PAPER_TABLE, SMALL, ModLaNetConfig
from .modlanet_position_only import _invert, _ls_states, _position_only, _relative_band, _velocities
from .modlanet_stages import (_Clock, _data, _energy_curve, _energy_deviation, _extension, _modlanet, _positions, _rollout_row,
                              _states, _system, _times, _train_baseline, _train_kwargs)
from .modlanet_table import _cells, _fmt, table

__all__ = ["ModLaNetConfig", "run", "table", "PAPER_TABLE", "FULL", "SMALL", "main"]


# ---------------------------------------------------------------------------------------------- run
def run(config: ModLaNetConfig = FULL["double_pendulum"], log: Callable[[str], None] = print) -> Dict[str, Any]:
    """Run the experiment (module docstring). Returns a dict with ``config``, ``rows`` (one per model:
    ``model, params, mse_q, mse_E, *_std, failed, states, train_val`` and the trajectories ``q, v``),
    ``reference`` (``times, q, v``), ``initial``/``trained`` validation losses of ModLaNet,
    ``position_only``, ``extension``, ``models`` and ``timings`` (seconds per stage)."""
    cfg = config
    if cfg.system not in ("double_pendulum", "three_body"):
        raise BeaValueError(f"system must be 'double_pendulum' or 'three_body', got {cfg.system!r}")
    if cfg.variational_h is not None and abs(cfg.dt_out / cfg.variational_h - round(cfg.dt_out / cfg.variational_h)) > 1e-9:
        raise BeaValueError(f"variational_h ({cfg.variational_h}) must divide dt_out ({cfg.dt_out})")
    clock = _Clock(log)
    t_start = time.perf_counter()
    torch_threads = torch.get_num_threads()
    log(f"ModLaNet experiment: {cfg.system} ({torch_threads} torch threads)")
    data = clock("data", _data, cfg)
    log(f"  {len(data)} samples")
    system = _system(cfg)

    # reference rollouts
    q0, v0 = _states(cfg, None, cfg.n_states, seed=cfg.seed + 1000)
    ts = _times(cfg.t_rollout, cfg.dt_out)
    flow = clock("reference", reference_flow, system, q0, v0, ts)
    q_ref, v_ref = flow.q, flow.v

    # ModLaNet on accelerations
    model = _modlanet(cfg)
    res = clock("train modlanet", train, model, (data.q, data.v, data.a), **_train_kwargs(cfg, cfg.epochs))
    log(f"  ModLaNet validation loss {res.initial_val:.3e} -> {res.best_val:.3e} ({res.epochs_run} epochs)")
    rows = [_rollout_row("ModLaNet", model, parameter_count(model), q0, v0, ts, q_ref, v_ref, cfg, clock)]
    rows[0]["train_val"] = (res.initial_val, res.best_val)
    if cfg.variational_h is not None:
        r = _rollout_row("ModLaNet (variational)", model, parameter_count(model), q0, v0, ts, q_ref, v_ref, cfg, clock,
                         kind="variational")
        r["train_val"] = rows[0]["train_val"]
        rows.append(r)
    models: Dict[str, Any] = {"modlanet": model}

    # baselines, same loop
    for kind in cfg.baselines:
        bm, bres = _train_baseline(kind, cfg, data, clock)
        log(f"  {kind} validation loss {bres.initial_val:.3e} -> {bres.best_val:.3e}")
        r = _rollout_row(_LABELS.get(kind, kind), bm, parameter_count(bm), q0, v0, ts, q_ref, v_ref, cfg, clock,
                         kind="hnn" if kind.endswith("hnn") else "ode")
        r["train_val"] = (bres.initial_val, bres.best_val)
        rows.append(r)
        models[kind] = bm
    for r in rows:
        log(f"  {r['model']:<26} MSE_q {r['mse_q']:.3e}  MSE_E {r['mse_E']:.3e}  paper statistic q {r['paper_q']:.3e} "
            f"E {r['paper_E']:.3e}  failed {r['failed']}/{r['states']}")

    out: Dict[str, Any] = {"config": cfg, "rows": rows, "reference": {"times": ts, "q": q_ref, "v": v_ref},
                           "train": res, "models": models}
    if cfg.position_only and cfg.system == "double_pendulum":
        po = _position_only(cfg, q0, v0, q_ref, v_ref, ts, clock, log)
        out["position_only"] = po
        models["modlanet_del"] = po.pop("modelobj")
        log(f"  position-only: MSE_q {po['mse_q']:.3e}, MSE_E {po['mse_E']:.3e}, failed {po['failed']}; level-set error "
            f"N=0 {po['level_set'][0]:.3e}, N=2 {po['level_set'][2]:.3e}")
    if cfg.extend_to:
        out["extension"] = _extension(cfg, model, len(data), clock, log)
    clock.timings["total"] = time.perf_counter() - t_start
    out["timings"] = clock.timings
    return out


# ---------------------------------------------------------------------------------------------- CLI
def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    p = OneLineParser(prog="python -m pipelines.modlanet_experiments", description=__doc__.split("\n")[0],
                     name="pipelines.modlanet_experiments")
    p.add_argument("--system", choices=("double_pendulum", "three_body"), default="double_pendulum")
    p.add_argument("--small", action="store_true", help="reduced size (tests, about a minute)")
    p.add_argument("--epochs", type=int, default=None, help="ModLaNet and baseline epochs (default: the config's)")
    p.add_argument("--no-baselines", action="store_true", help="ModLaNet only (no LNN/HNN/MLP training and rollouts)")
    p.add_argument("--no-extension", action="store_true", help="skip the extension to more elements")
    p.add_argument("--no-position-only", action="store_true", help="skip the position-only (DEL) variant")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--save", default=None, help="write the numbers, curves and trajectories (torch.save, no models) here")
    args = p.parse_args(argv)
    cfg = (SMALL if args.small else FULL)[args.system]
    if args.epochs is not None:
        cfg = replace(cfg, epochs=args.epochs, baseline_epochs=args.epochs, del_epochs=args.epochs)
    if args.no_progress:
        cfg = replace(cfg, progress=False)
    if args.no_baselines:
        cfg = replace(cfg, baselines=())
    if args.no_extension:
        cfg = replace(cfg, extend_to=())
    if args.no_position_only:
        cfg = replace(cfg, position_only=False)
    print(cfg.describe(), flush=True)
    res = run(cfg, log=lambda s: print(s, flush=True))
    print(table(res), flush=True)
    if args.save:
        plain = _plain(res)
        atomic_save(args.save, lambda fh: torch.save(plain, fh))
        print(f"saved to {args.save}", flush=True)
    return res


def _plain(x):
    """``results`` without models and training objects (tensors, numbers, strings, dicts, lists), for ``torch.save``."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items() if k not in ("models",)}
    if isinstance(x, (list, tuple)):
        return type(x)(_plain(v) for v in x)
    if isinstance(x, ModLaNetConfig):
        return asdict(x)
    if isinstance(x, (torch.Tensor, int, float, str, bool)) or x is None:
        return x
    if hasattr(x, "history"):  # TrainResult
        return {"history": x.history, "best_val": x.best_val, "epochs_run": x.epochs_run, "seconds": x.seconds}
    return repr(x)


if __name__ == "__main__":
    import sys

    from bea.cli import run_guarded

    sys.exit(run_guarded(lambda: main() and None, "pipelines.modlanet_experiments"))
