"""MXNet model builder: Gluon HybridBlocks from a ModelSpec, trained with gluon.Trainer.
Imports only MXNet (through the MXNet backend, which patches NumPy for it first)."""

from __future__ import annotations

import numpy as np

from opbench.backends.mxnet import mx
from opbench.models.native import NativeModel
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


class MxnetModel(NativeModel):
    lstm_biases = 2

    def __init__(self, spec, params, device, dtype, mode, ctx):
        super().__init__(spec, device, dtype, mode)
        self._ctx = ctx
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
        if optimizer.name == "sgd":
            args = {"learning_rate": optimizer.lr}
        else:
            args = {"learning_rate": optimizer.lr, "beta1": optimizer.beta1, "beta2": optimizer.beta2,
                    "epsilon": optimizer.eps}
        trainer = gluon.Trainer(self.net.collect_params(), optimizer.name, args)
        batch = x.shape[0]

        def call():
            with autograd.record():
                losses = self._loss(self.net(x), y)
            losses.backward()
            trainer.step(batch)  # divides the summed gradient by the batch: the mean loss's gradient
            return losses.mean()

        return call

    def _slots(self):
        """(canonical name, gluon parameter, to_native, to_canonical) for every parameter."""
        for i, (layer, group) in enumerate(zip(self.spec.layers, self._blocks, strict=True)):
            block = group[0]
            if isinstance(layer, Dense):
                yield f"{i}.W", block.weight, np.transpose, np.transpose
                yield f"{i}.b", block.bias, None, None
            elif isinstance(layer, Conv2D):
                yield f"{i}.W", block.weight, None, None
                yield f"{i}.b", block.bias, None, None
            elif isinstance(layer, LSTM):
                p = block.collect_params()
                yield f"{i}.Wx", _named(p, "l0_i2h_weight"), np.transpose, np.transpose
                yield f"{i}.Wh", _named(p, "l0_h2h_weight"), np.transpose, np.transpose

    def set_params(self, params):
        for name, param, to_native, _ in self._slots():
            value = to_native(params[name]) if to_native else params[name]
            param.set_data(mx.nd.array(np.ascontiguousarray(value), ctx=self._ctx))
        for i, layer in enumerate(self.spec.layers):
            if isinstance(layer, LSTM):  # two biases per gate set: b and zeros
                p = self._blocks[i][0].collect_params()
                _named(p, "l0_i2h_bias").set_data(mx.nd.array(params[f"{i}.b"], ctx=self._ctx))
                _named(p, "l0_h2h_bias").set_data(mx.nd.zeros((4 * layer.units,), ctx=self._ctx))

    def get_params(self):
        out = {}
        for name, param, _, to_canonical in self._slots():
            value = param.data().asnumpy()
            out[name] = to_canonical(value) if to_canonical else value
        for i, layer in enumerate(self.spec.layers):
            if isinstance(layer, LSTM):
                p = self._blocks[i][0].collect_params()
                out[f"{i}.b"] = (_named(p, "l0_i2h_bias").data() + _named(p, "l0_h2h_bias").data()).asnumpy()
        return out


def _named(params, suffix: str):
    """The parameter of a ParameterDict whose (prefixed) name ends with `suffix`."""
    (match,) = [v for k, v in params.items() if k.endswith(suffix)]
    return match
