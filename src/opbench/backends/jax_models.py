"""JAX model builder: a pure function of the parameters from a ModelSpec, trained by jax.grad.

JAX keeps parameters as arrays in a dict, so the canonical layouts (spec.py) are used as they
are: dense weights (in, out), kernels OIHW with NCHW images, one LSTM bias with gates in the
order input, forget, cell, output. SGD and Adam are written out (as torch.optim and Keras
define them: Adam with bias correction, eps added to the corrected square root). Imports only JAX.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from opbench.models.native import NativeModel, Slot
from opbench.models.spec import LSTM, Conv2D, Dense, Flatten, ModelSpec, Optimizer, Pool2D, param_shapes


def _layer(layer, params, i, x):
    if isinstance(layer, Dense):
        x = jnp.reshape(x, (x.shape[0], -1)) @ params[f"{i}.W"] + params[f"{i}.b"]
    elif isinstance(layer, Conv2D):
        x = lax.conv_general_dilated(x, params[f"{i}.W"], (layer.stride, layer.stride), [(layer.pad, layer.pad)] * 2,
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
        x = x + params[f"{i}.b"].reshape(1, -1, 1, 1)
    elif isinstance(layer, Pool2D):
        window, strides = (1, 1, layer.size, layer.size), (1, 1, layer.stride, layer.stride)
        if layer.kind == "max":
            x = lax.reduce_window(x, -jnp.inf, lax.max, window, strides, "VALID")
        else:
            x = lax.reduce_window(x, 0.0, lax.add, window, strides, "VALID") / (layer.size * layer.size)
    elif isinstance(layer, Flatten):
        x = jnp.reshape(x, (x.shape[0], -1))
    elif isinstance(layer, LSTM):
        x = _lstm(params[f"{i}.Wx"], params[f"{i}.Wh"], params[f"{i}.b"], x, layer.units)
    return jax.nn.relu(x) if getattr(layer, "activation", None) == "relu" else x


def _lstm(wx, wh, b, x, units):
    """The last hidden state of an LSTM over (N, T, F), one time step per lax.scan iteration."""
    n = x.shape[0]

    def step(carry, xt):
        h, c = carry
        z = xt @ wx + h @ wh + b
        i, f, g, o = (jax.nn.sigmoid(z[:, :units]), jax.nn.sigmoid(z[:, units:2 * units]),
                      jnp.tanh(z[:, 2 * units:3 * units]), jax.nn.sigmoid(z[:, 3 * units:]))
        c = f * c + i * g
        return (o * jnp.tanh(c), c), None

    zeros = jnp.zeros((n, units), x.dtype)
    (h, _), _ = lax.scan(step, (zeros, zeros), jnp.swapaxes(x, 0, 1))
    return h


def forward(spec: ModelSpec, params: dict, x):
    for i, layer in enumerate(spec.layers):
        x = _layer(layer, params, i, x)
    return x


def loss(spec: ModelSpec, params: dict, x, y):
    """Softmax cross-entropy over integer labels, averaged over the batch."""
    logp = jax.nn.log_softmax(forward(spec, params, x).astype(jnp.float32))
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))


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


class JaxModel(NativeModel):
    def __init__(self, spec, params, device, dtype, mode, jax_device, jax_dtype, wrap):
        super().__init__(spec, device, dtype, mode)
        self._device, self._dtype, self._wrap = jax_device, jax_dtype, wrap
        self.params = {name: None for name in param_shapes(spec)}
        self.set_params(params)
        self._forward = wrap(lambda params, x: forward(spec, params, x))
        self._grad = jax.value_and_grad(lambda params, x, y: loss(spec, params, x, y))
        self._steps: dict[Optimizer, tuple] = {}  # one traced (compiled) step per optimizer, reused

    def inputs(self, x, y):
        tx = jax.device_put(np.asarray(x).astype(self._dtype), self._device)
        return tx, jax.device_put(y.astype(np.int32), self._device)

    def infer(self, x):
        return lambda: jax.block_until_ready(self._forward(self.params, x))

    def train_step(self, x, y, optimizer: Optimizer):
        if optimizer not in self._steps:
            update, init = _sgd(optimizer) if optimizer.name == "sgd" else _adam(optimizer)

            def step(params, state, x, y):
                value, grads = self._grad(params, x, y)
                params, state = update(params, grads, state)
                return params, state, value

            self._steps[optimizer] = self._wrap(step), init
        fn, init = self._steps[optimizer]
        state = [jax.device_put(init(self.params), self._device)]  # committed, as its successors will be

        def call():
            self.params, state[0], value = jax.block_until_ready(fn(self.params, state[0], x, y))
            return value

        return call

    def _slots(self):
        return (Slot(name, (name,)) for name in self.params)

    def _read(self, handle):
        return np.asarray(jax.device_get(self.params[handle]), dtype=np.float32)

    def _write(self, handle, value):
        self.params[handle] = jax.device_put(value.astype(self._dtype), self._device)

    def peak_memory(self):
        if self.device != "gpu":
            return None
        return (self._device.memory_stats() or {}).get("peak_bytes_in_use")
