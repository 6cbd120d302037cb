"""How much of the held-out energy-difference error of an element-structure fit is hyperparameter uncertainty (issue 23,
Session 16, branch elemcal; a diagnostic, used by element_calibration_diagnosis.py ``--hyper``).

Re-conditioning at fixed hyperparameters (the distant-difference calibration) cannot see the error that comes from
choosing the hyperparameters on these data. Here the element search's held-out objective (``"positions"``: the mean
over the ``M`` validation functionals' triples of ``log |dc|^2``) is read as a log-likelihood, ``-M/2`` times it up
to a constant, and at the kept hyperparameters theta* each free coordinate ``c`` of the untied stage is moved by
``+-s`` (``--hyper-step``, default log 1.5 / 2, half the stage's first step):

* Laplace (diagonal): curvature ``k_c = (f(+s) + f(-s) - 2 f*) / s^2``, posterior variance ``2 / (M k_c)`` of
  theta_c, and the mean's gradient ``g_c = (m(+s) - m(-s)) / 2s`` of each held-out difference ``m`` (the GP
  conditioned on all the final functionals at that theta); ``var_hyp = sum_c g_c^2 2 / (M k_c)``;
* weighted spread: the ``2 F + 1`` points' means weighted by ``exp(-(f - f*) M / 2)``.

Both with the best-scale direction (the acceptance fits the energy unit) projected out. Printed against the GP's raw
variance ``v`` of the same differences (standardised units; "scale units": ``var / v``), and the RMS z / 2 sigma of
the 40 held-out differences with ``var_hyp`` added to the calibrated GP variance and the truncation term.
"""

from __future__ import annotations

import math
from contextlib import contextmanager


@contextmanager
def recording():
    """Record the element search's full-data objective and the untied stage's result during a fit."""
    import learners.shadow.element_search as E
    import learners.shadow.hyperparameter_search as H

    rec = {"objectives": []}
    real_objective, real_untied = H.objective, E.untied_search

    def objective(gp, kind, F_tr, F_va, G_va, positions=None):
        evaluate = real_objective(gp, kind, F_tr, F_va, G_va, positions)
        rec["objectives"].append((gp, F_tr.count, F_va.count, evaluate))
        return evaluate

    def untied(evaluate, theta, best, free, evaluations):
        out = real_untied(evaluate, theta, best, free, evaluations)
        rec["untied"] = (out[0].clone(), out[1], list(free))
        return out

    H.objective, E.untied_search = objective, untied
    try:
        yield rec
    finally:
        H.objective, E.untied_search = real_objective, real_untied


def _unscaled(d, m0):
    """``d`` (..., B) less its component along ``m0`` (B,): what the best energy unit does not absorb."""
    return d - (d @ m0)[..., None] / (m0 @ m0) * m0


def spread(m, rec, x, xr, step=math.log(1.5) / 2, order=2):
    """``(var_hyp, var_weighted, info)`` (B,) each for the differences ``x - xr`` (standardised), module docstring."""
    import torch

    import learners.shadow.difference_calibration as D
    from learners.shadow.hyperparameter_search import _set_theta

    if "untied" not in rec:
        return None
    gp, F_final = m.gp, m.gp.train_functionals
    _, _, M, evaluate = max((o for o in rec["objectives"] if o[0] is gp), key=lambda o: o[1])
    theta, best, free = rec["untied"]
    m0 = D._mean_differences(m, gp, x, xr, order)
    vals, means = [], []
    points = [theta] + [theta + sgn * step * torch.eye(theta.numel(), dtype=theta.dtype)[c] for c in free for sgn in (1, -1)]
    try:
        with torch.no_grad():
            for th in points:
                vals.append(evaluate(th))
                gp.condition(F_final)
                means.append(D._mean_differences(m, gp, x, xr, order))
    finally:
        with torch.no_grad():
            _set_theta(gp, theta)
            gp.condition(F_final)
        m._recovered, m._jet = {}, None
    means = torch.stack(means)
    f0 = vals[0]
    var_hyp = torch.zeros_like(m0)
    curv = []
    for i, c in enumerate(free):
        fp, fm = vals[1 + 2 * i], vals[2 + 2 * i]
        k = (fp + fm - 2 * f0) / step ** 2
        curv.append(k)
        g = _unscaled((means[1 + 2 * i] - means[2 + 2 * i]) / (2 * step), m0)
        var_hyp = var_hyp + (g ** 2 * 2 / (M * k) if k > 0 else float("inf") * torch.ones_like(g))
    w = torch.tensor([math.exp(-(v - min(vals)) * M / 2) if math.isfinite(v) else 0.0 for v in vals], dtype=m0.dtype)
    dev = _unscaled(means - (w[:, None] * means).sum(0) / w.sum(), m0)
    var_w = (w[:, None] * dev ** 2).sum(0) / w.sum()
    info = {"M": M, "f*": best, "f(theta*) again": f0, "mean moved at theta* (rel)":
            float((means[0] - m0).abs().max() / m0.abs().max()), "curvatures": [round(k, 3) for k in curv],
            "weights": [round(float(a), 3) for a in w], "free": free}
    return var_hyp, var_w, info
