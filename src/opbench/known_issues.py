"""Framework bugs the correctness gate found, listed in one place.

A case matching an entry is marked xfail(strict=True): it still runs its gate, the gate still
refuses to time it, and the day the framework is fixed the unexpected pass fails the run so that
the entry is removed. A test checks that every entry still matches a case of the catalogue.
"""

from __future__ import annotations

from dataclasses import dataclass

from opbench.cases import Case


@dataclass(frozen=True)
class KnownIssue:
    framework: str
    versions: tuple[str, ...]  # version prefixes, e.g. "2.13."
    names: tuple[str, ...]  # operators or models
    reason: str
    modes: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    directions: tuple[str, ...] = ()

    def matches(self, case: Case, version: str) -> bool:
        return (
            case.framework == self.framework
            and version.startswith(self.versions)
            and case.name in self.names
            and (not self.modes or case.mode in self.modes)
            and (not self.devices or case.device in self.devices)
            and (not self.directions or case.direction in self.directions)
        )


KNOWN_ISSUES: tuple[KnownIssue, ...] = (
    KnownIssue(
        framework="torch",
        versions=("2.13.",),
        names=("vgg10", "vgg16"),
        modes=("compile",),
        devices=("cpu",),
        directions=("training",),
        reason="torch.compile (inductor, CPU) returns zero weight gradients for conv -> relu -> max_pool2d: "
        "the VGG training step does not train (reproduced with a 5-layer nn.Sequential; "
        "backend='aot_eager' is correct)",
    ),
)


def known_issue(case: Case, version: str) -> KnownIssue | None:
    for issue in KNOWN_ISSUES:
        if issue.matches(case, version):
            return issue
    return None
