"""Activations operators: each test measures one operator over the selected frameworks, modes and sizes."""

from opbench.measure import measure


def test_sigmoid(op_case, benchmark):
    measure(benchmark, op_case)


def test_sigmoid_backward(op_case, benchmark):
    measure(benchmark, op_case)


def test_relu(op_case, benchmark):
    measure(benchmark, op_case)


def test_relu_backward(op_case, benchmark):
    measure(benchmark, op_case)


def test_tanh(op_case, benchmark):
    measure(benchmark, op_case)


def test_tanh_backward(op_case, benchmark):
    measure(benchmark, op_case)


def test_softplus(op_case, benchmark):
    measure(benchmark, op_case)


def test_softplus_backward(op_case, benchmark):
    measure(benchmark, op_case)


def test_softsign(op_case, benchmark):
    measure(benchmark, op_case)


def test_softsign_backward(op_case, benchmark):
    measure(benchmark, op_case)


def test_gelu(op_case, benchmark):
    measure(benchmark, op_case)


def test_gelu_backward(op_case, benchmark):
    measure(benchmark, op_case)


def test_softmax(op_case, benchmark):
    measure(benchmark, op_case)


def test_softmax_backward(op_case, benchmark):
    measure(benchmark, op_case)
