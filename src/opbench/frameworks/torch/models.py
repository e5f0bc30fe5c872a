"""PyTorch model builder: torch.nn modules from a ModelSpec. Imports only torch."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from opbench.workloads.models import precision
from opbench.workloads.models.native import NativeModel, out_in_slots
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


class _Residual(nn.Module):
    def __init__(self, body: nn.Module, shortcut: nn.Module | None, relu: bool) -> None:
        super().__init__()
        self.body, self.shortcut, self.relu = body, shortcut, relu

    def forward(self, x):
        y = self.body(x) + self.shortcut(x) if self.shortcut is not None else self.body(x)
        return F.relu(y) if self.relu else y


class _LastStep(nn.Module):
    """nn.LSTM's output -> the last hidden state (N, H)."""

    def forward(self, out):
        return out[0][:, -1]


class _FrozenBatchNorm(nn.modules.batchnorm._BatchNorm):
    """A batch norm (any rank) that stays in inference behaviour whatever the module's mode."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.train(False)

    def _check_input_dim(self, x) -> None:
        pass

    def train(self, mode: bool = True):
        return super().train(False)


def _residual(layer: Residual, shape, path: str, leaves: dict):
    shortcut = None if layer.shortcut is None else _sequence(layer.shortcut, shape, f"{path}.s", leaves)
    return _Residual(_sequence(layer.body, shape, f"{path}.", leaves), shortcut, layer.activation == "relu")


def _batch_norm(layer: BatchNorm, shape) -> nn.Module:
    kind = _FrozenBatchNorm if layer.frozen else nn.BatchNorm2d if len(shape) == 3 else nn.BatchNorm1d
    mod = kind(shape[0], eps=layer.eps, momentum=1 - layer.momentum)  # PyTorch's momentum is the new share
    mod.requires_grad_(not layer.frozen)
    return mod


def _lstm(layer: LSTM, shape, path: str, leaves: dict) -> nn.Module:
    leaves[path] = nn.LSTM(shape[-1], layer.units, batch_first=True)
    return nn.Sequential(leaves[path], _LastStep())


def _alone(build):
    """A layer kind built as one module (`build(layer, input shape)`), recorded in `leaves` under its
    path, a ReLU after it where the layer has one."""
    def one(layer, shape, path: str, leaves: dict) -> nn.Module:
        mod = leaves[path] = build(layer, shape)
        return nn.Sequential(mod, nn.ReLU()) if getattr(layer, "activation", None) == "relu" else mod
    return one


# Each layer kind as torch.nn modules: (layer, input shape, path, leaves) -> the module that runs it,
# its activation included; the module holding its parameters is recorded in `leaves` under its path
LAYERS = {
    Residual: _residual,
    Dense: _alone(lambda layer, shape: nn.Linear(int(np.prod(shape)), layer.units)),
    Conv2D: _alone(lambda layer, shape: nn.Conv2d(shape[0], layer.filters, layer.kernel, layer.stride, layer.pad,
                                                  bias=layer.bias)),
    BatchNorm: _alone(_batch_norm),
    Pool2D: _alone(lambda layer, shape: (nn.MaxPool2d if layer.kind == "max" else nn.AvgPool2d)(layer.size,
                                                                                             layer.stride)),
    GlobalAvgPool: _alone(lambda layer, shape: nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())),
    Flatten: _alone(lambda layer, shape: nn.Flatten()),
    LSTM: _lstm,
}


def _module(layer, shape, path: str, leaves: dict) -> nn.Module:
    """One spec layer as torch.nn modules; every parameterised module is recorded in `leaves` under
    its path."""
    try:
        build = LAYERS[type(layer)]
    except KeyError:
        raise TypeError(f"PyTorch builds no {type(layer).__name__} (frameworks/torch/models.LAYERS)") from None
    return build(layer, shape, path, leaves)


def _sequence(layers: tuple, shape: tuple, prefix: str, leaves: dict) -> nn.Sequential:
    mods = []
    for i, layer in enumerate(layers):
        mods.append(_module(layer, shape, f"{prefix}{i}", leaves))
        shape = output_shape(layer, shape)
    return nn.Sequential(*mods)


def torch_optimizer(params, optimizer: Optimizer) -> torch.optim.Optimizer:
    """The spec's optimizer over `params`, fresh (no state)."""
    params = list(params)
    if optimizer.name == "sgd":
        return torch.optim.SGD(params, lr=optimizer.lr)
    return torch.optim.Adam(params, lr=optimizer.lr, betas=(optimizer.beta1, optimizer.beta2), eps=optimizer.eps)


class _AfterProducts(TorchDispatchMode):
    """The floating types of every op's results after the last product (a matrix product or a
    convolution) of the ops it sees: in a training pass, from the logits to the loss."""

    PRODUCTS = ("mm", "addmm", "bmm", "matmul", "linear", "convolution", "mkldnn_convolution", "mkldnn_rnn_layer",
                "_thnn_fused_lstm_cell", "lstm")

    def __init__(self) -> None:
        super().__init__()
        self.types: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket.__name__.lstrip("_") in (p.lstrip("_") for p in self.PRODUCTS):
            self.types = set()
        else:
            results = out if isinstance(out, (tuple, list)) else (out,)
            self.types |= {precision.dtype_name(r.dtype) for r in results
                           if isinstance(r, torch.Tensor) and r.is_floating_point()}
        return out


class TorchModel(NativeModel):
    """`amp`: the low-precision type of torch.autocast (mixed precision), None for float32. Under
    float16 a GradScaler scales the loss (precision.LOSS_SCALE to start, dynamic after)."""

    lstm_biases = 2
    unbiased_var = True  # nn.BatchNorm moves running_var with the unbiased batch variance

    def __init__(self, spec, params, device, dtype, mode, torch_dtype, torch_device, compile_fn, amp=None):
        super().__init__(spec, device, dtype, mode)
        self._dev, self._dtype, self._amp = torch_device, torch_dtype, amp
        self._leaves: dict[str, nn.Module] = {}
        self.net = _sequence(spec.layers, spec.input_shape, "", self._leaves).to(device=torch_device, dtype=torch_dtype)
        self.set_params(params)
        self._forward = compile_fn(self._logits)
        # The training loss, uncompiled: looked up when the step runs or is traced (a test's mutant replaces
        # it), and what product_dtypes watches over a training pass
        self._loss_of = lambda x, y: F.cross_entropy(self._logits(x).float(), y)
        self._loss = compile_fn(lambda x, y: self._loss_of(x, y))  # noqa: PLW0108 (looked up when traced)

    def _logits(self, x):
        with torch.autocast(torch.device(self._dev).type, self._amp, enabled=self._amp is not None):
            return self.net(x)

    def product_dtypes(self, x, y):
        """Forward hooks on the product layers over one inference pass of the uncompiled forward and
        one training pass of the uncompiled loss, under the model's own autocast (a compiled graph
        does not call hooks): the type each layer's output came out in, in each pass ("PATH in
        training"); and every type the training pass computed in after its last product, from the
        logits to the loss (the cross-entropy, watched op by op in a TorchDispatchMode). The
        training pass leaves batch norm's running statistics as they were."""
        seen: dict[str, str] = {}
        when = [""]

        def record(path):
            def hook(module, args, out):
                out = out[0] if isinstance(out, tuple) else out
                seen[path + when[0]] = precision.dtype_name(out.dtype)

            return hook

        hooks = [self._leaves[path].register_forward_hook(record(path)) for path in self.compute_layers()]
        training = self.net.training
        kept = {name: b.clone() for name, b in self.net.named_buffers()}
        try:
            self._mode(False)  # inference: batch norm's running statistics stay as they are
            with torch.no_grad():
                self._logits(x)
            when[0] = " in training"
            self._mode(True)
            with torch.no_grad(), _AfterProducts() as after:
                self._loss_of(x, y)
        finally:
            for h in hooks:
                h.remove()
            for name, b in self.net.named_buffers():
                b.copy_(kept[name])
            self._mode(training)
        seen["cross-entropy"] = ",".join(sorted(after.types)) or "not observed"
        seen["weights"] = ",".join(sorted({precision.dtype_name(p.dtype) for p in self.net.parameters()}))
        return seen

    def _scaler(self) -> torch.amp.GradScaler | None:
        if self._amp != torch.float16:
            return None
        return torch.amp.GradScaler(torch.device(self._dev).type, init_scale=precision.LOSS_SCALE)

    def _mode(self, training: bool) -> None:
        """Training or inference behaviour (batch norm), switched only when it changes."""
        if self.net.training != training:
            self.net.train(training)

    def inputs(self, x, y):
        tx = torch.from_numpy(np.require(x, requirements="C")).to(device=self._dev, dtype=self._dtype)
        return tx, torch.from_numpy(y.astype(np.int64)).to(self._dev)

    def loss_head(self, logits, y):
        z = torch.tensor(np.asarray(logits, np.float32), device=self._dev, requires_grad=True)
        loss = F.cross_entropy(z, torch.from_numpy(np.asarray(y, np.int64)).to(self._dev))
        loss.backward()
        return float(loss.detach()), z.grad.cpu().numpy()

    def infer(self, x):
        def call():
            self._mode(False)
            with torch.no_grad():
                return self._forward(x)

        return call

    def trainer(self, optimizer: Optimizer):
        opt = torch_optimizer((p for p in self.net.parameters() if p.requires_grad), optimizer)
        scaler = self._scaler()

        def call(x, y):
            self._mode(True)
            opt.zero_grad(set_to_none=True)
            loss = self._loss(x, y)
            if scaler is None:
                loss.backward()
                opt.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            return loss.detach()

        return call

    def _slots(self):
        def handles(path):
            mod = self._leaves[path]
            if isinstance(mod, nn.LSTM):
                return mod.weight_ih_l0, mod.weight_hh_l0, mod.bias_ih_l0, mod.bias_hh_l0
            if isinstance(mod, nn.modules.batchnorm._BatchNorm):
                return mod.weight, mod.bias, mod.running_mean, mod.running_var
            return mod.weight, mod.bias

        return out_in_slots(self.spec, handles)

    def _read(self, handle):
        return handle.detach().float().cpu().numpy()

    def _write(self, handle, value):
        with torch.no_grad():
            handle.copy_(torch.from_numpy(value))

    def reset_peak_memory(self):
        if self.device == "gpu":
            torch.cuda.reset_peak_memory_stats()

    def peak_memory(self):
        return (torch.cuda.max_memory_allocated(), "block") if self.device == "gpu" else None
