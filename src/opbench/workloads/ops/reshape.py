"""Flatten: (N, C, H, W) -> (N, C*H*W) in row-major order, as a layer before a dense layer."""

from __future__ import annotations

from opbench.core.case import dims_label
from opbench.workloads.ops.base import Arg, OpSpec, normal, register, shape_strategy

register(
    OpSpec(
        name="flatten",
        family="reshape",
        # "plain": the input is flattened in the order it is given, never transposed first.
        args=(Arg("x"),),
        make=lambda r, p: (normal(r, p["n"], p["c"], p["h"], p["w"]),),
        reference=lambda p, x: x.reshape(x.shape[0], -1),
        vjp=lambda p, arrays, ct: (ct.reshape(arrays[0].shape),),
        shapes={
            "quick": ({"n": 64, "c": 64, "h": 16, "w": 16},),
            "full": ({"n": 64, "c": 64, "h": 16, "w": 16}, {"n": 128, "c": 256, "h": 32, "w": 32}),
        },
        label=lambda p: dims_label(p["n"], p["c"], p["h"], p["w"]),
        small=lambda: shape_strategy(n=(1, 4), c=(1, 4), h=(1, 6), w=(1, 6)),
        fixed={"n": 2, "c": 3, "h": 4, "w": 5},
        notes="frameworks may return a view: the timing then measures the call, not a copy",
    )
)
