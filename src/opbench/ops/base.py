"""What an operator is to the suite: inputs, NumPy reference, gradient, cost and sizes.

An OpSpec holds no framework code. Backends implement the operator under the same name with the
signature `name(p, *inputs)` (creation operators: `name(p, device, dtype, *host_inputs)`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

Params = Mapping[str, Any]

# Relative tolerance by dtype: an output passes when max|out - ref| <= tol * max(1, max|ref|).
TOLERANCE = {"float32": 5e-5, "float16": 2e-2, "bfloat16": 1e-1}


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
    vjp: Callable[..., tuple[np.ndarray, ...]] | None = None  # vjp(p, arrays, cotangent)
    flops: Callable[[Params], float] | None = None  # nominal forward FLOPs
    output_kind: str = "plain"
    creation: bool = False
    # A custom output check (random creation): check(p, host_inputs, out) -> error, raises on failure.
    check: Callable[..., float] | None = None
    tol_scale: float = 1.0
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def differentiable(self) -> bool:
        return self.vjp is not None

    @property
    def grad_argnums(self) -> tuple[int, ...]:
        return tuple(i for i, a in enumerate(self.args) if a.differentiable)

    def cost(
        self, p: Params, direction: str, inputs: tuple[np.ndarray, ...], out_size: int, itemsize: int
    ) -> tuple[float | None, float]:
        """(FLOPs, bytes moved) of one call. The backward pass counts the forward pass plus one
        product of the forward's size per input it differentiates (the usual 1 + n estimate)."""
        flops = self.flops(p) if self.flops else None
        in_elems = sum(a.size for a in inputs)
        if direction == "backward":
            flops = flops * (1 + len(self.grad_argnums)) if flops else flops
            elems = in_elems + 2 * out_size + sum(inputs[i].size for i in self.grad_argnums)
        else:
            elems = in_elems + out_size
        return flops, float(elems * itemsize)


REGISTRY: dict[str, OpSpec] = {}


def register(spec: OpSpec) -> OpSpec:
    if spec.name in REGISTRY:
        raise ValueError(f"operator {spec.name!r} registered twice")
    REGISTRY[spec.name] = spec
    return spec


def shape_strategy(**ranges: tuple[int, int]) -> st.SearchStrategy[dict[str, int]]:
    """A strategy of dicts with one integer per name, each drawn from its (low, high) range."""
    return st.fixed_dictionaries({k: st.integers(lo, hi) for k, (lo, hi) in ranges.items()})


def normal(r: np.random.Generator, *shape: int) -> np.ndarray:
    return r.standard_normal(shape).astype(np.float32)


def max_error(out: np.ndarray, ref: np.ndarray) -> float:
    """max|out - ref|, or inf when out has the wrong shape or holds NaN/Inf."""
    out = np.asarray(out, dtype=np.float64)
    if out.size == ref.size == 1:  # a scalar may come back as shape () or (1,)
        out = out.reshape(ref.shape)
    if out.shape != ref.shape or not np.all(np.isfinite(out)):
        return float("inf")
    return float(np.max(np.abs(out - ref))) if out.size else 0.0


def allowed_error(ref: np.ndarray, dtype: str, scale: float = 1.0) -> float:
    """The largest max|out - ref| accepted for `dtype`."""
    magnitude = float(np.max(np.abs(ref))) if ref.size else 0.0
    return TOLERANCE[dtype] * scale * max(1.0, magnitude)
