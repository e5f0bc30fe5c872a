"""The JAX backend: op-by-op dispatch ("eager") and jax.jit, on the CPU and CUDA GPUs.

The only module importing JAX. JAX dispatches asynchronously: every call returned here blocks
on its outputs (`jax.block_until_ready`), so a timed call includes all of its work.

Threads: XLA's CPU client sizes its intra-op thread pool from the cores the process may run on
when the client starts, and never changes it afterwards. `set_threads(n)` before the first
computation starts the client under an affinity of n cores (the first n allowed), so the pool has
n threads bound to those cores, then restores the process's affinity; later calls that would
change the count leave it, and the thread check reports the mismatch (as for TensorFlow: one
process per count). The XLA_FLAGS in force are recorded in machine_info.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from opbench.frameworks.base import Backend, Call, Framework, GpuFacts, hlo_product_types
from opbench.workloads.models import precision

# Both modes compile per input shape: op by op, JAX compiles each primitive for each new shape.
FRAMEWORK = Framework(name="jax", title="JAX", package="jax", modes=("eager", "jit"), order=4,
                      compiled=("eager", "jit"))

# float32 means float32: no TF32 or bfloat16 passes in float32 products on GPUs.
jax.config.update("jax_default_matmul_precision", "highest")

_DTYPES = {"float32": jnp.float32, "float16": jnp.float16, "bfloat16": jnp.bfloat16}
_PLATFORMS = {"cpu": "cpu", "gpu": "gpu"}


def _client_started() -> bool:
    from jax._src import xla_bridge  # the one public-enough way to ask without starting it

    return xla_bridge.backends_are_initialized()


class JaxBackend(Backend):
    framework = FRAMEWORK

    def __init__(self) -> None:
        self._threads: int | None = None  # fixed when the CPU client starts

    def version(self) -> str:
        return jax.__version__

    def gpu_unavailable(self) -> str | None:
        try:
            jax.devices("gpu")
        except RuntimeError:
            return "jax sees no GPU (a CPU-only jaxlib, or no CUDA device)"
        return None

    def gpu_facts(self) -> GpuFacts:
        d = jax.devices("gpu")[0]
        cc = getattr(d, "compute_capability", None)  # "9.0" on CUDA devices
        capability = tuple(int(v) for v in str(cc).split(".")[:2]) if cc else None
        return GpuFacts(d.device_kind, capability, getattr(d, "core_count", None))

    def _device(self, device: str):
        return jax.devices(_PLATFORMS[device])[0]

    def from_numpy(self, array, device, dtype):
        array = np.asarray(array)
        if np.issubdtype(array.dtype, np.floating):
            array = array.astype(_DTYPES[dtype])
        return jax.device_put(array, self._device(device))

    def to_numpy(self, tensor):
        host = np.asarray(jax.device_get(tensor))
        return host.astype(np.float32) if jnp.issubdtype(host.dtype, jnp.floating) else host

    def sync(self, device: str) -> None:
        """Every call this backend returns has already blocked on its outputs."""

    def set_threads(self, n: int) -> None:
        if _client_started():
            return
        allowed = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, allowed[:n])
        try:
            jax.devices("cpu")  # starts the CPU client: its pool takes the cores allowed now
        finally:
            os.sched_setaffinity(0, allowed)
        self._threads = min(n, len(allowed))

    def forget(self) -> None:
        """jit's and eager dispatch's compiled programs, with what they captured: a worker kept
        250 MiB after LeNet's eager training step, 20 MiB once they were cleared."""
        jax.clear_caches()

    def threads(self) -> int:
        if self._threads is None:  # started by someone else, or not yet: all allowed cores
            return len(os.sched_getaffinity(0))
        return self._threads

    def _ops_module(self):
        return _Ops

    def _mode(self, fn, mode):
        if mode == "jit":
            return jax.jit(fn)
        if mode == "eager":
            return fn
        raise self.no_mode(mode)

    def compiled(self, fn, mode, device):
        return self._mode(fn, mode)

    def wait(self, result, device):
        jax.block_until_ready(result)

    def forward(self, impl, p, args, mode, device) -> Call:
        fn = self._mode(lambda *xs: impl(p, *xs), mode)
        return lambda: jax.block_until_ready(fn(*args))

    def backward(self, impl, p, args, argnums, cotangent, mode, device) -> Call:
        def value_and_grads(cot, *xs):
            def f(*wrt):
                full = list(xs)
                for i, a in zip(argnums, wrt, strict=True):
                    full[i] = a
                return impl(p, *full)

            out, pullback = jax.vjp(f, *(xs[i] for i in argnums))
            return out, list(pullback(cot))

        fn = self._mode(value_and_grads, mode)
        return lambda: jax.block_until_ready(fn(cotangent, *args))

    def products_computed_in(self, impl, p, args, mode, device):
        """Eager JAX compiles each primitive through XLA as jit does: both read the compiled HLO."""
        return hlo_product_types(jax.jit(lambda *xs: impl(p, *xs)).lower(*args).compile().as_text())

    def creation(self, impl, p, host_args, device, dtype) -> Call:
        where, jdtype = self._device(device), _DTYPES[dtype]
        return lambda: jax.block_until_ready(impl(p, where, jdtype, *host_args))

    def build(self, model, params, device, dtype, mode):
        from opbench.frameworks.jax import models

        amp = precision.low_dtype(dtype, device)
        return models.JaxModel(model, params, device, dtype, mode, self._device(device), _DTYPES["float32"],
                                   lambda fn: self._mode(fn, mode), amp and _DTYPES[amp])

    profiler_name = "jax.profiler"

    def info(self) -> dict[str, Any]:
        import jaxlib

        info = {"version": jax.__version__, "jaxlib": jaxlib.__version__, "xla_flags": os.environ.get("XLA_FLAGS", ""),
                "intra_op_threads": self.threads(), "matmul_precision": "highest"}
        if self.gpu_unavailable() is None:
            info["gpu"] = jax.devices("gpu")[0].device_kind
        return info


def _pool(x, p, init, op):
    window = (1, 1, p["k"], p["k"])
    return lax.reduce_window(x, init, op, window, (1, 1, p["stride"], p["stride"]), "VALID")


def _normalize(x, gamma, beta, axes, shape, eps):
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    return (x - mean) * lax.rsqrt(var + eps) * gamma.reshape(shape) + beta.reshape(shape)


def _batch_norm(p, x, gamma, beta):
    """Training-mode batch normalisation of NCHW images: statistics over N, H, W per channel."""
    return _normalize(x, gamma, beta, (0, 2, 3), (1, -1, 1, 1), p["eps"])


def _layer_norm(p, x, gamma, beta):
    return _normalize(x, gamma, beta, (-1,), (1, -1), p["eps"])


class _Ops:
    """jax implementations, one per operator name, signature name(p, *inputs)."""

    sigmoid = staticmethod(lambda p, x: jax.nn.sigmoid(x))
    relu = staticmethod(lambda p, x: jax.nn.relu(x))
    tanh = staticmethod(lambda p, x: jnp.tanh(x))
    softplus = staticmethod(lambda p, x: jax.nn.softplus(x))
    softsign = staticmethod(lambda p, x: jax.nn.soft_sign(x))
    gelu = staticmethod(lambda p, x: jax.nn.gelu(x, approximate=False))
    softmax = staticmethod(lambda p, x: jax.nn.softmax(x, axis=-1))
    dot = staticmethod(lambda p, a, b: jnp.dot(a, b))
    gemm = staticmethod(lambda p, a, b: jnp.matmul(a, b))
    bmm = staticmethod(lambda p, a, b: jnp.matmul(a, b))
    flatten = staticmethod(lambda p, x: jnp.reshape(x, (x.shape[0], -1)))
    conv2d = staticmethod(lambda p, x, w: lax.conv_general_dilated(
        x, w, (p["stride"], p["stride"]), [(p["pad"], p["pad"])] * 2, dimension_numbers=("NCHW", "OIHW", "NCHW")))
    maxpool2d = staticmethod(lambda p, x: _pool(x, p, -jnp.inf, lax.max))
    avgpool2d = staticmethod(lambda p, x: _pool(x, p, 0.0, lax.add) / (p["k"] * p["k"]))
    l2_normalize = staticmethod(lambda p, x: x * lax.rsqrt(jnp.sum(x * x, axis=1, keepdims=True)))
    batch_norm = staticmethod(_batch_norm)
    layer_norm = staticmethod(_layer_norm)

    # creation: name(p, device, dtype, *host_inputs)
    from_numpy = staticmethod(lambda p, device, dtype, x: jax.device_put(x.astype(dtype), device))
    from_list = staticmethod(lambda p, device, dtype, x: jax.device_put(np.array(x, dtype=dtype), device))
    zeros = staticmethod(lambda p, device, dtype: jnp.zeros(p["shape"], dtype, device=device))

    @staticmethod
    def random_normal(p, device, dtype):
        """Fresh samples every call: the key is split as a JAX program would (the split is timed)."""
        if device not in _Ops._keys:
            _Ops._keys[device] = jax.device_put(jax.random.key(0), device)
        _Ops._keys[device], sub = jax.random.split(_Ops._keys[device])
        return jax.random.normal(sub, p["shape"], dtype)

    _keys: dict = {}


BACKEND = JaxBackend
