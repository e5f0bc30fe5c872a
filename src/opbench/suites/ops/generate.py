"""The operator benchmarks, generated from the operator registry.

`benchmarks_of(spec)` is one operator's `test_<op>` and, where it is differentiable,
`test_<op>_backward`, each bound to its operator by the `opbench` marker (a hand-written benchmark
binds the same way, under any name). The benchmark files of the operator suite get them through the
public API, as a user's file does (`opbench.api.builtin_operators(family)`, then each Operator's
`benchmarks()`). Registering an operator is then all it takes to benchmark it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from opbench.core.case import Case
from opbench.core.schema import OP_DIRECTIONS
from opbench.suites.registry import MARKER, Listing, Request
from opbench.workloads import ops

__all__ = ["MARKER", "benchmarks_of", "binding", "listing", "op_cases"]


def directions(spec: ops.OpSpec) -> tuple[str, ...]:
    return OP_DIRECTIONS if spec.differentiable else OP_DIRECTIONS[:1]


def test_name(op: str, direction: str) -> str:
    return f"test_{op}" + ("_backward" if direction == "backward" else "")


def benchmarks_of(spec: ops.OpSpec) -> dict[str, Callable]:
    """The benchmarks of one operator, by test name: forward, and backward where it has a gradient."""
    return {test_name(spec.name, d): _benchmark(spec.name, d, test_name(spec.name, d)) for d in directions(spec)}


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


def op_cases(settings, name: str, direction: str) -> list[Case]:
    """Every case of operator `name` the settings select."""
    from opbench import frameworks

    spec = ops.get(name)
    cases = []
    for framework in settings.frameworks:
        if framework not in frameworks.taking_part("ops"):
            continue
        for mode in settings.framework_modes(framework):
            if spec.creation and mode != "eager":
                continue
            for device in settings.devices:
                for dtype in settings.dtypes:
                    for p in spec.shapes[settings.profile]:
                        cases.append(Case.operator(spec, direction, framework, device, mode, dtype, p))
    return cases


def listing(request: Request) -> Listing:
    """The cases of an operator benchmark (the suite's row in opbench.suites.registry): its
    operator's and direction's, bound by its opbench marker."""
    name, direction = binding(request.marker)
    return Listing(op_cases(request.settings, name, direction),
                   (((name,), "operator"), ((ops.get(name).family,), "operator family")))
