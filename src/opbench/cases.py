"""The frozen description of one benchmark: what runs, where, how, on which problem.

A Case is all that parametrisation produces and all that the rest of the suite reads: its id,
its benchmark group and its markers are derived from it, never stored beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Case:
    """One benchmark: an operator or model, on a framework, device, mode, dtype and problem size."""

    kind: str  # "op" or "model"
    name: str  # operator or model name, also its marker
    family: str  # operator family ("linalg", ...) or "e2e"
    direction: str  # "forward" / "backward" for ops, "inference" / "training" for models
    framework: str
    device: str
    mode: str
    dtype: str  # a model's is its precision: "float32" or "amp"
    label: str  # the problem size as text, e.g. "1024x1024x1024"
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def p(self) -> dict[str, Any]:
        """The problem's parameters (sizes, strides, ...) as a dict."""
        return dict(self.params)

    @property
    def id(self) -> str:
        """The pytest id: framework-device-mode-dtype-size."""
        return f"{self.framework}-{self.device}-{self.mode}-{self.dtype}-{self.label}"

    @property
    def group(self) -> str:
        """Benchmark group: one per operator/model, direction, device, dtype and size,
        so that frameworks and modes stand side by side."""
        return f"{self.name}-{self.direction}[{self.device}-{self.dtype}-{self.label}]"

    @property
    def markers(self) -> tuple[str, ...]:
        """The markers attached to this case's test item."""
        amp = ("amp",) if self.kind == "model" and self.dtype == "amp" else ()
        return (self.framework, self.device, self.mode, self.name, self.family, self.direction, *amp)


def dims_label(*dims: int, sep: str = "x") -> str:
    """Sizes joined as text: dims_label(2, 3) == '2x3'."""
    return sep.join(str(d) for d in dims)
