"""Real-data loaders, on small files the tests write in each format; bad files are one clear error."""

from __future__ import annotations

import gzip
import pickle
import struct

import numpy as np
import pytest

from opbench.workloads.models import catalogue, datasets
from opbench.workloads.models.datasets import DataError


def write_idx(path, array: np.ndarray, compress=False):
    header = b"\0\0\x08" + bytes([array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    payload = header + array.astype(np.uint8).tobytes()
    if compress:
        with gzip.open(str(path) + ".gz", "wb") as f:
            f.write(payload)
    else:
        path.write_bytes(payload)


@pytest.fixture
def mnist_dir(tmp_path):
    r = np.random.default_rng(0)
    write_idx(tmp_path / "train-images-idx3-ubyte", r.integers(0, 256, (10, 28, 28)), compress=True)
    write_idx(tmp_path / "train-labels-idx1-ubyte", r.integers(0, 10, (10,)))
    return tmp_path


def test_mnist_idx_feeds_mlp_and_lenet(mnist_dir):
    x, y = datasets.batch(catalogue.get("mlp"), 4, str(mnist_dir))
    assert x.shape == (4, 784) and x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1 and y.shape == (4,)
    x, _ = datasets.batch(catalogue.get("lenet"), 4, str(mnist_dir), index=1)
    assert x.shape == (4, 1, 28, 28)


def test_cifar10_pickle(tmp_path):
    (tmp_path / "cifar-10-batches-py").mkdir()
    r = np.random.default_rng(0)
    batch = {b"data": r.integers(0, 256, (6, 3072)).astype(np.uint8), b"labels": list(range(6))}
    with open(tmp_path / "cifar-10-batches-py" / "data_batch_1", "wb") as f:
        pickle.dump(batch, f)
    x, y = datasets.batch(catalogue.get("vgg16"), 3, str(tmp_path))
    assert x.shape == (3, 3, 32, 32) and list(y) == [0, 1, 2]
    np.testing.assert_allclose(x[0].reshape(-1), batch[b"data"][0] / 255.0, rtol=1e-6)


def test_imdb_npz(tmp_path):
    np.savez(tmp_path / "imdb.npz", x=np.zeros((5, 250, 50), np.float32), y=np.array([0, 1, 0, 1, 1]))
    x, y = datasets.batch(catalogue.get("lstm"), 5, str(tmp_path))
    assert x.shape == (5, 250, 50) and list(y) == [0, 1, 0, 1, 1]


@pytest.mark.parametrize(
    "setup, model, message",
    [
        (lambda d: None, "mlp", "missing data file"),
        (lambda d: (d / "train-images-idx3-ubyte").write_bytes(b"junk"), "mlp", "missing data file|not an idx"),
        (lambda d: (d / "data_batch_1").write_bytes(b"not a pickle"), "vgg10", "not a CIFAR-10 python batch"),
        (lambda d: (d / "imdb.npz").write_bytes(b"PK broken"), "lstm", "not an npz"),
    ],
)
def test_bad_files_are_data_errors(tmp_path, setup, model, message):
    setup(tmp_path)
    with pytest.raises(DataError, match=message):
        datasets.batch(catalogue.get(model), 2, str(tmp_path))


def test_too_few_samples(mnist_dir):
    with pytest.raises(DataError, match="has 10 samples"):
        datasets.batch(catalogue.get("mlp"), 8, str(mnist_dir), index=1)


def test_truncated_idx(tmp_path):
    write_idx(tmp_path / "train-images-idx3-ubyte", np.zeros((4, 28, 28)))
    raw = (tmp_path / "train-images-idx3-ubyte").read_bytes()
    (tmp_path / "train-images-idx3-ubyte").write_bytes(raw[:-10])
    with pytest.raises(DataError, match="expected 3136 values"):
        datasets.read_idx(str(tmp_path / "train-images-idx3-ubyte"))


def test_synthetic_is_deterministic_and_shaped():
    model = catalogue.get("lstm")
    x1, y1 = datasets.synthetic(model, 3)
    x2, y2 = datasets.synthetic(model, 3)
    assert x1.shape == (3, 250, 50) and np.array_equal(x1, x2) and np.array_equal(y1, y2)
    assert not np.array_equal(datasets.synthetic(model, 3, index=1)[0], x1)
