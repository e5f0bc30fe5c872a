"""Linalg operators: each test measures one operator over the selected frameworks, modes and sizes."""

from opbench.measure import measure


def test_dot(op_case, benchmark):
    measure(benchmark, op_case)


def test_dot_backward(op_case, benchmark):
    measure(benchmark, op_case)


def test_gemm(op_case, benchmark):
    measure(benchmark, op_case)


def test_gemm_backward(op_case, benchmark):
    measure(benchmark, op_case)


def test_bmm(op_case, benchmark):
    measure(benchmark, op_case)


def test_bmm_backward(op_case, benchmark):
    measure(benchmark, op_case)
