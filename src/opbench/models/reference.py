"""The NumPy reference of a whole model: forward pass, cross-entropy loss, backpropagation and
a plain SGD step, in float64, written for clarity. It is the oracle the equivalence checks use."""

from __future__ import annotations

import numpy as np

from opbench.models.spec import LSTM, Conv2D, Dense, Flatten, ModelSpec, Pool2D
from opbench.ops import conv, pooling


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _relu_if(layer, z):
    return np.maximum(z, 0) if getattr(layer, "activation", None) == "relu" else z


def _pool_fns(layer: Pool2D):
    if layer.kind == "max":
        return pooling.maxpool2d, pooling.maxpool2d_vjp
    return pooling.avgpool2d, pooling.avgpool2d_vjp


def _lstm_forward(params, i, x, units):
    n, t, _ = x.shape
    h, c = np.zeros((n, units)), np.zeros((n, units))
    steps = []
    for s in range(t):
        z = x[:, s] @ params[f"{i}.Wx"] + h @ params[f"{i}.Wh"] + params[f"{i}.b"]
        ig, fg, gg, og = (_sigmoid(z[:, :units]), _sigmoid(z[:, units:2 * units]),
                          np.tanh(z[:, 2 * units:3 * units]), _sigmoid(z[:, 3 * units:]))
        c_prev, h_prev = c, h
        c = fg * c + ig * gg
        h = og * np.tanh(c)
        steps.append((h_prev, c_prev, ig, fg, gg, og, c))
    return h, steps


def _lstm_backward(params, i, x, steps, dh, units):
    grads = {k: np.zeros_like(params[f"{i}.{k}"]) for k in ("Wx", "Wh", "b")}
    dx = np.zeros_like(x)
    dc = np.zeros_like(dh)
    for s in reversed(range(x.shape[1])):
        h_prev, c_prev, ig, fg, gg, og, c = steps[s]
        tc = np.tanh(c)
        do = dh * tc
        dc = dc + dh * og * (1 - tc * tc)
        di, df, dg = dc * gg, dc * c_prev, dc * ig
        dz = np.concatenate([di * ig * (1 - ig), df * fg * (1 - fg), dg * (1 - gg * gg), do * og * (1 - og)], axis=1)
        grads["Wx"] += x[:, s].T @ dz
        grads["Wh"] += h_prev.T @ dz
        grads["b"] += dz.sum(axis=0)
        dx[:, s] = dz @ params[f"{i}.Wx"].T
        dh = dz @ params[f"{i}.Wh"].T
        dc = dc * fg
    return dx, {f"{i}.{k}": v for k, v in grads.items()}


def forward(model: ModelSpec, params: dict, x: np.ndarray, tape: list | None = None) -> np.ndarray:
    """Logits for input `x`; with a list as `tape`, records what backward() needs."""
    for i, layer in enumerate(model.layers):
        inp = x
        if isinstance(layer, Dense):
            x = _relu_if(layer, x @ params[f"{i}.W"] + params[f"{i}.b"])
        elif isinstance(layer, Conv2D):
            p = {"k": layer.kernel, "stride": layer.stride, "pad": layer.pad}
            x = _relu_if(layer, conv.conv2d(p, x, params[f"{i}.W"]) + params[f"{i}.b"][:, None, None])
        elif isinstance(layer, Pool2D):
            x = _pool_fns(layer)[0]({"k": layer.size, "stride": layer.stride}, x)
        elif isinstance(layer, Flatten):
            x = x.reshape(x.shape[0], -1)
        elif isinstance(layer, LSTM):
            x, steps = _lstm_forward(params, i, x, layer.units)
            inp = (inp, steps)
        if tape is not None:
            tape.append((inp, x))
    return x


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean softmax cross-entropy and its gradient with respect to the logits."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    n = len(labels)
    loss = -float(log_probs[np.arange(n), labels].mean())
    dlogits = np.exp(log_probs)
    dlogits[np.arange(n), labels] -= 1
    return loss, dlogits / n


def loss_and_grads(model: ModelSpec, params: dict, x: np.ndarray, y: np.ndarray) -> tuple[float, dict]:
    """The loss of one batch and the gradient of every parameter."""
    tape: list = []
    logits = forward(model, params, x, tape)
    loss, dx = cross_entropy(logits, y)
    grads: dict[str, np.ndarray] = {}
    for i in reversed(range(len(model.layers))):
        layer, (inp, out) = model.layers[i], tape[i]
        if getattr(layer, "activation", None) == "relu":
            dx = dx * (out > 0)
        if isinstance(layer, Dense):
            grads[f"{i}.W"], grads[f"{i}.b"] = inp.T @ dx, dx.sum(axis=0)
            dx = dx @ params[f"{i}.W"].T
        elif isinstance(layer, Conv2D):
            p = {"k": layer.kernel, "stride": layer.stride, "pad": layer.pad}
            grads[f"{i}.b"] = dx.sum(axis=(0, 2, 3))
            dx, grads[f"{i}.W"] = conv.conv2d_vjp(p, (inp, params[f"{i}.W"]), dx)
        elif isinstance(layer, Pool2D):
            (dx,) = _pool_fns(layer)[1]({"k": layer.size, "stride": layer.stride}, (inp,), dx)
        elif isinstance(layer, Flatten):
            dx = dx.reshape(inp.shape)
        elif isinstance(layer, LSTM):
            dx, lstm_grads = _lstm_backward(params, i, inp[0], inp[1], dx, layer.units)
            grads.update(lstm_grads)
    return loss, grads


def sgd_step(
    model: ModelSpec, params: dict, x: np.ndarray, y: np.ndarray, lr: float, lstm_biases: int = 1
) -> tuple[float, dict]:
    """One plain SGD step: the batch's loss (before the update) and the updated parameters.

    `lstm_biases` is how many bias vectors a framework trains per LSTM gate set: PyTorch and
    MXNet train two whose sum is the canonical bias, and each receives the full gradient, so
    under SGD the sum moves `lstm_biases` times as far. That is the frameworks' real behaviour.
    """
    loss, grads = loss_and_grads(model, params, x, y)
    scale = {f"{i}.b": lstm_biases for i, layer in enumerate(model.layers) if isinstance(layer, LSTM)}
    return loss, {k: v - lr * scale.get(k, 1) * grads[k] for k, v in params.items()}
