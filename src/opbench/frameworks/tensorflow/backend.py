"""The TensorFlow backend: eager, graph (tf.function) and XLA (jit_compile=True).

The only module importing TensorFlow. Images are NHWC on the CPU (TensorFlow's CPU kernels
have no NCHW convolution) and NCHW on the GPU; kernels are always HWIO.
"""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

from opbench.frameworks.base import Backend, Call, Framework, GpuFacts, hlo_product_types
from opbench.workloads.models import precision

FRAMEWORK = Framework(name="tensorflow", title="TensorFlow", package="tensorflow", modes=("eager", "graph", "xla"),
                      order=2, compiled=("xla",), load_before=("torch",))

_DTYPES = {"float32": tf.float32, "float16": tf.float16, "bfloat16": tf.bfloat16}
_DEVICES = {"cpu": "/CPU:0", "gpu": "/GPU:0"}

# float32 means float32: no TF32 tensor-core shortcuts on GPUs that have them.
tf.config.experimental.enable_tensor_float_32_execution(False)


class TensorflowBackend(Backend):
    framework = FRAMEWORK
    kernel_layout = "HWIO"

    def version(self) -> str:
        return tf.__version__

    def gpu_unavailable(self) -> str | None:
        return None if tf.config.list_physical_devices("GPU") else "tensorflow sees no GPU"

    def gpu_facts(self) -> GpuFacts:
        details = tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[0])
        capability = details.get("compute_capability")
        return GpuFacts(details.get("device_name", ""), tuple(capability) if capability else None)

    def image_layout(self, device: str) -> str:
        return "NHWC" if device == "cpu" else "NCHW"

    def from_numpy(self, array, device, dtype):
        with tf.device(_DEVICES[device]):
            t = tf.identity(tf.convert_to_tensor(array))
            return tf.cast(t, _DTYPES[dtype]) if t.dtype.is_floating else t

    def to_numpy(self, tensor):
        return (tf.cast(tensor, tf.float32) if tensor.dtype.is_floating else tensor).numpy()

    def sync(self, device: str) -> None:
        if device == "gpu":
            tf.test.experimental.sync_devices()

    def set_threads(self, n: int) -> None:
        """Intra-op threads can only change before the runtime starts; later calls that would
        change them leave them as they are, and the thread check reports the mismatch."""
        if tf.config.threading.get_intra_op_parallelism_threads() == n:
            return
        try:
            tf.config.threading.set_intra_op_parallelism_threads(n)
            tf.config.threading.set_inter_op_parallelism_threads(n)
        except RuntimeError:
            pass

    def threads(self) -> int:
        n = tf.config.threading.get_intra_op_parallelism_threads()
        return n or len(os.sched_getaffinity(0))

    def _ops_module(self):
        return _Ops

    def _mode(self, fn, mode):
        if mode == "graph":
            return tf.function(fn, autograph=False)
        if mode == "xla":
            return tf.function(fn, autograph=False, jit_compile=True)
        if mode == "eager":
            return fn
        raise self.no_mode(mode)

    def compiled(self, fn, mode, device):
        traced, where = self._mode(fn, mode), _DEVICES[device]

        def on_device(*xs):
            with tf.device(where):
                return traced(*xs)

        return on_device

    def forward(self, impl, p, args, mode, device) -> Call:
        fn = self._mode(lambda *xs: impl(p, *xs), mode)
        where = _DEVICES[device]

        def call():
            with tf.device(where):
                return fn(*args)

        return call

    def backward(self, impl, p, args, argnums, cotangent, mode, device) -> Call:
        def value_and_grad(*xs):
            with tf.GradientTape() as tape:
                for i in argnums:
                    tape.watch(xs[i])
                out = impl(p, *xs)
            return out, tape.gradient(out, [xs[i] for i in argnums], output_gradients=cotangent)

        fn = self._mode(value_and_grad, mode)
        where = _DEVICES[device]

        def call():
            with tf.device(where):
                return fn(*args)

        return call

    def products_computed_in(self, impl, p, args, mode, device):
        """Under XLA, the optimized HLO of the compiled function; eager and graph kernels show no
        program (their oneDNN kernels would need its verbose log)."""
        if mode != "xla":
            return None
        fn = tf.function(lambda *xs: impl(p, *xs), autograph=False, jit_compile=True)
        with tf.device(_DEVICES[device]):
            return hlo_product_types(fn.experimental_get_compiler_ir(*args)(stage="optimized_hlo"))

    def creation(self, impl, p, host_args, device, dtype) -> Call:
        where, tf_dtype = _DEVICES[device], _DTYPES[dtype]

        def call():
            with tf.device(where):
                return impl(p, where, tf_dtype, *host_args)

        return call

    def build(self, model, params, device, dtype, mode):
        from opbench.frameworks.tensorflow import models

        amp = precision.low_dtype(dtype, device)
        return models.TensorflowModel(model, params, device, dtype, mode, _DTYPES["float32"],
                                                 _DEVICES[device], self.image_layout(device),
                                                 lambda fn: self._mode(fn, mode), amp and f"mixed_{amp}")

    profiler_name = "tf.profiler"

    def info(self) -> dict[str, Any]:
        build = tf.sysconfig.get_build_info()
        return {
            "version": tf.__version__,
            "cuda": build.get("cuda_version"),
            "cudnn": build.get("cudnn_version"),
            "onednn": _onednn_operations(),
            "gpus": [d.name for d in tf.config.list_physical_devices("GPU")],
            # graph mode runs independent kernels side by side on the inter-op pool, each on the
            # intra-op pool: `threads` (observed on one GEMM) is the intra-op count
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        }


def _onednn_operations() -> str:
    """Whether TensorFlow's oneDNN operations are on in this process, as TensorFlow decided: by
    TF_ENABLE_ONEDNN_OPTS, else by the CPU (on by default only with AVX-512 VNNI, AVX-512 BF16,
    AVX-VNNI or AMX; elsewhere, an AVX2 CPU among them, Eigen's kernels run)."""
    try:
        from tensorflow.python.util import _pywrap_util_port

        on = _pywrap_util_port.IsMklEnabled()
    except (ImportError, AttributeError):  # a TensorFlow without it: what was asked, marked as such
        return f"asked {os.environ.get('TF_ENABLE_ONEDNN_OPTS', 'default')}"
    return "on" if on else "off"


def _spatial(p, pair):
    """A per-dimension list for the image layout: (1, s, s, 1) for NHWC, (1, 1, s, s) for NCHW."""
    return [pair[0], pair[1], pair[1], pair[0]] if p["layout"] == "NHWC" else [pair[0], pair[0], pair[1], pair[1]]


def _pool(kind, p, x):
    pool = tf.nn.max_pool2d if kind == "MAX" else tf.nn.avg_pool2d
    return pool(x, ksize=p["k"], strides=p["stride"], padding="VALID", data_format=p["layout"])


def _batch_norm(p, x, gamma, beta):
    if x.dtype != tf.float32:  # the fused kernel takes a half-precision input's scale and offset in float32
        gamma, beta = tf.cast(gamma, tf.float32), tf.cast(beta, tf.float32)
    y, _, _ = tf.compat.v1.nn.fused_batch_norm(
        x, gamma, beta, epsilon=p["eps"], data_format=p["layout"], is_training=True
    )
    return y


def _layer_norm(p, x, gamma, beta):
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    return tf.nn.batch_normalization(x, mean, var, beta, gamma, p["eps"])


class _Ops:
    """TensorFlow implementations, one per operator name, signature name(p, *inputs)."""

    sigmoid = staticmethod(lambda p, x: tf.sigmoid(x))
    relu = staticmethod(lambda p, x: tf.nn.relu(x))
    tanh = staticmethod(lambda p, x: tf.tanh(x))
    softplus = staticmethod(lambda p, x: tf.nn.softplus(x))
    softsign = staticmethod(lambda p, x: tf.nn.softsign(x))
    gelu = staticmethod(lambda p, x: tf.nn.gelu(x, approximate=False))
    softmax = staticmethod(lambda p, x: tf.nn.softmax(x, axis=-1))
    dot = staticmethod(lambda p, a, b: tf.tensordot(a, b, 1))
    gemm = staticmethod(lambda p, a, b: tf.linalg.matmul(a, b))
    bmm = staticmethod(lambda p, a, b: tf.linalg.matmul(a, b))
    flatten = staticmethod(lambda p, x: tf.reshape(x, [tf.shape(x)[0], -1]))
    conv2d = staticmethod(
        lambda p, x, w: tf.nn.conv2d(
            x, w, strides=_spatial(p, (1, p["stride"])), padding=_spatial(p, ((0, 0), (p["pad"],) * 2)),
            data_format=p["layout"],
        )
    )
    maxpool2d = staticmethod(lambda p, x: _pool("MAX", p, x))
    avgpool2d = staticmethod(lambda p, x: _pool("AVG", p, x))
    l2_normalize = staticmethod(lambda p, x: tf.math.l2_normalize(x, axis=1))
    batch_norm = staticmethod(_batch_norm)
    layer_norm = staticmethod(_layer_norm)

    # creation: name(p, device, dtype, *host_inputs)
    from_numpy = staticmethod(lambda p, device, dtype, x: tf.identity(tf.convert_to_tensor(x, dtype=dtype)))
    from_list = staticmethod(lambda p, device, dtype, x: tf.identity(tf.constant(x, dtype=dtype)))
    zeros = staticmethod(lambda p, device, dtype: tf.zeros(p["shape"], dtype=dtype))
    random_normal = staticmethod(lambda p, device, dtype: tf.random.normal(p["shape"], dtype=dtype))


BACKEND = TensorflowBackend
