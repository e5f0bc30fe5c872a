"""A catalogue of plausible wrong implementations (mutants) and the gate that claims to catch each.

A mutant is a small wrapper applied to a real backend: it changes what a framework computes the
way a real bug would (a missing update, a stale gradient, a swapped gate, a wrong epsilon) and
leaves everything else as it is. `tests/test_mutants.py` runs every float32 mutant through the
suite's own gate and fails when one survives; `python -m tests.mutants` prints the mutation score
of each gate, for every framework installed.

Model mutants act through the framework-neutral NativeModel interface (`get_params`/`set_params`
around a real training step, or the parameters a model is built from), so each applies to every
framework unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from opbench import backends
from opbench.cases import Case
from opbench.e2e import prepare_model
from opbench.execute import CorrectnessError
from opbench.models import catalogue

FRAMEWORKS = ("torch", "tensorflow", "mxnet")
Params = dict[str, np.ndarray]


@dataclass(frozen=True)
class ModelMutant:
    """A wrong model: `update(before, after, state)` replaces the parameters after each real
    training step, or `build(params)` changes the parameters the framework is built from."""

    name: str
    gate: str  # "model training" | "model inference"
    model: str
    why: str
    update: Callable[[Params, Params, dict], Params] | None = None
    build: Callable[[Params], Params] | None = None


def _keep(before: Params, after: Params, frozen: Callable[[str], bool]) -> Params:
    return {k: before[k] if frozen(k) else after[k] for k in after}


def _scaled(factor: float) -> Callable[[Params, Params, dict], Params]:
    return lambda before, after, state: {k: before[k] + factor * (after[k] - before[k]) for k in after}


def _stale(before: Params, after: Params, state: dict) -> Params:
    """Each step applies the previous step's update (a gradient buffer read before it is refreshed)."""
    fresh = {k: after[k] - before[k] for k in after}
    applied = state.get("last", fresh)
    state["last"] = fresh
    return {k: before[k] + applied[k] for k in after}


def _swap_lstm_bias_gates(params: Params) -> Params:
    i, f, g, o = np.split(params["0.b"], 4, axis=-1)
    return {**params, "0.b": np.concatenate([f, i, g, o], axis=-1)}


def _flip_kernels(params: Params) -> Params:
    """Convolution in place of cross-correlation: every conv kernel flipped in space."""
    return {k: v[:, :, ::-1, ::-1].copy() if v.ndim == 4 else v for k, v in params.items()}


def _drop_bias(layer: str) -> Callable[[Params], Params]:
    return lambda params: {**params, f"{layer}.b": np.zeros_like(params[f"{layer}.b"])}


MODEL_MUTANTS = (
    ModelMutant("no update", "model training", "lenet", "the optimizer step never runs",
                update=lambda before, after, state: dict(before)),
    ModelMutant("conv gradients zero", "model training", "lenet", "conv weights and biases never train",
                update=lambda before, after, state: _keep(before, after, lambda k: k.split(".")[0] in ("0", "2"))),
    ModelMutant("last layer only", "model training", "lenet", "only the output layer trains",
                update=lambda before, after, state: _keep(before, after, lambda k: not k.startswith("7."))),
    ModelMutant("biases frozen", "model training", "lenet", "bias gradients dropped",
                update=lambda before, after, state: _keep(before, after, lambda k: k.endswith(".b"))),
    ModelMutant("half gradient", "model training", "lenet", "loss averaged twice over a split batch",
                update=_scaled(0.5)),
    ModelMutant("gradient x1.1", "model training", "lenet", "a 10% error in the learning-rate schedule",
                update=_scaled(1.1)),
    ModelMutant("stale gradient", "model training", "lenet", "each step applies the previous step's gradient",
                update=_stale),
    ModelMutant("lstm bias gates swapped (training)", "model training", "lstm",
                "input and forget gate biases in each other's place", build=_swap_lstm_bias_gates),
    ModelMutant("lstm bias gates swapped", "model inference", "lstm",
                "input and forget gate biases in each other's place", build=_swap_lstm_bias_gates),
    ModelMutant("convolution, not correlation", "model inference", "lenet", "kernels flipped in space",
                build=_flip_kernels),
    ModelMutant("output bias dropped", "model inference", "mlp", "the last layer built without its bias",
                build=_drop_bias("2")),
)


class _MutatedModel:
    """A native model whose training steps go through the mutant's update rule."""

    def __init__(self, native, mutant: ModelMutant) -> None:
        self._native, self._mutant, self._state = native, mutant, {}

    def __getattr__(self, name):
        return getattr(self._native, name)

    def train_step(self, x, y, optimizer):
        step = self._native.train_step(x, y, optimizer)

        def call():
            before = self._native.get_params()
            loss = step()
            self._native.set_params(self._mutant.update(before, self._native.get_params(), self._state))
            return loss

        return call


@contextlib.contextmanager
def applied(mutant: ModelMutant, backend) -> Iterator[None]:
    """The backend builds mutated models inside the block."""
    real = backend.build

    def build(model, params, *args, **kwargs):
        native = real(model, mutant.build(params) if mutant.build else params, *args, **kwargs)
        return _MutatedModel(native, mutant) if mutant.update else native

    backend.build = build
    try:
        yield
    finally:
        del backend.build  # the instance attribute goes; the class's method shows again


def model_case(framework: str, name: str, direction: str, profile: str = "quick") -> Case:
    """The benchmark's own case (eager, float32, the profile's batch): the gate as it runs there."""
    batch = catalogue.get(name).batch[profile]
    return Case("model", name, "e2e", direction, framework, "cpu", "eager", "float32", f"{name}-b{batch}",
                (("batch", batch),))


def model_survives(mutant: ModelMutant, framework: str) -> str | None:
    """None when the gate catches the mutant; otherwise what the gate accepted."""
    backend = backends.load(framework)
    direction = "training" if mutant.gate == "model training" else "inference"
    with applied(mutant, backend):
        try:
            prepared = prepare_model(model_case(framework, mutant.model, direction), backend)
            err = prepared.verify(prepared.call())
        except CorrectnessError:
            return None
    return f"passed with recorded error {err:.3g}"


def main() -> None:
    scores: dict[str, list[int]] = {}
    for framework in FRAMEWORKS:
        try:
            backends.load(framework)
        except backends.Unavailable as exc:
            print(f"{framework}: skipped ({exc})")
            continue
        for mutant in MODEL_MUTANTS:
            survived = model_survives(mutant, framework)
            caught, total = scores.setdefault(mutant.gate, [0, 0])
            scores[mutant.gate] = [caught + (survived is None), total + 1]
            print(f"{mutant.gate:16} {framework:10} {mutant.name:36} {'caught' if survived is None else 'SURVIVED'}"
                  f"{'' if survived is None else ': ' + survived}", flush=True)
    print()
    for gate, (caught, total) in scores.items():
        print(f"{gate}: {caught}/{total} mutants caught")


if __name__ == "__main__":
    main()
