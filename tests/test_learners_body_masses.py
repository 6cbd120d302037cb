"""``kernel="auto"`` on bodies of unequal masses (learners/shadow/structure_choice.py, ``_per_body``): where identical
bodies screen best, the same bodies with one element each and the diagonal mass condition are screened too and replace
them where their held-out value is lower by BODY_MARGIN -- a shared body element cannot hold unequal masses."""

import warnings
from types import SimpleNamespace

import pytest
import sympy
import torch
import integrators
from integrators.data import snapshots
from learners import InverseModifiedLagrangianGP
from bea.errors import BeaRuntimeError
from learners import saving
from learners.shadow import element_search, normalisation, persist, structure_choice
from learners.shadow.guards import IdentifiabilityWarning
from learners.shadow.element_kernel import ElementKernel
from learners.shadow.normalisation import MassNormalisation
from learners.shadow.structure_choice import UNEQUAL, structure_kernel, structure_name
from tests.test_learners_shadow_auto import energy_differences


def heavy_light4():
    """Two bodies of masses 1 and 3 in the plane, softened attraction 3 / (2 sqrt(r^2 + 2/5)), a harmonic trap of
    stiffness m_i / 6 (this file's own system: no other test or tuning uses it)."""
    q = sympy.symbols("x1 y1 x2 y2", real=True)
    v = sympy.symbols("u1 w1 u2 w2", real=True)
    m = (1, 1, 3, 3)
    r2 = (q[0] - q[2])**2 + (q[1] - q[3])**2 + sympy.Rational(2, 5)
    T = sum(mi * x**2 for mi, x in zip(m, v)) / 2
    V = -sympy.Rational(3, 2) / sympy.sqrt(r2) + sum(mi * x**2 for mi, x in zip(m, q)) / 12
    return integrators.systems.from_sympy(T - V, q, v, "heavy_light4", domain=[(-0.7, 0.7)] * 4 + [(-0.3, 0.3)] * 4)


def test_the_per_body_spec_builds_one_element_per_body():
    """("bodies", k, d, UNEQUAL) is ElementKernel.bodies(k, d, identical=False): two body groups and the pair group,
    against one body group for identical bodies; its name says so."""
    spec = ("bodies", 2, 2, UNEQUAL)
    assert structure_name(spec) == "bodies(2, 2, identical=False)"
    per_body, identical = structure_kernel(spec), structure_kernel(spec[:3])
    assert per_body.parameter_names() == ElementKernel.bodies(2, 2, identical=False).parameter_names()
    assert len(per_body.groups) == len(identical.groups) + 1 and not per_body.equal_masses() and identical.equal_masses()


def test_a_list_spec_is_per_body_too(monkeypatch):
    """A model file holds the spec as a list: its name, kernel and the diagonal condition in the search's arguments
    are those of the tuple (a comparison with a tuple slice would read the list as identical bodies)."""
    spec = ["bodies", 2, 2, UNEQUAL]
    assert structure_name(spec) == "bodies(2, 2, identical=False)" and not structure_kernel(spec).equal_masses()
    model, args = SimpleNamespace(_norm_diagonal="diagonal"), tuple(range(9))
    monkeypatch.setattr(structure_choice, "at_data_states", lambda F_diag, F_data: (F_diag, F_data))
    assert structure_choice._spec_args(model, spec, args)[8] == ("diagonal", 0)  # at the data's states (args[0])
    assert structure_choice._spec_args(model, spec[:3], args) == args


def test_the_diagonal_condition_is_set_at_data_states_too():
    """at_data_states repeats the diagonal condition's entries above the diagonal (6 at n = 4) at BODY_STATES of the
    data's states, targets 0; L(x0), dL/dv(x0) and the trace stay once. A per-body Lagrangian without velocity coupling
    meets them all (to rounding); the pair's freedom, a coupling c(r) |v1 - v2|^2 with c(0) = 0 (r = q1 - q2), meets the
    one at x0 and none at the data's states, whose r is not 0 -- which the condition at x0 alone left free."""
    from learners.shadow.functionals import AtomSet, Functionals

    D, count = 8, 5
    F_diag = MassNormalisation(matrix="diagonal").functionals(4, torch.zeros(D, dtype=torch.float64))
    points = torch.randn(20, D, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    F_data = Functionals(D, 20, {0: AtomSet(points, torch.zeros(20, 0, D, dtype=torch.float64),
                                            torch.ones(20, dtype=torch.float64), torch.arange(20))})
    F = normalisation.at_data_states(F_diag, F_data, count)
    first = F_diag.count
    assert F.count == first + 6 * count and bool((F.targets[first:] == 0).all())
    assert torch.equal(F.targets[:first], F_diag.targets)
    extra = F.atoms[2].owner >= first
    assert all(bool((points == x).all(-1).any()) for x in F.atoms[2].points[extra])

    def per_body(x):
        q, v = x[..., :4], x[..., 4:]
        r2 = (q[..., :2] - q[..., 2:]).pow(2).sum(-1)
        return (v[..., :2].pow(2).sum(-1) + 3 * v[..., 2:].pow(2).sum(-1)) / 2 + 1 / (r2 + 0.4).sqrt() - q.pow(2).sum(-1) / 6

    def coupled(x):
        r2 = (x[..., :2] - x[..., 2:4]).pow(2).sum(-1)
        return per_body(x) + r2 * (x[..., 4:6] - x[..., 6:]).pow(2).sum(-1) / 10

    off = torch.arange(4 + 2, first)  # the entries above the diagonal at x0
    assert float(F.apply(per_body).detach()[torch.cat([off, torch.arange(first, F.count)])].abs().max()) < 1e-12
    moved = F.apply(coupled).detach()
    assert float(moved[off].abs().max()) < 1e-12 and float(moved[first:].abs().max()) > 1e-2

    # with the curvature term (the fits' kappa = h^2/12 in standard units) the conditions at the data's states carry
    # their q-atoms too: bodies in separate traps plus a coupling a (|v_r|^2 / 2 + |r|^2 / (2 kappa)) have
    # d2L/dv2 - kappa d2L/dq2 diagonal at every state, and meet every condition only with them (a copy without them
    # leaves -a at each state)
    kappa, a = 0.3, 0.2
    norm_k = MassNormalisation(matrix="diagonal", curvature=kappa)
    F_k = normalisation.at_data_states(norm_k.functionals(4, torch.zeros(D, dtype=torch.float64)),
                                       F_data, count)

    def balanced(x):
        q_r, v_r = x[..., :2] - x[..., 2:4], x[..., 4:6] - x[..., 6:]
        separate = (x[..., 4:6].pow(2).sum(-1) + 3 * x[..., 6:].pow(2).sum(-1)) / 2 - x[..., :4].pow(4).sum(-1) / 6
        return separate + a * (v_r.pow(2).sum(-1) / 2 + q_r.pow(2).sum(-1) / (2 * kappa))

    assert F_k.count == F.count
    assert float(F_k.apply(balanced).detach()[torch.cat([off, torch.arange(first, F_k.count)])].abs().max()) < 1e-12
    assert float(F.apply(balanced).detach()[first:].abs().max()) > 0.1  # without the curvature term: the coupling a is seen


def _candidate(value, spec):
    return (value, tuple(spec), f"gp {structure_name(spec)}", None, {})


def test_per_body_is_screened_where_bodies_screen_near_the_best(monkeypatch):
    """Identical bodies within STRUCTURE_MARGIN of the best screen (here 0.5 behind a chain) get the per-body screen
    (at masses 1 : 3 to 1 : 30 they led the wrong chain(4) by only 0.5-1.5, RESULTS Session 20 fix pass); farther behind, none."""
    calls = []
    monkeypatch.setattr(structure_choice, "_screen_spec",
                        lambda model, spec, args, D, records: calls.append(spec) or _candidate(-9.0, spec))
    model, args = SimpleNamespace(_norm_diagonal="diagonal"), (SimpleNamespace(dim=8),)
    near = [_candidate(-5.0, ("chain", 4, "fixed")), _candidate(-4.5, ("bodies", 2, 2))]
    out = structure_choice._per_body(model, args, near, {})
    assert calls == [("bodies", 2, 2, UNEQUAL)] and out[-1][1] == ("bodies", 2, 2, UNEQUAL) and len(out) == 3
    far = [_candidate(-5.0, ("chain", 4, "fixed")), _candidate(-5.0 + structure_choice.STRUCTURE_MARGIN + 0.1,
                                                               ("bodies", 2, 2))]
    assert structure_choice._per_body(model, args, far, {}) == far and len(calls) == 1


@pytest.mark.parametrize("per_body", ["behind", "fails"])
def test_a_per_body_refinement_not_kept_falls_back_to_the_others(monkeypatch, per_body):
    """The per-body structure screened best but its refinement is not kept (behind the default's by less than the margin,
    or raising): the best of the others, identical bodies, is refined and kept, as without the per-body screen."""
    screened = [_candidate(-6.0, ("bodies", 2, 2)), _candidate(-4.0, ("chain", 4, "fixed"))]
    monkeypatch.setattr(structure_choice, "_per_body",
                        lambda model, args, s, records: s + [_candidate(-9.0, ("bodies", 2, 2, UNEQUAL))])
    refined = {"gp bodies(2, 2, identical=False)": -0.5, "gp bodies(2, 2)": -3.0}  # the default's: 0, margin 1
    scans = {}

    def search(model, *args, start, group_scan):
        scans[model.gp] = group_scan
        if model.gp.endswith("identical=False)") and per_body == "fails":
            raise BeaRuntimeError("no usable fit")
        model.history["objective"] = refined[model.gp]
        return f"result of {model.gp}"

    monkeypatch.setattr(element_search, "element_start", lambda model, *args, **options: None)
    monkeypatch.setattr(structure_choice, "at_data_states", lambda F_diag, F_data: F_diag)  # no functionals here
    monkeypatch.setattr(element_search, "search_elements", search)
    model = SimpleNamespace(history={"objective": 0.0}, gp="default", kernel_structure=None, kernel_degree=2,
                            _norm_diagonal="diagonal")
    records = {structure_name(c[1]): {} for c in screened + [_candidate(0, ("bodies", 2, 2, UNEQUAL))]}
    monkeypatch.setattr(structure_choice, "_screen", lambda model, args, D, r: r.update(records) or screened)
    out = structure_choice.choose_structure(model, (SimpleNamespace(dim=4),) + (None,) * 8, "found")
    assert out == "result of gp bodies(2, 2)" and model.kernel_structure == ("bodies", 2, 2), out
    assert model.history["structure_kept"] == "bodies(2, 2)" and model.history["objective"] == -3.0
    said = model.history["structures"]["bodies(2, 2, identical=False)"]
    assert ("error" in said) == (per_body == "fails") and ("refined" in said) == (per_body == "behind")
    # stage 2c (each group's lengthscale) for the per-body refinement only: identical bodies' fits stay as before
    assert scans == {"gp bodies(2, 2, identical=False)": True, "gp bodies(2, 2)": False}, scans


def test_the_group_scan_parts_a_short_range_pair_from_smooth_bodies():
    """scan_groups (element search stage 2c) on a held-out value that is lowest with the pair's lengthscale 4x below
    the tied start and the bodies' 2x above it (lj_unequal4's pattern: pair 8 -> 2, bodies 8 -> 16-24 data spreads):
    it finds both in one pass, 4 solves a group, leaves the correction's lengthscale and every other scale alone, and
    keeps the start where no factor improves. Stage 3's steps of 1.5 with 16 solves for 11 free scales did not part
    them (held-out -11.18, energy differences 7.6e-2; RESULTS_identification.md, Session 25)."""
    import math

    k = ElementKernel.bodies(2, 2, identical=False)
    names = k.parameter_names()
    theta = element_search.element_theta(k, 8.0, 64.0)
    best = {"body0:lengthscale": 16.0, "body1:lengthscale": 16.0, "pair:lengthscale": 2.0, "correction:lengthscale": 1.0}
    calls = []

    def held_out(th):
        calls.append(th.clone())
        return sum((float(th[i]) - math.log(best[x])) ** 2 for i, x in enumerate(names) if x in best)

    out, value, trace = element_search.scan_groups(held_out, theta, held_out(theta), names)
    got = {x: math.exp(float(out[i])) for i, x in enumerate(names)}
    assert [round(got[x], 9) for x in ("body0:lengthscale", "body1:lengthscale", "pair:lengthscale")] == [16.0, 16.0, 2.0]
    other = [i for i, x in enumerate(names) if x not in ("body0:lengthscale", "body1:lengthscale", "pair:lengthscale")]
    assert torch.equal(out[other], theta[other]) and "correction:lengthscale" in [names[i] for i in other]
    assert len(trace) == 3 * len(element_search.GROUP_FACTORS) == len(calls) - 1 and value == min(trace)
    same, v2, _ = element_search.scan_groups(held_out, out, value, names)  # already at the lowest: kept
    assert torch.equal(same, out) and v2 == value


@pytest.fixture(scope="module")
def heavy_light_auto():
    """heavy_light4 at CI size (60 trajectories of 5 steps, h = 0.2), library defaults (27.4 CPU s measured, loaded
    machine). Not 40: the per-body structure is still kept there (screens -11.45 / -6.07) but its energy differences
    0.200 equal the default kernels' 0.196 (RESULTS Session 20 fix pass), so the energy bound would not test the change."""
    system = heavy_light4()
    data = snapshots(system, 0.2, 60, 5, seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = InverseModifiedLagrangianGP(0.2, progress=False).fit(data)
    return system, model, caught


def test_unequal_masses_keep_one_element_per_body(heavy_light_auto):
    """The default keeps bodies(2, 2, identical=False) with the diagonal condition (its final normalisation is the
    diagonal condition's, not the whole matrix's): its screen led the identical bodies' by more than BODY_MARGIN
    (measured -11.42 against -6.16), and it warns why its energies are less certain. Energy differences 1.42e-3 measured
    (seed 0; seed 2: 1.76e-3) with the diagonal condition at BODY_STATES data states besides x0 (Session 24); with it
    at x0 only 0.115 (seed 2: 0.197), and with no per-body screen 1.71. The bound 1e-2: 5.7x the larger draw measured
    (room for the draw and rounding across machines), 11x below the value with the condition at x0 only."""
    system, m, caught = heavy_light_auto
    h = m.history
    assert m.kernel_structure == ("bodies", 2, 2, UNEQUAL) and h["structure_kept"] == "bodies(2, 2, identical=False)"
    screens = {name: r.get("screen") for name, r in h["structures"].items()}
    assert screens["bodies(2, 2, identical=False)"] < screens["bodies(2, 2)"] - structure_choice.BODY_MARGIN, screens
    counts = {matrix: MassNormalisation(matrix=matrix).functionals(4).count for matrix in ("diagonal", True)}
    assert m._norm_count == counts["diagonal"] + 6 * normalisation.BODY_STATES != counts[True], counts  # 6 entries a state
    searched = h["structures"]["bodies(2, 2, identical=False)"]["history"]  # the refinement's, the screen's inside
    assert searched["normalisation_candidates"] == searched["screen"]["normalisation_candidates"] == ["diagonal"]
    rel, _ = energy_differences(m, system, 2, return_std=False)
    assert rel <= 1e-2, rel
    said = [str(w.message) for w in caught if issubclass(w.category, IdentifiabilityWarning)]
    assert any("kept bodies(2, 2, identical=False)" in x and "more trajectories" in x for x in said), said


def test_the_per_body_warning_quotes_this_fit(heavy_light_auto):
    """The per-body warning states this fit's own numbers (its screen against identical bodies', its held-out value
    against the default kernels'), none measured on other systems: those ("energy differences 3.8e-4 to 0.36", "RMS z
    0.4-2.7") were wrong in both directions for the next system (magnetic4: an accurate fit, its std 2.4x too wide;
    benchmarks/RESULTS_calibration.md, Session 24). The numbers are formatted as the warning formats them."""
    _, m, caught = heavy_light_auto
    h, per = m.history, m.history["structures"]["bodies(2, 2, identical=False)"]
    said = [str(w.message) for w in caught if "kept bodies(2, 2, identical=False)" in str(w.message)]
    assert len(said) == 1, said
    own = [f"held-out {per['refined']:.3g}; the default kernels' {h['default_objective']:.3g}",
           f"({per['screen']:.3g} against {h['structures']['bodies(2, 2)']['screen']:.3g})"]
    assert all(x in said[0] for x in own), (own, said[0])
    assert "measured on" not in said[0] and "RMS z" not in said[0], said[0]


def test_the_per_body_structure_survives_save_and_load(heavy_light_auto, tmp_path, monkeypatch):
    """The file records the four-entry spec as version 5, which code reading up to version 4 (three-entry structures
    only) refuses; the same state with identical bodies is still version 4. The loaded model has the spec and predicts
    the same Lagrangian (to rounding). The energy calibration a file carries is skipped (its cost;
    tests/test_learners_structure_choice.py's reason)."""
    from learners.shadow import calibration

    system, m, _ = heavy_light_auto
    monkeypatch.setattr(calibration, "ensure_energy_calibration", lambda model: None)
    path = m.save(tmp_path / "per_body.pt")
    assert torch.load(path, weights_only=True)["version"] == 5
    assert persist.file_version(dict(persist.fitted_state(m), kernel_structure=["bodies", 2, 2])) == 4
    back = InverseModifiedLagrangianGP.load(path)
    assert back.kernel_structure == ("bodies", 2, 2, UNEQUAL) and repr(back) == repr(m)
    q, v = torch.linspace(-0.3, 0.3, 12, dtype=torch.float64).reshape(3, 4), torch.full((3, 4), 0.1, dtype=torch.float64)
    assert torch.allclose(back.lagrangian(q, v), m.lagrangian(q, v), rtol=1e-10, atol=1e-12)
    monkeypatch.setattr(saving, "VERSIONS", (2, 3, 4))  # code before the per-body structure
    with pytest.raises(saving.ModelFileError, match="version 5"):
        InverseModifiedLagrangianGP.load(path)


def core_pair4():
    """Two bodies of masses 1 and 2 in the plane, a softened pair ``(s^-2 / 16 - s^-1 / 2) / 2``, ``s = r^2 + 1/4`` (a
    well of depth 1/2 with a flat, quartic bottom: its force peaks at r = 1/2 and falls off as r^-3), in the trap
    ``x^2 / 8 + x^4 / 6`` per coordinate (this file's own system, a variant of benchmarks' lj_unequal4)."""
    q = sympy.symbols("x1 y1 x2 y2", real=True)
    v = sympy.symbols("u1 w1 u2 w2", real=True)
    s = (q[0] - q[2])**2 + (q[1] - q[3])**2 + sympy.Rational(1, 4)
    pair = (1 / (16 * s**2) - 1 / (2 * s)) / 2
    T = sum(mi * x**2 for mi, x in zip((1, 1, 2, 2), v)) / 2
    return integrators.systems.from_sympy(T - pair - sum(x**2 / 8 + x**4 / 6 for x in q), q, v, "core_pair4",
                                          domain=[(-0.7, 0.7)] * 4 + [(-0.35, 0.35)] * 4)


def test_a_short_range_pair_gets_its_own_lengthscale():
    """core_pair4 at CI size (60 trajectories of 5 steps, h = 0.2, seed 0; 22 CPU s measured), library defaults: the
    per-body refinement's group scan (element search stage 2c) ends with the pair's lengthscale far below the bodies'
    (measured 1.19 against 19.0) and the per-body structure is kept (refined -14.22); its energy differences 9.3e-3.
    Without the scan (GROUP_FACTORS = ()) the refinement stayed at -10.91 with degenerate body scales, was not kept
    (DEGENERATE_MARGIN), and the default kernels gave 0.785 (RESULTS_identification.md, Session 25). The bound 3e-2:
    3.2x the value measured, 26x below the value without the scan."""
    system = core_pair4()
    data = snapshots(system, 0.2, 60, 5, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = InverseModifiedLagrangianGP(0.2, progress=False).fit(data)
    assert m.kernel_structure == ("bodies", 2, 2, UNEQUAL), m.history.get("structures")
    scales = dict(zip(m.gp.kernel.base_kernel.parameter_names(), m.gp.kernel.base_kernel.lengthscale.reshape(-1).tolist()))
    assert 4 * scales["pair:lengthscale"] < min(scales["body0:lengthscale"], scales["body1:lengthscale"]), scales
    rel, _ = energy_differences(m, system, 2, return_std=False)
    assert rel <= 3e-2, rel
