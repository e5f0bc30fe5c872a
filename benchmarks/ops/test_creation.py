"""Creation operators: each test measures one operator over the selected frameworks, modes and sizes."""

from opbench.measure import measure


def test_from_numpy(op_case, benchmark):
    measure(benchmark, op_case)


def test_from_list(op_case, benchmark):
    measure(benchmark, op_case)


def test_zeros(op_case, benchmark):
    measure(benchmark, op_case)


def test_random_normal(op_case, benchmark):
    measure(benchmark, op_case)
