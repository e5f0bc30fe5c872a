"""The suites opbench runs, one row each: the pytest fixture that carries a suite's cases, and the
function, in the suite's own package, that lists the cases one benchmark function of the suite
gets. The pytest plugin parametrises every benchmark from this table, and the paired gate's worker
finds the cases it can time through it. Adding a suite is its package and one row here
(docs/contributing/extending.md).

A listing is named by "module:function" and imported when a benchmark asks for its fixture, so
that a run imports only the suites it collects.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MARKER = "opbench"  # @pytest.mark.opbench(op="gemm", direction="backward"), (model="lenet", direction=...)


@dataclass(frozen=True)
class Request:
    """What a suite's listing reads: the benchmark function's name, its closest opbench marker (or
    None), the run's settings and the models the run's --workloads file declared."""

    function: str
    marker: Any
    settings: Any
    workload_models: tuple[str, ...] = ()


@dataclass(frozen=True)
class Listing:
    """The cases of one benchmark function, and the markers the run must know to select them
    (names a user's own declarations brought, with what they are: `((name,), "operator")`)."""

    cases: list
    markers: tuple[tuple[tuple[str, ...], str], ...] = field(default=())


@dataclass(frozen=True)
class Suite:
    fixture: str  # the pytest fixture a benchmark of the suite asks for
    listing: str  # "module:function": Request -> Listing; KeyError or ValueError says what is wrong
    paired: bool = False  # the paired gate's worker times its cases

    def cases(self, request: Request) -> Listing:
        module, _, name = self.listing.partition(":")
        lister: Callable[[Request], Listing] = getattr(importlib.import_module(module), name)
        return lister(request)


SUITES = (
    Suite("op_case", "opbench.suites.ops.generate:listing", paired=True),
    Suite("model_case", "opbench.suites.models.cases:listing", paired=True),
    Suite("fw", "opbench.suites.functions:listing"),
    Suite("convergence_case", "opbench.suites.convergence.training:listing"),
    Suite("dist_case", "opbench.suites.distributed.cases:listing"),
)
FIXTURES = tuple(suite.fixture for suite in SUITES)
PAIRED = tuple(suite.fixture for suite in SUITES if suite.paired)
