"""The frozen description of one benchmark: what runs, where, how, on which problem.

A Case is all that parametrisation produces and all that the rest of the suite reads: its id,
its benchmark group and its markers are derived from it, never stored beside it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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

    @classmethod
    def operator(cls, spec: Any, direction: str, framework: str, device: str = "cpu", mode: str = "eager",
                 dtype: str = "float32", params: Mapping[str, Any] | Iterable[tuple[str, Any]] = (),
                 label: str | None = None) -> Case:
        """An operator case: its name, family and size label come from the operator's spec (what
        workloads.ops registers: name, family, label(params)); `label` replaces the size label
        where a case is a variant of a size (edge inputs, a seed)."""
        p = dict(params)
        return cls("op", spec.name, spec.family, direction, framework, device, mode, dtype,
                   spec.label(p) if label is None else label, tuple(sorted(p.items())))

    @classmethod
    def model(cls, name: str, direction: str, framework: str, batch: int, device: str = "cpu", mode: str = "eager",
              precision: str = "float32", epochs: int | None = None) -> Case:
        """A model case at a batch size: a training step or inference (family "e2e"), or with
        `epochs` a whole training run (family and direction "convergence")."""
        if epochs is None:
            return cls("model", name, "e2e", direction, framework, device, mode, precision, f"{name}-b{batch}",
                       (("batch", batch),))
        return cls("model", name, "convergence", "convergence", framework, device, mode, precision,
                   f"{name}-b{batch}-e{epochs}", (("batch", batch), ("epochs", epochs)))

    @classmethod
    def function(cls, name: str, framework: str, device: str = "cpu", mode: str = "eager",
                 dtype: str = "float32") -> Case:
        """A user's own function timed through the `fw` fixture (opbench.api): `name` is its
        test's, its family "function", its size whatever the test makes (no label)."""
        return cls("op", name, "function", "forward", framework, device, mode, dtype, "")

    @property
    def is_function(self) -> bool:
        """A user's own function, timed through the `fw` fixture, not a registered operator."""
        return self.family == "function"

    @property
    def is_model(self) -> bool:
        """A model (training, inference or convergence), not an operator."""
        return self.kind == "model"

    @property
    def precision(self) -> str:
        """A model's precision ("float32" or "amp"); an operator's dtype."""
        return self.dtype

    @property
    def p(self) -> dict[str, Any]:
        """The problem's parameters (sizes, strides, ...) as a dict."""
        return dict(self.params)

    @property
    def id(self) -> str:
        """The pytest id: framework-device-mode-dtype-size."""
        return "-".join(filter(None, (self.framework, self.device, self.mode, self.dtype, self.label)))

    @property
    def group(self) -> str:
        """Benchmark group: one per operator/model, direction, device, dtype and size,
        so that frameworks and modes stand side by side."""
        return f"{self.name}-{self.direction}[{'-'.join(filter(None, (self.device, self.dtype, self.label)))}]"

    @property
    def markers(self) -> tuple[str, ...]:
        """The markers attached to this case's test item."""
        amp = ("amp",) if self.is_model and self.precision == "amp" else ()
        return (self.framework, self.device, self.mode, self.name, self.family, self.direction, *amp)


def dims_label(*dims: int, sep: str = "x") -> str:
    """Sizes joined as text: dims_label(2, 3) == '2x3'."""
    return sep.join(str(d) for d in dims)
