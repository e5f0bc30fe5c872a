"""Models declared outside the catalogue: held to what every framework's builder can build, and
read from blueprint files, TOML with one table per model (`--workloads`, docs/usage/own.md):

    [model.tiny]
    input_shape = [784]
    batch = 64
    optimizer = { name = "adam", lr = 0.001 }
    layers = [
      { layer = "dense", units = 32, activation = "relu" },
      { layer = "dense", units = 10 },
    ]

A layer's `layer` names its kind, its other keys are its spec's fields (opbench.workloads.models.
spec: a pool2d's `kind` is max or avg); a residual block's `body` and `shortcut` are lists of layers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from opbench.core.errors import DeclarationError
from opbench.workloads.models import catalogue
from opbench.workloads.models import spec as kinds
from opbench.workloads.models.spec import Dense, Layer, ModelSpec, Optimizer, misfit, param_shapes

KINDS = {"dense": kinds.Dense, "conv2d": kinds.Conv2D, "pool2d": kinds.Pool2D, "flatten": kinds.Flatten,
         "lstm": kinds.LSTM, "batch_norm": kinds.BatchNorm, "global_avg_pool": kinds.GlobalAvgPool,
         "residual": kinds.Residual}
OPTIMIZERS = ("sgd", "adam")  # what every framework's builder and the reference step implement


def declared(name: str, input_shape: Sequence[int], layers: Sequence[Any], optimizer: Optimizer | None,
             batch: int | Mapping[str, int], dataset: str, notes: str, origin: str) -> ModelSpec:
    """The ModelSpec of a model declared at `origin` (a file and line, or a blueprint file), not yet
    registered; DeclarationError, one line starting with `origin`, where the catalogue has the name
    already or a builder could not build it."""
    def refuse(why: str) -> DeclarationError:
        return DeclarationError(f"{origin}: model {name!r}: {why}")

    if name in catalogue.MODELS:
        raise DeclarationError(f"{origin}: model {name!r} is declared already "
                               f"({catalogue.MODELS[name].origin or 'one of opbench own'}): choose another name")
    kinds = Layer.__args__
    for layer in layers:
        if not isinstance(layer, kinds):
            raise refuse(f"{layer!r} is not one of opbench's layers ({', '.join(k.__name__ for k in kinds)})")
    if not layers or not isinstance(layers[-1], Dense):
        raise refuse("the last layer is a Dense, its units the classes")
    optimizer = optimizer or Optimizer("sgd", 0.01)
    if optimizer.name not in OPTIMIZERS:
        raise refuse(f"unknown optimizer {optimizer.name!r}; valid: {', '.join(OPTIMIZERS)}")
    sizes = dict(batch) if isinstance(batch, Mapping) else {"quick": int(batch), "full": int(batch)}
    if set(sizes) != {"quick", "full"} or min(sizes.values()) < 1:
        raise refuse(f"batch is a positive size, or one per profile (quick and full), not {batch!r}")
    spec = ModelSpec(name=name, input_shape=tuple(int(d) for d in input_shape), layers=tuple(layers),
                     optimizer=optimizer, batch=sizes, dataset=dataset, notes=notes or f"declared in {origin}",
                     origin=origin)
    try:
        wrong = misfit(spec)
        param_shapes(spec)
    except Exception as exc:
        wrong = f"{type(exc).__name__}: {exc}"
    if wrong:
        raise refuse(f"its layers do not fit {spec.input_shape}: {wrong}")
    return spec


def _layer(table: Any, where: str) -> Layer:
    if not isinstance(table, Mapping) or "layer" not in table:
        raise DeclarationError(f"{where}: a layer is a table whose `layer` is one of {', '.join(KINDS)}, not {table!r}")
    fields = dict(table)
    kind = fields.pop("layer")
    if kind not in KINDS:
        raise DeclarationError(f"{where}: unknown layer {kind!r}; valid: {', '.join(KINDS)}")
    if kind == "residual":
        fields["body"] = tuple(_layer(t, f"{where} body {i}") for i, t in enumerate(fields.get("body", ())))
        if fields.get("shortcut") is not None:
            fields["shortcut"] = tuple(_layer(t, f"{where} shortcut {i}") for i, t in enumerate(fields["shortcut"]))
    known = {f.name for f in dataclasses.fields(KINDS[kind])}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise DeclarationError(f"{where}: {kind} has no {', '.join(unknown)}; "
                               f"its keys: layer, {', '.join(sorted(known))}")
    try:
        return KINDS[kind](**fields)
    except TypeError as exc:
        raise DeclarationError(f"{where}: {kind}: {exc}") from None


def register_file(path: str | Path) -> list[ModelSpec]:
    """Every model of the blueprint file `path`, checked (load) and then registered in the
    catalogue, all or none: what --workloads and opbench.api.models_from declare."""
    specs = load(path)
    for spec in specs:
        catalogue.register(spec)
    return specs


MODEL_KEYS = {"input_shape", "layers", "optimizer", "batch", "dataset", "notes"}


def load(path: str | Path) -> list[ModelSpec]:
    """Every model of the blueprint file `path`, checked, not registered; DeclarationError, one line
    naming the file and the model, for a file that is no TOML or a model a builder could not build."""
    path = Path(path)
    try:
        import tomllib
    except ImportError:  # Python 3.10
        raise DeclarationError(f"{path}: blueprint files need Python 3.11 or later (tomllib)") from None
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise DeclarationError(f"{path}: cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise DeclarationError(f"{path}: not TOML: {exc}") from None
    models = document.get("model")
    if not isinstance(models, Mapping) or not models or set(document) != {"model"}:
        raise DeclarationError(f"{path}: a blueprint file holds [model.NAME] tables and nothing else")
    specs = []
    for name, table in models.items():
        where = f"{path.name} [model.{name}]"
        missing, unknown = {"input_shape", "layers"} - set(table), set(table) - MODEL_KEYS
        if missing or unknown:
            raise DeclarationError(f"{where}: " + "; ".join(
                [f"needs {', '.join(sorted(missing))}"] * bool(missing) +
                [f"has no {', '.join(sorted(unknown))} (its keys: {', '.join(sorted(MODEL_KEYS))})"] * bool(unknown)))
        layers = [_layer(t, f"{where} layer {i}") for i, t in enumerate(table["layers"])]
        optimizer = table.get("optimizer")
        try:
            optimizer = Optimizer(**optimizer) if optimizer is not None else None
        except TypeError as exc:
            raise DeclarationError(f"{where}: optimizer: {exc}") from None
        specs.append(declared(name, table["input_shape"], layers, optimizer, table.get("batch", 32),
                              table.get("dataset", ""), table.get("notes", ""), where))
    return specs
