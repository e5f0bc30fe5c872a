"""Tensor creation: from a NumPy array, from a Python list, zeros, random normal.

These time exactly the creation (host-to-device conversion included) and are checked by value,
or, for random normal, by shape, dtype and moments.
"""

from __future__ import annotations

import math

import numpy as np

from opbench.core.case import dims_label
from opbench.workloads.ops.base import Arg, CheckFailed, OpSpec, normal, register, shape_strategy

SHAPES = {
    "quick": ({"shape": (256, 1024)},),
    "full": ({"shape": (256, 1024)}, {"shape": (1024, 1024)}, {"shape": (4096, 4096)}),
}
_LIST_SHAPES = {"quick": ({"shape": (64, 256)},), "full": ({"shape": (64, 256)}, {"shape": (256, 1024)})}


def _small():
    return shape_strategy(a=(1, 16), b=(1, 16)).map(lambda d: {"shape": (d["a"], d["b"])})


def _label(p):
    return dims_label(*p["shape"])


FALSE_REJECTION = 1e-6  # the chance that the shape test refuses a correct generator
_PHI = np.frompyfunc(lambda v: 0.5 * (1.0 + math.erf(v / math.sqrt(2.0))), 1, 1)


def ks_distance(samples: np.ndarray) -> float:
    """Kolmogorov-Smirnov distance between the samples' empirical CDF and the standard normal's."""
    x = np.sort(samples.reshape(-1))
    cdf = _PHI(x).astype(np.float64)
    n = x.size
    return float(max(np.max(np.arange(1, n + 1) / n - cdf), np.max(cdf - np.arange(n) / n)))


def check_normal(p, host_inputs, out: np.ndarray) -> float:
    """Standard normal samples: right shape, finite, mean and standard deviation within 6 standard
    errors of 0 and 1, and the distribution's shape: the Kolmogorov-Smirnov distance to the normal
    CDF within the Dvoretzky-Kiefer-Wolfowitz bound sqrt(ln(2 / a) / 2n) at a = FALSE_REJECTION
    (uniform x sqrt(3) or +-1 samples have the right moments and fail here). Returns the largest
    of the deviations (CheckFailed carries it where the samples fail)."""
    shape = tuple(p["shape"])
    out = np.asarray(out, dtype=np.float64)  # moments of 16-bit samples overflow in 16 bits
    if out.shape != shape or not np.all(np.isfinite(out)):
        raise AssertionError(f"expected a finite array of shape {shape}, got {out.shape}")
    n = out.size
    mean_err = abs(float(out.mean()))
    std_err = abs(float(out.std()) - 1.0)
    distance, bound = ks_distance(out), math.sqrt(math.log(2 / FALSE_REJECTION) / (2 * n))
    deviation = max(mean_err, std_err, distance)
    if n > 1 and (mean_err > 6 / np.sqrt(n) or std_err > 6 / np.sqrt(2 * n) + 0.01):
        raise CheckFailed(f"not standard normal: mean {out.mean():.4f}, std {out.std():.4f} over {n} samples",
                          deviation)
    if distance > bound:
        raise CheckFailed(f"not normally distributed: Kolmogorov-Smirnov distance {distance:.4f} > "
                          f"{bound:.4f} over {n} samples", deviation)
    return deviation


for _name, _shapes, _as_list, _notes in (
    ("from_numpy", SHAPES, False, "a framework tensor from a NumPy array, on the device"),
    ("from_list", _LIST_SHAPES, True, "a framework tensor from a nested Python list, on the device"),
):
    register(
        OpSpec(
            name=_name,
            family="creation",
            args=(Arg("x", differentiable=False),),
            make=lambda r, p: (normal(r, *p["shape"]),),
            reference=lambda p, x: x,
            shapes=_shapes,
            label=_label,
            small=_small,
            creation=True,
            extra={"as_list": _as_list},
            notes=_notes,
        )
    )

register(
    OpSpec(
        name="zeros",
        family="creation",
        args=(),
        make=lambda r, p: (),
        reference=lambda p: np.zeros(p["shape"]),
        shapes=SHAPES,
        label=_label,
        small=_small,
        creation=True,
    )
)

register(
    OpSpec(
        name="random_normal",
        family="creation",
        args=(),
        make=lambda r, p: (),
        reference=lambda p: np.zeros(p["shape"]),  # unused: checked by moments
        check=check_normal,
        shapes=SHAPES,
        label=_label,
        small=_small,
        creation=True,
        notes="standard normal samples from the framework's own generator",
    )
)
