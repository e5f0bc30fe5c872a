"""The only place benchmark inputs are made.

Inputs come from a NumPy generator seeded by the problem (operator and size), never by the
framework, so every framework receives exactly the same values. Low-precision inputs are rounded
on the host so that the NumPy reference sees the very values the framework computes with.
"""

from __future__ import annotations

import zlib

import numpy as np

SEED = 20261122


def rng(*key: object) -> np.random.Generator:
    """A generator whose stream depends only on `key` (e.g. the operator name and size label)."""
    digest = zlib.crc32(repr(key).encode())
    return np.random.default_rng([SEED, digest])


def round_bfloat16(a: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest bfloat16 (ties to even), kept as float32."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    # ascontiguousarray makes a scalar 1-D: the shape is a's (a dot product's cotangent is a scalar)
    return rounded.astype(np.uint32).view(np.float32).reshape(np.shape(a))


def host_array(a: np.ndarray, dtype: str) -> np.ndarray:
    """The host copy of `a` handed to frameworks for `dtype`: float16 natively, bfloat16 as
    bf16-rounded float32 (NumPy has no bfloat16), float32 as is."""
    if not np.issubdtype(a.dtype, np.floating):
        return a
    if dtype == "float16":
        return a.astype(np.float16)
    if dtype == "bfloat16":
        return round_bfloat16(a.astype(np.float32))
    return a.astype(np.float32)
