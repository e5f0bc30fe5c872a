"""Every operator, framework, mode and direction against the NumPy reference on random small
problems (Hypothesis). Compiled modes (each framework declares which) use the operator's one
fixed problem (OpSpec.fixed) with fresh values, so that each example does not pay a compilation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opbench import backends, execute, ops, suite
from opbench.backends import Unavailable
from opbench.cases import Case
from opbench.known_issues import known_issue


def _items(compiled: bool):
    for name, spec in ops.REGISTRY.items():
        for framework in backends.taking_part("ops"):
            declared = backends.declared()[framework]
            for mode in declared.modes:
                # creation operators run eager only, on Hypothesis' problems (they have no fixed one)
                if (spec.creation and mode != "eager") or (mode in declared.compiled and not spec.creation) != compiled:
                    continue
                for direction in suite.directions(spec):
                    yield pytest.param(name, framework, mode, direction, id=f"{name}-{direction}-{framework}-{mode}")


def check(name: str, framework: str, mode: str, direction: str, p: dict, seed: int) -> float:
    """Run one case through the same preparation and verification the benchmarks use."""
    spec = ops.get(name)
    case = Case("op", name, spec.family, direction, framework, "cpu", mode, "float32",
                f"{spec.label(p)}-seed{seed}", tuple(sorted(p.items())))
    try:
        backend = execute.require(case)
    except Unavailable as exc:
        pytest.skip(str(exc))
    issue = known_issue(case, backend.version())
    if issue:  # whether a small random problem reaches it is chance; tests/test_edges.py holds it to it
        pytest.skip(f"known issue: {issue.reason}")
    prepared = execute.prepare(case, backend)
    return prepared.verify(prepared.call())


@pytest.mark.parametrize("name, framework, mode, direction", list(_items(compiled=False)))
@given(data=st.data())
def test_matches_numpy(name, framework, mode, direction, data):
    p = data.draw(ops.get(name).small(), label="problem")
    seed = data.draw(st.integers(0, 2**20), label="seed")
    assert check(name, framework, mode, direction, p, seed) >= 0


@pytest.mark.parametrize("name, framework, mode, direction", list(_items(compiled=True)))
@settings(max_examples=2)
@given(seed=st.integers(0, 2**20))
def test_compiled_matches_numpy(name, framework, mode, direction, seed):
    assert check(name, framework, mode, direction, ops.get(name).fixed, seed) >= 0

