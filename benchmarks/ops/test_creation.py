"""Creation operators: `test_<op>` and `test_<op>_backward` for every operator of family 'creation' in
the registry (opbench.workloads.ops), each over the selected frameworks, modes, devices, dtypes and sizes."""

from opbench import api

for _op in api.builtin_operators("creation"):  # the call a user's own operator file makes
    globals().update(_op.benchmarks())
