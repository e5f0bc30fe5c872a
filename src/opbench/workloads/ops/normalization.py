"""L2 normalisation of rows, batch normalisation (training statistics) and layer normalisation."""

from __future__ import annotations

import numpy as np

from opbench.core.case import dims_label
from opbench.workloads.ops.base import Arg, OpSpec, normal, register, shape_strategy, shifted_rows

EPS = 1e-5  # batch and layer normalisation epsilon, passed explicitly to every framework


def l2_normalize(p, x):
    return x / np.sqrt(np.sum(x * x, axis=1, keepdims=True))


def l2_normalize_vjp(p, arrays, ct):
    x = arrays[0]
    norm = np.sqrt(np.sum(x * x, axis=1, keepdims=True))
    y = x / norm
    return ((ct - y * np.sum(ct * y, axis=1, keepdims=True)) / norm,)


def _normalize(x, axes):
    """(x - mean) / sqrt(var + eps) over `axes`, with the biased variance, and 1/sqrt(var + eps)."""
    mean = x.mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(x.var(axis=axes, keepdims=True) + EPS)
    return (x - mean) * inv, inv


def _normalize_vjp(xhat, inv, dxhat, axes):
    """The gradient of _normalize: dx = inv * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))."""
    return inv * (dxhat - dxhat.mean(axis=axes, keepdims=True) - xhat * (dxhat * xhat).mean(axis=axes, keepdims=True))


_BN_AXES = (0, 2, 3)


def _conditioning(x, gamma, axes, shape):
    """|gamma| (|x| + |mean|) / sqrt(var + eps): how far a unit of roundoff in x - mean moves
    the output (see ops.base.COND_ULPS)."""
    mean = np.abs(x.mean(axis=axes, keepdims=True))
    inv = 1.0 / np.sqrt(x.var(axis=axes, keepdims=True) + EPS)
    return np.abs(gamma).reshape(shape) * (np.abs(x) + mean) * inv


def _per_channel(v):
    return v.reshape(1, -1, 1, 1)


def batch_norm(p, x, gamma, beta):
    xhat, _ = _normalize(x, _BN_AXES)
    return xhat * _per_channel(gamma) + _per_channel(beta)


def batch_norm_vjp(p, arrays, ct):
    x, gamma, _ = arrays
    xhat, inv = _normalize(x, _BN_AXES)
    dx = _normalize_vjp(xhat, inv, ct * _per_channel(gamma), _BN_AXES)
    return dx, np.sum(ct * xhat, axis=_BN_AXES), np.sum(ct, axis=_BN_AXES)


def layer_norm(p, x, gamma, beta):
    xhat, _ = _normalize(x, (-1,))
    return xhat * gamma + beta


def layer_norm_vjp(p, arrays, ct):
    x, gamma, _ = arrays
    xhat, inv = _normalize(x, (-1,))
    dx = _normalize_vjp(xhat, inv, ct * gamma, (-1,))
    return dx, np.sum(ct * xhat, axis=0), np.sum(ct, axis=0)


def _mixed_rows(r, *shape: int, axis: int = 0) -> np.ndarray:
    """N(1, 2^2) values, except that every other slice along `axis` is N(0, 0.1^2): there the
    variance is 1e-2, and an epsilon of 1e-3 instead of 1e-5 changes the output by 5%, where at
    variance 4 it changed it by 0.01% (inside the float32 tolerance). Smaller variances would
    show smaller epsilons, but float16 frameworks then compute NaN or a wrong variance."""
    x = normal(r, *shape) * 2 + 1
    low = [slice(None)] * len(shape)
    low[axis] = slice(1, None, 2)
    x[tuple(low)] = 0.1 * normal(r, *x[tuple(low)].shape)
    return x


def _affine(r, size):
    return (1 + 0.1 * normal(r, size), 0.1 * normal(r, size))


# Edge regimes: means 0, 1 and 3 (a one-pass variance cancels at 3 with std 1e-3: 9 - 9) and
# standard deviations from 0 (a constant slice) through 1e-4 and 3e-3 (variance below and near
# EPS) to 2.
EDGE_MEANS, EDGE_STDS = (0.0, 1.0, 3.0), (0.0, 1e-4, 3e-3, 0.1, 2.0)


def _l2_edge(r, p):
    """Rows whose norms run from 10^-12.5 to 1e2 in equal steps of about a decade: below and around
    the epsilons frameworks bound the norm (1e-12) or the sum of squares (1e-12, 1e-10) with, and
    never on one, where rounding would decide the verdict (a row norm of exactly 1e-12 is clamped
    by PyTorch in 5% of the seeds)."""
    x = normal(r, p["n"], p["d"])
    x /= np.sqrt(np.sum(x.astype(np.float64) ** 2, axis=1, keepdims=True)).astype(np.float32)
    x *= np.logspace(-12.5, 2, p["n"]).astype(np.float32)[:, None]
    return (x,)


_ROWS = {"quick": ({"n": 256, "d": 1024},), "full": ({"n": 256, "d": 1024}, {"n": 4096, "d": 4096})}

register(
    OpSpec(
        name="l2_normalize",
        family="normalization",
        args=(Arg("x"),),
        make=lambda r, p: (normal(r, p["n"], p["d"]),),
        reference=l2_normalize,
        vjp=l2_normalize_vjp,
        flops=lambda p: 3 * p["n"] * p["d"],
        shapes=_ROWS,
        label=lambda p: dims_label(p["n"], p["d"]),
        small=lambda: shape_strategy(n=(1, 6), d=(2, 40)),
        fixed={"n": 4, "d": 9},
        edge=_l2_edge,
        edge_problem={"n": 15, "d": 16},
        notes="each row divided by its Euclidean norm",
    )
)

register(
    OpSpec(
        name="batch_norm",
        family="normalization",
        args=(Arg("x", "image"), Arg("gamma"), Arg("beta")),
        output_kind="image",
        make=lambda r, p: (_mixed_rows(r, p["n"], p["c"], p["h"], p["w"], axis=1), *_affine(r, p["c"])),
        reference=batch_norm,
        vjp=batch_norm_vjp,
        flops=lambda p: 8 * p["n"] * p["c"] * p["h"] * p["w"],
        shapes={
            "quick": ({"n": 32, "c": 64, "h": 32, "w": 32},),
            "full": ({"n": 32, "c": 64, "h": 32, "w": 32}, {"n": 64, "c": 256, "h": 28, "w": 28}),
        },
        label=lambda p: dims_label(p["n"], p["c"], p["h"], p["w"]),
        small=lambda: shape_strategy(n=(2, 4), c=(1, 4), h=(2, 5), w=(2, 5)),
        fixed={"n": 3, "c": 2, "h": 4, "w": 5},
        edge=lambda r, p: (shifted_rows(r, EDGE_MEANS, EDGE_STDS, p["n"], p["c"], p["h"], p["w"], axis=1),
                           *_affine(r, p["c"])),
        edge_problem={"n": 4, "c": 15, "h": 4, "w": 4},
        conditioning=lambda p, x, gamma, beta: _conditioning(x, gamma, _BN_AXES, (1, -1, 1, 1)),
        tol_scale=5.0,
        extra={"eps": EPS},
        notes="training mode: batch statistics over N, H, W per channel; eps 1e-5; half the channels of variance 1e-2",
    )
)

register(
    OpSpec(
        name="layer_norm",
        family="normalization",
        args=(Arg("x"), Arg("gamma"), Arg("beta")),
        make=lambda r, p: (_mixed_rows(r, p["n"], p["d"]), *_affine(r, p["d"])),
        reference=layer_norm,
        vjp=layer_norm_vjp,
        flops=lambda p: 8 * p["n"] * p["d"],
        shapes=_ROWS,
        label=lambda p: dims_label(p["n"], p["d"]),
        small=lambda: shape_strategy(n=(1, 6), d=(2, 40)),
        fixed={"n": 4, "d": 9},
        edge=lambda r, p: (shifted_rows(r, EDGE_MEANS, EDGE_STDS, p["n"], p["d"]), *_affine(r, p["d"])),
        edge_problem={"n": 15, "d": 64},
        conditioning=lambda p, x, gamma, beta: _conditioning(x, gamma, (-1,), (1, -1)),
        tol_scale=5.0,
        extra={"eps": EPS},
        notes="over the last axis; eps 1e-5; every other row of variance 1e-2",
    )
)
