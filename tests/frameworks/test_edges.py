"""Every operator that declares edge regimes, in every framework, mode and direction, against the
NumPy reference on inputs over its whole range: activations out to |x| = 40 (saturated tails),
softmax with probabilities down to e^-80, rows whose norms run down to 1e-12 and rows and
channels whose variance is zero, below, near and above the normalisation epsilon. Tolerances
are the suite's own; a framework that is wrong there fails, unless a known issue says so with
its evidence, and then it must still be wrong (a fixed framework fails this test until the
entry goes)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opbench import frameworks
from opbench.frameworks import Unavailable
from opbench.harness.known_issues import known_issue
from opbench.suites import prepared as shared
from opbench.suites.ops import generate, prepare
from opbench.workloads import ops
from tests.helpers import edge_case

# torch.compile's edge regimes are the second variant of torch eager's (the same regimes): inductor has gcc
# build a kernel for each, about a minute on a cold 2-core host, so make test runs eager's and every other
# compiled mode's, and make test-rest and make test-full torch.compile's as well.
SECOND = {("torch", "compile")}


def _items():
    for name, spec in ops.REGISTRY.items():
        if spec.edge is None:
            continue
        for framework in frameworks.taking_part("ops"):
            declared = frameworks.declared()[framework]
            for mode in declared.modes:
                for direction in generate.directions(spec):
                    yield pytest.param(name, framework, mode, direction, id=f"{name}-{direction}-{framework}-{mode}",
                                       marks=pytest.mark.full if (framework, mode) in SECOND else ())


def test_every_activation_and_normalisation_has_edge_regimes():
    families = {spec.family for spec in ops.REGISTRY.values() if spec.edge}
    missing = [s.name for s in ops.REGISTRY.values() if s.family in ("activation", "normalization") and not s.edge]
    assert families == {"activation", "normalization"} and not missing


@pytest.mark.parametrize("name, framework, mode, direction", list(_items()))
@settings(max_examples=2)
@given(seed=st.integers(0, 2**20))
def test_edge_regimes_match_numpy(name, framework, mode, direction, seed):
    case = edge_case(name, framework, mode, direction, seed)
    try:
        backend = shared.require(case)
    except Unavailable as exc:
        pytest.skip(str(exc))
    prepared = prepare.prepare(case, backend)
    result = prepared.call()
    issue = known_issue(case, backend.version())
    if issue is None:
        assert prepared.verify(result) >= 0
    else:  # an entry with a regime is met only by a deviation inside it, within its bound
        with pytest.raises(shared.KnownDeviation if issue.regime else shared.CorrectnessError):
            prepared.verify(result)
