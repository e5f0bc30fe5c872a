"""Why a selection left nothing: the option or marker that removed everything, and its values."""

from __future__ import annotations

from opbench.harness.config import Settings
from opbench.harness.selection import why_nothing


def test_a_framework_without_the_chosen_mode_names_its_modes():
    settings = Settings(frameworks=("torch",), modes=("jit",))
    assert why_nothing(settings, "conv2d") == ["torch has no mode 'jit'; its modes: eager, compile"]


def test_a_framework_named_by_marker_is_the_one_explained():
    settings = Settings(modes=("compile",))
    assert why_nothing(settings, "jax and gemm") == ["jax has no mode 'compile'; its modes: eager, jit"]


def test_a_marker_for_what_the_options_did_not_generate_names_the_option():
    settings = Settings(frameworks=("numpy", "torch"))
    assert why_nothing(settings, "gpu and torch") == ["no gpu cases: devices are chosen with --device (now: cpu)"]
    assert why_nothing(settings, "mxnet") == ["no mxnet cases: frameworks are chosen with --framework "
                                              "(now: numpy,torch)"]
    assert why_nothing(settings, "amp") == ["no amp cases: precisions are chosen with --precision (now: float32)"]


def test_a_negated_or_generated_marker_is_no_cause():
    settings = Settings(frameworks=("numpy", "torch"))
    assert why_nothing(settings, "not gpu and not mxnet") == []
    assert why_nothing(Settings(devices=("cpu", "gpu")), "gpu") == []
    assert why_nothing(settings, "") == []
