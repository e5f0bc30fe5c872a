"""Convergence on real data: whole training runs from the shared initial weights on the same
batches in every framework, held-out accuracy after each epoch, time to a target accuracy; each
run gated against the NumPy reference first (opbench.suites.convergence.training)."""

from opbench.suites.convergence.training import measure


def test_convergence(convergence_case, benchmark):
    measure(benchmark, convergence_case)
