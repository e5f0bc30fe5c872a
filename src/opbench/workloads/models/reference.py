"""The NumPy reference of a whole model: forward pass, cross-entropy loss, backpropagation and
a plain SGD step, in float64, written for clarity. It is the oracle the equivalence checks use.
Residual blocks recurse: a block's tape holds its body's and its shortcut's tapes. `lowp` (a
rounder of opbench.workloads.models.precision) emulates mixed precision: what a framework stores in the
low-precision type is rounded to it, the arithmetic between stays float64. A layer's product is
rounded before its bias is added: JAX and Keras store it in the low-precision type and add the
bias in a second operation (PyTorch's addmm adds it in the product's epilogue, one rounding), so
the emulation takes the coarser of the two orders. In float16 that order alone moves the MLP's
first-layer gradient 1.1% from float64's, against 0.06% with one rounding: cancellation between
the product and the bias flips ReLU masks (docs/usage/gpu.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from opbench.workloads.models import precision
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
    walk,
)
from opbench.workloads.ops import conv, pooling


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _relu_if(layer, z):
    return np.maximum(z, 0) if getattr(layer, "activation", None) == "relu" else z


def _pool_fns(layer: Pool2D):
    if layer.kind == "max":
        return pooling.maxpool2d, pooling.maxpool2d_vjp
    return pooling.avgpool2d, pooling.avgpool2d_vjp


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    """NumPy's BLAS held to one thread (threadpoolctl, where installed: mlxtend brings it). An LSTM's
    recurrence multiplies a batch's few rows by its weights once per step: at the quick batch (8
    rows, 250 steps) a second OpenBLAS thread only spins, and a reference pass took 0.45 CPU-s for
    0.23 s of wall on 2 threads against 0.21 CPU-s for 0.19 s on one, the same numbers to the bit
    (2 Zen 3 cores, 2026-12-04); at batch 128 the wall time was the same and the CPU time half. One
    thread also keeps the reference's rounding whatever thread count the run pins (at batch 128
    OpenBLAS's split of a product over 2 threads rounded differently)."""
    try:
        import threadpoolctl
    except ImportError:
        yield
        return
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        yield


@_one_blas_thread()
def _lstm_forward(params, i: str, x, units):
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


@_one_blas_thread()
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


def _exact(a: np.ndarray) -> np.ndarray:
    return a


Rounder = Callable[[np.ndarray], np.ndarray]


# Both running-variance conventions in one pass (unbiased_var=None): the trained trajectory does not
# depend on the convention, only the running variance does, so a pass keeps the biased estimate under
# its own name and the unbiased one beside it under this suffix (a state name: is_state() holds).
# by_convention() gives either convention's tensors from such a pass, as that convention's own pass
# makes them, bit for bit.
UNBIASED_VAR = ".unbiased.var"


def with_conventions(params: dict) -> dict:
    """`params` as a pass in both conventions starts from them: each running variance also under
    its unbiased name, where the pass does not carry it yet (appended, so the order of the others
    stays the order a single-convention pass sees)."""
    return {**params, **{_unbiased(k): v for k, v in params.items()
                         if k.endswith(".var") and convention_of(k) == k and _unbiased(k) not in params}}


def by_convention(tensors: dict, unbiased_var: bool | None) -> dict:
    """Tensors made in both conventions, as one convention makes them (None: as they are)."""
    if unbiased_var is None:
        return tensors
    one = {k: v for k, v in tensors.items() if not k.endswith(UNBIASED_VAR)}
    if unbiased_var:
        one.update({convention_of(k): v for k, v in tensors.items() if k.endswith(UNBIASED_VAR)})
    return one


def convention_of(name: str) -> str:
    """The tensor of a single-convention pass that `name` stands for (itself, or the running
    variance an unbiased name stands beside)."""
    return name[: -len(UNBIASED_VAR)] + ".var" if name.endswith(UNBIASED_VAR) else name


def _unbiased(var: str) -> str:
    return var[: -len(".var")] + UNBIASED_VAR


def _variances(path: str, unbiased_var: bool | None) -> tuple[tuple[str, bool], ...]:
    """The running variances a training pass moves: (name, whether unbiased)."""
    if unbiased_var is None:
        return ((f"{path}.var", False), (_unbiased(f"{path}.var"), True))
    return ((f"{path}.var", unbiased_var),)


@dataclass
class _Run:
    """One pass: training or inference, the framework's running-variance convention (None: both,
    UNBIASED_VAR), the running statistics a training pass produces, and the rounding of what flows
    between layers (exact, or to a low precision)."""

    training: bool
    unbiased_var: bool | None = False
    state: dict = field(default_factory=dict)
    round: Rounder = _exact


def _start(params: dict, x: np.ndarray, run: _Run, lowp: Rounder | None) -> tuple[dict, np.ndarray]:
    """The parameters as the layers read them and the input, rounded under mixed precision (the
    master parameters, running statistics and batch-norm scales stay as they are)."""
    if lowp is None:
        return params, x
    run.round = lowp
    return {k: lowp(v) if k.endswith(precision.PRODUCT_PARAMS) else v for k, v in params.items()}, lowp(x)


def _conv_p(layer: Conv2D) -> dict:
    return {"k": layer.kernel, "stride": layer.stride, "pad": layer.pad}


def _channels(x: np.ndarray) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The axes a batch norm reduces over (all but the channel axis 1) and its broadcast shape."""
    return (0, *range(2, x.ndim)), (1, -1) + (1,) * (x.ndim - 2)


def _batch_norm(layer: BatchNorm, path: str, params: dict, x: np.ndarray, run: _Run) -> tuple[np.ndarray, tuple]:
    axes, shape = _channels(x)
    if run.training and not layer.frozen:
        mean, var = x.mean(axis=axes), x.var(axis=axes)
        n = x.size // x.shape[1]
        m = layer.momentum
        run.state[f"{path}.mean"] = m * params[f"{path}.mean"] + (1 - m) * mean
        for name, unbiased in _variances(path, run.unbiased_var):
            moved = var * n / (n - 1) if unbiased else var
            run.state[name] = m * params.get(name, params[f"{path}.var"]) + (1 - m) * moved
    else:
        mean, var = params[f"{path}.mean"], params[f"{path}.var"]
    inv = 1.0 / np.sqrt(var + layer.eps)
    xhat = (x - mean.reshape(shape)) * inv.reshape(shape)
    return params[f"{path}.gamma"].reshape(shape) * xhat + params[f"{path}.beta"].reshape(shape), (xhat, inv)


def _batch_norm_vjp(layer: BatchNorm, path: str, params: dict, aux: tuple, dy: np.ndarray, run: _Run, grads: dict):
    xhat, inv = aux
    axes, shape = _channels(dy)
    gamma = params[f"{path}.gamma"].reshape(shape)
    if layer.frozen or not run.training:
        return dy * gamma * inv.reshape(shape)
    grads[f"{path}.gamma"], grads[f"{path}.beta"] = (dy * xhat).sum(axis=axes), dy.sum(axis=axes)
    mean_dy, mean_dy_xhat = dy.mean(axis=axes, keepdims=True), (dy * xhat).mean(axis=axes, keepdims=True)
    return gamma * inv.reshape(shape) * (dy - mean_dy - xhat * mean_dy_xhat)


def _dense(layer, path, params, x, run, tape):
    return run.round(x @ params[f"{path}.W"]) + params[f"{path}.b"], None


def _conv(layer, path, params, x, run, tape):
    x = conv.conv2d(_conv_p(layer), x, params[f"{path}.W"])
    return (run.round(x) + params[f"{path}.b"][:, None, None] if layer.bias else x), None


def _pool(layer, path, params, x, run, tape):
    return _pool_fns(layer)[0]({"k": layer.size, "stride": layer.stride}, x), None


def _residual(layer, path, params, x, run, tape):
    aux = ([], [])
    body = _forward(layer.body, f"{path}.", params, x, run, aux[0])
    if layer.shortcut is None:
        return body, aux
    return body + (_forward(layer.shortcut, f"{path}.s", params, x, run, aux[1]) if layer.shortcut else x), aux


# Each layer kind's forward pass: (layer, path, params, x, run, tape) -> (output, what its vjp needs)
FORWARD = {
    Dense: _dense,
    Conv2D: _conv,
    BatchNorm: lambda layer, path, params, x, run, tape: _batch_norm(layer, path, params, x, run),
    Pool2D: _pool,
    GlobalAvgPool: lambda layer, path, params, x, run, tape: (x.mean(axis=(2, 3)), None),
    Flatten: lambda layer, path, params, x, run, tape: (x.reshape(x.shape[0], -1), None),
    LSTM: lambda layer, path, params, x, run, tape: _lstm_forward(params, path, x, layer.units),
    Residual: _residual,
}


def _dense_vjp(layer, path, params, inp, aux, dx, run, grads):
    grads[f"{path}.W"], grads[f"{path}.b"] = inp.T @ dx, dx.sum(axis=0)
    return dx @ params[f"{path}.W"].T


def _conv_vjp(layer, path, params, inp, aux, dx, run, grads):
    if layer.bias:
        grads[f"{path}.b"] = dx.sum(axis=(0, 2, 3))
    dx, grads[f"{path}.W"] = conv.conv2d_vjp(_conv_p(layer), (inp, params[f"{path}.W"]), dx)
    return dx


def _pool_vjp(layer, path, params, inp, aux, dx, run, grads):
    (dx,) = _pool_fns(layer)[1]({"k": layer.size, "stride": layer.stride}, (inp,), dx)
    return dx


def _lstm_vjp(layer, path, params, inp, aux, dx, run, grads):
    dx, lstm_grads = _lstm_backward(params, path, inp, aux, dx, layer.units)
    grads.update(lstm_grads)
    return dx


def _residual_vjp(layer, path, params, inp, aux, dx, run, grads):
    d_body = _backward(layer.body, f"{path}.", params, aux[0], dx, run, grads)
    if layer.shortcut:
        d_body = d_body + _backward(layer.shortcut, f"{path}.s", params, aux[1], dx, run, grads)
    elif layer.shortcut is not None:  # identity
        d_body = d_body + dx
    return d_body


# Each layer kind's vector-Jacobian product: (layer, path, params, input, aux, dy, run, grads) -> dx,
# the parameters' gradients written into grads
BACKWARD = {
    Dense: _dense_vjp,
    Conv2D: _conv_vjp,
    BatchNorm: lambda layer, path, params, inp, aux, dx, run, grads: _batch_norm_vjp(layer, path, params, aux, dx,
                                                                                       run, grads),
    Pool2D: _pool_vjp,
    GlobalAvgPool: lambda layer, path, params, inp, aux, dx, run, grads: np.broadcast_to(
        dx[:, :, None, None] / (inp.shape[2] * inp.shape[3]), inp.shape),
    Flatten: lambda layer, path, params, inp, aux, dx, run, grads: dx.reshape(inp.shape),
    LSTM: _lstm_vjp,
    Residual: _residual_vjp,
}


def _rule(table: dict, layer, what: str):
    try:
        return table[type(layer)]
    except KeyError:
        raise TypeError(f"the reference has no {what} for {type(layer).__name__} (reference.{what.upper()})") from None


def _forward(layers: tuple, prefix: str, params: dict, x: np.ndarray, run: _Run, tape: list) -> np.ndarray:
    for i, layer in enumerate(layers):
        path, inp = f"{prefix}{i}", x
        x, aux = _rule(FORWARD, layer, "forward")(layer, path, params, x, run, tape)
        x = run.round(_relu_if(layer, x))
        tape.append((inp, x, aux))
    return x


def _backward(layers: tuple, prefix: str, params: dict, tape: list, dx: np.ndarray, run: _Run, grads: dict):
    for i in reversed(range(len(layers))):
        layer, path, (inp, out, aux) = layers[i], f"{prefix}{i}", tape[i]
        if getattr(layer, "activation", None) == "relu":
            dx = dx * (out > 0)
        dx = run.round(_rule(BACKWARD, layer, "backward")(layer, path, params, inp, aux, dx, run, grads))
    return dx


def forward(model: ModelSpec, params: dict, x: np.ndarray, lowp: Rounder | None = None) -> np.ndarray:
    """Logits for input `x` in inference mode (batch norms use their running statistics)."""
    run = _Run(training=False)
    params, x = _start(params, x, run, lowp)
    return _forward(model.layers, "", params, x, run, [])


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean softmax cross-entropy and its gradient with respect to the logits."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    n = len(labels)
    loss = -float(log_probs[np.arange(n), labels].mean())
    dlogits = np.exp(log_probs)
    dlogits[np.arange(n), labels] -= 1
    return loss, dlogits / n


def loss_and_grads(
    model: ModelSpec, params: dict, x: np.ndarray, y: np.ndarray, unbiased_var: bool | None = False,
    lowp: Rounder | None = None, head: Callable[[np.ndarray, np.ndarray], tuple[float, np.ndarray]] | None = None,
) -> tuple[float, dict, dict]:
    """The loss of one batch in training mode, the gradient of every trained parameter, and the
    running statistics the pass leaves (`unbiased_var`: the framework moves the running variance
    with the unbiased batch variance, as PyTorch does; None: both, UNBIASED_VAR; `lowp`: mixed
    precision, emulated; `head`: the loss and its gradient at the logits made by a framework's
    own loss, NativeModel.loss_head, in place of cross_entropy's)."""
    run, tape = _Run(training=True, unbiased_var=unbiased_var), []
    used, x = _start(params, x, run, lowp)
    logits = _forward(model.layers, "", used, x, run, tape)
    loss, dx = (head or cross_entropy)(logits, y)
    grads: dict[str, np.ndarray] = {}
    _backward(model.layers, "", used, tape, run.round(dx), run, grads)
    return loss, {k: run.round(g) for k, g in grads.items()}, run.state


def sgd_step(
    model: ModelSpec, params: dict, x: np.ndarray, y: np.ndarray, lr: float, lstm_biases: int = 1,
    unbiased_var: bool = False,
) -> tuple[float, dict]:
    """One plain SGD step: the batch's loss (before the update) and the updated parameters, with
    the running statistics the step's forward pass moved.

    `lstm_biases` is how many bias vectors a framework trains per LSTM gate set: PyTorch and
    MXNet train two whose sum is the canonical bias, and each receives the full gradient, so
    under SGD the sum moves `lstm_biases` times as far. That is the frameworks' real behaviour.
    """
    loss, grads, state = loss_and_grads(model, params, x, y, unbiased_var)
    return loss, sgd_update(model, params, grads, state, lr, lstm_biases)


def update_scale(model: ModelSpec, lstm_biases: int) -> dict[str, int]:
    """How many times an optimizer's update each canonical tensor moves, where not once: a
    framework that trains `lstm_biases` bias vectors per LSTM gate set, each given the full
    gradient, moves their sum (the canonical bias) that many times as far."""
    return {f"{path}.b": lstm_biases for path, layer, _ in walk(model.layers, model.input_shape)
            if isinstance(layer, LSTM)}


def sgd_update(model: ModelSpec, params: dict, grads: dict, state: dict, lr: float, lstm_biases: int = 1) -> dict:
    """The parameters after a plain SGD step with `grads`, and the running statistics `state`
    (both from loss_and_grads)."""
    scale = update_scale(model, lstm_biases)
    new = {k: v - lr * scale.get(k, 1) * grads[k] if k in grads else v for k, v in params.items()}
    return {**new, **state}


def adam_update(
    model: ModelSpec, params: dict, grads: dict, state: dict, moments: tuple, step: int, opt, lstm_biases: int = 1,
    eps_corrected: bool = True,
) -> tuple[dict, tuple]:
    """The parameters after Adam step number `step` (from 1) with bias correction, and the moments
    after it ((m, v), dicts; empty dicts before the first step). eps is added to the corrected
    square root sqrt(v / (1 - beta2^t)) as torch.optim.Adam does, or (`eps_corrected` False) to
    sqrt(v) with the correction folded into the rate, as Keras and MXNet do: the same as
    eps / sqrt(1 - beta2^t) added to the corrected root. A framework that trains two LSTM biases
    moves their sum twice as far (`lstm_biases`, as in sgd_update)."""
    m, v = moments
    m = {k: opt.beta1 * m.get(k, 0.0) + (1 - opt.beta1) * g for k, g in grads.items()}
    v = {k: opt.beta2 * v.get(k, 0.0) + (1 - opt.beta2) * g * g for k, g in grads.items()}
    c1, c2 = 1 - opt.beta1**step, 1 - opt.beta2**step
    eps = opt.eps if eps_corrected else opt.eps / np.sqrt(c2)
    scale = update_scale(model, lstm_biases)
    new = {k: p - scale.get(k, 1) * opt.lr * (m[k] / c1) / (np.sqrt(v[k] / c2) + eps) if k in grads else p
           for k, p in params.items()}
    return {**new, **state}, (m, v)


class NoReference(AssertionError):
    """The reference has no rule for what a model asks (an optimizer it does not have): its step
    cannot be checked, and a case that cannot be checked fails as a failed check does (an
    AssertionError, never a skip), rather than being timed."""


def optimizer_update(model: ModelSpec, params: dict, grads: dict, state: dict, opt: Optimizer, lstm_biases: int,
                     eps_corrected: bool, moments: tuple = ({}, {}), step: int = 1) -> tuple[dict, tuple]:
    """The reference's step number `step` of `opt` (the study's optimizer, as the timed step runs
    it) from `params`, and the optimizer's moments after it: SGD at its rate, or Adam with the
    framework's epsilon convention (`moments` empty before its first step). Raises NoReference for
    an optimizer the reference does not have."""
    if opt.name == "sgd":
        return sgd_update(model, params, grads, state, opt.lr, lstm_biases), moments
    if opt.name == "adam":
        return adam_update(model, params, grads, state, moments, step, opt, lstm_biases, eps_corrected)
    raise NoReference(f"{model.name}: the reference has no optimizer {opt.name!r}; its timed step cannot be "
                      "checked, so it is not timed")
