"""What an operator is to the suite: inputs, NumPy reference, gradient, cost and sizes.

An OpSpec holds no framework code. Backends implement the operator under the same name with the
signature `name(p, *inputs)` (creation operators: `name(p, device, dtype, *host_inputs)`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from hypothesis import strategies as st

Params = Mapping[str, Any]

# An output passes when every element is within rtol * (|ref| + floor) of the reference, in the
# style of numpy.testing.assert_allclose with atol = rtol * floor. rtol by dtype (times the
# operator's tol_scale) for operators that reduce; element-wise operators declare `ulps`, and
# their rtol is that many units of roundoff of the dtype.
TOLERANCE = {"float32": 5e-5, "float16": 2e-2, "bfloat16": 1e-1}
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
# The smallest normal number: below it a dtype keeps only an absolute precision, so every
# element may also be off by this much (6.1e-5 for float16; float32 and bfloat16 share 1.2e-38).
SMALLEST_NORMAL = {"float32": 2.0**-126, "float16": 2.0**-14, "bfloat16": 2.0**-126}
# Units of roundoff of an operator's conditioning allowed beside its relative tolerance: the
# float32 mean of values near 3 is off by ulp(3)/2 even when correctly rounded, so x - mean is
# off by 1.2e-7 / std relative to itself; honest frameworks measured at most 2.2 units, while
# MXNet's float16 softmax (accumulated in float16) needs 15.7 beside its relative tolerance.
COND_ULPS = 8


class CheckFailed(AssertionError):
    """An operator's own check (`OpSpec.check`) refused a result; `error` is how far it was, in the
    check's own measure."""

    def __init__(self, message: str, error: float) -> None:
        super().__init__(message)
        self.error = error


@dataclass(frozen=True)
class Arg:
    """One operator input. `kind` says how backends may lay it out: "plain" arrays are never
    transposed, "image" arrays are NCHW here (NHWC where a backend prefers it), "kernel" arrays
    are OIHW here (HWIO for TensorFlow)."""

    name: str
    kind: str = "plain"
    differentiable: bool = True


@dataclass(frozen=True)
class OpSpec:
    """A framework-neutral operator: how to make its inputs, its NumPy reference and costs."""

    name: str
    family: str
    args: tuple[Arg, ...]
    make: Callable[[np.random.Generator, Params], tuple[np.ndarray, ...]]
    reference: Callable[..., np.ndarray]  # reference(p, *arrays) -> output
    shapes: Mapping[str, tuple[Params, ...]]  # per profile
    label: Callable[[Params], str]
    small: Callable[[], st.SearchStrategy[Params]]  # small problems for property tests
    # One small problem for the property tests of compiled modes, whose examples then reuse one
    # compilation (None: creation operators, measured in eager mode only).
    fixed: Params | None = None
    vjp: Callable[..., tuple[np.ndarray, ...]] | None = None  # vjp(p, arrays, cotangent)
    flops: Callable[[Params], float] | None = None  # forward FLOPs
    # The FLOP count is exact (equal to torch.utils.flop_counter's for products and convolution)
    # for the forward pass, and for the backward pass where backward_flops gives it; otherwise
    # it is nominal, recorded as extra_info flops_exact=False and left out of %-of-peak.
    flops_exact: bool = False
    backward_flops: Callable[[Params], float] | None = None
    # The most a published fast algorithm divides the counted FLOPs by (Winograd and FFT
    # convolution: at most the kernel's area); the roofline guard allows that much more.
    algorithm_gain: Callable[[Params], float] | None = None
    output_kind: str = "plain"
    creation: bool = False
    # A custom output check (random creation): check(p, host_inputs, out) -> error, raises on failure.
    check: Callable[..., float] | None = None
    tol_scale: float = 1.0
    # Element-wise forward outputs: rtol = ulps x the dtype's unit roundoff (None: TOLERANCE).
    ulps: float | None = None
    # floor(p, *inputs) -> the per-element magnitude the forward output's rounding error scales
    # with beside |ref| (e.g. |x| for activations); None: the RMS of the reference output.
    floor: Callable[..., np.ndarray | float] | None = None
    # underflow(p, *inputs) -> how many smallest normals an output element may be off by: an
    # intermediate that flushes to zero there, multiplied into the output (gelu is x Phi(x),
    # with Phi below 1e-38 for x < -13: 1 + |x|); None: 1.
    underflow: Callable[..., np.ndarray | float] | None = None
    # conditioning(p, *inputs) -> how far one unit of roundoff in the inputs and in the reduced
    # statistics moves each forward output element (normalisations: |gamma| (|x| + |mean|) /
    # sqrt(var + eps), large where the mean dwarfs the spread); COND_ULPS units of it are allowed.
    conditioning: Callable[..., np.ndarray] | None = None
    # Linear in each input (products, convolution, average pooling): the rounding error of every
    # output and gradient element is bounded by the same operation on absolute values (Higham's
    # |A||B| bound), which is then its floor: per element, however much the terms cancel.
    linear: bool = False
    # Inputs over the function's whole range and the regimes where definitions differ (saturated
    # tails, norms and variances near the epsilon), for the edge-regime property tests:
    # edge(rng, p) at the problem `edge_problem`; a case asks for them with the parameter inputs="edge".
    edge: Callable[[np.random.Generator, Params], tuple[np.ndarray, ...]] | None = None
    edge_problem: Params | None = None
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # An operator declared outside opbench (opbench.api.operator) carries its own implementations:
    # by framework name, a function that returns one with the signature the backends' own have (it
    # imports the framework when the backend asks, never before); `origin` is the file that
    # declared it ("" for opbench's own, whose implementations live in their backends).
    implementations: Mapping[str, Callable[[], Callable[..., Any]]] = field(default_factory=dict)
    origin: str = ""

    @property
    def differentiable(self) -> bool:
        return self.vjp is not None

    def inputs(self, r: np.random.Generator, p: Params) -> tuple[np.ndarray, ...]:
        """The operator's inputs for problem `p`: the edge regimes where p says inputs="edge"."""
        if p.get("inputs") == "edge":
            if self.edge is None:
                raise ValueError(f"operator {self.name!r} has no edge-regime inputs")
            return self.edge(r, p)
        return self.make(r, p)

    @property
    def grad_argnums(self) -> tuple[int, ...]:
        return tuple(i for i, a in enumerate(self.args) if a.differentiable)

    def cost(
        self, p: Params, direction: str, inputs: tuple[np.ndarray, ...], out_size: int, itemsize: int
    ) -> tuple[float | None, float, bool]:
        """(FLOPs, bytes moved, whether the FLOP count is exact) of one call. Without
        backward_flops, the backward pass counts the forward pass plus one product of the
        forward's size per input it differentiates (the nominal 1 + n estimate)."""
        flops = self.flops(p) if self.flops else None
        exact = self.flops_exact and flops is not None
        in_elems = sum(a.size for a in inputs)
        if direction == "backward":
            if self.backward_flops:
                flops = self.backward_flops(p)
            else:
                flops, exact = (flops * (1 + len(self.grad_argnums)) if flops else flops), False
            elems = in_elems + 2 * out_size + sum(inputs[i].size for i in self.grad_argnums)
        else:
            elems = in_elems + out_size
        return flops, float(elems * itemsize), exact


REGISTRY: dict[str, OpSpec] = {}


def register(spec: OpSpec) -> OpSpec:
    if spec.name in REGISTRY:
        raise ValueError(f"operator {spec.name!r} registered twice")
    REGISTRY[spec.name] = spec
    return spec


def shape_strategy(**ranges: tuple[int, int]) -> st.SearchStrategy[dict[str, int]]:
    """A strategy of dicts with one integer per name, each drawn from its (low, high) range."""
    from hypothesis import strategies as st  # only property tests need it: the plugin stays light

    return st.fixed_dictionaries({k: st.integers(lo, hi) for k, (lo, hi) in ranges.items()})


def normal(r: np.random.Generator, *shape: int) -> np.ndarray:
    return r.standard_normal(shape).astype(np.float32)


def log_uniform(r: np.random.Generator, low: float, high: float, *shape: int) -> np.ndarray:
    """Magnitudes spread evenly over the decades from `low` to `high`, each with a random sign."""
    magnitude = np.exp(r.uniform(np.log(low), np.log(high), shape))
    return (magnitude * r.choice([-1.0, 1.0], shape)).astype(np.float32)


def shifted_rows(r: np.random.Generator, means, stds, *shape: int, axis: int = 0) -> np.ndarray:
    """Normal values whose slices along `axis` take, in turn, each (mean, std) pair: a constant
    slice (std 0), variances far below, near and above a normalisation's epsilon, and means
    far from zero, where a one-pass variance (E[x^2] - E[x]^2) cancels."""
    x = normal(r, *shape)
    index = [slice(None)] * len(shape)
    for i in range(shape[axis]):
        index[axis] = i
        mean, std = means[i % len(means)], stds[(i // len(means)) % len(stds)]
        x[tuple(index)] = mean + std * x[tuple(index)]
    return x


def abs_error(out: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray | None, float]:
    """|out - ref| element by element in float64, and its maximum; (None, inf) when out has the wrong
    shape or either side holds NaN or infinity. One difference, made in place: every benchmark's check
    reads it for each output, and its passes over the arrays are the check's cost."""
    out = np.asarray(out, dtype=np.float64)
    if out.size == ref.size == 1:  # a scalar may come back as shape () or (1,)
        out = out.reshape(ref.shape)
    if out.shape != ref.shape:
        return None, float("inf")
    diff = np.empty(ref.shape)
    with np.errstate(invalid="ignore"):  # infinity less infinity: a NaN, which is no finite error either
        np.subtract(out, ref, out=diff)
    np.abs(diff, out=diff)
    err = float(np.max(diff)) if diff.size else 0.0
    return (diff, err) if np.isfinite(err) else (None, float("inf"))


def max_error(out: np.ndarray, ref: np.ndarray) -> float:
    """max|out - ref|, or inf when out has the wrong shape or either side holds NaN or infinity."""
    return abs_error(out, ref)[1]


def rms(ref: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(ref)))) if np.size(ref) else 0.0


def rtol(spec: OpSpec, dtype: str, forward: bool) -> float:
    """The relative tolerance of one output of `spec` in `dtype` (gradients: always TOLERANCE)."""
    if forward and spec.ulps is not None:
        return min(spec.ulps * UNIT_ROUNDOFF[dtype], TOLERANCE[dtype])
    return TOLERANCE[dtype] * spec.tol_scale


def absolute_allowance(spec: OpSpec, p: Params, inputs: tuple[np.ndarray, ...], dtype: str) -> np.ndarray | float:
    """What a forward output element may be off by beside its relative tolerance: underflow of
    intermediates and the operator's conditioning (both in units of the dtype)."""
    allowance = SMALLEST_NORMAL[dtype] * (spec.underflow(p, *inputs) if spec.underflow else 1.0)
    if spec.conditioning:
        allowance = allowance + COND_ULPS * UNIT_ROUNDOFF[dtype] * spec.conditioning(p, *inputs)
    return allowance


def gradient_allowance(spec: OpSpec, p: Params, inputs: tuple[np.ndarray, ...], dtype: str,
                       grads: list[np.ndarray]) -> list[float]:
    """What each gradient may be off by beside its relative tolerance: a gradient through an
    ill-conditioned forward (x - mean over a tiny spread) inherits its error, scaled by the
    largest gradient."""
    cond = float(np.max(spec.conditioning(p, *inputs))) if spec.conditioning and inputs[0].size else 0.0
    return [SMALLEST_NORMAL[dtype] + COND_ULPS * UNIT_ROUNDOFF[dtype] * cond * max(1.0, float(np.max(np.abs(g))))
            for g in grads]


def allowed_error(ref: np.ndarray, dtype: str, tol: float, floor: np.ndarray | float,
                  absolute: np.ndarray | float | None = None) -> np.ndarray:
    """The largest |out - ref| accepted at each element (absolute: the dtype's smallest normal
    unless absolute_allowance says more)."""
    return tol * (np.abs(ref) + floor) + (SMALLEST_NORMAL[dtype] if absolute is None else absolute)
