"""The MXNet backend: imperative NDArray ("eager") and a hybridized Gluon HybridBlock.

The only module importing MXNet. MXNet's engine is asynchronous even on the CPU: a call returns
before its result exists, so every timed call ends with mx.nd.waitall().
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from opbench.frameworks.base import Backend, Call, Framework, Unavailable
from opbench.frameworks.mxnet.loader import STARTED_WITH, autograd, gluon, mx

FRAMEWORK = Framework(name="mxnet", title="MXNet", package="mxnet", modes=("eager", "hybridize"), order=3)

_DTYPES = {"float32": "float32", "float16": "float16"}


def _omp(name: str):
    """An OpenMP runtime function as MXNet's library resolves it."""
    return getattr(mx.base._LIB, name, None)


class _Block(gluon.HybridBlock):
    """One operator as a HybridBlock: the same code runs on NDArrays and on Symbols."""

    def __init__(self, impl, p, ctx):
        super().__init__()
        self._impl, self._p = impl, p
        # Auxiliary state (BatchNorm's moving statistics) must be a Variable in a graph.
        with self.name_scope():
            for name, (shape, value) in getattr(impl, "aux", lambda p: {})(p).items():
                param = self.params.get(name, shape=shape, init=mx.init.Constant(value), grad_req="null",
                                        differentiable=False)
                setattr(self, name, param)  # registered parameters reach hybrid_forward by name
        self.initialize(ctx=ctx)

    def hybrid_forward(self, F, *args, **aux):
        return self._impl(F, self._p, *args, **aux)


class MxnetBackend(Backend):
    framework = FRAMEWORK

    def version(self) -> str:
        return mx.__version__

    def gpu_unavailable(self) -> str | None:
        try:
            gpus = mx.context.num_gpus()
        except mx.base.MXNetError as exc:
            return f"mxnet cannot query GPUs: {exc}"
        return None if gpus else "mxnet sees no GPU (a CPU build, or no CUDA device)"

    def dtypes(self, device: str) -> tuple[str, ...]:
        return tuple(_DTYPES)

    def amp_unavailable(self, device: str) -> str | None:
        return ("MXNet's AMP (mxnet.contrib.amp.init) patches every operator of the process, irreversibly and "
                "before any model is built, so it cannot run beside the float32 benchmarks of one session")

    @staticmethod
    def _ctx(device: str):
        return mx.gpu(0) if device == "gpu" else mx.cpu()

    def from_numpy(self, array, device, dtype):
        kind = _DTYPES[dtype] if array.dtype.kind == "f" else array.dtype
        # MXNet's NDArray has no 0-d arrays: a scalar is shape (1,), as F.dot returns for vectors.
        return mx.nd.array(array.reshape(array.shape or (1,)), ctx=self._ctx(device), dtype=kind)

    def to_numpy(self, tensor):
        return (tensor.astype("float32") if tensor.dtype in (np.float16,) else tensor).asnumpy()

    def sync(self, device: str) -> None:
        mx.nd.waitall()

    def set_threads(self, n: int) -> None:
        """The engine's operators keep the OpenMP team it sized when MXNet started (see _mxnet:
        the process's start_threads count); this sets the calling thread's count, for what MXNet
        runs there, and threads() keeps saying what the operators will use."""
        mx.base.check_call(mx.base._LIB.MXSetNumOMPThreads(ctypes.c_int(n)))
        setter = _omp("omp_set_num_threads")
        if setter:
            setter(ctypes.c_int(n))

    def threads(self) -> int:
        return STARTED_WITH

    def _ops_module(self):
        return _Ops

    def _bind(self, impl, p, mode, device):
        if mode == "hybridize":
            block = _Block(impl, p, self._ctx(device))
            block.hybridize(static_alloc=True, static_shape=True)
            return block
        if mode == "eager":
            return lambda *xs: impl(mx.nd, p, *xs)
        raise self.no_mode(mode)

    def compiled(self, fn, mode, device):
        """fn(F, *arrays), F being mx.nd in eager mode and mx.sym in a hybridized block's graph."""
        return self._bind(lambda F, p, *xs: fn(F, *xs), {}, mode, device)

    def forward(self, impl, p, args, mode, device) -> Call:
        fn = self._bind(impl, p, mode, device)

        def call():
            with autograd.train_mode():
                return fn(*args)

        return call

    def backward(self, impl, p, args, argnums, cotangent, mode, device) -> Call:
        fn = self._bind(impl, p, mode, device)
        for i in argnums:
            args[i].attach_grad()

        def call():
            with autograd.record():
                out = fn(*args)
            out.backward(cotangent)
            return out, [args[i].grad for i in argnums]

        return call

    def creation(self, impl, p, host_args, device, dtype) -> Call:
        ctx, kind = self._ctx(device), _DTYPES[dtype]
        return lambda: impl(p, ctx, kind, *host_args)

    def build(self, model, params, device, dtype, mode):
        from opbench.frameworks.mxnet import models

        if mode not in self.modes:
            raise self.no_mode(mode)
        if dtype != "float32":
            raise Unavailable(self.amp_unavailable(device))
        return models.MxnetModel(model, params, device, dtype, mode, self._ctx(device))

    profiler_name = "mx.profiler"

    def info(self) -> dict[str, Any]:
        features = mx.runtime.Features()
        return {"version": mx.__version__, "features": sorted(f.name for f in features.values() if f.enabled)}


def _batch_norm(F, p, x, gamma, beta, moving_mean=None, moving_var=None):
    if moving_mean is None:  # imperative: fresh statistics; hybridized: the block's parameters
        moving_mean, moving_var = F.zeros_like(gamma), F.ones_like(gamma)
    return F.BatchNorm(x, gamma, beta, moving_mean, moving_var, eps=p["eps"], fix_gamma=False,
                       use_global_stats=False, axis=1)


def _pool(F, p, x, kind):
    return F.Pooling(x, kernel=(p["k"],) * 2, stride=(p["stride"],) * 2, pool_type=kind)


_batch_norm.aux = lambda p: {"moving_mean": ((p["c"],), 0.0), "moving_var": ((p["c"],), 1.0)}


class _Ops:
    """MXNet implementations, signature name(F, p, *inputs) with F = mx.nd or mx.sym."""

    sigmoid = staticmethod(lambda F, p, x: F.sigmoid(x))
    relu = staticmethod(lambda F, p, x: F.relu(x))
    tanh = staticmethod(lambda F, p, x: F.tanh(x))
    softplus = staticmethod(lambda F, p, x: F.Activation(x, act_type="softrelu"))
    softsign = staticmethod(lambda F, p, x: F.Activation(x, act_type="softsign"))
    gelu = staticmethod(lambda F, p, x: F.LeakyReLU(x, act_type="gelu"))
    softmax = staticmethod(lambda F, p, x: F.softmax(x, axis=-1))
    dot = staticmethod(lambda F, p, a, b: F.dot(a, b))
    gemm = staticmethod(lambda F, p, a, b: F.dot(a, b))
    bmm = staticmethod(lambda F, p, a, b: F.batch_dot(a, b))
    flatten = staticmethod(lambda F, p, x: F.flatten(x))
    conv2d = staticmethod(
        lambda F, p, x, w: F.Convolution(
            x, w, kernel=(p["k"], p["k"]), stride=(p["stride"],) * 2, pad=(p["pad"],) * 2, num_filter=p["o"],
            no_bias=True,
        )
    )
    maxpool2d = staticmethod(lambda F, p, x: _pool(F, p, x, "max"))
    avgpool2d = staticmethod(lambda F, p, x: _pool(F, p, x, "avg"))
    l2_normalize = staticmethod(lambda F, p, x: F.L2Normalization(x, mode="instance"))
    batch_norm = staticmethod(_batch_norm)
    layer_norm = staticmethod(lambda F, p, x, gamma, beta: F.LayerNorm(x, gamma, beta, axis=-1, eps=p["eps"]))

    # creation: name(p, ctx, dtype, *host_inputs)
    from_numpy = staticmethod(lambda p, ctx, dtype, x: mx.nd.array(x, ctx=ctx, dtype=dtype))
    from_list = staticmethod(lambda p, ctx, dtype, x: mx.nd.array(x, ctx=ctx, dtype=dtype))
    zeros = staticmethod(lambda p, ctx, dtype: mx.nd.zeros(p["shape"], ctx=ctx, dtype=dtype))
    random_normal = staticmethod(lambda p, ctx, dtype: mx.nd.random.normal(shape=p["shape"], ctx=ctx, dtype=dtype))


BACKEND = MxnetBackend
