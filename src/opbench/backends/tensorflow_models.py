"""TensorFlow model builder: Keras layers from a ModelSpec, trained with tf.GradientTape.
Imports only TensorFlow (and Keras, its layer API)."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from opbench.models.native import NativeModel, Slot, nchw_dense_rows, nhwc_dense_rows
from opbench.models.spec import LSTM, Conv2D, Dense, Flatten, ModelSpec, Optimizer, Pool2D, layer_inputs


def _keras_layers(spec: ModelSpec, data_format: str) -> list:
    """One Keras layer per spec layer (a ZeroPadding2D before a padded convolution)."""
    fmt = "channels_last" if data_format == "NHWC" else "channels_first"
    layers = []
    for layer in spec.layers:
        if isinstance(layer, Dense):
            layers.append([keras.layers.Dense(layer.units, activation=layer.activation)])
        elif isinstance(layer, Conv2D):
            pad = [keras.layers.ZeroPadding2D(layer.pad, data_format=fmt)] if layer.pad else []
            conv = keras.layers.Conv2D(layer.filters, layer.kernel, layer.stride, data_format=fmt,
                                       activation=layer.activation)
            layers.append([*pad, conv])
        elif isinstance(layer, Pool2D):
            pool = keras.layers.MaxPooling2D if layer.kind == "max" else keras.layers.AveragePooling2D
            layers.append([pool(layer.size, layer.stride, data_format=fmt)])
        elif isinstance(layer, Flatten):
            # channels_last here means "flatten in memory order": Keras would otherwise permute
            # channels_first input to (H, W, C) first.
            layers.append([keras.layers.Flatten(data_format="channels_last")])
        elif isinstance(layer, LSTM):
            layers.append([keras.layers.LSTM(layer.units)])
    return layers


class TensorflowModel(NativeModel):
    def __init__(self, spec, params, device, dtype, mode, tf_dtype, tf_device, data_format, wrap):
        super().__init__(spec, device, dtype, mode)
        self._where, self._dtype, self._format, self._wrap = tf_device, tf_dtype, data_format, wrap
        self._groups = _keras_layers(spec, data_format)
        shape = spec.input_shape
        if len(shape) == 3 and data_format == "NHWC":
            shape = (shape[1], shape[2], shape[0])
        with tf.device(tf_device):
            self.net = keras.Sequential([keras.Input(shape)] + [lay for group in self._groups for lay in group])
            self.set_params(params)
        self._forward = wrap(lambda x: self.net(x, training=False))

    def inputs(self, x, y):
        if x.ndim == 4 and self._format == "NHWC":
            x = x.transpose(0, 2, 3, 1)
        with tf.device(self._where):
            return tf.identity(tf.cast(tf.convert_to_tensor(x), self._dtype)), tf.identity(tf.constant(y, tf.int64))

    def infer(self, x):
        def call():
            with tf.device(self._where):
                return self._forward(x)

        return call

    def train_step(self, x, y, optimizer: Optimizer):
        with tf.device(self._where):
            if optimizer.name == "sgd":
                opt = keras.optimizers.SGD(optimizer.lr)
            else:
                opt = keras.optimizers.Adam(optimizer.lr, beta_1=optimizer.beta1, beta_2=optimizer.beta2,
                                            epsilon=optimizer.eps)
            variables = self.net.trainable_variables
            opt.build(variables)

        def step(x, y):
            with tf.GradientTape() as tape:
                logits = self.net(x, training=True)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
            return loss

        fn = self._wrap(step)

        def call():
            with tf.device(self._where):
                return fn(x, y)

        return call

    def _slots(self):
        """Keras stores dense kernels (in, out), conv kernels HWIO and one LSTM bias: only the dense
        layer after Flatten needs its rows reordered, when images are NHWC."""
        shapes = layer_inputs(self.spec)
        for i, (layer, group) in enumerate(zip(self.spec.layers, self._groups, strict=True)):
            main = group[-1]
            if isinstance(layer, Dense):
                after_flatten = i and isinstance(self.spec.layers[i - 1], Flatten) and len(shapes[i - 1]) == 3
                if after_flatten and self._format == "NHWC":
                    chw = shapes[i - 1]
                    yield Slot(f"{i}.W", (main.kernel,), lambda w, c=chw: nhwc_dense_rows(w, c),
                               lambda w, c=chw: nchw_dense_rows(w, c))
                else:
                    yield Slot(f"{i}.W", (main.kernel,))
                yield Slot(f"{i}.b", (main.bias,))
            elif isinstance(layer, Conv2D):
                hwio, oihw = (lambda w: w.transpose(2, 3, 1, 0)), (lambda w: w.transpose(3, 2, 0, 1))
                yield Slot(f"{i}.W", (main.kernel,), hwio, oihw)
                yield Slot(f"{i}.b", (main.bias,))
            elif isinstance(layer, LSTM):
                cell = main.cell
                yield Slot(f"{i}.Wx", (cell.kernel,))
                yield Slot(f"{i}.Wh", (cell.recurrent_kernel,))
                yield Slot(f"{i}.b", (cell.bias,))

    def _read(self, handle):
        return np.asarray(handle.numpy(), dtype=np.float32)

    def _write(self, handle, value):
        handle.assign(tf.cast(value, handle.dtype))

    def peak_memory(self):
        if self.device != "gpu":
            return None
        return tf.config.experimental.get_memory_info("GPU:0")["peak"]
