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
    dtypes: tuple[str, ...] = ()

    def matches(self, case: Case, version: str) -> bool:
        return (
            case.framework == self.framework
            and version.startswith(self.versions)
            and case.name in self.names
            and (not self.modes or case.mode in self.modes)
            and (not self.devices or case.device in self.devices)
            and (not self.directions or case.direction in self.directions)
            and (not self.dtypes or case.dtype in self.dtypes)
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
    KnownIssue(
        framework="mxnet",
        versions=("1.9.",),
        names=("softmax",),
        dtypes=("float16",),
        reason="MXNet computes float16 softmax in float16: a probability of 0.7885 comes back as 0.8115 (2.9%), "
        "outside the float16 tolerance of 2%; PyTorch and TensorFlow accumulate in float32 and pass",
    ),
    KnownIssue(
        framework="numpy",
        versions=("1.",),
        names=("batch_norm",),
        dtypes=("float16",),
        reason="NumPy's var() of a float16 array sums the squares in float16 over 32768 elements per channel: "
        "the sum passes 65504, overflows to inf, and the normalised output collapses to beta",
    ),
    KnownIssue(
        framework="jax",
        versions=("0.7.",),
        names=("random_normal",),
        dtypes=("bfloat16",),
        reason="jax.random.normal in bfloat16 draws its uniform variates in bfloat16 (a 2^-8 grid) before the "
        "inverse CDF: over five keys of 2^20 samples the mean is -0.011 to -0.013 (12 standard errors) and "
        "no sample passes about +-2.9; float32 samples are unbiased",
    ),
)


def known_issue(case: Case, version: str) -> KnownIssue | None:
    for issue in KNOWN_ISSUES:
        if issue.matches(case, version):
            return issue
    return None
