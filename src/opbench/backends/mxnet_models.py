"""MXNet model builder: Gluon HybridBlocks from a ModelSpec, trained with gluon.Trainer.
Imports only MXNet (through the MXNet backend, which patches NumPy for it first)."""

from __future__ import annotations

import numpy as np

from opbench.backends._mxnet import mx
from opbench.models.native import NativeModel, out_in_slots
from opbench.models.spec import LSTM, Conv2D, Dense, Flatten, ModelSpec, Optimizer, Pool2D, layer_inputs

autograd, gluon, nn, rnn = mx.autograd, mx.gluon, mx.gluon.nn, mx.gluon.rnn


class _LastStep(gluon.HybridBlock):
    """(N, T, H) -> (N, H): the LSTM's last hidden state."""

    def hybrid_forward(self, F, x):
        return F.squeeze(F.slice_axis(x, axis=1, begin=-1, end=None), axis=1)


def _blocks(spec: ModelSpec) -> list:
    """One Gluon block (or pair) per spec layer."""
    blocks = []
    for layer, shape in zip(spec.layers, layer_inputs(spec), strict=True):
        if isinstance(layer, Dense):
            blocks.append([nn.Dense(layer.units, activation=layer.activation, in_units=int(np.prod(shape)))])
        elif isinstance(layer, Conv2D):
            blocks.append([nn.Conv2D(layer.filters, layer.kernel, layer.stride, layer.pad, in_channels=shape[0],
                                     activation=layer.activation)])
        elif isinstance(layer, Pool2D):
            pool = nn.MaxPool2D if layer.kind == "max" else nn.AvgPool2D
            blocks.append([pool(layer.size, layer.stride)])
        elif isinstance(layer, Flatten):
            blocks.append([nn.Flatten()])
        elif isinstance(layer, LSTM):
            blocks.append([rnn.LSTM(layer.units, layout="NTC", input_size=shape[-1]), _LastStep()])
    return blocks


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

    def __init__(self, spec, params, device, dtype, mode, ctx):
        """`ctx`: one context, or a list of them for one copy of the weights on each (data parallel
        within one process); inputs and get_params use the first."""
        super().__init__(spec, device, dtype, mode)
        self._ctx = ctx[0] if isinstance(ctx, list) else ctx
        self._blocks = _blocks(spec)
        self.net = nn.HybridSequential()
        for group in self._blocks:
            self.net.add(*group)
        self.net.initialize(ctx=ctx)
        self.set_params(params)
        if mode == "hybridize":
            self.net.hybridize(static_alloc=True, static_shape=True)
        self._loss = gluon.loss.SoftmaxCrossEntropyLoss()

    def inputs(self, x, y):
        return mx.nd.array(x, ctx=self._ctx, dtype="float32"), mx.nd.array(y, ctx=self._ctx, dtype="float32")

    def infer(self, x):
        return lambda: self.net(x)

    def train_step(self, x, y, optimizer: Optimizer):
        trainer = gluon.Trainer(self.net.collect_params(), optimizer.name, optimizer_args(optimizer))
        batch = x.shape[0]

        def call():
            with autograd.record():
                losses = self._loss(self.net(x), y)
            losses.backward()
            trainer.step(batch)  # divides the summed gradient by the batch: the mean loss's gradient
            return losses.mean()

        return call

    def _slots(self):
        def handles(i):
            block = self._blocks[i][0]
            if isinstance(block, rnn.LSTM):
                p = block.collect_params()
                return tuple(_named(p, f"l0_{k}") for k in ("i2h_weight", "h2h_weight", "i2h_bias", "h2h_bias"))
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
