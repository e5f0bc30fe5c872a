"""Reshape operators: each test measures one operator over the selected frameworks, modes and sizes."""

from opbench.measure import measure


def test_flatten(op_case, benchmark):
    measure(benchmark, op_case)


def test_flatten_backward(op_case, benchmark):
    measure(benchmark, op_case)
