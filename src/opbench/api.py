"""opbench's public API: your own operators, models and code, benchmarked as opbench's own are.

This is the one supported import for code outside opbench (docs/usage/own.md); every other
module may change between releases. Importing it imports no framework.

- `operator(...)` declares an operator: its inputs, NumPy reference and gradient, and one
  implementation per framework. `globals().update(op.benchmarks())` in a test file then gives
  its forward and backward benchmarks over every selected framework, mode, device, dtype and
  size, each checked against NumPy before it is timed, with the roofline, the observed threads,
  the machine's load and the report, exactly as a built-in operator.
- `model(...)` declares a model from opbench's layers (Dense, Conv2D, ...): every framework
  builds it with the same weights, and `globals().update(m.benchmarks())` gives its training
  step and inference benchmarks, held to the float64 reference as the catalogue's models are.
  `model_benchmarks(*models)` gives one training and one inference benchmark over several models;
  without models, over opbench's own catalogue: benchmarks/e2e is written with it.
- `builtin_operators(family)` gives opbench's own operators as the same Operators: opbench's
  benchmarks/ops files generate their benchmarks with it, as a user's file does.
- The `fw` fixture (the pytest plugin) gives a test one framework in one mode on one device and
  dtype: `fw.array`, `fw.compile`, `fw.sync`, `fw.check` and `fw.measure` (Runner).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from opbench.core.case import dims_label
from opbench.core.errors import DeclarationError
from opbench.suites.functions import Runner
from opbench.suites.models.cases import DIRECTIONS
from opbench.suites.prepared import CorrectnessError
from opbench.workloads import ops
from opbench.workloads.models import catalogue
from opbench.workloads.models.spec import (
    LSTM,
    BatchNorm,
    Conv2D,
    Dense,
    Flatten,
    GlobalAvgPool,
    ModelSpec,
    Optimizer,
    Pool2D,
    Residual,
)
from opbench.workloads.ops.base import Arg, register

__all__ = ["LSTM", "Arg", "BatchNorm", "Conv2D", "CorrectnessError", "DeclarationError", "Dense", "Flatten",
           "GlobalAvgPool", "Model", "Operator", "Optimizer", "Pool2D", "Residual", "Runner", "builtin_operators",
           "model", "model_benchmarks", "models_from", "operator"]


def _caller(depth: int = 2) -> str:
    """'file.py:12' of the declaration (the frame `depth` levels up)."""
    frame = inspect.stack()[depth]
    return f"{Path(frame.filename).name}:{frame.lineno}"


def _frameworks() -> tuple[str, ...]:
    from opbench import frameworks

    return tuple(frameworks.declared())


@dataclass(frozen=True)
class Operator:
    """A declared operator: `spec` is what opbench runs."""

    spec: ops.OpSpec

    @property
    def name(self) -> str:
        return self.spec.name

    def benchmarks(self) -> dict[str, Callable]:
        """`test_<name>` and, with a gradient, `test_<name>_backward`: for `globals().update(...)`."""
        from opbench.suites.ops.generate import benchmarks_of

        return benchmarks_of(self.spec)


def builtin_operators(family: str) -> tuple[Operator, ...]:
    """opbench's own operators of `family` (activation, linalg, conv, ...), each the Operator a
    declaration gives. opbench's benchmarks/ops files are written with it, through the same call as a
    user's own operator: `for op in builtin_operators("linalg"): globals().update(op.benchmarks())`.
    Operators a user declared in that family are benchmarked where they are declared, not here.
    Raises DeclarationError for an unknown family, naming the valid ones."""
    if family not in ops.FAMILIES:
        raise DeclarationError(f"unknown operator family {family!r}; valid: {', '.join(ops.FAMILIES)}")
    return tuple(Operator(spec) for spec in ops.REGISTRY.values() if spec.family == family and not spec.origin)


def _as_tuple(made: Any) -> tuple[np.ndarray, ...]:
    return tuple(made) if isinstance(made, tuple | list) else (made,)


def _float32(arrays: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    return tuple(np.asarray(a, np.float32) if np.asarray(a).dtype.kind == "f" else np.asarray(a) for a in arrays)


def operator(name: str, *, reference: Callable[..., np.ndarray], inputs: Callable[..., Any],
             sizes: Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Mapping[str, Any]]],
             vjp: Callable[..., Any] | None = None, flops: Callable[[Mapping[str, Any]], float] | None = None,
             args: Sequence[str | Arg] | None = None, family: str = "custom", tol_scale: float = 1.0,
             label: Callable[[Mapping[str, Any]], str] | None = None,
             **implementations: Callable[..., Any]) -> Operator:
    """Declare operator `name`.

    - `inputs(rng, p)`: its input arrays (one, or a tuple) for the problem `p`, made with the
      NumPy Generator `rng`: the same in every framework.
    - `reference(p, *inputs)`: NumPy's output, evaluated in float64 as the check's oracle.
    - `sizes`: the problems, each a dict (`{"n": 256, "d": 1024}`), or by profile
      (`{"quick": [...], "full": [...]}`; one list serves both).
    - `vjp(p, inputs, cotangent)`: the gradient of each input (one array, or a tuple), for the
      backward benchmark; without it there is none.
    - `flops(p)`: the forward pass's FLOPs, for GFLOP/s and the roofline's plausibility check.
    - outputs and gradients are held to opbench's relative tolerance for the dtype (float32
      5e-5, times `tol_scale`) of |ref| + RMS(ref), element by element.
    - one implementation per framework, by name (`torch=`, `tensorflow=`, `jax=`, `mxnet=`;
      `numpy=` replaces the reference as NumPy's own entry): `impl(module, p, *inputs)` on the
      framework's arrays, `module` being the framework's package (torch, tensorflow, jax,
      numpy), imported when its benchmark runs and not before; MXNet's is F, mx.nd or mx.sym
      (hybridized), as its own operators get it. A framework without one is skipped with that
      reason.

    Raises DeclarationError, naming the declaring line, for a name opbench already has, an
    unknown framework, or a reference or gradient that fails on the first size.
    """
    where = _caller()
    known = _frameworks()
    unknown = sorted(set(implementations) - set(known))
    if unknown:
        raise DeclarationError(f"{where}: operator {name!r}: unknown framework {', '.join(unknown)}; "
                               f"valid: {', '.join(known)}")
    if name in ops.REGISTRY:
        raise DeclarationError(f"{where}: operator {name!r} is declared already "
                               f"({ops.REGISTRY[name].origin or 'one of opbench own'}): choose another name")
    profiles = dict(sizes) if isinstance(sizes, Mapping) else {"quick": tuple(sizes), "full": tuple(sizes)}
    profiles = {k: tuple(dict(p) for p in v) for k, v in profiles.items()}
    if set(profiles) != {"quick", "full"} or not all(profiles.values()):
        raise DeclarationError(f"{where}: operator {name!r}: sizes is a list of problems, or one per profile "
                               "(quick and full)")
    first = profiles["quick"][0]
    made = _float32(_as_tuple(inputs(np.random.default_rng(0), first)))
    names = [a if isinstance(a, Arg) else Arg(a) for a in (args or [f"x{i}" for i in range(len(made))])]
    if len(names) != len(made):
        raise DeclarationError(f"{where}: operator {name!r}: {len(names)} args named, inputs made {len(made)}")
    _check_reference(where, name, reference, vjp, first, made, names)
    spec = ops.OpSpec(
        name=name, family=family, args=tuple(names),
        make=lambda r, p: _float32(_as_tuple(inputs(r, p))),
        reference=reference,
        vjp=None if vjp is None else (lambda p, arrays, ct: _as_tuple(vjp(p, arrays, ct))),
        shapes=profiles,
        label=label or (lambda p: dims_label(*p.values()) if all(isinstance(v, int) for v in p.values())
                        else "-".join(f"{k}{v}" for k, v in p.items())),
        small=lambda: _fixed(first), fixed=first, flops=flops, tol_scale=tol_scale,
        implementations={fw: functools.partial(_bound, fn, fw) for fw, fn in implementations.items()}, origin=where,
    )
    register(spec)
    return Operator(spec)


def _bound(fn: Callable[..., Any], framework: str) -> Callable[..., Any]:
    """`fn` with its framework's module given first, as the backend calls its own operators:
    imported here, when the backend asks, outside anything a compiler traces. MXNet's backend
    hands its F (mx.nd or mx.sym) itself."""
    if framework == "mxnet":
        return fn
    from opbench import frameworks

    module = frameworks.package(framework)
    return lambda p, *xs: fn(module, p, *xs)


def _fixed(p: Mapping[str, Any]):
    from hypothesis import strategies as st

    return st.just(dict(p))


def _check_reference(where, name, reference, vjp, p, made, names) -> None:
    """The reference (and gradient) computed on the first size, in float64: one line where not."""
    exact = tuple(a.astype(np.float64) if a.dtype.kind == "f" else a for a in made)
    try:
        out = np.asarray(reference(p, *exact))
    except Exception as exc:
        raise DeclarationError(f"{where}: operator {name!r}: reference(p, *inputs) fails on {p}: "
                               f"{type(exc).__name__}: {exc}") from None
    if out.dtype.kind != "f" or not np.all(np.isfinite(out)):
        raise DeclarationError(f"{where}: operator {name!r}: reference gives {out.dtype} with "
                               f"{'non-finite values' if out.dtype.kind == 'f' else 'no floating point'} on {p}")
    if vjp is None:
        return
    try:
        grads = _as_tuple(vjp(p, exact, np.ones_like(out)))
    except Exception as exc:
        raise DeclarationError(f"{where}: operator {name!r}: vjp(p, inputs, cotangent) fails on {p}: "
                               f"{type(exc).__name__}: {exc}") from None
    want = [a.shape for a, arg in zip(exact, names, strict=True) if arg.differentiable]
    if [np.shape(g) for g in grads] != want:
        raise DeclarationError(f"{where}: operator {name!r}: vjp gives gradients of shapes "
                               f"{[np.shape(g) for g in grads]}, its differentiable inputs have {want}")


@dataclass(frozen=True)
class Model:
    """A declared model: `spec` is what every framework builds."""

    spec: ModelSpec

    @property
    def name(self) -> str:
        return self.spec.name

    def benchmarks(self) -> dict[str, Callable]:
        """`test_<name>_training` and `test_<name>_inference`: for `globals().update(...)`."""
        return {f"test_{self.name}_{d}": _model_benchmark(f"test_{self.name}_{d}", d, self.name)
                for d in DIRECTIONS}


def _model_benchmark(test_name: str, direction: str, models: str | tuple[str, ...] | None) -> Callable:
    """One model benchmark: `direction` of `models` (None: what benchmarks/e2e runs, the catalogue's
    own models and those of --workloads), bound by the opbench marker that says so."""
    import pytest

    from opbench.suites.measure import measure

    def benchmark_test(model_case, benchmark):
        measure(benchmark, model_case)

    benchmark_test.__name__ = benchmark_test.__qualname__ = test_name
    what = "the catalogue's models" if models is None else ", ".join((models,) if isinstance(models, str) else models)
    benchmark_test.__doc__ = f"{what}: {direction} over the selected frameworks, modes and precisions."
    if models is None:
        return benchmark_test  # the suite's own listing (opbench.suites.models.cases) binds it by its name
    return pytest.mark.opbench(model=models, direction=direction)(benchmark_test)


def model_benchmarks(*models: Model) -> dict[str, Callable]:
    """`test_training` and `test_inference`, each over all of `models` (the model is part of each
    id: `test_training[torch-cpu-eager-float32-mlp-b128]`); for `globals().update(...)`. Without
    models: opbench's own catalogue and the models of --workloads files, which is how
    benchmarks/e2e writes its benchmarks."""
    names = tuple(m.name for m in models) or None
    return {f"test_{d}": _model_benchmark(f"test_{d}", d, names) for d in DIRECTIONS}


def model(name: str, *, input_shape: Sequence[int], layers: Sequence[Any], optimizer: Optimizer | None = None,
          batch: int | Mapping[str, int] = 32, dataset: str = "", notes: str = "") -> Model:
    """Declare model `name`: `layers` (opbench's Dense, Conv2D, Pool2D, Flatten, LSTM, BatchNorm,
    GlobalAvgPool, Residual) on inputs of `input_shape` (no batch axis), the last a Dense whose
    units are the classes; trained with `optimizer` (SGD 0.01 by default; "sgd" or "adam") on
    synthetic batches of `batch` (or `dataset`'s, one of --data-dir's, where given). Raises
    DeclarationError, naming the declaring line, for a name opbench already has or layers that do
    not fit together."""
    from opbench.workloads.models import blueprint

    spec = blueprint.declared(name, input_shape, layers, optimizer, batch, dataset, notes, _caller())
    catalogue.register(spec)
    return Model(spec)


def models_from(path: str | Path) -> list[Model]:
    """Every model of a blueprint file (TOML, one [model.NAME] table each: docs/usage/own.md),
    declared: `for m in models_from("models.toml"): globals().update(m.benchmarks())`. Raises
    DeclarationError, one line naming the file and the model, for one opbench cannot build."""
    from opbench.workloads.models import blueprint

    return [Model(spec) for spec in blueprint.register_file(path)]
