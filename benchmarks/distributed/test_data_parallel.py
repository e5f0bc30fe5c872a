"""Data-parallel training on each framework's own distributed engine: one timed call is one
synchronous training step of every worker, after the equivalence gate (opbench.suites.distributed)."""

from opbench.suites.distributed.bench import measure_distributed


def test_data_parallel(dist_case, benchmark):
    measure_distributed(benchmark, dist_case)
