"""A catalogue of plausible wrong implementations (mutants) and the gate that claims to catch each.

A mutant is a small wrapper applied to a real backend: it changes what a framework computes the
way a real bug would (a missing update, a stale gradient, a swapped gate, a wrong epsilon) and
leaves everything else as it is. `tests/plugin/test_mutants.py` runs every float32 mutant through the
suite's own gate and fails when one survives; `python -m tests.mutants` prints the mutation score
of each gate, for every framework installed.

Model mutants act through the framework-neutral NativeModel interface (`get_params`/`set_params`
around a real training step, or the parameters a model is built from), so each applies to every
framework unchanged. Operator mutants transform a real framework's output or gradients (or,
for a wrong definition, replace them with that definition computed in NumPy) between the
framework and the gate; creation mutants replace a generator's samples.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from opbench import frameworks
from opbench.core.case import Case
from opbench.core.layouts import from_native, to_native
from opbench.suites import prepared as shared
from opbench.suites.convergence import training as convergence
from opbench.suites.models.equivalence import prepare_model
from opbench.suites.ops import prepare
from opbench.suites.prepared import CorrectnessError
from opbench.workloads import ops
from opbench.workloads.models import catalogue
from opbench.workloads.models.spec import (
    BatchNorm,
    Conv2D,
    Dense,
    GlobalAvgPool,
    ModelSpec,
    Optimizer,
    Residual,
    init_params,
    is_state,
)
from opbench.workloads.ops import activations, conv, normalization
from tests.helpers import edge_case

FRAMEWORKS = frameworks.taking_part("models")  # the frameworks under test; NumPy is the reference
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
    spec: Callable[[ModelSpec], ModelSpec] | None = None  # the model the framework builds instead
    precision: str = "float32"  # the precision the case is labelled with (--precision)
    built_in: str | None = None  # the precision the framework builds instead
    optimizer: Callable[[Optimizer], Optimizer] | None = None  # what the timed step runs for the model's own
    claims: tuple[tuple[str, Callable[[object], object]], ...] = ()  # conventions the model states wrongly
    profile: str = "quick"  # the profile whose batch the case runs at
    native: Callable[[object, str], None] | None = None  # changes the built native model (framework-specific)
    timed_only: bool = False  # `update` acts on the timed step's calls only (the model's own optimizer)
    rebuilt: bool = False  # the timed step makes its optimizer anew at each call
    # `update` acts from this call of the timed step on, the calls before it right: a path that goes wrong
    # once warm, which only a call after the timed rounds shows (model_survives makes TIMED_ROUNDS of them)
    warm: int = 0
    stale_loss: bool = False  # from call `warm` on, the timed step returns the loss of the call before it


def _relayered(fn: Callable[[object], object]) -> Callable[[ModelSpec], ModelSpec]:
    """A spec mutation: `fn` applied to every layer, residual bodies and shortcuts included."""

    def each(layers):
        return None if layers is None else tuple(fn(_inner(layer)) for layer in layers)

    def _inner(layer):
        if isinstance(layer, Residual):
            return dataclasses.replace(layer, body=each(layer.body), shortcut=each(layer.shortcut))
        return layer

    return lambda model: dataclasses.replace(model, layers=each(model.layers))


def _batch_norms(**changes) -> Callable[[ModelSpec], ModelSpec]:
    def change(layer):
        if not isinstance(layer, BatchNorm):
            return layer
        return dataclasses.replace(layer, **{k: v(layer) for k, v in changes.items()})

    return _relayered(change)


def _shortcuts(change: Callable[[tuple], tuple | None]) -> Callable[[ModelSpec], ModelSpec]:
    return _relayered(lambda layer: dataclasses.replace(layer, shortcut=change(layer.shortcut))
                      if isinstance(layer, Residual) else layer)


def _keep(before: Params, after: Params, frozen: Callable[[str], bool]) -> Params:
    return {k: before[k] if frozen(k) else after[k] for k in after}


def _frozen_convs(before: Params, after: Params, state: dict) -> Params:
    """LeNet's two conv layers (0 and 2) keep their weights."""
    return _keep(before, after, lambda k: k.split(".")[0] in ("0", "2"))


def _scaled(factor: float) -> Callable[[Params, Params, dict], Params]:
    return lambda before, after, state: {k: before[k] + factor * (after[k] - before[k]) for k in after}


def _stale(before: Params, after: Params, state: dict) -> Params:
    """Each step applies the previous step's update (a gradient buffer read before it is refreshed)."""
    fresh = {k: after[k] - before[k] for k in after}
    applied = state.get("last", fresh)
    state["last"] = fresh
    return {k: before[k] + applied[k] for k in after}


def _trained_step(before: Params, after: Params) -> Params:
    return {k: after[k] - before[k] for k in after if not is_state(k)}


def _momentum(before: Params, after: Params, state: dict) -> Params:
    """SGD with momentum 0.9, as PyTorch keeps it: the buffer starts as the first step, then is 0.9
    of itself plus each new step (the first step is the plain one)."""
    step = _trained_step(before, after)
    buffer = state["buffer"] = {k: 0.9 * state["buffer"][k] + v for k, v in step.items()} if state else step
    return {**after, **{k: before[k] + v for k, v in buffer.items()}}


def _trained(params: Params) -> Params:
    return {k: v for k, v in params.items() if not is_state(k)}


def _scaled(factor: float) -> Callable[[Params, Params, dict], Params]:
    """Each trained tensor moved `factor` times as far as the real step moved it."""
    return lambda before, after, state: {**after, **{k: before[k] + factor * v
                                                     for k, v in _trained_step(before, after).items()}}


def _never_zeroed(before: Params, after: Params, state: dict) -> Params:
    """Gradients summed into the same buffer across calls, never zeroed: each SGD step applies the
    sum of every gradient so far."""
    step = _trained_step(before, after)
    total = state["total"] = {k: state["total"][k] + v for k, v in step.items()} if state else step
    return {**after, **{k: before[k] + v for k, v in total.items()}}


def _decoupled_decay(model: str, decay: float) -> Callable[[Params, Params, dict], Params]:
    """AdamW for Adam: each step also moves every trained weight by -lr * decay * weight (Keras'
    AdamW defaults to a decay of 4e-3, PyTorch's to 1e-2)."""
    lr = catalogue.get(model).optimizer.lr
    return lambda before, after, state: {k: v if is_state(k) else v - lr * decay * before[k] for k, v in after.items()}


def _swap_lstm_bias_gates(params: Params) -> Params:
    i, f, g, o = np.split(params["0.b"], 4, axis=-1)
    return {**params, "0.b": np.concatenate([f, i, g, o], axis=-1)}


def _flip_kernels(params: Params) -> Params:
    """Convolution in place of cross-correlation: every conv kernel flipped in space."""
    return {k: v[:, :, ::-1, ::-1].copy() if v.ndim == 4 else v for k, v in params.items()}


def _drop_bias(layer: str) -> Callable[[Params], Params]:
    return lambda params: {**params, f"{layer}.b": np.zeros_like(params[f"{layer}.b"])}


def _unbuilt(framework: str, what: str):
    return frameworks.Unavailable(f"{framework}: {what} has no mixed precision to mutate (opbench runs no amp there)")


def _one_layer_in_float32(native, framework: str) -> None:
    """One product layer of LeNet computes in float32 under the amp label: PyTorch's first
    convolution outside autocast, Keras' first convolution on a float32 dtype policy, and in JAX
    the last dense layer's weights left uncast (jnp promotes its bfloat16 input to float32; a
    convolution would refuse the mix)."""
    if framework == "torch":
        import torch

        module = native._leaves["0"]
        real = module.forward

        def forward(x):
            with torch.autocast("cpu", enabled=False):
                return real(x.float())

        module.forward = forward
    elif framework == "tensorflow":
        import keras

        native._leaves["0"].dtype_policy = keras.DTypePolicy("float32")
    elif framework == "jax":
        from opbench.frameworks.jax import models

        last = f"{len(native.spec.layers) - 1}."

        def masters_for_last(params, x):
            cast, x = models._cast(params, x, native._amp)
            return {**cast, **{k: v for k, v in params.items() if k.startswith(last)}}, x

        def logits(params, x):
            params, x = masters_for_last(params, x)
            return models._sequence(native.spec.layers, params, "", x, False, {})

        native._logits = logits
        native._loss = lambda params, x, y: models.cross_entropy(native.spec, *masters_for_last(params, x), y)
    else:
        raise _unbuilt(framework, "amp on part of the network")


def _last_layer_in_float32_in_training(native, framework: str) -> None:
    """LeNet's last dense layer computes in float32 in training only (its inference pass, which a
    watch of inference alone would read, stays in bfloat16): PyTorch's last layer outside autocast
    when the module trains, and in JAX the training loss alone with that layer's weights uncast.
    Keras' dtype policy is one for both passes, so it has no such layer to build."""
    last = str(len(native.spec.layers) - 1)
    if framework == "torch":
        import torch

        module = native._leaves[last]
        real = module.forward

        def forward(x):
            if not module.training:
                return real(x)
            with torch.autocast("cpu", enabled=False):
                return real(x.float())

        module.forward = forward
    elif framework == "jax":
        from opbench.frameworks.jax import models

        def masters_for_last(params, x):
            cast, x = models._cast(params, x, native._amp)
            return {**cast, **{k: v for k, v in params.items() if k.startswith(f"{last}.")}}, x

        native._loss = lambda params, x, y: models.cross_entropy(native.spec, *masters_for_last(params, x), y)
    else:
        raise frameworks.Unavailable(f"{framework}: a layer's type is one for training and inference (its dtype "
                                     "policy), so a layer in float32 in training only is not built")


def _float16_autocast(native, framework: str) -> None:
    """float16 where the CPU's low precision is bfloat16."""
    if framework == "torch":
        import torch

        native._amp = torch.float16
    elif framework == "tensorflow":
        import keras

        for layer in native._leaves.values():
            layer.dtype_policy = keras.DTypePolicy("mixed_float16")
    elif framework == "jax":
        import jax.numpy as jnp

        native._amp = jnp.float16
    else:
        raise _unbuilt(framework, "float16 for bfloat16")


def _low_precision_loss(cast_back: bool):
    """The cross-entropy of the bfloat16 logits, in bfloat16 (no cast to float32 first); with
    `cast_back`, the loss then cast to float32, so that its own type says float32."""

    def mutate(native, framework: str) -> None:
        if framework == "torch":
            import torch.nn.functional as F

            def loss_of(x, y):
                loss = F.cross_entropy(native._logits(x), y)
                return loss.float() if cast_back else loss

            native._loss_of = loss_of
        elif framework == "tensorflow":
            import tensorflow as tf

            def loss_of(logits, y):
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
                return tf.cast(loss, tf.float32) if cast_back else loss

            native._loss = loss_of
        elif framework == "jax":
            import jax
            import jax.numpy as jnp

            from opbench.frameworks.jax import models

            def loss(params, x, y):
                state: dict = {}
                cast, x = models._cast(params, x, native._amp)
                logp = jax.nn.log_softmax(models._sequence(native.spec.layers, cast, "", x, True, state))
                value = -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))
                return (value.astype(jnp.float32) if cast_back else value), state

            native._loss = loss
        else:
            raise _unbuilt(framework, "a low-precision loss")

    return mutate


MODEL_MUTANTS = (
    ModelMutant("no update", "model training", "lenet", "the optimizer step never runs",
                update=lambda before, after, state: dict(before)),
    ModelMutant("conv gradients zero", "model training", "lenet", "conv weights and biases never train",
                update=_frozen_convs),
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
    ModelMutant("SGD in place of Adam", "model training", "lenet",
                "the timed step runs plain SGD at Adam's rate (the gate's SGD steps are right)",
                optimizer=lambda opt: Optimizer("sgd", opt.lr)),
    ModelMutant("Adam epsilon 1e-3", "model training", "lenet",
                "the timed step's Adam adds 1e-3, not the model's 1e-8, to its denominator",
                optimizer=lambda opt: dataclasses.replace(opt, eps=1e-3)),
    ModelMutant("Adam at 10x the rate", "model training", "lenet", "the timed step's Adam at ten times the rate",
                optimizer=lambda opt: dataclasses.replace(opt, lr=10 * opt.lr)),
    ModelMutant("Adam betas swapped", "model training", "lenet",
                "the timed step's Adam with beta1 0.999 and beta2 0.9: its first step is lr * sign(g) whatever the "
                "betas, the second is not", optimizer=lambda opt: dataclasses.replace(opt, beta1=opt.beta2,
                                                                                       beta2=opt.beta1)),
    ModelMutant("Adam made anew each call", "model training", "lenet",
                "the timed step builds its optimizer inside the step: every call is an Adam first step", rebuilt=True),
    ModelMutant("SGD with momentum", "model training", "lenet",
                "the timed step's SGD keeps a momentum of 0.9 the model does not have (its first step is plain)",
                update=_momentum, timed_only=True),
    ModelMutant("gradients never zeroed", "model training", "mlp",
                "the timed step adds each call's gradients to the last call's (zeroed once, before the first)",
                update=_never_zeroed, timed_only=True),
    ModelMutant("AdamW for Adam", "model training", "lenet",
                "the timed step decays the weights as Keras' AdamW does by default (4e-3 of the rate)",
                update=_decoupled_decay("lenet", 4e-3), timed_only=True),
    ModelMutant("update skipped once warm (Adam)", "model training", "lenet",
                "from its third call the timed step computes the loss and gradients but updates nothing",
                update=lambda before, after, state: {**after, **_trained(before)}, timed_only=True, warm=3),
    ModelMutant("update skipped once warm (SGD)", "model training", "mlp",
                "from its third call the timed step computes the loss and gradients but updates nothing",
                update=lambda before, after, state: {**after, **_trained(before)}, timed_only=True, warm=3),
    ModelMutant("stale loss once warm", "model training", "lenet",
                "from its third call the timed step trains but returns the loss of the call before",
                timed_only=True, warm=3, stale_loss=True),
    ModelMutant("Adam at 10x the rate once warm", "model training", "lenet",
                "from its third call the timed step's Adam moves ten times as far (a rate read from a "
                "recompiled graph's stale constant)", update=_scaled(10.0), timed_only=True, warm=3),
    ModelMutant("SGD update applied twice once warm", "model training", "resnet20",
                "from its third call the timed step applies its SGD update twice", update=_scaled(2.0),
                timed_only=True, warm=3),
    ModelMutant("SGD at 10x the rate", "model training", "mlp",
                "the timed step's SGD at ten times the model's rate (the gate's SGD is at its own rate)",
                optimizer=lambda opt: dataclasses.replace(opt, lr=10 * opt.lr)),
    ModelMutant("biased running variance", "model training", "resnet20",
                "the running variance moves with the biased batch variance where the framework says unbiased "
                "(or the reverse), at the quick profile's batch",
                claims=(("unbiased_var", lambda unbiased: not unbiased),)),
    ModelMutant("biased running variance at batch 128", "model training", "resnet20",
                "the running variance moves with the biased batch variance where the framework says unbiased "
                "(or the reverse): 1/127 of the variance's update, under a 1e-3 floor",
                claims=(("unbiased_var", lambda unbiased: not unbiased),), profile="full"),
    ModelMutant("amp on part of the network", "model training", "lenet",
                "one product layer computes in float32 under the amp label (error size alone cannot tell: "
                "PyTorch's LeNet with its first convolution in float32 is 0.053 off, full bfloat16 0.064)",
                precision="amp", native=_one_layer_in_float32),
    ModelMutant("float16 for bfloat16", "model training", "lenet",
                "autocast to float16 on a CPU whose amp type is bfloat16", precision="amp",
                native=_float16_autocast),
    ModelMutant("low-precision loss", "model training", "lenet",
                "softmax cross-entropy computed in bfloat16", precision="amp", native=_low_precision_loss(False)),
    ModelMutant("low-precision loss cast back", "model training", "lenet",
                "softmax cross-entropy computed in bfloat16, the loss then cast to float32 (its own type says "
                "float32)", precision="amp", native=_low_precision_loss(True)),
    ModelMutant("last layer in float32 in training only", "model training", "lenet",
                "the last dense layer computes in float32 when it trains, in bfloat16 in inference",
                precision="amp", native=_last_layer_in_float32_in_training),
    ModelMutant("batch-norm epsilon changed (amp training)", "model training", "resnet20",
                "Keras' default epsilon (1e-3) where the model says 1e-5, trained under amp",
                spec=_batch_norms(eps=lambda bn: 1e-3), precision="amp"),
    ModelMutant("lstm bias gates swapped (training)", "model training", "lstm",
                "input and forget gate biases in each other's place", build=_swap_lstm_bias_gates),
    ModelMutant("lstm bias gates swapped", "model inference", "lstm",
                "input and forget gate biases in each other's place", build=_swap_lstm_bias_gates),
    ModelMutant("convolution, not correlation", "model inference", "lenet", "kernels flipped in space",
                build=_flip_kernels),
    ModelMutant("output bias dropped", "model inference", "mlp", "the last layer built without its bias",
                build=_drop_bias("2")),
    ModelMutant("running statistics in training", "model training", "resnet20",
                "batch norm normalises with its running statistics during training",
                spec=_batch_norms(frozen=lambda bn: True)),
    ModelMutant("batch-norm momentum flipped", "model training", "resnet20",
                "PyTorch's momentum (the new share) passed where the kept share is meant",
                spec=_batch_norms(momentum=lambda bn: 1 - bn.momentum)),
    ModelMutant("batch-norm epsilon changed", "model inference", "resnet20",
                "Keras' default epsilon (1e-3) where the model says 1e-5",
                spec=_batch_norms(eps=lambda bn: 1e-3)),
    ModelMutant("shortcut missing", "model inference", "resnet20", "the residual blocks add no shortcut",
                spec=_shortcuts(lambda shortcut: None)),
    ModelMutant("projection without batch norm", "model inference", "resnet20",
                "the 1x1 projection shortcut built without its batch norm",
                spec=_shortcuts(lambda shortcut: shortcut[:1] if shortcut else shortcut)),
    ModelMutant("conv gradients zero (amp)", "model training", "lenet", "conv weights and biases never train, in "
                "bfloat16, where correct conv updates are 10-23% off float64's (MAX_UPDATE_ERR catches it)",
                update=_frozen_convs, precision="amp"),
    ModelMutant("float32 step labelled amp", "model training", "lenet",
                "the mixed-precision setting never reaches the framework: a float32 step timed as amp",
                precision="amp", built_in="float32"),
    ModelMutant("float32 inference labelled amp", "model inference", "resnet20",
                "the mixed-precision setting never reaches the framework: float32 logits timed as amp",
                precision="amp", built_in="float32"),
)


class _MutatedModel:
    """A native model whose training steps go through the mutant's update rule, or whose timed
    step (the model's own optimizer) runs the mutant's optimizer."""

    def __init__(self, native, mutant: ModelMutant) -> None:
        self._native, self._mutant, self._state = native, mutant, {}

    def __getattr__(self, name):
        claimed = dict(self._mutant.claims).get(name)
        value = getattr(self._native, name)
        return claimed(value) if claimed else value

    def train_step(self, x, y, optimizer):
        own = catalogue.get(self._mutant.model).optimizer
        timed = optimizer is own  # the gate's SGD is another object, even where it equals the model's
        if self._mutant.optimizer and optimizer == own:
            optimizer = self._mutant.optimizer(optimizer)
        if self._mutant.rebuilt and timed:
            def anew():
                return self._native.trainer(optimizer)(x, y)

            return anew
        step = self._native.train_step(x, y, optimizer)
        if not (self._mutant.update or self._mutant.stale_loss) or (self._mutant.timed_only and not timed):
            return step
        state = {} if self._mutant.timed_only else self._state
        calls: list = []  # each call's loss

        def call():
            before = self._native.get_params()
            loss = step()
            calls.append(loss)
            if len(calls) < self._mutant.warm:
                return loss
            if self._mutant.update:
                self._native.set_params(self._mutant.update(before, self._native.get_params(), state))
            return calls[-2] if self._mutant.stale_loss else loss

        return call


@contextlib.contextmanager
def applied(mutant: ModelMutant, backend) -> Iterator[None]:
    """The backend builds mutated models inside the block."""
    real = backend.build

    def build(model, params, device, precision, mode):
        model = mutant.spec(model) if mutant.spec else model
        native = real(model, mutant.build(params) if mutant.build else params, device,
                      mutant.built_in or precision, mode)
        if mutant.native and precision != "float32":  # the amp build, not its float32 twin
            mutant.native(native, backend.name)
        mutated = mutant.update or mutant.optimizer or mutant.claims or mutant.rebuilt or mutant.stale_loss
        return _MutatedModel(native, mutant) if mutated else native

    backend.build = build
    try:
        yield
    finally:
        del backend.build  # the instance attribute goes; the class's method shows again


def model_case(framework: str, name: str, direction: str, profile: str = "quick", precision: str = "float32") -> Case:
    """The benchmark's own case (eager, the profile's batch): the gate as it runs there."""
    batch = catalogue.get(name).batch[profile]
    return Case.model(name, direction, framework, batch, precision=precision)


TIMED_ROUNDS = 3  # the timed calls model_survives makes after the checked ones, as a short benchmark would


def model_survives(mutant: ModelMutant, framework: str) -> str | None:
    """None when the gate catches the mutant; otherwise what the gate accepted."""
    backend = frameworks.load(framework)
    direction = "training" if mutant.gate == "model training" else "inference"
    case = model_case(framework, mutant.model, direction, mutant.profile, mutant.precision)
    shared.require(case)  # Unavailable where the benchmark itself would be skipped (MXNet's amp)
    with applied(mutant, backend):
        try:
            prepared = prepare_model(case, backend)
            err = prepared.verify(prepared.call())
            if prepared.after_rounds:  # the timed rounds (a few calls), then the check of the call after them
                for _ in range(TIMED_ROUNDS):
                    prepared.call()
                err = max(err, prepared.after_rounds())
        except CorrectnessError:
            return None
    return f"passed with recorded error {err:.3g}"


# --- convergence runs ------------------------------------------------------------------------
class _WrongFeed(convergence.Feed):
    """A framework's input pipeline that departs from the plan in one way."""

    def __init__(self, plan: convergence.Feed, how: str, on_epoch: Callable[[int], None] = lambda index: None) -> None:
        super().__init__(plan.split, plan.batch)
        self.how, self.on_epoch = how, on_epoch

    def epoch(self, index: int):
        self.on_epoch(index)
        batches = super().epoch(index)
        if self.how == "order":  # its own shuffle: another seed
            return super().epoch(index + 1000)
        if self.how == "drop last":
            return batches[:-1]
        if self.how == "repeat last":
            return [*batches, batches[-1]]
        return batches

    def heldout(self):
        if self.how == "training as held-out":
            x, y = self.training()
            return x[:len(self.split.y_held)], y[:len(self.split.y_held)]
        return super().heldout()


@dataclass(frozen=True)
class ConvergenceMutant:
    """A wrong training run: its input pipeline (`how`), or an evaluation in training mode."""

    name: str
    model: str
    why: str
    how: str = ""
    train_mode_eval: str = ""  # "" (never), "always", "after epoch 1", "in timed runs"
    cached_eval: bool = False  # inference returns what it returned before for an input of the same shape


CONVERGENCE_MUTANTS = (
    ConvergenceMutant("own shuffle order", "mlp", "the framework's loader shuffles with its own seed", how="order"),
    ConvergenceMutant("last partial batch dropped", "mlp", "drop_last / drop_remainder", how="drop last"),
    ConvergenceMutant("last partial batch repeated", "mlp", "the last batch padded by repeating it",
                      how="repeat last"),
    ConvergenceMutant("training accuracy as held-out", "mlp", "held-out accuracy measured on training samples",
                      how="training as held-out"),
    ConvergenceMutant("inference cached by input shape", "mlp", "a compiled inference keyed by the input's shape "
                      "alone: the held-out set's second chunk of 500 gets the first chunk's logits", cached_eval=True),
    ConvergenceMutant("evaluated in training mode", "digits-bn", "batch norm keeps batch statistics at evaluation",
                      train_mode_eval="always"),
    ConvergenceMutant("evaluated in training mode after epoch 1", "digits-bn",
                      "the model is left in training mode once the first evaluation is done",
                      train_mode_eval="after epoch 1"),
    ConvergenceMutant("evaluated in training mode in timed runs", "digits-bn",
                      "the checked run evaluates right, the timed runs in training mode",
                      train_mode_eval="in timed runs"),
)

# An MNIST-shaped model with batch norm, where evaluating in training mode changes the logits.
DIGITS_BN = ModelSpec("digits-bn", (1, 28, 28), (
    Conv2D(4, 5, 2, 0, bias=False), BatchNorm(activation="relu"), GlobalAvgPool(), Dense(10)),
    Optimizer("sgd", 0.05), {"quick": 64, "full": 64}, "mnist")


def convergence_survives(mutant: ConvergenceMutant, framework: str) -> str | None:
    """None when the convergence gate catches the mutant: one epoch of eager training (two where
    it acts from the second epoch), and a timed run after it where it acts there."""
    backend = frameworks.load(framework)
    model = DIGITS_BN if mutant.model == DIGITS_BN.name else catalogue.get(mutant.model)
    wrong_eval = mutant.train_mode_eval
    epochs = 2 if wrong_eval == "after epoch 1" else 1
    with _registered(model):
        plan = convergence.Feed(convergence.split_of(model.name))
        native = backend.build(model, init_params(model), "cpu", "float32", "eager")
        right = _shape_cached(native.infer) if mutant.cached_eval else native.infer
        native.infer = right
        wrong = _training_mode_infer(native, framework) if wrong_eval else right
        runs = ["the checked run", "timed run 1"] if wrong_eval == "in timed runs" else ["the checked run"]

        def on_epoch(run: str, index: int) -> None:
            native.infer = wrong if (wrong_eval == "always" or (wrong_eval == "after epoch 1" and index >= 1)
                                     or (wrong_eval == "in timed runs" and run != "the checked run")) else right

        case = Case.model(model.name, "convergence", framework, 64, epochs=epochs)
        try:
            for run in runs:
                feed = _WrongFeed(plan, mutant.how, lambda index, run=run: on_epoch(run, index))
                curve = convergence.train(native, backend, model, feed, epochs)
                agreed = convergence.check_plan_and_curve(case, native, plan, curve, "")
                convergence.check_evaluation(case, plan, curve, run)
        except CorrectnessError:
            return None
    return f"passed, following the reference for {agreed} steps"


def _shape_cached(infer):
    """The native model's inference, run once per input shape and its result returned for every
    later input of that shape."""
    seen: dict[tuple, object] = {}

    def cached(x):
        key = tuple(x.shape)
        if key not in seen:
            seen[key] = infer(x)
        return seen[key]

    return cached


@contextlib.contextmanager
def _registered(model: ModelSpec) -> Iterator[None]:
    added = model.name not in catalogue.MODELS
    catalogue.MODELS.setdefault(model.name, model)
    try:
        yield
    finally:
        if added:
            del catalogue.MODELS[model.name]
            convergence.split_of.cache_clear()
            convergence.reference_losses.cache_clear()


def _training_mode_infer(native, framework: str):
    """The framework's own forward pass in training mode (batch statistics), as inference."""
    if framework == "torch":
        import torch

        def infer(x):
            def call():
                native.net.train(True)
                with torch.no_grad():
                    return native.net(x)

            return call
    elif framework == "tensorflow":
        def infer(x):
            return lambda: native.net(x, training=True)
    elif framework == "jax":
        from opbench.frameworks.jax import models

        def infer(x):
            return lambda: models._sequence(native.spec.layers, native.params, "", x, True, {})
    elif framework == "mxnet":
        from mxnet import autograd

        def infer(x):
            def call():
                with autograd.train_mode():
                    return native.net(x)

            return call
    else:
        raise frameworks.Unavailable(f"{framework}: no training mode to evaluate in")
    return infer


# --- operators ------------------------------------------------------------------------------
@dataclass(frozen=True)
class OpMutant:
    """A wrong operator: `wrong(out, inputs, p)` gives the output (forward) or the list of
    gradients (backward, `out` being the real gradients and inputs ending with the cotangent)
    from the real ones and the float64 inputs; creation mutants give the samples."""

    name: str
    gate: str  # "operator forward" | "operator backward" | "operator edges" | "creation"
    op: str
    why: str
    wrong: Callable[..., object]


def _tf32(a: np.ndarray) -> np.ndarray:
    """Round to TF32's 10-bit mantissa, as tensor cores do to GEMM inputs."""
    m, e = np.frexp(a)
    return np.ldexp(np.round(m * 2**11) / 2**11, e)


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _gelu_tanh_grad(x):
    u = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
    du = math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * x**2)
    return 0.5 * (1 + np.tanh(u)) + 0.5 * x * (1 - np.tanh(u) ** 2) * du


def _with_eps(eps, fn, *args):
    real = normalization.EPS
    normalization.EPS = eps
    try:
        return fn(*args)
    finally:
        normalization.EPS = real


def _layer_norm_no_mean_term(grads, inputs, p):
    x, gamma, _, ct = inputs
    xhat, inv = normalization._normalize(x, (-1,))
    dxhat = ct * gamma
    return [inv * (dxhat - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True)), *grads[1:]]


def _one_pass_layer_norm(out, inputs, p):
    """Layer norm with the variance as E[x^2] - E[x]^2 in float32 (what XLA does for batch norm)."""
    x, gamma, beta = (a.astype(np.float32) for a in inputs)
    mean = x.mean(axis=-1, keepdims=True)
    var = np.maximum((x * x).mean(axis=-1, keepdims=True) - mean * mean, 0)
    return ((x - mean) / np.sqrt(var + np.float32(normalization.EPS)) * gamma + beta).astype(np.float64)


def _softmax_no_sum_term(grads, inputs, p):
    y = activations._softmax(inputs[0])
    return [y * inputs[-1]]


OP_MUTANTS = (
    OpMutant("softmax drops p < 5e-5", "operator forward", "softmax", "small probabilities flushed to zero",
             lambda out, inputs, p: np.where(out < 5e-5, 0.0, out)),
    OpMutant("gelu tanh approximation", "operator forward", "gelu", "the tanh formula for the exact (erf) one",
             lambda out, inputs, p: _gelu_tanh(inputs[0])),
    OpMutant("relu leaks 1e-5", "operator forward", "relu", "leaky relu with slope 1e-5 for relu",
             lambda out, inputs, p: out + 1e-5 * np.minimum(inputs[0], 0)),
    OpMutant("softplus cut off below -10", "operator forward", "softplus", "a threshold returning 0 in the tail",
             lambda out, inputs, p: np.where(inputs[0] < -10, 0.0, out)),
    OpMutant("tanh 10 ulps high", "operator forward", "tanh", "a fast approximation 1e-5 relative off",
             lambda out, inputs, p: out * (1 + 1e-5)),
    OpMutant("sigmoid in float16", "operator forward", "sigmoid", "computed at reduced precision",
             lambda out, inputs, p: out.astype(np.float16).astype(np.float64)),
    OpMutant("batch_norm eps 1e-3", "operator forward", "batch_norm", "epsilon 1e-3 for 1e-5",
             lambda out, inputs, p: _with_eps(1e-3, normalization.batch_norm, p, *inputs)),
    OpMutant("layer_norm eps 1e-3", "operator forward", "layer_norm", "epsilon 1e-3 for 1e-5",
             lambda out, inputs, p: _with_eps(1e-3, normalization.layer_norm, p, *inputs)),
    OpMutant("layer_norm over the batch axis", "operator forward", "layer_norm", "statistics over the wrong axis",
             lambda out, inputs, p: normalization._normalize(inputs[0], (0,))[0] * inputs[1] + inputs[2]),
    OpMutant("relu leaks 1e-6", "operator forward", "relu", "a slope of 1e-6 below zero (inside the old |x| floor)",
             lambda out, inputs, p: out + 1e-6 * np.minimum(inputs[0], 0)),
    OpMutant("sigmoid tail flushed below -30", "operator edges", "sigmoid", "values under 1e-13 returned as 0",
             lambda out, inputs, p: np.where(inputs[0] < -30, 0.0, out)),
    OpMutant("gelu tail of the wrong sign", "operator edges", "gelu", "x Phi(x) positive for x < -6",
             lambda out, inputs, p: np.where(inputs[0] < -6, -out, out)),
    OpMutant("softplus tail 0.1% high", "operator edges", "softplus", "a fast exp approximation below x = -15",
             lambda out, inputs, p: np.where(inputs[0] < -15, out * 1.001, out)),
    OpMutant("layer_norm one-pass variance", "operator edges", "layer_norm", "E[x^2] - E[x]^2 in float32",
             _one_pass_layer_norm),
    OpMutant("l2_normalize eps 1e-6 on the norm", "operator edges", "l2_normalize", "rows under 1e-6 not normalised",
             lambda out, inputs, p: inputs[0] / np.maximum(np.sqrt(np.sum(inputs[0] ** 2, axis=1, keepdims=True)),
                                                           1e-6)),
    OpMutant("gemm in TF32", "operator forward", "gemm", "inputs rounded to a 10-bit mantissa",
             lambda out, inputs, p: _tf32(inputs[0]) @ _tf32(inputs[1])),
    OpMutant("gemm with B transposed", "operator forward", "gemm", "a layout flag read the wrong way",
             lambda out, inputs, p: inputs[0] @ inputs[1].T),
    OpMutant("conv2d as convolution", "operator forward", "conv2d", "kernel flipped: convolution, not correlation",
             lambda out, inputs, p: conv.conv2d(p, inputs[0], inputs[1][:, :, ::-1, ::-1])),
    OpMutant("conv2d weights O and I swapped", "operator forward", "conv2d", "OIHW read as IOHW (square kernels)",
             lambda out, inputs, p: conv.conv2d(p, inputs[0], inputs[1].transpose(1, 0, 2, 3))
             if inputs[1].shape[0] == inputs[1].shape[1] else out + 1),
    OpMutant("maxpool2d as subsampling", "operator forward", "maxpool2d", "each window's first element, not its max",
             lambda out, inputs, p: inputs[0][:, :, :out.shape[2] * p["stride"]:p["stride"],
                                              :out.shape[3] * p["stride"]:p["stride"]]),
    OpMutant("avgpool2d 1% low", "operator forward", "avgpool2d", "divides by k*k + 1% (a wrong count)",
             lambda out, inputs, p: out * 0.99),
    OpMutant("flatten in NHWC order", "operator forward", "flatten", "channels-last rows",
             lambda out, inputs, p: inputs[0].transpose(0, 2, 3, 1).reshape(out.shape)),
    OpMutant("dot drops the last product", "operator forward", "dot", "a loop bound off by one",
             lambda out, inputs, p: out - inputs[0][-1] * inputs[1][-1]),
    OpMutant("gelu backward of the tanh form", "operator backward", "gelu", "the approximation's derivative",
             lambda grads, inputs, p: [inputs[-1] * _gelu_tanh_grad(inputs[0])]),
    OpMutant("softmax backward without the sum", "operator backward", "softmax", "y * ct only",
             _softmax_no_sum_term),
    OpMutant("layer_norm backward without the mean term", "operator backward", "layer_norm",
             "the gradient through the mean dropped", _layer_norm_no_mean_term),
    OpMutant("batch_norm gamma gradient averaged", "operator backward", "batch_norm", "mean instead of sum",
             lambda grads, inputs, p: [grads[0], grads[1] / (inputs[0].size / inputs[0].shape[1]), grads[2]]),
    OpMutant("gemm backward dB = A ct", "operator backward", "gemm", "a missing transpose (square shapes)",
             lambda grads, inputs, p: [grads[0], inputs[0] @ inputs[-1]]),
    OpMutant("relu backward passes x <= 0", "operator backward", "relu", "gradient 1 at x == 0 and 1e-3 below",
             lambda grads, inputs, p: [grads[0] + 1e-3 * inputs[-1] * (inputs[0] <= 0)]),
    OpMutant("sigmoid backward 1% low", "operator backward", "sigmoid", "a scaled gradient",
             lambda grads, inputs, p: [0.99 * grads[0]]),
    OpMutant("random_normal as uniform", "creation", "random_normal", "uniform x sqrt(3): mean 0, variance 1",
             lambda out, inputs, p: (np.random.default_rng(0).random(out.shape) * 2 - 1) * math.sqrt(3)),
    OpMutant("random_normal as +-1", "creation", "random_normal", "Rademacher: mean 0, variance 1",
             lambda out, inputs, p: np.random.default_rng(0).choice([-1.0, 1.0], out.shape)),
    OpMutant("random_normal as Laplace", "creation", "random_normal", "Laplace(0, 1/sqrt 2): mean 0, variance 1",
             lambda out, inputs, p: np.random.default_rng(0).laplace(0, 2**-0.5, out.shape)),
)


def op_case(framework: str, mutant: OpMutant, dtype: str = "float32") -> Case:
    """The benchmark's own quick case for the mutant's operator (eager); edge mutants: the edge
    regimes' case of tests/frameworks/test_edges.py."""
    if mutant.gate == "operator edges":
        return edge_case(mutant.op, framework, "eager", "forward", dtype=dtype)
    spec = ops.get(mutant.op)
    p = spec.shapes["quick"][0]
    direction = "backward" if mutant.gate == "operator backward" else "forward"
    return Case.operator(spec, direction, framework, dtype=dtype, params=p)


@contextlib.contextmanager
def op_applied(mutant: OpMutant, backend, case: Case) -> Iterator[None]:
    """The backend's forward, backward or creation calls return the mutant's results inside the block."""
    spec = ops.get(case.name)
    image, kernel = backend.image_layout(case.device), backend.kernel_layout
    inputs = [a.astype(np.float64) for a in prepare.host_inputs(case.name, case.label, case.params, case.dtype)]

    def native(a, kind):
        return backend.from_numpy(to_native(np.asarray(a, dtype=np.float32), kind, image, kernel), case.device,
                                  case.dtype)

    def host(t, kind):
        return from_native(backend.to_numpy(t), kind, image, kernel).astype(np.float64)

    def forward(*args, **kwargs):
        run = type(backend).forward(backend, *args, **kwargs)
        return lambda: native(mutant.wrong(host(run(), spec.output_kind), inputs, case.p), spec.output_kind)

    def backward(impl, p, args, argnums, cotangent, *rest, **kwargs):
        run = type(backend).backward(backend, impl, p, args, argnums, cotangent, *rest, **kwargs)
        kinds = [spec.args[i].kind for i in argnums]

        def call():
            out, grads = run()
            ct = host(cotangent, spec.output_kind)
            wrong = mutant.wrong([host(g, k) for g, k in zip(grads, kinds, strict=True)], [*inputs, ct], case.p)
            return out, [native(g, k) for g, k in zip(wrong, kinds, strict=True)]

        return call

    def creation(*args, **kwargs):
        run = type(backend).creation(backend, *args, **kwargs)
        return lambda: native(mutant.wrong(host(run(), "plain"), inputs, case.p), "plain")

    backend.forward, backend.backward, backend.creation = forward, backward, creation
    try:
        yield
    finally:
        del backend.forward, backend.backward, backend.creation


def op_survives(mutant: OpMutant, framework: str, dtype: str = "float32") -> str | None:
    """None when the operator gate catches the mutant; otherwise what the gate accepted."""
    backend = frameworks.load(framework)
    case = op_case(framework, mutant, dtype)
    shared.require(case)
    with op_applied(mutant, backend, case):
        try:
            prepared = prepare.prepare(case, backend)
            result = prepared.call()
        except Exception as exc:  # the benchmark itself skips a case its framework cannot run
            raise frameworks.Unavailable(f"{framework} cannot run {case.name} in {dtype}: {exc}") from exc
        try:
            err = prepared.verify(result)
        except AssertionError:  # CorrectnessError, and the creation check's own
            return None
    return f"passed with recorded error {err:.3g}"


def main() -> None:
    """Mutation scores per gate: model mutants in their precision, operator and creation mutants in every
    dtype (16-bit results say which mutants that precision can and cannot show)."""
    scores: dict[tuple[str, str], list[int]] = {}
    for framework in FRAMEWORKS:
        try:
            frameworks.load(framework)
        except frameworks.Unavailable as exc:
            print(f"{framework}: skipped ({exc})")
            continue
        # every float32 model mutant again in mixed precision: what the coarser amp gate still sees
        amp = [dataclasses.replace(m, precision="amp") for m in MODEL_MUTANTS if m.precision == "float32"]
        runs = [(m.gate, m.precision, m, lambda m=m, f=framework: model_survives(m, f)) for m in (*MODEL_MUTANTS, *amp)]
        runs += [(m.gate, dtype, m, lambda m=m, d=dtype, f=framework: op_survives(m, f, d))
                 for dtype in ("float32", "float16", "bfloat16") for m in OP_MUTANTS]
        for gate, dtype, mutant, survives in runs:
            try:
                survived = survives()
            except frameworks.Unavailable:
                continue
            tally = scores.setdefault((gate, dtype), [0, 0])
            tally[0], tally[1] = tally[0] + (survived is None), tally[1] + 1
            print(f"{gate:17} {dtype:8} {framework:10} {mutant.name:42} "
                  f"{'caught' if survived is None else 'SURVIVED: ' + survived}", flush=True)
    print()
    for (gate, dtype), (caught, total) in sorted(scores.items()):
        print(f"{gate:17} {dtype:8} {caught:3}/{total:<3} mutants caught")


if __name__ == "__main__":
    main()
