"""Inputs: deterministic per problem, identical across frameworks, low precision rounded on host."""

import numpy as np

from opbench.core import inputs, layouts


def test_rng_depends_only_on_key():
    assert np.array_equal(inputs.rng("gemm", "2x2").standard_normal(4), inputs.rng("gemm", "2x2").standard_normal(4))
    assert not np.array_equal(inputs.rng("gemm", "2x2").standard_normal(4),
                              inputs.rng("gemm", "3x3").standard_normal(4))


def test_bfloat16_rounding_ties_to_even():
    one = np.float32(1.0)
    step = np.float32(2.0**-7)  # bfloat16 spacing at 1.0
    values = np.array([one + step / 2, one + 3 * step / 2, one + step / 4, -(one + 3 * step / 4)], np.float32)
    expected = np.array([one, one + 2 * step, one, -(one + step)], np.float32)
    np.testing.assert_array_equal(inputs.round_bfloat16(values), expected)


def test_low_precision_host_copies_keep_the_shape():
    """A scalar stays a scalar (a dot product's cotangent: as a 1-element vector, PyTorch's and JAX's
    backward refused it, so the bfloat16 dot was never checked)."""
    for shape in ((), (1,), (3, 1, 2)):
        a = np.ones(shape, np.float32) * np.float32(1.3)
        for dtype in ("bfloat16", "float16", "float32"):
            assert inputs.host_array(a, dtype).shape == shape


def test_host_array_dtypes():
    a = np.linspace(-1, 1, 7, dtype=np.float32)
    assert inputs.host_array(a, "float16").dtype == np.float16
    assert inputs.host_array(a, "bfloat16").dtype == np.float32
    assert inputs.host_array(a, "float32") is not None


def test_layout_round_trip():
    x = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    for kind, image, kernel in (("image", "NHWC", "HWIO"), ("kernel", "NHWC", "HWIO"), ("plain", "NHWC", "HWIO")):
        native = layouts.to_native(x, kind, image, kernel)
        np.testing.assert_array_equal(layouts.from_native(native, kind, image, kernel), x)
    assert layouts.to_native(x, "image", "NHWC", "OIHW").shape == (2, 4, 5, 3)
    assert layouts.to_native(x, "kernel", "NCHW", "HWIO").shape == (4, 5, 3, 2)
