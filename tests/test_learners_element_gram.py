"""The element kernel's covariance part by part (learners/shadow/element_gram.py): the same matrix to rounding, a part
assembled again only where its own scales moved."""

import pytest
import torch

from learners.shadow import ElementKernel
from learners.shadow.element_gram import reusing_parts
from learners.shadow.functionals import snapshot_functionals
from learners.shadow.kernels import FunctionalKernel
from learners.shadow.symmetric_covariance import symmetric_covariance

# the parts' sums differ from the one-pass sum in order only: rounding, 1e-15 relative measured here; 1e-12 leaves room
# for other BLAS orders while a missing or doubled part (a group's variance, 1/4-4 here) is O(1)
ROUNDING = 1e-12


def _kernel(kern, seed=0):
    gen = torch.Generator().manual_seed(seed)
    kern = kern.to(torch.float64)
    kern.lengthscale = torch.rand(kern.raw_lengthscale.shape[-1], generator=gen, dtype=torch.float64) + 0.5
    return FunctionalKernel(kern.requires_grad_(False)).requires_grad_(False)


def _functionals():
    gen = torch.Generator().manual_seed(3)
    return snapshot_functionals(0.3 * torch.randn(3, 6, 6, generator=gen, dtype=torch.float64).cumsum(1), 0.2, "midpoint")[0]


def _assembled(fk, monkeypatch):
    """Count the derivative blocks the assembly asks of each part (the element kernel's ``_part``; None: all)."""
    kern, seen = fk.base_kernel, []
    real = type(kern).derivative_block
    monkeypatch.setattr(type(kern), "derivative_block", lambda self, *a: seen.append(getattr(self, "_part", None))
                        or real(self, *a))
    return seen


@pytest.mark.parametrize("structure", [ElementKernel.bodies(3, 2), ElementKernel.chain(6),
                                       ElementKernel.bodies(3, 2, triples=True)], ids=["bodies3", "chain6", "bodies3_triples"])
def test_parts_sum_to_the_one_pass_covariance_and_only_moved_parts_are_assembled(structure, monkeypatch):
    fk, F = _kernel(structure), _functionals()
    kern = fk.base_kernel
    parts = len(kern.groups) + 1
    names = kern.parameter_names()
    seen = _assembled(fk, monkeypatch)

    with reusing_parts(kern):
        ref = fk.forward(F, F, symmetric=True)
        seen.clear()
        got = symmetric_covariance(fk, F)
        assert float((got - ref).abs().max()) <= ROUNDING * float(ref.abs().max())
        assert set(seen) == set(range(parts))  # every part assembled once, alone
        for name in names:  # move one parameter: only a lengthscale's own part is assembled again
            i = names.index(name)
            ls = kern.lengthscale.clone().reshape(-1)
            ls[i] *= 1.5
            kern.lengthscale = ls
            seen.clear()
            got = symmetric_covariance(fk, F)
            moved = set(seen)
            seen.clear()
            kern.__dict__["_hold"] = kern.__dict__.pop("_part_grams")  # the one-pass reference, nothing reused
            ref = symmetric_covariance(fk, F)
            kern.__dict__["_part_grams"] = kern.__dict__.pop("_hold")
            assert seen == [None] * len(seen) and seen
            assert float((got - ref).abs().max()) <= ROUNDING * float(ref.abs().max()), name
            if name.endswith(":scale"):
                assert moved == set(), name  # a variance moves no Gram
            else:
                group = name.split(":")[0]
                part = len(kern.groups) if group == "correction" else [g["name"] for g in kern.groups].index(group)
                assert moved == {part}, name
        for change in ("outputscale", "bind"):  # the keys see the outputscale and the maps (bind replaces them)
            if change == "outputscale":
                fk.outputscale = 2.5 * float(fk.outputscale)
            else:
                kern.bind(torch.full((kern.dim // 2,), 0.1, dtype=torch.float64), 1.3, 0.7, None)
            seen.clear()
            got = symmetric_covariance(fk, F)
            # every part again, none reused from before the change; bind moves the groups' maps, not the correction's
            assert set(seen) == set(range(parts if change == "outputscale" else parts - 1)), change
            kern.__dict__["_hold"] = kern.__dict__.pop("_part_grams")
            ref = symmetric_covariance(fk, F)
            kern.__dict__["_part_grams"] = kern.__dict__.pop("_hold")
            assert float((got - ref).abs().max()) <= ROUNDING * float(ref.abs().max()), change
    assert "_part_grams" not in kern.__dict__  # dropped with the context


def test_a_part_keeps_the_gram_other_trials_reuse():
    """The coordinate search's order: the point B (reused by the trials of other parts), then two trials of this part
    (T1, T2): T2 replaces T1, not B; with no Gram reused yet, the oldest goes."""
    from learners.shadow.element_gram import KEPT, _PartGrams

    assert KEPT == 2
    grams, F = _PartGrams(), object()
    grams.put(F, 0, "B", "gram B")
    assert grams.get(F, 0, "B") == "gram B"
    grams.put(F, 0, "T1", "gram T1")
    grams.put(F, 0, "T2", "gram T2")
    assert grams.get(F, 0, "B") == "gram B" and grams.get(F, 0, "T1") is None and grams.get(F, 0, "T2") == "gram T2"
    fresh = _PartGrams()
    for key in ("A", "B", "C"):
        fresh.put(F, 1, key, key)
    assert [fresh.get(F, 1, k) for k in ("A", "B", "C")] == [None, "B", "C"]
    assert fresh.get(object(), 1, "C") is None  # other functionals: nothing applies


def test_the_autograd_path_assembles_in_one_pass():
    """``closed_form=False`` takes its blocks from ``pointwise``, which sums every part: no parts there (with them each
    "part" was the whole kernel, 2.76 relative off on bodies(3, 2)); the matrix is the one-pass one, bit for bit."""
    fk, F = _kernel(ElementKernel.bodies(3, 2)), _functionals()
    fk = FunctionalKernel(fk.base_kernel, closed_form=False).requires_grad_(False)
    ref = symmetric_covariance(fk, F)
    with reusing_parts(fk.base_kernel):
        assert torch.equal(symmetric_covariance(fk, F), ref)


def test_the_point_the_search_moves_from_keeps_its_gram():
    """A coordinate search accepts T1 (it moved this part and improved); its next trials T2, T3 of the same part drop
    the start B and then T2, never T1, which every later trial moving another part reuses."""
    from learners.shadow.element_gram import _PartGrams

    grams, F = _PartGrams(), object()
    grams.put(F, 0, ("B",), "gram B")
    assert grams.get(F, 0, ("B",)) == "gram B"  # the start, reused by a trial of another part

    def trial(key, value):
        grams.last[0] = key
        grams.put(F, 0, key, f"gram {key[0]}")
        return value
    evaluate = grams.keeping(lambda k: trial(*k), best=0.0)
    assert evaluate((("T1",), -1.0)) == -1.0  # improves: the search moves to T1
    evaluate((("T2",), 0.5))
    assert grams.get(F, 0, ("T1",)) == "gram T1" and grams.get(F, 0, ("B",)) is None
    evaluate((("T3",), -0.5))  # above -1: not accepted
    assert grams.get(F, 0, ("T1",)) == "gram T1" and grams.get(F, 0, ("T2",)) is None


def test_the_search_uses_parts_in_stages_2b_and_3_only(monkeypatch):
    """A real element fit (planar two-body, ten trajectories, bodies(2, 2), about 3 s): the positions objective's
    covariance comes part by part exactly in the correction's scan and the untied search (one per evaluation), equal to
    the one-pass matrix to rounding each time, and the parts' Grams are gone after the fit."""
    import learners.shadow.symmetric_covariance as S
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP
    from tests.test_learners_shadow_auto import two_body4

    calls, real = [], S.part_covariance

    def spy(fk, F):
        parts = real(fk, F)
        calls.append(parts is not None)
        if parts is not None:
            grams = fk.base_kernel.__dict__.pop("_part_grams")
            ref = fk.forward(F, F, symmetric=True)
            fk.base_kernel._part_grams = grams
            assert float((parts - ref).abs().max()) <= ROUNDING * float(ref.abs().max())
        return parts
    monkeypatch.setattr(S, "part_covariance", spy)
    model = InverseModifiedLagrangianGP(0.2, kernel=ElementKernel.bodies(2, 2), progress=False,
                                        max_train_functionals=40).fit(snapshots(two_body4(), 0.2, 10, 5, seed=0))
    later = len(model.history["correction_scan"]) - 1 + len(model.history["search_untied"])
    first = calls.index(True)
    assert calls[first:first + later] == [True] * later and sum(calls) == later  # one run: stages 2b-3, each trial
    assert later >= 3 and first > 0  # stages 1-2 solved before, in one pass
    assert "_part_grams" not in model.gp.kernel.base_kernel.__dict__
