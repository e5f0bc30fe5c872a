"""MXNet model builder: Gluon HybridBlocks from a ModelSpec, trained with gluon.Trainer.
Imports only MXNet (through the MXNet backend, which patches NumPy for it first)."""

from __future__ import annotations

import numpy as np

from opbench.frameworks.mxnet.loader import mx
from opbench.workloads.models.native import NativeModel, out_in_slots
from opbench.workloads.models.native import first_holds_parameters as held
from opbench.workloads.models.spec import (
    LSTM,
    BatchNorm,
    Conv2D,
    Dense,
    Flatten,
    GlobalAvgPool,
    Optimizer,
    Pool2D,
    Residual,
    output_shape,
)

autograd, gluon, nn, rnn = mx.autograd, mx.gluon, mx.gluon.nn, mx.gluon.rnn


class _LastStep(gluon.HybridBlock):
    """(N, T, H) -> (N, H): the LSTM's last hidden state."""

    def hybrid_forward(self, F, x):
        return F.squeeze(F.slice_axis(x, axis=1, begin=-1, end=None), axis=1)


class _Residual(gluon.HybridBlock):
    """activation(body(x) + shortcut(x))."""

    def __init__(self, body, shortcut, relu: bool) -> None:
        super().__init__()
        self.relu = relu
        with self.name_scope():
            self.body, self.shortcut = body, shortcut

    def hybrid_forward(self, F, x):
        y = self.body(x) + self.shortcut(x) if self.shortcut is not None else self.body(x)
        return F.relu(y) if self.relu else y


def _residual(layer: Residual, shape: tuple, path: str, leaves: dict) -> list:
    shortcut = None if layer.shortcut is None else _sequence(layer.shortcut, shape, f"{path}.s", leaves)
    return [_Residual(_sequence(layer.body, shape, f"{path}.", leaves), shortcut, layer.activation == "relu")]


def _batch_norm(layer: BatchNorm, shape: tuple) -> list:
    # use_global_stats: the running statistics in training too (a frozen batch norm)
    norm = nn.BatchNorm(axis=1, momentum=layer.momentum, epsilon=layer.eps, in_channels=shape[0],
                        use_global_stats=layer.frozen)
    if layer.frozen:
        norm.gamma.grad_req = norm.beta.grad_req = "null"
    return [norm, nn.Activation(layer.activation)] if layer.activation else [norm]


# Each layer kind as Gluon blocks: (layer, input shape, path, leaves) -> the blocks that run it, its
# activation included; the one holding its parameters is recorded in `leaves` under its path
LAYERS = {
    Residual: _residual,
    Dense: held(lambda layer, shape: [nn.Dense(layer.units, activation=layer.activation,
                                               in_units=int(np.prod(shape)))]),
    Conv2D: held(lambda layer, shape: [nn.Conv2D(layer.filters, layer.kernel, layer.stride, layer.pad,
                                                 in_channels=shape[0], activation=layer.activation,
                                                 use_bias=layer.bias)]),
    BatchNorm: held(_batch_norm),
    Pool2D: held(lambda layer, shape: [(nn.MaxPool2D if layer.kind == "max" else nn.AvgPool2D)(layer.size,
                                                                                             layer.stride)]),
    GlobalAvgPool: held(lambda layer, shape: [nn.GlobalAvgPool2D(), nn.Flatten()]),
    Flatten: held(lambda layer, shape: [nn.Flatten()]),
    LSTM: held(lambda layer, shape: [rnn.LSTM(layer.units, layout="NTC", input_size=shape[-1]), _LastStep()]),
}


def _group(layer, shape: tuple, path: str, leaves: dict) -> list:
    """One spec layer as Gluon blocks; the parameterised one is recorded in `leaves` under its path."""
    try:
        build = LAYERS[type(layer)]
    except KeyError:
        raise TypeError(f"MXNet builds no {type(layer).__name__} (frameworks/mxnet/models.LAYERS)") from None
    return build(layer, shape, path, leaves)


def _sequence(layers: tuple, shape: tuple, prefix: str, leaves: dict) -> nn.HybridSequential:
    seq = nn.HybridSequential()
    for i, layer in enumerate(layers):
        seq.add(*_group(layer, shape, f"{prefix}{i}", leaves))
        shape = output_shape(layer, shape)
    return seq


def optimizer_args(optimizer: Optimizer) -> dict:
    """The spec's optimizer as MXNet's optimizer arguments."""
    if optimizer.name == "sgd":
        return {"learning_rate": optimizer.lr}
    return {"learning_rate": optimizer.lr, "beta1": optimizer.beta1, "beta2": optimizer.beta2,
            "epsilon": optimizer.eps}


def mxnet_optimizer(optimizer: Optimizer, rescale_grad: float):
    """The spec's optimizer as an MXNet optimizer object that scales each gradient by `rescale_grad`
    (an update rule of its own, for a KVStore or an updater)."""
    return mx.optimizer.create(optimizer.name, rescale_grad=rescale_grad, **optimizer_args(optimizer))


class MxnetModel(NativeModel):
    lstm_biases = 2
    adam_eps_corrected = False  # mx.optimizer.Adam: w -= lr_t * m / (sqrt(v) + eps), lr_t bias-corrected

    def __init__(self, spec, params, device, dtype, mode, ctx):
        """`ctx`: one context, or a list of them for one copy of the weights on each (data parallel
        within one process); inputs and get_params use the first."""
        super().__init__(spec, device, dtype, mode)
        self._ctx = ctx[0] if isinstance(ctx, list) else ctx
        self._leaves: dict = {}
        self.net = _sequence(spec.layers, spec.input_shape, "", self._leaves)
        self.net.initialize(ctx=ctx)
        self.set_params(params)
        if mode == "hybridize":
            self.net.hybridize(static_alloc=True, static_shape=True)
        self._loss = gluon.loss.SoftmaxCrossEntropyLoss()

    def inputs(self, x, y):
        return mx.nd.array(x, ctx=self._ctx, dtype="float32"), mx.nd.array(y, ctx=self._ctx, dtype="float32")

    def loss_head(self, logits, y):
        z = mx.nd.array(logits, ctx=self._ctx, dtype="float32")
        z.attach_grad()
        with autograd.record():
            loss = gluon.loss.SoftmaxCrossEntropyLoss()(z, mx.nd.array(y, ctx=self._ctx, dtype="float32")).mean()
        loss.backward()
        return float(loss.asscalar()), z.grad.asnumpy()

    def infer(self, x):
        return lambda: self.net(x)

    def trainer(self, optimizer: Optimizer):
        trainer = gluon.Trainer(self.net.collect_params(), optimizer.name, optimizer_args(optimizer))

        def call(x, y):
            batch = x.shape[0]
            with autograd.record():
                losses = self._loss(self.net(x), y)
            losses.backward()
            trainer.step(batch)  # divides the summed gradient by the batch: the mean loss's gradient
            return losses.mean()

        return call

    def _slots(self):
        def handles(path):
            block = self._leaves[path]
            if isinstance(block, rnn.LSTM):
                p = block.collect_params()
                return tuple(_named(p, f"l0_{k}") for k in ("i2h_weight", "h2h_weight", "i2h_bias", "h2h_bias"))
            if isinstance(block, nn.BatchNorm):
                return block.gamma, block.beta, block.running_mean, block.running_var
            return block.weight, block.bias

        return out_in_slots(self.spec, handles)

    def _read(self, handle):
        return handle.data().asnumpy()

    def _write(self, handle, value):
        handle.set_data(mx.nd.array(value, ctx=self._ctx))


def _named(params, suffix: str):
    """The parameter of a ParameterDict whose (prefixed) name ends with `suffix`."""
    (match,) = [v for k, v in params.items() if k.endswith(suffix)]
    return match
