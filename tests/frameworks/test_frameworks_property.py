"""Every operator, framework, mode and direction against the NumPy reference on random small
problems (Hypothesis). Compiled modes (each framework declares which) use the operator's one
fixed problem (OpSpec.fixed) with fresh values, so that each example does not pay a compilation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opbench import frameworks
from opbench.core.case import Case
from opbench.suites import prepared as shared
from opbench.suites.measure import admit
from opbench.suites.ops import generate
from opbench.suites.registry import verified
from opbench.workloads import ops


def _items(compiled: bool):
    for name, spec in ops.REGISTRY.items():
        for framework in frameworks.taking_part("ops"):
            declared = frameworks.declared()[framework]
            for mode in declared.modes:
                # creation operators run eager only, on Hypothesis' problems (they have no fixed one)
                if (spec.creation and mode != "eager") or (mode in declared.compiled and not spec.creation) != compiled:
                    continue
                for direction in generate.directions(spec):
                    yield pytest.param(name, framework, mode, direction, id=f"{name}-{direction}-{framework}-{mode}")


def check(name: str, framework: str, mode: str, direction: str, p: dict, seed: int) -> float:
    """Run one case through the same preparation and verification the benchmarks use."""
    spec = ops.get(name)
    case = Case.operator(spec, direction, framework, mode=mode, params=p, label=f"{spec.label(p)}-seed{seed}")
    admission = admit(case)
    if admission.unavailable:
        pytest.skip(admission.unavailable)
    # whether a small random problem reaches a known issue is chance; tests/frameworks/test_edges.py holds it to it.
    # An entry with a regime says where the result may deviate and by how much: a problem that reaches it is
    # held to that, and every other element to the ordinary check
    if admission.issue and not admission.issue.regime:
        pytest.skip(f"known issue: {admission.issue.reason}")
    try:
        return verified(case, admission.backend)[1]
    except shared.KnownDeviation as deviation:
        return deviation.max_abs_err


@pytest.mark.parametrize("name, framework, mode, direction", list(_items(compiled=False)))
@given(data=st.data())
def test_matches_numpy(name, framework, mode, direction, data):
    p = data.draw(ops.get(name).small(), label="problem")
    seed = data.draw(st.integers(0, 2**20), label="seed")
    assert check(name, framework, mode, direction, p, seed) >= 0


# The compiled modes' second variant: make test's quick benchmarks check each operator in each compiled mode
# (at its quick sizes); these repeat it with fresh values, and make test-full runs them.
@pytest.mark.full
@pytest.mark.parametrize("name, framework, mode, direction", list(_items(compiled=True)))
@settings(max_examples=2)
@given(seed=st.integers(0, 2**20))
def test_compiled_matches_numpy(name, framework, mode, direction, seed):
    assert check(name, framework, mode, direction, ops.get(name).fixed, seed) >= 0

