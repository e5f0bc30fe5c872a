"""Every float32 mutant of the catalogue (tests/mutants.py) is caught by the gate that claims to
cover it, in every framework installed; a surviving mutant fails its test."""

from __future__ import annotations

import pytest

from opbench import backends
from tests import mutants


@pytest.mark.parametrize("framework", mutants.FRAMEWORKS)
@pytest.mark.parametrize("mutant", mutants.MODEL_MUTANTS, ids=lambda m: m.name.replace(" ", "-"))
def test_model_mutant_is_caught(mutant, framework):
    try:
        backends.load(framework)
        survived = mutants.model_survives(mutant, framework)
    except backends.Unavailable as exc:
        pytest.skip(str(exc))
    assert survived is None, f"{mutant.gate} gate: {mutant.name} ({mutant.why}) {survived}"


@pytest.mark.parametrize("framework", mutants.FRAMEWORKS)
@pytest.mark.parametrize("mutant", mutants.OP_MUTANTS, ids=lambda m: m.name.replace(" ", "-"))
def test_operator_mutant_is_caught(mutant, framework):
    try:
        backends.load(framework)
        survived = mutants.op_survives(mutant, framework)
    except backends.Unavailable as exc:
        pytest.skip(str(exc))
    assert survived is None, f"{mutant.gate} gate: {mutant.name} ({mutant.why}) {survived}"


@pytest.mark.parametrize("framework", mutants.FRAMEWORKS)
@pytest.mark.parametrize("mutant", mutants.CONVERGENCE_MUTANTS, ids=lambda m: m.name.replace(" ", "-"))
def test_convergence_mutant_is_caught(mutant, framework):
    try:
        backends.load(framework)
        survived = mutants.convergence_survives(mutant, framework)
    except backends.Unavailable as exc:
        pytest.skip(str(exc))
    assert survived is None, f"convergence gate: {mutant.name} ({mutant.why}) {survived}"
