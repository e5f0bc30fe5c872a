"""End-to-end workloads: one training step (forward, loss, backward, update) or one inference
forward pass per timed call, for every model of the catalogue (and of --workloads files), after the
equivalence gate: `test_training` and `test_inference`, written by the public API's call a user's
file makes for several models of its own."""

from opbench import api

globals().update(api.model_benchmarks())
