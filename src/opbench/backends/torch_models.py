"""PyTorch model builder: torch.nn modules from a ModelSpec. Imports only torch."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from opbench.models.native import NativeModel
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
        params = list(self.net.parameters())
        if optimizer.name == "sgd":
            opt = torch.optim.SGD(params, lr=optimizer.lr)
        else:
            opt = torch.optim.Adam(params, lr=optimizer.lr, betas=(optimizer.beta1, optimizer.beta2), eps=optimizer.eps)

        def call():
            opt.zero_grad(set_to_none=True)
            loss = self._loss(x, y)
            loss.backward()
            opt.step()
            return loss.detach()

        return call

    def _slots(self):
        """(canonical name, parameter, to_native, to_canonical) for every parameter."""
        for i, (layer, mod) in enumerate(zip(self.spec.layers, self.net.mods, strict=True)):
            if isinstance(layer, Dense):
                yield f"{i}.W", mod.weight, np.transpose, np.transpose
                yield f"{i}.b", mod.bias, None, None
            elif isinstance(layer, Conv2D):
                yield f"{i}.W", mod.weight, None, None
                yield f"{i}.b", mod.bias, None, None
            elif isinstance(layer, LSTM):
                yield f"{i}.Wx", mod.weight_ih_l0, np.transpose, np.transpose
                yield f"{i}.Wh", mod.weight_hh_l0, np.transpose, np.transpose

    def set_params(self, params):
        with torch.no_grad():
            for name, param, to_native, _ in self._slots():
                value = to_native(params[name]) if to_native else params[name]
                param.copy_(torch.from_numpy(np.ascontiguousarray(value)))
            for i, layer in enumerate(self.spec.layers):
                if isinstance(layer, LSTM):  # two biases per gate set: b and zeros
                    self.net.mods[i].bias_ih_l0.copy_(torch.from_numpy(params[f"{i}.b"]))
                    self.net.mods[i].bias_hh_l0.zero_()

    def get_params(self):
        out = {}
        for name, param, _, to_canonical in self._slots():
            value = param.detach().float().cpu().numpy()
            out[name] = to_canonical(value) if to_canonical else value
        for i, layer in enumerate(self.spec.layers):
            if isinstance(layer, LSTM):
                mod = self.net.mods[i]
                out[f"{i}.b"] = (mod.bias_ih_l0 + mod.bias_hh_l0).detach().float().cpu().numpy()
        return out

    def peak_memory(self):
        return torch.cuda.max_memory_allocated() if self.device == "gpu" else None
