"""The PyTorch backend: eager and torch.compile, CPU and CUDA. The only module importing torch."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from opbench.core.errors import one_line
from opbench.frameworks.base import Backend, Call, Framework, GpuFacts, NotCompiled
from opbench.workloads.models import precision

FRAMEWORK = Framework(name="torch", title="PyTorch", package="torch", modes=("eager", "compile"), order=1,
                      compiled=("compile",))

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
_DEVICES = {"cpu": "cpu", "gpu": "cuda"}

# float32 means float32: no TF32 tensor-core shortcuts on GPUs that have them.
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def _dynamo():
    """torch.compile's front end, imported at the first compiled case and not before: it costs an
    eager process 3.8 s to start and 80 MB resident (sympy among them) that no eager case uses, and
    an eager case's peak memory would carry them. A compiled benchmark must never fall back to
    eager behind our back, so its recompile limit is an error."""
    import torch._dynamo

    torch._dynamo.config.fail_on_recompile_limit_hit = True
    return torch._dynamo


def _whole_graph(fn):
    """`fn` compiled whole (fullgraph): a graph break, which would run part of a model's step
    eagerly under the compile label (nn.LSTM: "Attempted to wrap RNN, GRU, or LSTM"), raises
    NotCompiled on the first call instead."""
    dynamo = _dynamo()
    compiled = torch.compile(fn, dynamic=False, fullgraph=True)

    def call(*args):
        try:
            return compiled(*args)
        except dynamo.exc.Unsupported as exc:
            raise NotCompiled(f"torch.compile(fullgraph=True): {one_line(exc, limit=200)}") from None

    return call


class TorchBackend(Backend):
    framework = FRAMEWORK

    def version(self) -> str:
        return torch.__version__

    def gpu_unavailable(self) -> str | None:
        return None if torch.cuda.is_available() else "torch sees no CUDA GPU (torch.cuda.is_available() is False)"

    def gpu_facts(self) -> GpuFacts:
        props = torch.cuda.get_device_properties(0)
        khz = getattr(props, "clock_rate", 0)  # cudaDevAttrClockRate: the maximum SM clock, in kHz
        return GpuFacts(props.name, (props.major, props.minor), props.multi_processor_count, khz * 1e3 or None)

    def from_numpy(self, array, device, dtype):
        t = torch.from_numpy(np.require(array, requirements="C"))
        if t.is_floating_point():
            t = t.to(_DTYPES[dtype])
        return t.to(_DEVICES[device])

    def to_numpy(self, tensor):
        t = tensor.detach()
        if t.is_floating_point():
            t = t.float()
        return t.cpu().numpy()

    def sync(self, device: str) -> None:
        if device == "gpu":
            torch.cuda.synchronize()

    def set_threads(self, n: int) -> None:
        torch.set_num_threads(n)

    def forget(self) -> None:
        """torch.compile's compiled graphs and guards (Dynamo's and inductor's caches in memory),
        where a case compiled anything: resetting would import the compiler into an eager process."""
        if "torch._dynamo" in sys.modules:
            torch.compiler.reset()

    def threads(self) -> int:
        return torch.get_num_threads()

    def _ops_module(self):
        return _Ops

    def _mode(self, fn, mode, fullgraph=True):
        """`fn` in `mode`. Compiled functions start from an empty Dynamo cache, so that one case
        never meets another's guards or recompile limit; fullgraph makes a graph break an error."""
        if mode == "compile":
            _dynamo().reset()
            return torch.compile(fn, dynamic=False, fullgraph=fullgraph)
        if mode == "eager":
            return fn
        raise self.no_mode(mode)

    def compiled(self, fn, mode, device):
        return self._mode(fn, mode)

    def forward(self, impl, p, args, mode, device) -> Call:
        fn = self._mode(lambda *xs: impl(p, *xs), mode)

        def call():
            with torch.no_grad():
                return fn(*args)

        return call

    def backward(self, impl, p, args, argnums, cotangent, mode, device) -> Call:
        fn = self._mode(lambda *xs: impl(p, *xs), mode)
        leaves = [a.detach().requires_grad_(i in argnums) for i, a in enumerate(args)]
        wrt = [leaves[i] for i in argnums]

        def call():
            out = fn(*leaves)
            grads = torch.autograd.grad(out, wrt, cotangent)
            return out.detach(), grads

        return call

    def creation(self, impl, p, host_args, device, dtype) -> Call:
        return lambda: impl(p, _DEVICES[device], _DTYPES[dtype], *host_args)

    def build(self, model, params, device, dtype, mode):
        from opbench.frameworks.torch import models

        self._mode(lambda: None, mode)  # an unknown mode an error, a compiled model's Dynamo cache emptied
        compile_fn = _whole_graph if mode == "compile" else (lambda fn: fn)
        amp = precision.low_dtype(dtype, device)
        return models.TorchModel(model, params, device, dtype, mode, _DTYPES["float32"], _DEVICES[device],
                                       compile_fn, amp and _DTYPES[amp])

    profiler_name = "torch.profiler"

    def info(self) -> dict[str, Any]:
        info = {
            "version": torch.__version__,
            "mkldnn": torch.backends.mkldnn.is_available(),
            "openmp": torch.backends.openmp.is_available(),
            "cuda": torch.version.cuda,
        }
        if torch.cuda.is_available():
            info["cudnn"] = torch.backends.cudnn.version()
            info["gpu"] = torch.cuda.get_device_name(0)
        return info


class _Ops:
    """torch implementations, one per operator name, signature name(p, *inputs)."""

    sigmoid = staticmethod(lambda p, x: torch.sigmoid(x))
    relu = staticmethod(lambda p, x: torch.relu(x))
    tanh = staticmethod(lambda p, x: torch.tanh(x))
    softplus = staticmethod(lambda p, x: F.softplus(x))
    softsign = staticmethod(lambda p, x: F.softsign(x))
    gelu = staticmethod(lambda p, x: F.gelu(x))
    softmax = staticmethod(lambda p, x: torch.softmax(x, dim=-1))
    dot = staticmethod(lambda p, a, b: torch.dot(a, b))
    gemm = staticmethod(lambda p, a, b: torch.mm(a, b))
    bmm = staticmethod(lambda p, a, b: torch.bmm(a, b))
    flatten = staticmethod(lambda p, x: torch.flatten(x, 1))
    conv2d = staticmethod(lambda p, x, w: F.conv2d(x, w, stride=p["stride"], padding=p["pad"]))
    maxpool2d = staticmethod(lambda p, x: F.max_pool2d(x, p["k"], p["stride"]))
    avgpool2d = staticmethod(lambda p, x: F.avg_pool2d(x, p["k"], p["stride"]))
    l2_normalize = staticmethod(lambda p, x: F.normalize(x, p=2.0, dim=1))

    @staticmethod
    def batch_norm(p, x, gamma, beta):
        return F.batch_norm(x, None, None, gamma, beta, training=True, eps=p["eps"])

    @staticmethod
    def layer_norm(p, x, gamma, beta):
        return F.layer_norm(x, x.shape[-1:], gamma, beta, eps=p["eps"])

    # creation: name(p, device, dtype, *host_inputs)
    from_numpy = staticmethod(lambda p, device, dtype, x: torch.from_numpy(x).to(device=device, dtype=dtype))
    from_list = staticmethod(lambda p, device, dtype, x: torch.tensor(x, device=device, dtype=dtype))
    zeros = staticmethod(lambda p, device, dtype: torch.zeros(p["shape"], device=device, dtype=dtype))
    random_normal = staticmethod(lambda p, device, dtype: torch.randn(p["shape"], device=device, dtype=dtype))


BACKEND = TorchBackend
