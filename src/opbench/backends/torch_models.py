"""PyTorch model builder: torch.nn modules from a ModelSpec. Imports only torch."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from opbench.models.native import NativeModel, out_in_slots
from opbench.models.spec import LSTM, Conv2D, Dense, Flatten, ModelSpec, Optimizer, Pool2D, layer_inputs


class _Net(nn.Module):
    """The spec's layers as torch.nn modules, applied in order."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.spec = spec
        mods = []
        for layer, shape in zip(spec.layers, layer_inputs(spec), strict=True):
            if isinstance(layer, Dense):
                mods.append(nn.Linear(int(np.prod(shape)), layer.units))
            elif isinstance(layer, Conv2D):
                mods.append(nn.Conv2d(shape[0], layer.filters, layer.kernel, layer.stride, layer.pad))
            elif isinstance(layer, Pool2D):
                pool = nn.MaxPool2d if layer.kind == "max" else nn.AvgPool2d
                mods.append(pool(layer.size, layer.stride))
            elif isinstance(layer, Flatten):
                mods.append(nn.Flatten())
            elif isinstance(layer, LSTM):
                mods.append(nn.LSTM(shape[-1], layer.units, batch_first=True))
        self.mods = nn.ModuleList(mods)

    def forward(self, x):
        for layer, mod in zip(self.spec.layers, self.mods, strict=True):
            x = mod(x)
            if isinstance(layer, LSTM):
                x = x[0][:, -1]
            if getattr(layer, "activation", None) == "relu":
                x = F.relu(x)
        return x


def torch_optimizer(params, optimizer: Optimizer) -> torch.optim.Optimizer:
    """The spec's optimizer over `params`, fresh (no state)."""
    params = list(params)
    if optimizer.name == "sgd":
        return torch.optim.SGD(params, lr=optimizer.lr)
    return torch.optim.Adam(params, lr=optimizer.lr, betas=(optimizer.beta1, optimizer.beta2), eps=optimizer.eps)


class TorchModel(NativeModel):
    lstm_biases = 2

    def __init__(self, spec, params, device, dtype, mode, torch_dtype, torch_device, compile_fn):
        super().__init__(spec, device, dtype, mode)
        self._dev, self._dtype = torch_device, torch_dtype
        self.net = _Net(spec).to(device=torch_device, dtype=torch_dtype)
        self.set_params(params)
        self._forward = compile_fn(self.net)
        self._loss = compile_fn(lambda x, y: F.cross_entropy(self.net(x), y))

    def inputs(self, x, y):
        tx = torch.from_numpy(np.require(x, requirements="C")).to(device=self._dev, dtype=self._dtype)
        return tx, torch.from_numpy(y.astype(np.int64)).to(self._dev)

    def infer(self, x):
        def call():
            with torch.no_grad():
                return self._forward(x)

        return call

    def train_step(self, x, y, optimizer: Optimizer):
        opt = torch_optimizer(self.net.parameters(), optimizer)

        def call():
            opt.zero_grad(set_to_none=True)
            loss = self._loss(x, y)
            loss.backward()
            opt.step()
            return loss.detach()

        return call

    def _slots(self):
        def handles(i):
            mod = self.net.mods[i]
            if isinstance(mod, nn.LSTM):
                return mod.weight_ih_l0, mod.weight_hh_l0, mod.bias_ih_l0, mod.bias_hh_l0
            return mod.weight, mod.bias

        return out_in_slots(self.spec, handles)

    def _read(self, handle):
        return handle.detach().float().cpu().numpy()

    def _write(self, handle, value):
        with torch.no_grad():
            handle.copy_(torch.from_numpy(value))

    def peak_memory(self):
        return torch.cuda.max_memory_allocated() if self.device == "gpu" else None
