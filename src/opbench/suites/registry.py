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
    doc: str  # what the fixture gives, as `pytest --fixtures` shows it
    listing: str  # "module:function": Request -> Listing; KeyError says what is wrong with a benchmark
    binder: str = "opbench.suites.binding:bind"  # "module:function": (case, request, state) -> the value
    paired: bool = False  # the paired gate's worker times its cases
    # Where the suite's cases go through suites.measure.setup: the Case.kind they have, and their
    # preparer, "module:function": (case, backend, settings) -> Prepared, checked before it is timed.
    kind: str = ""
    prepare: str = ""
    # Where a case is prepared by running its test up to the call it times (the paired gate's worker):
    # "module:function": (item, case, backend, state) -> measure.Ready
    from_test: str = ""

    def cases(self, request: Request) -> Listing:
        lister: Callable[[Request], Listing] = _named(self.listing)
        return lister(request)

    def binds(self, case, request, state) -> Any:
        """The fixture's value for `case`, or the item skipped with the reason it cannot run here."""
        return _named(self.binder)(case, request, state)


def _named(path: str) -> Callable:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


SUITES = (
    Suite("op_case", "The operator case of this test item.", "opbench.suites.ops.generate:listing", paired=True,
          kind="op", prepare="opbench.suites.ops.prepare:prepare"),
    Suite("model_case", "The end-to-end model case of this test item.", "opbench.suites.models.cases:listing",
          paired=True, kind="model", prepare="opbench.suites.models.equivalence:prepare_model"),
    Suite("fw", "One framework in one mode, on one device and dtype, for a test of the user's own code "
          "(opbench.suites.functions.Runner): skipped with the reason where it cannot run here.",
          "opbench.suites.functions:listing", "opbench.suites.functions:bind", paired=True,
          from_test="opbench.suites.functions:ready_from_test"),
    Suite("convergence_case", "The convergence case of this test item: a whole training run on real data.",
          "opbench.suites.convergence.training:listing"),
    Suite("dist_case", "The distributed case of this test item (its workers start in the benchmark, not here).",
          "opbench.suites.distributed.cases:listing", "opbench.suites.binding:bind_framework"),
)
FIXTURES = tuple(suite.fixture for suite in SUITES)
PAIRED = tuple(suite.fixture for suite in SUITES if suite.paired)


def suite(fixture: str) -> Suite:
    """The row of the suite whose benchmarks ask for `fixture`."""
    return next(s for s in SUITES if s.fixture == fixture)


def ready_from_test(fixture: str, item, case, backend, state):
    """For a suite whose cases are prepared by their test (Suite.from_test), the checked call of
    `item`; None for the others, which measure.setup prepares from the case alone."""
    row = suite(fixture)
    return _named(row.from_test)(item, case, backend, state) if row.from_test else None


def prepare(case, backend, settings=None):
    """`case` built and ready to check and time (a Prepared), by the suite its kind belongs to."""
    suite = next((s for s in SUITES if s.kind == case.kind and s.prepare), None)
    if suite is None:
        raise KeyError(f"no suite prepares a case of kind {case.kind!r}; suites/registry.py lists them")
    return _named(suite.prepare)(case, backend, settings)


def verified(case, backend, settings=None) -> tuple[Any, float]:
    """`case` prepared by its suite and checked against NumPy on one call: (prepared, its max abs
    error). Correct before fast: everything that times a prepared case outside the benchmarks (the
    breakdown's prediction, the thread calibration, the property tests) starts here; the
    benchmarks' own setup (suites/measure.py) times that first call too."""
    prepared = prepare(case, backend, settings)
    return prepared, prepared.verify(prepared.call())
