"""Which selection criterion ranks ``kernel="auto"``'s refined candidates the way their true ``H_rec[4]`` level-set
errors do (issue 23; benchmarks/RESULTS_identification.md, Session 11, branch gain).

One default fit of the FPU chain (as ``benchmarks/identification_default.py``; the principal-direction candidate off,
as in Session 10's exploratory rows: it is not kept on these data) records every candidate the search refines (the
RBF's choice, each mechanical candidate). Then, for each candidate, at its own refined hyperparameters:

- ``one-step``: its refined held-out value (mean log squared one-step error; the search's criterion);
- ``cons N``: :func:`benchmarks._conservation_score.score_of_energies` of ``H_rec[N]`` along the held-out
  trajectories, the GP conditioned on the search's training functionals (positions only), then the first variant tried
  (log of the mean variance along a trajectory over the variance of the means), then the CPU seconds of the energies;
- ``ls2, ls4, gain``: the true level-set errors of the candidate's final model (all data, the mass target as the fit
  would apply it), what the criterion should rank by.

Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 nice -n 5 python3 benchmarks/identification_selection.py --h 0.4 --seed 0 1 2
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import replace


def main(argv=None) -> None:
    from pipelines import identification as I

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=6)
    ap.add_argument("--traj", type=int, default=200)
    ap.add_argument("--points", type=int, default=40)
    ap.add_argument("--h", type=float, nargs="+", default=[I.CI.h])
    ap.add_argument("--seed", type=int, nargs="+", default=[I.CI.data_seed])
    ap.add_argument("--orders", type=int, nargs="+", default=[2, 4], help="orders of the conservation score")
    ap.add_argument("--save", default=None, help="path prefix: the energies along the held-out trajectories and the errors")
    args = ap.parse_args(argv)
    for h in args.h:
        for seed in args.seed:
            cfg = replace(I.CI, chain_n=args.n, h=h, lengthscale=None, q0=(0.0,) * args.n, qdot0=(0.0,) * args.n,
                          n_traj=args.traj, data_seed=seed)
            _rows(args, cfg)


def _fit(cfg):
    """The default fit with the principal candidate off: the model, the refined candidates, ``{"F_data", "diagonal"}``
    (the data functionals and the diagonal condition the search saw), the system and the fit's CPU seconds."""
    from learners import InverseModifiedLagrangianGP
    from learners.shadow import hyperparameters, position_search, principal
    from pipelines import identification as I
    from integrators.data import snapshots

    system = I.chain_system(cfg)
    dom = [(-cfg.amplitude, cfg.amplitude)] * (2 * cfg.chain_n)
    S = snapshots(system, cfg.h, cfg.n_traj, cfg.n_steps, domain=dom, seed=cfg.data_seed)
    refined, data = [], {}
    original_refined, original_search, original_applies = (position_search._refined, hyperparameters.search_positions,
                                                           principal._applies)

    def recording_refined(model, n, cand):
        out = original_refined(model, n, cand)
        refined.append(out[0])
        return out

    def recording_search(model, F_data, *a, **k):
        data["F_data"], data["diagonal"] = F_data, getattr(model, "_norm_diagonal", None)
        return original_search(model, F_data, *a, **k)

    position_search._refined, hyperparameters.search_positions = recording_refined, recording_search
    principal._applies = lambda model, n: False
    try:
        t = time.process_time()
        model = InverseModifiedLagrangianGP(cfg.h, progress=False).fit(S)
        cpu = time.process_time() - t
    finally:
        position_search._refined, hyperparameters.search_positions = original_refined, original_search
        principal._applies = original_applies
    return model, refined, data, system, cpu


def _rows(args, cfg) -> None:
    """Fit once, then score and measure every refined candidate (module docstring); one row each."""
    import torch
    from benchmarks._conservation_score import score_of_energies
    from learners.shadow.functionals import Functionals
    from learners.shadow.hyperparameter_search import settle
    from learners.shadow.position_search import tied_theta
    from pipelines import identification as I

    model, refined, data, system, cpu = _fit(cfg)
    F_data = data["F_data"]
    kept = (model.kernel_degree, model.history.get("mechanical_kept_name"))
    print(f"h {cfg.h} seed {cfg.data_seed}: fit {cpu:.1f} s CPU, kept degree {kept[0]} ({kept[1]}), "
          f"candidates {model.history.get('normalisation_candidates')}", flush=True)
    S_va = model._pending_calibration[1]
    qs = model._from_standard(S_va).transpose(0, 1)  # (steps + 1, held-out trajectories, n), data's units
    final_gp, final_degree = model.gp, model.kernel_degree
    saved = {"fit_cpu": cpu, "kept": kept}
    for lq, lv, val, _, F_all, norm, _, gp, degree in refined:
        name = "rbf" if degree is None else f"deg{degree}" + ("_diag" if norm is data["diagonal"] else "")
        settle(gp, "positions", tied_theta(lq, lv, model.n), F_all)
        with torch.no_grad():
            gp.condition(F_all)
        model.gp, model.kernel_degree, model._recovered, model._jet = gp, degree, {}, None
        scores = {}
        for N in args.orders:
            t = time.process_time()
            E = model.energies(qs, N).detach()
            scores[N] = (score_of_energies(E), _log_of_mean(E), time.process_time() - t)
            saved.setdefault(name, {})[f"E{N}"] = E
        with torch.no_grad():
            gp.condition(Functionals.cat([F_data, norm]))
        model._recovered, model._jet = {}, None
        t = time.process_time()
        raw = I.level_set_errors(cfg, model, system, (2, 4), args.points)  # before the mass target
        ls_cpu = time.process_time() - t
        targets = gp.train_functionals.targets.clone()
        model._correct_targets(norm)
        moved = not torch.equal(targets, gp.train_functionals.targets)
        model._recovered, model._jet = {}, None
        ls = I.level_set_errors(cfg, model, system, (2, 4), args.points) if moved else raw
        saved[name].update(one_step=val, ls=ls, raw=raw)
        if args.save:
            torch.save(saved, f"{args.save}-h{cfg.h}-s{cfg.data_seed}.pt")
        score_s = "  ".join(f"cons{N} {s:8.3f} / {a:7.3f} ({c:5.1f} s)" for N, (s, a, c) in scores.items())
        print(f"  {name:>10} one-step {val:8.3f}  {score_s}  ls2 {ls['ls2']:.5f} ls4 {ls['ls4']:.5f} "
              f"gain {ls['ls2'] / ls['ls4']:.2f}" + (f"  (mass target moved; before it ls2 {raw['ls2']:.5f} ls4 {raw['ls4']:.5f})"
                                                      if moved else "") + f"  [level sets {ls_cpu:.1f} s]", flush=True)
    model.gp, model.kernel_degree = final_gp, final_degree


def _log_of_mean(E) -> float:
    """The first variant tried: the log of the mean variance along a trajectory over the variance of the means."""
    return math.log(float(E.var(0, unbiased=False).mean() / E.mean(0).var(unbiased=False)))


if __name__ == "__main__":
    main()
