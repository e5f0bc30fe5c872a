"""What the harness adds to each timed call, measured in one process.

opbench times `call()`, a closure that runs the prepared operation and then the framework's
synchronisation. This script times a bare no-op callable, the same no-op prepared through
opbench's NumPy backend, and a ~100 us operation both ways, and prints the added microseconds
per call and their share of the 100 us operation.

    .venv/bin/python studies/overhead.py
"""

from __future__ import annotations

import timeit

import numpy as np

from opbench import frameworks
from opbench.core.case import Case
from opbench.suites.ops.prepare import host_inputs, prepare
from opbench.workloads import ops


def best_per_call(first, second, number: int, repeat: int = 21) -> tuple[float, float]:
    """The fastest of `repeat` timings of `number` calls of each, per call, in seconds. The two
    alternate, so that both see the same machine state."""
    t1, t2 = [], []
    for _ in range(repeat):
        t1.append(timeit.timeit(first, number=number))
        t2.append(timeit.timeit(second, number=number))
    return min(t1) / number, min(t2) / number


def main() -> None:
    backend = frameworks.load("numpy")
    noop_case = Case.operator(ops.get("relu"), "forward", "numpy", params={"d": 1, "n": 1})
    prepared_noop = prepare(noop_case, backend)
    x = np.ones((1, 1), np.float32)
    bare_noop = lambda: np.maximum(x, 0)  # what prepared_noop runs, without the harness

    p = {"m": 96, "k": 96, "n": 96}
    gemm_case = Case.operator(ops.get("gemm"), "forward", "numpy", params=p)
    prepared_gemm = prepare(gemm_case, backend)
    a, b = host_inputs("gemm", gemm_case.label, gemm_case.params, "float32")
    bare_gemm = lambda: a @ b

    rows = []
    for name, bare, wrapped, number in (
        ("relu 1x1 (no-op)", bare_noop, prepared_noop.call, 200_000),
        ("gemm 96^3", bare_gemm, prepared_gemm.call, 2_000),
    ):
        t_bare, t_wrapped = best_per_call(bare, wrapped, number)
        rows.append((name, t_bare, t_wrapped))
    print(f"{'operation':<20}{'bare us':>10}{'opbench us':>12}{'added us':>10}{'added %':>9}")
    for name, t_bare, t_wrapped in rows:
        added = t_wrapped - t_bare
        print(f"{name:<20}{t_bare * 1e6:>10.3f}{t_wrapped * 1e6:>12.3f}{added * 1e6:>10.3f}{added / t_bare:>9.2%}")
    added_noop = (rows[0][2] - rows[0][1]) * 1e6
    print(f"\nharness overhead: {added_noop:.3f} us per call; "
          f"{added_noop / 100:.2%} of a 100 us operation (target: < 2 us and < 1%)")


if __name__ == "__main__":
    main()
