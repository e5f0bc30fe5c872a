"""The models' precisions: "float32" throughout, or "amp", automatic mixed precision.

Under amp the master weights, the optimizer and its state stay float32; matrix products
(dense, convolution, LSTM), their inputs and outputs and the activations between layers are
computed and stored in the low-precision type of the device: bfloat16 on a CPU (native on AVX-512
BF16 and AMX hosts, with float32's range, so no loss scaling), float16 on a GPU (tensor cores),
with the loss scaled to keep small gradients above float16's underflow. Batch-norm statistics,
the softmax and the loss are computed in float32. That is what torch.autocast, Keras'
mixed_bfloat16/mixed_float16 policies and a hand-written JAX step do.

`rounder` emulates it for the NumPy reference: the float64 reference rounds to the low-precision
type every tensor that a framework stores in it (the layers' outputs, the weights as a product
reads them, the gradients flowing back and the weights' gradients), computing exactly in between
(frameworks accumulate products in float32). The reference run so rounded measures how far a
correct mixed-precision step may land from float64's: the check's tolerance, see suites/model_check.py.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from opbench.core.inputs import round_bfloat16

PRECISIONS = ("float32", "amp")
AMP_DTYPE = {"cpu": "bfloat16", "gpu": "float16"}  # the low-precision type amp computes in, per device
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
LOSS_SCALE = 2.0**8  # float16 only: gradients of a mean loss of 1e-5..1 stay above its 6e-8 subnormals
# The parameters a matrix product reads (dense, convolution and LSTM weights and biases): cast to
# the low-precision type under amp. Batch-norm scales and running statistics stay float32.
PRODUCT_PARAMS = (".W", ".b", ".Wx", ".Wh")


def dtype_name(dtype) -> str:
    """A framework's element type as NumPy names it ("float32", "bfloat16"): NumPy, JAX and
    TensorFlow dtypes carry the name, PyTorch's print as "torch.float32", Keras 3 gives a string."""
    name = getattr(dtype, "name", None)
    return name if isinstance(name, str) else str(dtype).removeprefix("torch.")


def compute_dtype(precision: str, device: str) -> str:
    """The type the matrix products of a model in `precision` run in on `device`."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
    return AMP_DTYPE[device] if precision == "amp" else "float32"


def low_dtype(precision: str, device: str) -> str | None:
    """The low-precision type a model builder computes in under amp, None for float32."""
    dtype = compute_dtype(precision, device)
    return None if dtype == "float32" else dtype


def _round_float16(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float16).astype(np.float64)


def rounder(dtype: str) -> Callable[[np.ndarray], np.ndarray] | None:
    """Round float64 values to `dtype`'s nearest, kept as float64; None for float32 and float64
    (the reference runs those natively)."""
    if dtype == "bfloat16":
        return lambda a: round_bfloat16(np.asarray(a, dtype=np.float32)).astype(np.float64)
    if dtype == "float16":
        return _round_float16
    return None
