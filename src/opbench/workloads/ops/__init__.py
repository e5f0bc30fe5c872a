"""The operator catalogue: every OpSpec, by name, one module per family."""

from opbench.workloads.ops import activations, conv, creation, linalg, normalization, pooling, reshape  # noqa: F401
from opbench.workloads.ops.base import (
    REGISTRY,
    TOLERANCE,
    Arg,
    OpSpec,
    abs_error,
    absolute_allowance,
    allowed_error,
    gradient_allowance,
    max_error,
    rms,
    rtol,
)

FAMILIES = tuple(dict.fromkeys(spec.family for spec in REGISTRY.values()))


def get(name: str) -> OpSpec:
    """The operator called `name`; KeyError lists the valid names."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown operator {name!r}; valid: {', '.join(REGISTRY)}") from None


__all__ = [
    "FAMILIES",
    "REGISTRY",
    "TOLERANCE",
    "Arg",
    "OpSpec",
    "abs_error",
    "absolute_allowance",
    "allowed_error",
    "get",
    "gradient_allowance",
    "max_error",
    "rms",
    "rtol",
]
