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


@pytest.mark.parametrize("structure", [ElementKernel.bodies(3, 2), ElementKernel.chain(6)], ids=["bodies3", "chain6"])
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
    assert "_part_grams" not in kern.__dict__  # dropped with the stage: the fit's own solve is one pass


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
