"""Vector dot product, GEMM and batched matrix multiplication."""

from __future__ import annotations

import numpy as np

from opbench.core.case import dims_label
from opbench.workloads.ops.base import Arg, OpSpec, normal, register, shape_strategy

register(
    OpSpec(
        name="dot",
        family="linalg",
        args=(Arg("a"), Arg("b")),
        make=lambda r, p: (normal(r, p["n"]), normal(r, p["n"])),
        reference=lambda p, a, b: np.asarray(np.dot(a, b)),
        vjp=lambda p, arrays, ct: (ct * arrays[1], ct * arrays[0]),
        flops=lambda p: 2 * p["n"],
        flops_exact=True,
        backward_flops=lambda p: 4 * p["n"],  # the forward's 2n, then ct * b and ct * a
        shapes={"quick": ({"n": 1 << 16},), "full": ({"n": 1 << 16}, {"n": 1 << 20}, {"n": 1 << 24})},
        label=lambda p: str(p["n"]),
        small=lambda: shape_strategy(n=(1, 300)),
        fixed={"n": 37},
        tol_scale=4.0,
        linear=True,
        notes="a . b of two vectors; the output is a scalar",
    )
)

register(
    OpSpec(
        name="gemm",
        family="linalg",
        args=(Arg("a"), Arg("b")),
        make=lambda r, p: (normal(r, p["m"], p["k"]), normal(r, p["k"], p["n"])),
        reference=lambda p, a, b: a @ b,
        vjp=lambda p, arrays, ct: (ct @ arrays[1].T, arrays[0].T @ ct),
        flops=lambda p: 2 * p["m"] * p["k"] * p["n"],
        flops_exact=True,
        backward_flops=lambda p: 3 * 2 * p["m"] * p["k"] * p["n"],  # the forward and two products of its size
        shapes={
            "quick": ({"m": 256, "k": 256, "n": 256}, {"m": 1024, "k": 1024, "n": 1024}),
            "full": tuple({"m": s, "k": s, "n": s} for s in (128, 256, 512, 1024, 2048, 4096)),
        },
        label=lambda p: dims_label(p["m"], p["k"], p["n"]),
        small=lambda: shape_strategy(m=(1, 24), k=(1, 24), n=(1, 24)),
        fixed={"m": 5, "k": 7, "n": 3},
        tol_scale=2.0,
        linear=True,
        notes="(m, k) @ (k, n); the label is MxKxN",
    )
)

register(
    OpSpec(
        name="bmm",
        family="linalg",
        args=(Arg("a"), Arg("b")),
        make=lambda r, p: (normal(r, p["b"], p["m"], p["k"]), normal(r, p["b"], p["k"], p["n"])),
        reference=lambda p, a, b: a @ b,
        vjp=lambda p, arrays, ct: (ct @ arrays[1].swapaxes(1, 2), arrays[0].swapaxes(1, 2) @ ct),
        flops=lambda p: 2 * p["b"] * p["m"] * p["k"] * p["n"],
        flops_exact=True,
        backward_flops=lambda p: 3 * 2 * p["b"] * p["m"] * p["k"] * p["n"],
        shapes={
            "quick": ({"b": 32, "m": 128, "k": 128, "n": 128},),
            "full": ({"b": 32, "m": 128, "k": 128, "n": 128}, {"b": 64, "m": 256, "k": 256, "n": 256}),
        },
        label=lambda p: dims_label(p["b"], p["m"], p["k"], p["n"]),
        small=lambda: shape_strategy(b=(1, 4), m=(1, 12), k=(1, 12), n=(1, 12)),
        fixed={"b": 2, "m": 5, "k": 7, "n": 3},
        tol_scale=2.0,
        linear=True,
        notes="batched (b, m, k) @ (b, k, n); the label is BxMxKxN",
    )
)
