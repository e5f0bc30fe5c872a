"""Every operator, framework, mode and direction against the NumPy reference on random small
problems (Hypothesis). Compiled modes (torch.compile, XLA) use one fixed problem size per
operator with fresh values, so that each example does not pay a compilation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opbench import config, execute, ops
from opbench.backends import Unavailable
from opbench.cases import Case

COMPILED = {"compile", "xla"}


def _items(compiled: bool):
    for name, spec in ops.REGISTRY.items():
        directions = ("forward", "backward") if spec.differentiable else ("forward",)
        for framework, modes in config.FRAMEWORK_MODES.items():
            for mode in modes:
                if (spec.creation and mode != "eager") or (mode in COMPILED) != compiled:
                    continue
                for direction in directions:
                    yield pytest.param(name, framework, mode, direction, id=f"{name}-{direction}-{framework}-{mode}")


def check(name: str, framework: str, mode: str, direction: str, p: dict, seed: int) -> float:
    """Run one case through the same preparation and verification the benchmarks use."""
    spec = ops.get(name)
    case = Case("op", name, spec.family, direction, framework, "cpu", mode, "float32",
                f"{spec.label(p)}-seed{seed}", tuple(sorted(p.items())))
    try:
        backend = execute.require(case)
    except Unavailable as exc:
        pytest.skip(str(exc))
    prepared = execute.prepare(case, backend)
    return prepared.verify(prepared.call())


@pytest.mark.parametrize("name, framework, mode, direction", list(_items(compiled=False)))
@given(data=st.data())
def test_matches_numpy(name, framework, mode, direction, data):
    p = data.draw(ops.get(name).small(), label="problem")
    seed = data.draw(st.integers(0, 2**20), label="seed")
    assert check(name, framework, mode, direction, p, seed) >= 0


@pytest.mark.parametrize("name, framework, mode, direction", list(_items(compiled=True)))
@settings(max_examples=2)
@given(seed=st.integers(0, 2**20))
def test_compiled_matches_numpy(name, framework, mode, direction, seed):
    assert check(name, framework, mode, direction, FIXED[name], seed) >= 0


# One small problem per operator for compiled modes, so that examples do not recompile.
FIXED = {
    "sigmoid": {"n": 3, "d": 17}, "relu": {"n": 3, "d": 17}, "tanh": {"n": 3, "d": 17},
    "softplus": {"n": 3, "d": 17}, "softsign": {"n": 3, "d": 17}, "gelu": {"n": 3, "d": 17},
    "softmax": {"n": 3, "d": 17}, "dot": {"n": 37}, "gemm": {"m": 5, "k": 7, "n": 3},
    "bmm": {"b": 2, "m": 5, "k": 7, "n": 3}, "flatten": {"n": 2, "c": 3, "h": 4, "w": 5},
    "conv2d": {"n": 2, "c": 3, "h": 7, "w": 7, "o": 4, "k": 3, "stride": 2, "pad": 1},
    "maxpool2d": {"n": 2, "c": 3, "h": 8, "w": 8, "k": 2, "stride": 2},
    "avgpool2d": {"n": 2, "c": 3, "h": 9, "w": 9, "k": 3, "stride": 2},
    "l2_normalize": {"n": 4, "d": 9}, "batch_norm": {"n": 3, "c": 2, "h": 4, "w": 5},
    "layer_norm": {"n": 4, "d": 9},
}
