"""JAX model builder: a pure function of the parameters from a ModelSpec, trained by jax.grad.

JAX keeps parameters as arrays in a dict, so the canonical layouts (spec.py) are used as they
are: dense weights (in, out), kernels OIHW with NCHW images, one LSTM bias with gates in the
order input, forget, cell, output. Batch-norm running statistics live in the same dict
(state, never trained; a training step returns them moved). SGD and Adam are written out (as torch.optim and Keras
define them: Adam with bias correction, eps added to the corrected square root). Imports only JAX.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from opbench.workloads.models import precision
from opbench.workloads.models.native import NativeModel, Slot
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
    is_state,
    param_shapes,
)


def _batch_norm(layer: BatchNorm, path: str, params: dict, x, training: bool, state: dict):
    """Batch norm over axis 1; in training it writes the moved running statistics into `state`."""
    axes, shape = (0, *range(2, x.ndim)), (1, -1) + (1,) * (x.ndim - 2)
    x_in, x = x, x.astype(jnp.float32)  # statistics and normalisation in float32, under amp too
    gamma, beta = params[f"{path}.gamma"], params[f"{path}.beta"]
    if layer.frozen:
        gamma, beta = lax.stop_gradient(gamma), lax.stop_gradient(beta)
    if training and not layer.frozen:
        mean, var = jnp.mean(x, axis=axes), jnp.var(x, axis=axes)
        m = layer.momentum
        state[f"{path}.mean"] = m * params[f"{path}.mean"] + (1 - m) * lax.stop_gradient(mean)
        state[f"{path}.var"] = m * params[f"{path}.var"] + (1 - m) * lax.stop_gradient(var)
    else:
        mean, var = params[f"{path}.mean"], params[f"{path}.var"]
    scale = gamma * lax.rsqrt(var + layer.eps)
    return ((x - mean.reshape(shape)) * scale.reshape(shape) + beta.reshape(shape)).astype(x_in.dtype)


def _residual(layer: Residual, params, path: str, x, training: bool, state: dict):
    y = _sequence(layer.body, params, f"{path}.", x, training, state)
    return y + _sequence(layer.shortcut, params, f"{path}.s", x, training, state) if layer.shortcut is not None else y


def _conv(layer: Conv2D, params, path: str, x, training: bool, state: dict):
    x = lax.conv_general_dilated(x, params[f"{path}.W"], (layer.stride, layer.stride),
                                 [(layer.pad, layer.pad)] * 2, dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return x + params[f"{path}.b"].reshape(1, -1, 1, 1) if layer.bias else x


def _pool(layer: Pool2D, params, path: str, x, training: bool, state: dict):
    window, strides = (1, 1, layer.size, layer.size), (1, 1, layer.stride, layer.stride)
    if layer.kind == "max":
        return lax.reduce_window(x, -jnp.inf, lax.max, window, strides, "VALID")
    return lax.reduce_window(x, 0.0, lax.add, window, strides, "VALID") / (layer.size * layer.size)


# Each layer kind as JAX computes it: (layer, params, path, x, training, state) -> output, before its activation
LAYERS = {
    Residual: _residual,
    Dense: lambda layer, params, path, x, training, state: (
        jnp.reshape(x, (x.shape[0], -1)) @ params[f"{path}.W"] + params[f"{path}.b"]),
    Conv2D: _conv,
    BatchNorm: lambda layer, params, path, x, training, state: _batch_norm(layer, path, params, x, training, state),
    Pool2D: _pool,
    GlobalAvgPool: lambda layer, params, path, x, training, state: jnp.mean(x, axis=(2, 3)),
    Flatten: lambda layer, params, path, x, training, state: jnp.reshape(x, (x.shape[0], -1)),
    LSTM: lambda layer, params, path, x, training, state: _lstm(params[f"{path}.Wx"], params[f"{path}.Wh"],
                                                                params[f"{path}.b"], x, layer.units),
}


def _layer(layer, params, path: str, x, training: bool, state: dict):
    try:
        compute = LAYERS[type(layer)]
    except KeyError:
        raise TypeError(f"JAX builds no {type(layer).__name__} (frameworks/jax/models.LAYERS)") from None
    x = compute(layer, params, path, x, training, state)
    return jax.nn.relu(x) if getattr(layer, "activation", None) == "relu" else x


def _sequence(layers: tuple, params: dict, prefix: str, x, training: bool, state: dict):
    for i, layer in enumerate(layers):
        x = _layer(layer, params, f"{prefix}{i}", x, training, state)
    return x


def _lstm_step(wx, wh, b, carry, xt):
    units = wh.shape[0]
    h, c = carry
    z = xt @ wx + h @ wh + b
    i, f, g, o = (jax.nn.sigmoid(z[:, :units]), jax.nn.sigmoid(z[:, units:2 * units]),
                  jnp.tanh(z[:, 2 * units:3 * units]), jax.nn.sigmoid(z[:, 3 * units:]))
    c = f * c + i * g
    return (o * jnp.tanh(c), c), None


@functools.partial(jax.jit, static_argnums=4)
def _lstm(wx, wh, b, x, units):
    """The last hidden state of an LSTM over (N, T, F), one time step per lax.scan iteration.

    A jitted function, as JAX's own library functions are (jax.nn.relu, ...): lax.scan is one
    compiled loop in any mode, and outside jit each call handed it a new step and new jaxprs for
    its derivative, so every eager training step traced and compiled the scan twice (~0.9 s a
    step of the quick LSTM against ~70 ms under jit). Jitted, its trace and its derivative's are
    cached by shape; under the jit mode it is inlined into the step's one program."""
    zeros = jnp.zeros((x.shape[0], units), x.dtype)
    (h, _), _ = lax.scan(functools.partial(_lstm_step, wx, wh, b), (zeros, zeros), jnp.swapaxes(x, 0, 1))
    return h


def _cast(params: dict, x, amp):
    """Mixed precision: what the matrix products read (their weights and biases, the input) in the
    low-precision type `amp`; the float32 masters stay the differentiated arguments, so their
    gradients come back float32. Batch norms keep float32 scales and statistics."""
    if amp is None:
        return params, x
    return {k: v.astype(amp) if k.endswith(precision.PRODUCT_PARAMS) else v for k, v in params.items()}, x.astype(amp)


def forward(spec: ModelSpec, params: dict, x, amp=None):
    """Inference logits (batch norms on their running statistics)."""
    params, x = _cast(params, x, amp)
    return _sequence(spec.layers, params, "", x, False, {})


def cross_entropy(spec: ModelSpec, params: dict, x, y):
    """Softmax cross-entropy over integer labels of the training-mode logits, in float32 whatever
    the products ran in, averaged over the batch; with the running statistics the pass moved (a
    dict of the state entries it changed). `params` and `x` as the products read them."""
    state: dict = {}
    return head(_sequence(spec.layers, params, "", x, True, state), y), state


def head(logits, y):
    """The mean softmax cross-entropy of `logits`, in float32, over integer labels `y`."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32))
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))


def loss(spec: ModelSpec, params: dict, x, y, amp=None):
    """cross_entropy of the float32 masters, their products in `amp` under mixed precision."""
    return cross_entropy(spec, *_cast(params, x, amp), y)


def _sgd(opt: Optimizer):
    def update(params, grads, state):
        return {k: params[k] - opt.lr * grads[k] for k in params}, state

    return update, lambda params: ()


def _adam(opt: Optimizer):
    def update(params, grads, state):
        t, m, v = state
        t = t + 1
        m = {k: opt.beta1 * m[k] + (1 - opt.beta1) * grads[k] for k in params}
        v = {k: opt.beta2 * v[k] + (1 - opt.beta2) * jnp.square(grads[k]) for k in params}
        c1, c2 = 1 - opt.beta1 ** t, 1 - opt.beta2 ** t
        new = {k: params[k] - opt.lr * (m[k] / c1) / (jnp.sqrt(v[k] / c2) + opt.eps) for k in params}
        return new, (t, m, v)

    def init(params):
        zeros = {k: jnp.zeros_like(p) for k, p in params.items()}
        return jnp.zeros((), jnp.float32), zeros, dict(zeros)

    return update, init


_PRODUCTS = ("dot_general", "conv_general_dilated")


def _equations(jaxpr):
    """Every equation of a jaxpr and of the jaxprs inside it (jit, scan, cond), depth first."""
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _equations(inner)


def _after_products(program) -> set[str]:
    """The types of the softmax's exponentials and logarithms after the program's last product: in
    the training loss, the cross-entropy of the logits (the dense layer's bias is added after its
    product, in the products' type, before the cast to float32)."""
    types: set[str] = set()
    for eqn in _equations(program.jaxpr):
        if eqn.primitive.name in _PRODUCTS:
            types = set()
        elif eqn.primitive.name in ("exp", "log", "log1p", "exp2"):
            types |= {str(v.aval.dtype) for v in eqn.outvars}
    return types or {"not observed"}


class JaxModel(NativeModel):
    """`amp`: the low-precision type of mixed precision (float32 master weights, products and
    activations in `amp`), None for float32. float16 scales the loss by precision.LOSS_SCALE
    (static: the gradients are unscaled before the update)."""

    def __init__(self, spec, params, device, dtype, mode, jax_device, jax_dtype, wrap, amp=None):
        super().__init__(spec, device, dtype, mode)
        self._device, self._dtype, self._wrap = jax_device, jax_dtype, wrap
        self.params = {name: None for name in param_shapes(spec)}
        self.set_params(params)
        self._amp = amp
        self._peak_before = None  # the process's device peak when the timed rounds began (reset_peak_memory)
        # The inference logits and the training loss, looked up when traced (a test's mutant replaces them).
        self._logits = lambda params, x: forward(spec, params, x, self._amp)
        self._loss = lambda params, x, y: loss(spec, params, x, y, self._amp)
        self._forward = wrap(lambda params, x: self._logits(params, x))  # noqa: PLW0108 (looked up when traced)
        scale = precision.LOSS_SCALE if amp == jnp.float16 else 1.0

        def scaled(params, x, y):
            value, running = self._loss(params, x, y)
            return value * scale, (value, running)

        def grad(params, x, y):
            (_, (value, running)), grads = jax.value_and_grad(scaled, has_aux=True)(params, x, y)
            return (value, running), {k: g / scale for k, g in grads.items()} if scale != 1.0 else grads

        self._grad = grad
        self._steps: dict[Optimizer, tuple] = {}  # one traced (compiled) step per optimizer, reused

    def product_dtypes(self, x, y):
        """The element types of every product in the programs that are timed, as traced
        (jax.make_jaxpr: what XLA is given): the inference forward and the training loss with its
        gradient, in program order, the LSTM's loop body and the backward products included."""
        programs = {"inference": jax.make_jaxpr(self._forward)(self.params, x),
                    "training": jax.make_jaxpr(self._grad)(self.params, x, y)}
        seen = {f"{what} {eqn.primitive.name} {i}": ",".join(sorted({str(v.aval.dtype) for v in eqn.invars}))
                for what, jaxpr in programs.items()
                for i, eqn in enumerate(e for e in _equations(jaxpr.jaxpr) if e.primitive.name in _PRODUCTS)}
        seen["weights"] = ",".join(sorted({str(v.dtype) for k, v in self.params.items() if not is_state(k)}))
        seen["cross-entropy"] = ",".join(sorted(_after_products(jax.make_jaxpr(self._loss)(self.params, x, y))))
        return seen

    def loss_head(self, logits, y):
        z, labels = (jax.device_put(a, self._device) for a in (np.asarray(logits, np.float32), y.astype(np.int32)))
        loss, grad = jax.value_and_grad(head)(z, labels)
        return float(loss), np.asarray(grad)

    def inputs(self, x, y):
        tx = jax.device_put(np.asarray(x).astype(self._dtype), self._device)
        return tx, jax.device_put(y.astype(np.int32), self._device)

    def infer(self, x):
        return lambda: jax.block_until_ready(self._forward(self.params, x))

    def trainer(self, optimizer: Optimizer):
        if optimizer not in self._steps:
            update, init = _sgd(optimizer) if optimizer.name == "sgd" else _adam(optimizer)

            def step(params, state, x, y):
                (value, running), grads = self._grad(params, x, y)
                trained = {k: v for k, v in params.items() if not is_state(k)}
                trained, state = update(trained, {k: grads[k] for k in trained}, state)
                return {**params, **trained, **running}, state, value

            self._steps[optimizer] = self._wrap(step), init
        fn, init = self._steps[optimizer]
        trained = {k: v for k, v in self.params.items() if not is_state(k)}
        state = [jax.device_put(init(trained), self._device)]  # committed, as its successors will be

        def call(x, y):
            self.params, state[0], value = jax.block_until_ready(fn(self.params, state[0], x, y))
            return value

        return call

    def _slots(self):
        return (Slot(name, (name,)) for name in self.params)

    def _read(self, handle):
        return np.asarray(jax.device_get(self.params[handle]), dtype=np.float32)

    def _write(self, handle, value):
        self.params[handle] = jax.device_put(value.astype(self._dtype), self._device)

    def _process_peak(self):
        return (self._device.memory_stats() or {}).get("peak_bytes_in_use") if self.device == "gpu" else None

    def reset_peak_memory(self):
        # PJRT's memory_stats has no reset: its peak_bytes_in_use is the process's since it began. Where
        # the rounds raise it, the new peak was reached in them and is theirs exactly
        self._peak_before = self._process_peak()

    def peak_memory(self):
        peak = self._process_peak()
        if peak is None:
            return None
        return peak, "block" if self._peak_before is not None and peak > self._peak_before else "process"
