"""TensorFlow model builder: Keras layers from a ModelSpec, trained with tf.GradientTape.
Imports only TensorFlow (and Keras, its layer API)."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from opbench.workloads.models import precision
from opbench.workloads.models.native import NativeModel, Slot, batch_norm_slots, nchw_dense_rows, nhwc_dense_rows
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
    walk,
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


def _group(layer, fmt: str, path: str, leaves: dict, kw: dict) -> list:
    """One spec layer as Keras layers (a ZeroPadding2D before a padded convolution, an Activation
    after a batch norm); the parameterised one is recorded in `leaves` under its path. `kw` goes
    to every layer: the dtype policy under mixed precision."""
    channels = -1 if fmt == "channels_last" else 1
    if isinstance(layer, Residual):
        shortcut = None if layer.shortcut is None else _sequence(layer.shortcut, fmt, f"{path}.s", leaves, kw)
        body = _sequence(layer.body, fmt, f"{path}.", leaves, kw)
        return [_Residual(body, shortcut, layer.activation == "relu", **kw)]
    group = []
    if isinstance(layer, Dense):
        group = [keras.layers.Dense(layer.units, activation=layer.activation, **kw)]
    elif isinstance(layer, Conv2D):
        pad = [keras.layers.ZeroPadding2D(layer.pad, data_format=fmt, **kw)] if layer.pad else []
        group = [*pad, keras.layers.Conv2D(layer.filters, layer.kernel, layer.stride, data_format=fmt,
                                           activation=layer.activation, use_bias=layer.bias, **kw)]
    elif isinstance(layer, BatchNorm):
        norm = keras.layers.BatchNormalization(channels, momentum=layer.momentum, epsilon=layer.eps,
                                               trainable=not layer.frozen, **kw)  # untrainable: inference behaviour
        group = [norm, keras.layers.Activation(layer.activation, **kw)] if layer.activation else [norm]
    elif isinstance(layer, Pool2D):
        pool = keras.layers.MaxPooling2D if layer.kind == "max" else keras.layers.AveragePooling2D
        group = [pool(layer.size, layer.stride, data_format=fmt, **kw)]
    elif isinstance(layer, GlobalAvgPool):
        group = [keras.layers.GlobalAveragePooling2D(data_format=fmt, **kw)]
    elif isinstance(layer, Flatten):
        # channels_last here means "flatten in memory order": Keras would otherwise permute
        # channels_first input to (H, W, C) first.
        group = [keras.layers.Flatten(data_format="channels_last", **kw)]
    elif isinstance(layer, LSTM):
        group = [keras.layers.LSTM(layer.units, **kw)]
    leaves[path] = group[1] if isinstance(layer, Conv2D) and layer.pad else group[0]
    return group


def _sequence(layers: tuple, fmt: str, prefix: str, leaves: dict, kw: dict) -> list:
    return [k for i, layer in enumerate(layers) for k in _group(layer, fmt, f"{prefix}{i}", leaves, kw)]


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
        for path, layer, _ in walk(self.spec.layers, self.spec.input_shape):
            main, i = self._leaves.get(path), int(path) if path.isdigit() else -1
            if isinstance(layer, Dense):
                after_flatten = i > 0 and isinstance(self.spec.layers[i - 1], Flatten) and len(shapes[i - 1]) == 3
                if after_flatten and self._format == "NHWC":
                    chw = shapes[i - 1]
                    yield Slot(f"{path}.W", (main.kernel,), lambda w, c=chw: nhwc_dense_rows(w, c),
                               lambda w, c=chw: nchw_dense_rows(w, c))
                else:
                    yield Slot(f"{path}.W", (main.kernel,))
                yield Slot(f"{path}.b", (main.bias,))
            elif isinstance(layer, Conv2D):
                hwio, oihw = (lambda w: w.transpose(2, 3, 1, 0)), (lambda w: w.transpose(3, 2, 0, 1))
                yield Slot(f"{path}.W", (main.kernel,), hwio, oihw)
                if layer.bias:
                    yield Slot(f"{path}.b", (main.bias,))
            elif isinstance(layer, BatchNorm):
                yield from batch_norm_slots(path, (main.gamma, main.beta, main.moving_mean, main.moving_variance))
            elif isinstance(layer, LSTM):
                cell = main.cell
                yield Slot(f"{path}.Wx", (cell.kernel,))
                yield Slot(f"{path}.Wh", (cell.recurrent_kernel,))
                yield Slot(f"{path}.b", (cell.bias,))

    def _read(self, handle):
        return np.asarray(handle.numpy(), dtype=np.float32)

    def _write(self, handle, value):
        handle.assign(tf.cast(value, handle.dtype))

    def peak_memory(self):
        if self.device != "gpu":
            return None
        return tf.config.experimental.get_memory_info("GPU:0")["peak"]
