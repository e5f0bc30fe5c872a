"""End-to-end workloads: one training step (forward, loss, backward, update) or one inference
forward pass per timed call, for every model of the catalogue, after the equivalence gate."""

from opbench.suites.measure import measure


def test_training(model_case, benchmark):
    measure(benchmark, model_case)


def test_inference(model_case, benchmark):
    measure(benchmark, model_case)
