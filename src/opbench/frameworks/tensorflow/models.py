"""TensorFlow model builder: Keras layers from a ModelSpec, trained with tf.GradientTape.
Imports only TensorFlow (and Keras, its layer API)."""

from __future__ import annotations

from collections.abc import Iterator

import keras
import numpy as np
import tensorflow as tf

from opbench.workloads.models import precision
from opbench.workloads.models.native import (
    NativeModel,
    Slot,
    batch_norm_slots,
    nchw_dense_rows,
    nhwc_dense_rows,
    slots_from,
)
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
    layer_inputs,
)


class _Residual(keras.layers.Layer):
    """activation(body(x) + shortcut(x)); the training flag reaches the sublayers through Keras'
    call context."""

    def __init__(self, body: list, shortcut: list | None, relu: bool, **kwargs) -> None:
        super().__init__(**kwargs)
        self.body, self.shortcut, self.relu = body, shortcut, relu

    def call(self, x):
        y = x
        for layer in self.body:
            y = layer(y)
        if self.shortcut is not None:
            s = x
            for layer in self.shortcut:
                s = layer(s)
            y = y + s
        return keras.activations.relu(y) if self.relu else y


def _residual(layer: Residual, fmt: str, path: str, leaves: dict, kw: dict) -> list:
    shortcut = None if layer.shortcut is None else _sequence(layer.shortcut, fmt, f"{path}.s", leaves, kw)
    body = _sequence(layer.body, fmt, f"{path}.", leaves, kw)
    return [_Residual(body, shortcut, layer.activation == "relu", **kw)]


def _conv(layer: Conv2D, fmt: str, path: str, leaves: dict, kw: dict) -> list:
    """A ZeroPadding2D before a padded convolution: Keras pads only "same" or "valid"."""
    pad = [keras.layers.ZeroPadding2D(layer.pad, data_format=fmt, **kw)] if layer.pad else []
    leaves[path] = keras.layers.Conv2D(layer.filters, layer.kernel, layer.stride, data_format=fmt,
                                       activation=layer.activation, use_bias=layer.bias, **kw)
    return [*pad, leaves[path]]


def _batch_norm(layer: BatchNorm, fmt: str, kw: dict) -> list:
    """An Activation after the batch norm where it has one; untrainable where frozen (its inference
    behaviour in training too)."""
    norm = keras.layers.BatchNormalization(-1 if fmt == "channels_last" else 1, momentum=layer.momentum,
                                           epsilon=layer.eps, trainable=not layer.frozen, **kw)
    return [norm, keras.layers.Activation(layer.activation, **kw)] if layer.activation else [norm]


def _pool(layer: Pool2D, fmt: str, kw: dict) -> list:
    pool = keras.layers.MaxPooling2D if layer.kind == "max" else keras.layers.AveragePooling2D
    return [pool(layer.size, layer.stride, data_format=fmt, **kw)]


# Each layer kind as Keras layers: (layer, data format, path, leaves, kw) -> the layers that run it, its
# activation included; the one holding its parameters is recorded in `leaves` under its path
LAYERS = {
    Residual: _residual,
    Dense: held(lambda layer, fmt, kw: [keras.layers.Dense(layer.units, activation=layer.activation, **kw)]),
    Conv2D: _conv,
    BatchNorm: held(_batch_norm),
    Pool2D: held(_pool),
    GlobalAvgPool: held(lambda layer, fmt, kw: [keras.layers.GlobalAveragePooling2D(data_format=fmt, **kw)]),
    # channels_last here means "flatten in memory order": Keras would otherwise permute channels_first
    # input to (H, W, C) first
    Flatten: held(lambda layer, fmt, kw: [keras.layers.Flatten(data_format="channels_last", **kw)]),
    LSTM: held(lambda layer, fmt, kw: [keras.layers.LSTM(layer.units, **kw)]),
}


def _group(layer, fmt: str, path: str, leaves: dict, kw: dict) -> list:
    """One spec layer as Keras layers; the parameterised one is recorded in `leaves` under its path.
    `kw` goes to every layer: the dtype policy under mixed precision."""
    try:
        build = LAYERS[type(layer)]
    except KeyError:
        raise TypeError(f"TensorFlow builds no {type(layer).__name__} (frameworks/tensorflow/models.LAYERS)") \
            from None
    return build(layer, fmt, path, leaves, kw)


def _sequence(layers: tuple, fmt: str, prefix: str, leaves: dict, kw: dict) -> list:
    return [k for i, layer in enumerate(layers) for k in _group(layer, fmt, f"{prefix}{i}", leaves, kw)]


def _dense_slots(path: str, layer: Dense, handles: tuple) -> Iterator[Slot]:
    """`chw`: the (C, H, W) a Flatten before the layer flattened, where images are NHWC: its rows
    reordered."""
    main, chw = handles
    if chw:
        yield Slot(f"{path}.W", (main.kernel,), lambda w: nhwc_dense_rows(w, chw), lambda w: nchw_dense_rows(w, chw))
    else:
        yield Slot(f"{path}.W", (main.kernel,))
    yield Slot(f"{path}.b", (main.bias,))


def _conv_slots(path: str, layer: Conv2D, handles: tuple) -> Iterator[Slot]:
    main = handles[0]
    yield Slot(f"{path}.W", (main.kernel,), lambda w: w.transpose(2, 3, 1, 0), lambda w: w.transpose(3, 2, 0, 1))
    if layer.bias:
        yield Slot(f"{path}.b", (main.bias,))


def _lstm_slots(path: str, layer: LSTM, handles: tuple) -> Iterator[Slot]:
    cell = handles[0].cell
    yield Slot(f"{path}.Wx", (cell.kernel,))
    yield Slot(f"{path}.Wh", (cell.recurrent_kernel,))
    yield Slot(f"{path}.b", (cell.bias,))


# Where Keras keeps each parameterised layer kind's parameters: dense kernels (in, out), conv kernels
# HWIO, one LSTM bias. Handles: (the layer's Keras layer, the (C, H, W) an NHWC Flatten before it made)
SLOTS = {
    Dense: _dense_slots,
    Conv2D: _conv_slots,
    BatchNorm: lambda path, layer, handles: batch_norm_slots(path, (handles[0].gamma, handles[0].beta,
                                                                    handles[0].moving_mean,
                                                                    handles[0].moving_variance)),
    LSTM: _lstm_slots,
}


class TensorflowModel(NativeModel):
    """Keras' Adam adds its epsilon to sqrt(v) before the bias correction (adam_eps_corrected).
    `policy`: a Keras mixed-precision policy ("mixed_bfloat16", "mixed_float16") given to every
    layer, None for float32. Under mixed_float16 a LossScaleOptimizer scales the loss
    (precision.LOSS_SCALE to start, dynamic after)."""

    adam_eps_corrected = False

    def __init__(self, spec, params, device, dtype, mode, tf_dtype, tf_device, data_format, wrap, policy=None):
        super().__init__(spec, device, dtype, mode)
        self._where, self._dtype, self._format, self._wrap = tf_device, tf_dtype, data_format, wrap
        self._policy = policy
        self._leaves: dict = {}
        fmt = "channels_last" if data_format == "NHWC" else "channels_first"
        shape = spec.input_shape
        if len(shape) == 3 and data_format == "NHWC":
            shape = (shape[1], shape[2], shape[0])
        kw = {"dtype": keras.DTypePolicy(policy)} if policy else {}
        with tf.device(tf_device):
            self.net = keras.Sequential([keras.Input(shape), *_sequence(spec.layers, fmt, "", self._leaves, kw)])
            self.set_params(params)
        self._forward = wrap(lambda x: self.net(x, training=False))

    @staticmethod
    def _loss(logits, y):
        """Softmax cross-entropy, averaged over the batch, of the logits in float32 whatever the
        layers computed in (looked up when the step is traced: a test's mutant replaces it)."""
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, tf.cast(logits, tf.float32)))

    def product_dtypes(self, x, y):
        """Each product layer's compute type as Keras runs it: the layer's dtype policy, which casts
        its inputs and weights before the product (Keras has no hooks on a built layer's call)."""
        seen = {path: self._leaves[path].compute_dtype for path in self.compute_layers()}
        seen["weights"] = ",".join(sorted({precision.dtype_name(v.dtype) for v in self.net.trainable_variables}))
        seen["cross-entropy"] = ",".join(sorted(self._loss_types(y)))
        return seen

    def _loss_types(self, y) -> set[str]:
        """The floating types of every op of the training loss as traced (tf.function) on logits of
        the last layer's type: the cross-entropy, from the logits (a placeholder) to the loss."""
        last = self.net.layers[-1]
        logits = tf.TensorSpec((y.shape[0], self.spec.classes), tf.as_dtype(last.compute_dtype))
        graph = tf.function(self._loss).get_concrete_function(logits, tf.TensorSpec(y.shape, y.dtype)).graph
        return {precision.dtype_name(t.dtype) for op in graph.get_operations() if op.type != "Placeholder"
                for t in op.outputs if t.dtype.is_floating} or {"not observed"}

    def loss_head(self, logits, y):
        with tf.device(self._where):
            z = tf.constant(np.asarray(logits, np.float32))
            with tf.GradientTape() as tape:
                tape.watch(z)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(tf.constant(y, tf.int64), z))
            return float(loss), tape.gradient(loss, z).numpy()

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

    def trainer(self, optimizer: Optimizer):
        with tf.device(self._where):
            if optimizer.name == "sgd":
                opt = keras.optimizers.SGD(optimizer.lr)
            else:
                opt = keras.optimizers.Adam(optimizer.lr, beta_1=optimizer.beta1, beta_2=optimizer.beta2,
                                            epsilon=optimizer.eps)
            if self._policy == "mixed_float16":
                opt = keras.optimizers.LossScaleOptimizer(opt, initial_scale=precision.LOSS_SCALE)
            variables = self.net.trainable_variables
            opt.build(variables)
        scaled = isinstance(opt, keras.optimizers.LossScaleOptimizer)

        def step(x, y):
            with tf.GradientTape() as tape:
                loss = self._loss(self.net(x, training=True), y)
                target = opt.scale_loss(loss) if scaled else loss
            opt.apply_gradients(zip(tape.gradient(target, variables), variables, strict=True))
            return loss

        fn = self._wrap(step)

        def call(x, y):
            with tf.device(self._where):
                return fn(x, y)

        return call

    def _slots(self):
        """Keras stores dense kernels (in, out), conv kernels HWIO and one LSTM bias: only the dense
        layer after Flatten needs its rows reordered, when images are NHWC."""
        shapes = layer_inputs(self.spec)
        flattened = {str(i + 1): shapes[i] for i, layer in enumerate(self.spec.layers)
                     if type(layer) is Flatten and len(shapes[i]) == 3 and self._format == "NHWC"}
        return slots_from(SLOTS, "frameworks/tensorflow/models.SLOTS", self.spec,
                          lambda path: (self._leaves[path], flattened.get(path)))

    def _read(self, handle):
        return np.asarray(handle.numpy(), dtype=np.float32)

    def _write(self, handle, value):
        handle.assign(tf.cast(value, handle.dtype))

    def reset_peak_memory(self):
        if self.device == "gpu":
            tf.config.experimental.reset_memory_stats("GPU:0")

    def peak_memory(self):
        if self.device != "gpu":
            return None
        return tf.config.experimental.get_memory_info("GPU:0")["peak"], "block"
