"""Moving image and kernel arrays between the suite's layouts (NCHW, OIHW) and a backend's."""

from __future__ import annotations

import numpy as np

_TO = {("image", "NHWC"): (0, 2, 3, 1), ("kernel", "HWIO"): (2, 3, 1, 0)}


def _axes(kind: str, layout: str) -> tuple[int, ...] | None:
    return _TO.get((kind, layout))


def to_native(a: np.ndarray, kind: str, image_layout: str, kernel_layout: str) -> np.ndarray:
    """`a` (NCHW image / OIHW kernel / plain) in the backend's layout."""
    axes = _axes(kind, image_layout if kind == "image" else kernel_layout)
    return np.ascontiguousarray(a.transpose(axes)) if axes else a


def from_native(a: np.ndarray, kind: str, image_layout: str, kernel_layout: str) -> np.ndarray:
    """The inverse of to_native."""
    axes = _axes(kind, image_layout if kind == "image" else kernel_layout)
    return a.transpose(np.argsort(axes)) if axes else a
