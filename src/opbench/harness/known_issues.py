"""Framework bugs the correctness check found, and definitions that differ from the reference
in an edge regime, listed in one place.

An entry is a behaviour, not a version list. One that states its **regime** (the inputs where the
result deviates, why, and how far it may go: `Regime`) applies to every version of its framework,
and the result decides: a case whose only deviations lie inside the regime and within its bound
meets the known issue (the check raises `KnownDeviation`, and pytest marks it xfail); a deviation
outside the regime, or beyond the bound, is a real failure; a result with no deviation passes, and
says so. A whole result that no element-wise regime describes (a sampler's) states its
**signature** instead (`Signature`: what the deviation leaves in the result), with the same
verdicts: a result that fails its check and shows the signature meets the issue, one that fails
without it fails. So an upgrade that keeps the behaviour bit for bit is judged as its predecessor was
(torch 2.14.1's GELU, which is 2.13's), and one that fixes or worsens it is told apart.

`seen_in` names the versions where the entry was measured. There the marking is strict: a pass
fails the run, so that an entry the framework outgrew is narrowed or removed. Elsewhere a pass is
an expected pass that pytest reports (XPASS) with the entry's reason. An entry without a regime
(a model that does not train, a compile that cannot capture, a whole-result error) cannot tell
its deviation from another one, so it applies only to the versions it was seen in. A test checks
that every entry still matches a case of the catalogue.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from opbench.core.case import Case

F32_UNIT = 2.0**-23  # float32's unit of roundoff at 1 (its machine epsilon)


@dataclass(frozen=True)
class Regime:
    """Where an element-wise operator's known deviation lies and how large it may be.

    `where(x)` selects the elements (of the output, and of the gradient, which have x's shape) in
    the regime; there an element may be off by `units` float32 units of roundoff of the terms that
    cancel: `output(x)` for the output, `gradient(x, ct)` for the gradient against the cotangent
    `ct` (None: the gradient shows no deviation and is held to the ordinary check)."""

    describe: str  # the inputs it covers and the mechanism, e.g. "x < -2: 1 + erf(x/sqrt 2) cancels"
    where: Callable[[np.ndarray], np.ndarray]
    units: float
    output: Callable[[np.ndarray], np.ndarray]
    gradient: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None

    def bound(self, what: str, x: np.ndarray, ct: np.ndarray | None) -> np.ndarray | None:
        """The largest error an element in the regime may show in `what` ("output" or a gradient),
        or None where the regime says nothing about it."""
        if what == "output":
            return self.units * F32_UNIT * self.output(x)
        if self.gradient is None or ct is None:
            return None
        return self.units * F32_UNIT * self.gradient(x, ct)


# 0.5 x (1 + erf(x / sqrt 2)) for x below about -2: erf(x / sqrt 2) lies within a few units of -1,
# so 1 + erf keeps only its rounding, a few units of roundoff of 1, which 0.5 x scales (and the
# gradient's 0.5 (1 + erf) the cotangent). Measured on torch 2.13.0 (AMD EPYC, AVX2; the quick
# inputs' 43,250 elements below -2): at most 1.5 units in the output (1.3 at x = -3.02: 2.32e-07
# where the ordinary check allows 5.96e-08) and 1.9 in the gradient, which the gradient's own
# allowance already covers. 8 units leave erf's own error (its libraries promise a few units)
# inside the bound, and nothing of another size or place.
_GELU_CANCELS = Regime(
    describe="x < -2, where 0.5 x (1 + erf(x/sqrt 2)) cancels",
    where=lambda x: x < -2,
    units=8,
    output=lambda x: 0.5 * np.abs(x),
    gradient=lambda x, ct: 0.5 * np.abs(ct),
)


@dataclass(frozen=True)
class Signature:
    """What a known deviation of a whole result leaves in it, where no element-wise regime
    describes it: `shows(result)` holds for a result with this deviation, not for a correct one."""

    describe: str  # what the result shows and why, e.g. "at most 256 distinct values: ..."
    shows: Callable[[np.ndarray], bool]


# jax.random.normal in a 16-bit type draws its uniform variates in that type: on bfloat16's 2^-7 grid in
# [1, 2), 128 values, and the inverse CDF maps each to one sample. A correct sampler rounded to bfloat16
# gives thousands of distinct values (3057 over the quick case's 262,144 samples, JAX 0.10.2).
_ON_A_BF16_GRID = Signature(
    describe="at most 256 distinct values: the inverse normal CDF of uniform variates drawn in bfloat16",
    shows=lambda result: np.unique(result).size <= 256,
)


@dataclass(frozen=True)
class KnownIssue:
    framework: str
    seen_in: tuple[str, ...]  # version prefixes it was measured in, e.g. "2.13.": strict there
    names: tuple[str, ...]  # operators or models
    reason: str
    modes: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    directions: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()
    edge_only: bool = False  # only on the edge-regime inputs (the benchmarks' inputs do not reach it)
    not_compiled: bool = False  # the compiled mode cannot compile the whole call (NotCompiled), not a wrong result
    regime: Regime | None = None  # where and how far the result deviates (an element-wise operator's)
    signature: Signature | None = None  # what the deviation leaves in a whole result (a sampler's)

    def seen(self, version: str) -> bool:
        return version.startswith(self.seen_in)

    def applies(self, case: Case, version: str) -> bool:
        """The entry describes this case here: by its behaviour where it states a regime or a
        signature, in any version; otherwise only in the versions it was seen in."""
        return self.matches(case) and (self.behaviour is not None or self.seen(version))

    @property
    def behaviour(self) -> Regime | Signature | None:
        """What tells this issue's deviation from another one in a result, if the entry says."""
        return self.regime or self.signature

    def matches(self, case: Case) -> bool:
        return (
            case.framework == self.framework
            and case.name in self.names
            and (not self.modes or case.mode in self.modes)
            and (not self.devices or case.device in self.devices)
            and (not self.directions or case.direction in self.directions)
            and (not self.dtypes or case.dtype in self.dtypes)
            and (not self.edge_only or case.p.get("inputs") == "edge")
        )


KNOWN_ISSUES: tuple[KnownIssue, ...] = (
    KnownIssue(
        framework="torch",
        seen_in=("2.11.", "2.13."),
        names=("gelu",),
        dtypes=("float32",),
        reason="torch computes the exact GELU as 0.5 x (1 + erf(x/sqrt 2)), on the CPU and in its CUDA kernel and "
        "inductor's: for x below about -2 the sum cancels, and at x = -5.555 it returns -0 where x Phi(x) = -7.7e-08 "
        "(5e5 units of roundoff of the function's conditioning; TensorFlow and JAX, through erfc, stay within 4). "
        "On an H100 (torch 2.11, CUDA 13) the median relative error over x in [-6, -3) is 2.4e-3 eager and 1.7e-3 "
        "compiled, 3e-7 over [-3, -1)",
        regime=_GELU_CANCELS,
    ),
    KnownIssue(
        framework="mxnet",
        seen_in=("1.9.",),
        names=("gelu",),
        dtypes=("float32",),
        reason="MXNet's LeakyReLU(act_type='gelu') computes 0.5 x (1 + erf(x/sqrt 2)): for x below about -2 the sum "
        "cancels, and at x = -5.555 it returns 0 where x Phi(x) = -7.7e-08",
        regime=_GELU_CANCELS,
    ),
    KnownIssue(
        framework="mxnet",
        seen_in=("1.9.",),
        names=("softplus",),
        dtypes=("float32",),
        reason="MXNet's softrelu returns 3.8e-06 for log(1 + e^x) at x = -39.8, where the value is 5.1e-18, and is "
        "1e6 units of roundoff off between x = -15 and -6 (log of 1 + e^x without log1p)",
    ),
    KnownIssue(
        framework="torch",
        seen_in=("2.",),
        names=("l2_normalize",),
        edge_only=True,
        reason="F.normalize divides by max(norm, eps) with eps 1e-12: a row of norm 10^-12.5 comes out with norm "
        "0.32 (-0.176 for -0.557), and below 1e-12 its gradient loses the projection term",
    ),
    KnownIssue(
        framework="tensorflow",
        seen_in=("2.",),
        names=("l2_normalize",),
        edge_only=True,
        reason="tf.math.l2_normalize bounds the sum of squares by its epsilon (1e-12): a row whose norm is below "
        "1e-6 is divided by 1e-6, not by its norm (norm 1e-12: 5.95e-07 for 0.595)",
    ),
    KnownIssue(
        framework="mxnet",
        seen_in=("1.9.",),
        names=("l2_normalize",),
        edge_only=True,
        reason="MXNet's L2Normalization adds its epsilon (1e-10) to the sum of squares: a row of norm 1e-7 comes "
        "out with norm 1e-2 (0.00659 for 0.659)",
    ),
    KnownIssue(
        framework="tensorflow",
        seen_in=("2.",),
        names=("batch_norm",),
        modes=("xla",),
        edge_only=True,
        reason="XLA's batch normalisation takes the variance as E[x^2] - E[x]^2 in float32: in a channel of mean 3 "
        "and variance 9e-6 (near eps 1e-5) the output is 3.7% off (1.9524 for 2.02682); eager and graph "
        "TensorFlow pass",
    ),
    KnownIssue(
        framework="torch",
        seen_in=("2.13.",),
        names=("vgg10", "vgg16"),
        modes=("compile",),
        devices=("cpu",),
        directions=("training",),
        dtypes=("float32", "amp"),
        reason="torch.compile (inductor, CPU) returns zero weight gradients for conv -> relu -> max_pool2d in float32: "
        "the VGG training step does not train (reproduced with a 5-layer nn.Sequential; "
        "backend='aot_eager' is correct). Under autocast to bfloat16 the step trains, but an amp case is checked "
        "in float32 first (its float32 twin), which meets the bug: 0.W's update 1 of its norm off, i.e. none "
        "(make bench, Xeon with AMX, 2026-11-28)",
    ),
    KnownIssue(
        framework="torch",
        seen_in=("2.11.", "2.13."),
        names=("lstm",),
        modes=("compile",),
        not_compiled=True,
        reason="torch.compile cannot capture nn.LSTM (Dynamo: 'Attempted to wrap RNN, GRU, or LSTM'; torch 2.13 on "
        "the CPU, 2.11 on CUDA): without "
        "fullgraph the LSTM ran eagerly under the compile label (11.2 ms a step against 10.8 ms eager), and "
        "Dynamo's experimental allow_rnn=True fails in inductor (aten.mkldnn_rnn_layer)",
    ),
    KnownIssue(
        framework="mxnet",
        seen_in=("1.9.",),
        names=("softmax",),
        dtypes=("float16",),
        reason="MXNet computes float16 softmax in float16: a probability of 0.7885 comes back as 0.8115 (2.9%), "
        "outside the float16 tolerance of 2%; PyTorch and TensorFlow accumulate in float32 and pass",
    ),
    KnownIssue(
        framework="numpy",
        seen_in=("1.", "2.4."),  # 2.4.6 too (2026-11-28, `--dtype float16 --framework numpy -k batch_norm`)
        names=("batch_norm",),
        dtypes=("float16",),
        reason="NumPy's var() of a float16 array sums the squares in float16 over 32768 elements per channel: "
        "the sum passes 65504, overflows to inf, and the normalised output collapses to beta",
    ),
    KnownIssue(
        framework="jax",
        seen_in=("0.7.", "0.10."),
        names=("random_normal",),
        dtypes=("bfloat16",),
        reason="jax.random.normal in bfloat16 draws its uniform variates in bfloat16 (128 values in (-1, 1), mean "
        "-1/128) before the inverse CDF: 128 distinct samples, none past about +-2.9, and over five keys of 2^20 "
        "samples a mean of -0.011 to -0.013 (12 standard errors; JAX 0.10.2, eight keys of 2^18: -0.008 to "
        "-0.015); float32 samples rounded to bfloat16 are unbiased",
        signature=_ON_A_BF16_GRID,
    ),
)


def known_issue(case: Case, version: str) -> KnownIssue | None:
    for issue in KNOWN_ISSUES:
        if issue.applies(case, version):
            return issue
    return None


def held_to(issue: KnownIssue, framework: str, version: str) -> str:
    """The xfail reason: the entry's, and, in a version it was not seen in, that the result decides."""
    if issue.seen(version):
        return issue.reason
    return (f"{issue.reason} [seen in {framework} {', '.join(v.rstrip('.') for v in issue.seen_in)}; "
            f"{framework} {version} is held to its behaviour ({issue.behaviour.describe}): a pass means this "
            "version no longer shows it]")
