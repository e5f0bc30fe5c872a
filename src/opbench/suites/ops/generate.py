"""The operator benchmarks, generated from the operator registry.

A benchmark file of the operator suite is `globals().update(operator_benchmarks("linalg"))`: one
`test_<op>` per operator of the family and a `test_<op>_backward` per differentiable one, each
bound to its operator by the `opbench` marker (a hand-written benchmark binds the same way, under
any name). Registering an operator is then all it takes to benchmark it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from opbench.core.schema import OP_DIRECTIONS
from opbench.workloads import ops

MARKER = "opbench"  # @pytest.mark.opbench(op="gemm", direction="backward")


def directions(spec: ops.OpSpec) -> tuple[str, ...]:
    return OP_DIRECTIONS if spec.differentiable else OP_DIRECTIONS[:1]


def test_name(op: str, direction: str) -> str:
    return f"test_{op}" + ("_backward" if direction == "backward" else "")


def operator_benchmarks(family: str) -> dict[str, Callable]:
    """Every benchmark of operator family `family`, by test name."""
    if family not in ops.FAMILIES:
        raise ValueError(f"unknown operator family {family!r}; valid: {', '.join(ops.FAMILIES)}")
    tests = {}
    for spec in ops.REGISTRY.values():
        if spec.family == family:
            for direction in directions(spec):
                name = test_name(spec.name, direction)
                tests[name] = _benchmark(spec.name, direction, name)
    return tests


def _benchmark(op: str, direction: str, name: str) -> Callable:
    from opbench.suites.measure import measure

    def benchmark_test(op_case, benchmark):
        measure(benchmark, op_case)

    benchmark_test.__name__ = benchmark_test.__qualname__ = name
    benchmark_test.__doc__ = f"{op} {direction} over the selected frameworks, modes, devices, dtypes and sizes."
    return getattr(pytest.mark, MARKER)(op=op, direction=direction)(benchmark_test)


def binding(marker: pytest.Mark | None) -> tuple[str, str]:
    """(operator, direction) from a benchmark's opbench marker; KeyError says what is wrong."""
    if marker is None:
        raise KeyError(f"bind it to an operator with @pytest.mark.{MARKER}(op=..., direction=...)")
    op, direction = marker.kwargs.get("op"), marker.kwargs.get("direction", "forward")
    spec = ops.get(op)  # KeyError lists the valid names
    if direction not in directions(spec):
        raise KeyError(f"operator {op!r} has no {direction!r} benchmark; its directions: {', '.join(directions(spec))}")
    return op, direction
