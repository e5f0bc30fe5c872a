"""2-D convolution, NCHW input and OIHW kernel here, with stride and symmetric zero padding.

The reference is an im2col formulation (clear, and fast enough for the full profile); tests check
it against a direct seven-loop convolution.
"""

from __future__ import annotations

import numpy as np

from opbench.workloads.ops.base import Arg, OpSpec, normal, register


def out_size(size: int, k: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - k) // stride + 1


def windows(xp: np.ndarray, k: int, stride: int, ho: int, wo: int) -> np.ndarray:
    """(N, C, k, k, Ho, Wo): every k x k window of the padded input, strided."""
    n, c = xp.shape[:2]
    cols = np.empty((n, c, k, k, ho, wo), dtype=xp.dtype)
    for i in range(k):
        for j in range(k):
            cols[:, :, i, j] = xp[:, :, i : i + stride * ho : stride, j : j + stride * wo : stride]
    return cols


def scatter_windows(dcols: np.ndarray, padded_shape, k: int, stride: int) -> np.ndarray:
    """The adjoint of `windows`: add each window's values back where they came from."""
    ho, wo = dcols.shape[-2:]
    dxp = np.zeros(padded_shape, dtype=dcols.dtype)
    for i in range(k):
        for j in range(k):
            dxp[:, :, i : i + stride * ho : stride, j : j + stride * wo : stride] += dcols[:, :, i, j]
    return dxp


def _pad(x, pad):
    return np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))


def columns(xp: np.ndarray, k: int, stride: int, ho: int, wo: int) -> np.ndarray:
    """(N*Ho*Wo, C*k*k): each k x k window of the padded input as one row (im2col), laid out as
    np.tensordot lays out `windows` for its GEMM: the same operands, so the same bits. Where
    tensordot copies (more than one image, window element and window position) the rows are built
    in that one copy; where it passes a view of `windows`, that view, whose strides BLAS reads in
    another order."""
    n, c = xp.shape[:2]
    if n == 1 or c * k * k == 1 or ho * wo == 1:
        return windows(xp, k, stride, ho, wo).transpose(0, 4, 5, 1, 2, 3).reshape(n * ho * wo, c * k * k)
    view = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.ascontiguousarray(view.transpose(0, 2, 3, 1, 4, 5)).reshape(n * ho * wo, c * k * k)


def conv2d(p, x, w):
    k, s, pad = p["k"], p["stride"], p["pad"]
    n, o = x.shape[0], w.shape[0]
    ho, wo = out_size(x.shape[2], k, s, pad), out_size(x.shape[3], k, s, pad)
    cols = columns(_pad(x, pad), k, s, ho, wo)
    return np.dot(cols, w.reshape(o, -1).T).reshape(n, ho, wo, o).transpose(0, 3, 1, 2)


def conv2d_vjp(p, arrays, ct):
    x, w = arrays
    k, s, pad = p["k"], p["stride"], p["pad"]
    n, o = x.shape[0], w.shape[0]
    xp = _pad(x, pad)
    ho, wo = ct.shape[2:]
    dw = np.dot(ct.transpose(1, 0, 2, 3).reshape(o, -1), columns(xp, k, s, ho, wo)).reshape(w.shape)
    dcols = np.dot(ct.transpose(0, 2, 3, 1).reshape(-1, o), w.reshape(o, -1)).reshape(n, ho, wo, *w.shape[1:])
    # each window offset's slab made contiguous (k, k, N, C, Ho, Wo), then seen as scatter_windows reads it
    by_offset = np.ascontiguousarray(dcols.transpose(4, 5, 0, 3, 1, 2))
    dxp = scatter_windows(by_offset.transpose(2, 3, 0, 1, 4, 5), xp.shape, k, s)
    h, wd = x.shape[2:]
    return dxp[:, :, pad : pad + h, pad : pad + wd], dw


def _conv(n, c, hw, o, k, stride, pad):
    return {"n": n, "c": c, "h": hw, "w": hw, "o": o, "k": k, "stride": stride, "pad": pad}


def _small():
    from hypothesis import strategies as st  # only property tests need it: the plugin stays light

    @st.composite
    def problems(draw):
        k = draw(st.integers(1, 3))
        pad = draw(st.integers(0, k - 1))
        hw = draw(st.integers(k, 7))
        return _conv(draw(st.integers(1, 2)), draw(st.integers(1, 3)), hw, draw(st.integers(1, 4)), k,
                     draw(st.integers(1, 2)), pad)

    return problems()


def _flops(p):
    ho, wo = out_size(p["h"], p["k"], p["stride"], p["pad"]), out_size(p["w"], p["k"], p["stride"], p["pad"])
    return 2 * p["n"] * p["o"] * ho * wo * p["c"] * p["k"] ** 2


register(
    OpSpec(
        name="conv2d",
        family="conv",
        args=(Arg("x", "image"), Arg("w", "kernel")),
        output_kind="image",
        make=lambda r, p: (  # a float32 scale: under NEP 50 a float64 one makes the weights float64
            normal(r, p["n"], p["c"], p["h"], p["w"]),
            normal(r, p["o"], p["c"], p["k"], p["k"]) / np.float32(np.sqrt(p["c"] * p["k"] ** 2)),
        ),
        reference=conv2d,
        vjp=conv2d_vjp,
        flops=_flops,
        flops_exact=True,
        backward_flops=lambda p: 3 * _flops(p),  # the forward, dx and dw: each the forward's products
        # Winograd F(m, r) does m^2 r^2 / (m + r - 1)^2 fewer products, below r^2 for every m; FFT
        # convolution saves less than that at these kernel sizes
        algorithm_gain=lambda p: float(p["k"] ** 2),
        shapes={
            "quick": (_conv(16, 64, 32, 64, 3, 1, 1), _conv(16, 128, 16, 128, 3, 2, 1)),
            "full": (
                _conv(32, 3, 224, 64, 7, 2, 3),
                _conv(32, 64, 56, 64, 3, 1, 1),
                _conv(32, 128, 28, 128, 3, 1, 1),
                _conv(32, 256, 14, 256, 3, 1, 1),
                _conv(128, 64, 32, 64, 3, 1, 1),
            ),
        },
        label=lambda p: f"{p['n']}x{p['c']}x{p['h']}x{p['w']}-o{p['o']}-k{p['k']}-s{p['stride']}-p{p['pad']}",
        small=_small,
        fixed={"n": 2, "c": 3, "h": 7, "w": 7, "o": 4, "k": 3, "stride": 2, "pad": 1},
        tol_scale=2.0,
        linear=True,
        notes="cross-correlation, as every framework defines conv2d; no bias",
    )
)
