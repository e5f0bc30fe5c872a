"""The interface every framework backend implements.

A backend turns a framework-neutral operator or model into a zero-argument callable on its
framework, in one of its execution modes, and knows how to synchronise, pin threads and move
arrays between NumPy and its device. Its module is the only one that imports its framework.
"""

from __future__ import annotations

import abc
import importlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from opbench.workloads import ops

Call = Callable[[], Any]


@dataclass(frozen=True)
class GpuFacts:
    """What a framework says of a GPU; None where it does not say."""

    name: str = ""
    capability: tuple[int, int] | None = None
    multiprocessors: int | None = None
    clock_hz: float | None = None


@dataclass(frozen=True)
class Framework:
    """What opbench knows of a framework before importing it. Every backend module declares one
    as `FRAMEWORK = Framework(...)` with literal arguments, read from its source by
    opbench.frameworks.declared() without running it; names, modes, markers, options and the test
    lists all derive from these declarations."""

    name: str  # the id part, marker and --framework value
    title: str  # how people write it: "PyTorch"
    package: str  # the import name, looked up without importing
    modes: tuple[str, ...]  # its execution modes, the first one plain op-by-op execution (named "eager")
    order: int  # its place in listings (NumPy, the reference, first)
    compiled: tuple[str, ...] = ()  # modes that compile per input shape
    suites: tuple[str, ...] = ("ops", "models")  # "ops": operators, "models": the end-to-end suite
    load_before: tuple[str, ...] = ()  # frameworks imported first when installed (import-order crashes)
    directions: tuple[str, ...] = ("forward", "backward")  # ("forward",): an inference engine, no gradients
    # registered operators it does not implement (tests/frameworks/test_registry.py holds it to it)
    lacks: tuple[str, ...] = ()


class Backend(abc.ABC):
    """One framework. Operator implementations are looked up by the operator's name."""

    framework: Framework
    kernel_layout = "OIHW"

    @property
    def name(self) -> str:
        return self.framework.name

    @property
    def modes(self) -> tuple[str, ...]:
        return self.framework.modes

    def no_mode(self, mode: str) -> Unavailable:
        """The error for a mode this backend does not have (never a silent eager run)."""
        return Unavailable(f"{self.name} has no mode {mode!r}; its modes: {', '.join(self.modes)}")

    @abc.abstractmethod
    def version(self) -> str: ...

    @abc.abstractmethod
    def gpu_unavailable(self) -> str | None:
        """Why the GPU cannot be used, or None when it can."""

    def gpu_facts(self) -> GpuFacts | None:
        """What the framework says of GPU 0 (name, compute capability, multiprocessors, maximum
        clock), for the roofline; None where it says nothing (then generous bounds apply)."""
        return None

    def dtypes(self, device: str) -> tuple[str, ...]:
        """The dtypes this framework computes in on `device`."""
        return ("float32", "float16", "bfloat16")

    def amp_unavailable(self, device: str) -> str | None:
        """Why this framework's models cannot train and infer in automatic mixed precision on
        `device` (opbench.workloads.models.precision), or None when they can."""
        return None

    def image_layout(self, device: str) -> str:
        """The layout of image tensors on `device`: "NCHW" or "NHWC"."""
        return "NCHW"

    @abc.abstractmethod
    def from_numpy(self, array: np.ndarray, device: str, dtype: str) -> Any: ...

    @abc.abstractmethod
    def to_numpy(self, tensor: Any) -> np.ndarray:
        """A float32 (or integer) NumPy copy of `tensor`; waits for it to be computed."""

    @abc.abstractmethod
    def sync(self, device: str) -> None:
        """Block until every operation queued on `device` has finished."""

    @abc.abstractmethod
    def set_threads(self, n: int) -> None: ...

    @abc.abstractmethod
    def threads(self) -> int:
        """The intra-op thread count the framework will actually use now."""

    def forget(self) -> None:
        """Let go of what the framework keeps for programs it compiled (their caches), between two
        cases of a worker and never within one: the next case's memory is then its own. Nothing
        by default."""
        return None

    def op(self, name: str) -> Callable[..., Any] | None:
        """This framework's implementation of operator `name`, or None: the one an operator
        declared outside opbench carries (opbench.api.operator), else this backend's own."""
        spec = ops.REGISTRY.get(name)
        own = spec.implementations.get(self.name) if spec is not None else None
        return own() if own is not None else getattr(self._ops_module(), name, None)

    def implemented(self) -> frozenset[str]:
        """The operators this backend implements: its ops module's public functions. Each must be
        a registered operator (a misspelt name is an error, not a silent skip), and every other
        registered operator must be declared in Framework.lacks."""
        module = self._ops_module()
        return frozenset(n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n)))

    @abc.abstractmethod
    def _ops_module(self) -> Any: ...

    def compiled(self, fn: Callable[..., Any], mode: str, device: str) -> Callable[..., Any]:
        """`fn(*tensors)` in `mode` on `device`, compiled as this backend compiles its operators
        (the `fw` fixture's compile): tracing or compilation happens on its first call."""
        raise self.no_mode(mode)

    def wait(self, result: Any, device: str) -> None:
        """Block until `result` is computed: the device synchronised, where the framework queues work."""
        self.sync(device)

    @abc.abstractmethod
    def forward(self, impl: Callable[..., Any], p: dict, args: Sequence[Any], mode: str, device: str) -> Call:
        """A callable computing impl(p, *args) in `mode` on `device`. Tracing or compilation
        happens on its first call, not here."""

    def backward(
        self, impl: Callable[..., Any], p: dict, args: Sequence[Any], argnums: Sequence[int], cotangent: Any,
        mode: str, device: str,
    ) -> Call:
        """A callable returning (output, grads): the forward pass and the vector-Jacobian product
        with `cotangent`, with respect to args[i] for i in argnums. A framework that declares
        directions=("forward",) keeps this default and its backward cases are skipped with why."""
        raise Unavailable(f"{self.name} computes forward passes only (its declared directions: "
                          f"{', '.join(self.framework.directions)})")

    def products_computed_in(self, impl: Callable[..., Any], p: dict, args: Sequence[Any], mode: str,
                             device: str) -> str | None:
        """The element type impl(p, *args)'s products (dots, convolutions) compute in in `mode`,
        read from the program the framework compiles (a 16-bit label may run float32 products
        between conversions); None where the framework shows no such program."""
        return None

    def creation(self, impl: Callable[..., Any], p: dict, host_args: Sequence[Any], device: str, dtype: str) -> Call:
        """A callable that creates a tensor with a creation operator (eager only)."""
        return lambda: impl(p, device, dtype, *host_args)

    def build(self, model: Any, params: dict[str, np.ndarray], device: str, dtype: str, mode: str) -> Any:
        """A NativeModel (opbench.workloads.models.native) of `model` with `params`, for `mode` on `device`."""
        raise Unavailable(f"{self.name} builds no models")

    profiler_name = ""  # the profiler profile() runs, as its framework names it; "" for none

    def profile(self, call: Call, steps: int, folder: str) -> Any:
        """Run `call` `steps` times under the framework's own profiler, each step annotated, and
        return what it recorded as an opbench.frameworks.profiling.Trace (`folder`: its files):
        the `record` of the module `profile` beside the backend's own, in the framework's folder,
        imported only here (a profiler is a study aid, never loaded for a timed run)."""
        if not self.profiler_name:
            raise Unavailable(f"{self.name} has no profiler opbench can read")
        folder_of = type(self).__module__.rpartition(".")[0]
        return importlib.import_module(f"{folder_of}.profile").record(call, steps, folder)

    def info(self) -> dict[str, Any]:
        """Build facts for machine_info: version and whatever decides its speed."""
        return {"version": self.version()}


_HLO_TYPES = {"f64": "float64", "f32": "float32", "bf16": "bfloat16", "f16": "float16"}
_HLO_PRODUCT = re.compile(r"=\s*(\w+)\[[^\]]*\](?:\{[^}]*\})?\s+(?:dot|convolution)\(")


def hlo_product_types(hlo: str) -> str | None:
    """The element types of the dot and convolution instructions of an XLA HLO module's text
    ("float32", or "bfloat16,float32" for a mix); None where it has none."""
    found = sorted({_HLO_TYPES.get(m.group(1), m.group(1)) for m in _HLO_PRODUCT.finditer(hlo)})
    return ",".join(found) or None


class NotCompiled(Exception):
    """A compiled mode could not compile the whole call (a graph break under fullgraph): timing it
    would time part of it eagerly under the compiled label, so it is not timed."""


class Unavailable(Exception):
    """A framework, device, mode or dtype cannot run here; the message is the skip reason."""
