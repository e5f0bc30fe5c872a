"""What a suite's pytest fixture hands its benchmark: the case of the test item, bound to the
backend that runs it and to the run's session, or the item skipped with the reason it cannot run
here. Each suite's row in opbench.suites.registry names its binder; the plugin makes the fixtures
from the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from opbench.core.case import Case
from opbench.frameworks.base import Backend, NotCompiled, Unavailable
from opbench.harness.known_issues import held_to
from opbench.suites import prepared


@dataclass
class Bound:
    """A case with the backend that runs it and the session it runs in."""

    case: Any
    backend: Backend
    state: Any


def bind(case: Case, request: pytest.FixtureRequest, state) -> Bound:
    """The case of this test item with its backend: skipped with the reason when it cannot run
    here, marked strict xfail when it meets a known framework bug."""
    from opbench.suites.measure import admit

    admission = admit(case)
    if admission.unavailable:
        pytest.skip(admission.unavailable)
    issue = admission.issue
    if issue:
        # an entry with a regime (or a signature) is met only by a result off inside it (or showing it):
        # KnownDeviation; one off elsewhere or further fails; strict where the entry was seen, an XPASS said elsewhere
        version = admission.backend.version()
        raises = NotCompiled if issue.not_compiled else prepared.KnownDeviation if issue.behaviour else \
            prepared.CorrectnessError
        request.node.add_marker(pytest.mark.xfail(reason=held_to(issue, case.framework, version), raises=raises,
                                                  strict=issue.seen(version)))
    return Bound(case, admission.backend, state)


def bind_framework(case, request: pytest.FixtureRequest, state) -> Bound:
    """A case whose workers start in the benchmark (the distributed suite): only its framework and
    device are admitted here."""
    try:
        backend = prepared.require_framework(case.framework, case.device)
    except Unavailable as exc:
        pytest.skip(str(exc))
    return Bound(case, backend, state)
