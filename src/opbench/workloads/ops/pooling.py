"""Max and average 2-D pooling over NCHW input, square window, no padding."""

from __future__ import annotations

import numpy as np

from opbench.workloads.ops.base import Arg, OpSpec, normal, register
from opbench.workloads.ops.conv import out_size, scatter_windows, windows


def _windows(p, x):
    k, s = p["k"], p["stride"]
    return windows(x, k, s, out_size(x.shape[2], k, s, 0), out_size(x.shape[3], k, s, 0))


def maxpool2d(p, x):
    return _windows(p, x).max(axis=(2, 3))


def avgpool2d(p, x):
    return _windows(p, x).mean(axis=(2, 3))


def maxpool2d_vjp(p, arrays, ct):
    """The gradient goes to the (first) maximum of each window."""
    k = p["k"]
    cols = _windows(p, arrays[0])
    n, c, _, _, ho, wo = cols.shape
    winner = cols.reshape(n, c, k * k, ho, wo).argmax(axis=2)
    dcols = np.zeros_like(cols)
    for i in range(k):
        for j in range(k):
            dcols[:, :, i, j] = ct * (winner == i * k + j)
    return (scatter_windows(dcols, arrays[0].shape, k, p["stride"]),)


def avgpool2d_vjp(p, arrays, ct):
    k = p["k"]
    cols_shape = _windows(p, arrays[0]).shape
    dcols = np.broadcast_to((ct / (k * k))[:, :, None, None], cols_shape)
    return (scatter_windows(np.ascontiguousarray(dcols), arrays[0].shape, k, p["stride"]),)


def _pool(n, c, hw, k, stride):
    return {"n": n, "c": c, "h": hw, "w": hw, "k": k, "stride": stride}


def _small():
    from hypothesis import strategies as st  # only property tests need it: the plugin stays light

    @st.composite
    def problems(draw):
        k = draw(st.integers(1, 3))
        return _pool(draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(k, 9)), k,
                     draw(st.integers(1, 3)))

    return problems()


SHAPES = {
    "quick": (_pool(32, 64, 32, 2, 2),),
    "full": (_pool(32, 64, 32, 2, 2), _pool(32, 64, 112, 3, 2), _pool(128, 256, 16, 2, 2)),
}

for _name, _fwd, _vjp, _fixed in (("maxpool2d", maxpool2d, maxpool2d_vjp, _pool(2, 3, 8, 2, 2)),
                                   ("avgpool2d", avgpool2d, avgpool2d_vjp, _pool(2, 3, 9, 3, 2))):
    register(
        OpSpec(
            name=_name,
            family="pooling",
            args=(Arg("x", "image"),),
            output_kind="image",
            make=lambda r, p: (normal(r, p["n"], p["c"], p["h"], p["w"]),),
            reference=_fwd,
            vjp=_vjp,
            flops=lambda p: (p["n"] * p["c"] * out_size(p["h"], p["k"], p["stride"], 0)
                             * out_size(p["w"], p["k"], p["stride"], 0) * p["k"] ** 2),
            shapes=SHAPES,
            label=lambda p: f"{p['n']}x{p['c']}x{p['h']}x{p['w']}-k{p['k']}-s{p['stride']}",
            small=_small,
            fixed=_fixed,
            linear=_name == "avgpool2d",
        )
    )
