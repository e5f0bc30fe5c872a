"""Pooling operators: each test measures one operator over the selected frameworks, modes and sizes."""

from opbench.measure import measure


def test_maxpool2d(op_case, benchmark):
    measure(benchmark, op_case)


def test_maxpool2d_backward(op_case, benchmark):
    measure(benchmark, op_case)


def test_avgpool2d(op_case, benchmark):
    measure(benchmark, op_case)


def test_avgpool2d_backward(op_case, benchmark):
    measure(benchmark, op_case)
