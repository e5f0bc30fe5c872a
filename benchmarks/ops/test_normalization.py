"""Normalization operators: each test measures one operator over the selected frameworks, modes and sizes."""

from opbench.measure import measure


def test_l2_normalize(op_case, benchmark):
    measure(benchmark, op_case)


def test_l2_normalize_backward(op_case, benchmark):
    measure(benchmark, op_case)


def test_batch_norm(op_case, benchmark):
    measure(benchmark, op_case)


def test_batch_norm_backward(op_case, benchmark):
    measure(benchmark, op_case)


def test_layer_norm(op_case, benchmark):
    measure(benchmark, op_case)


def test_layer_norm_backward(op_case, benchmark):
    measure(benchmark, op_case)
