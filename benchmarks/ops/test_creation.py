"""Creation operators: `test_<op>` and `test_<op>_backward` for every operator of family 'creation' in
the registry (opbench.workloads.ops), each over the selected frameworks, modes, devices, dtypes and sizes."""

from opbench.suites.ops.generate import operator_benchmarks

globals().update(operator_benchmarks("creation"))
