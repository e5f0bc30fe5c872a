"""How close does each operator's honest result come to its tolerance? Runs the selected
operator benchmarks once each (no timing) and reports, per operator, direction, dtype and
output, the largest share of the allowed error any framework and mode used (|out - ref| /
(rtol * (|ref| + floor)), worst element; a check fails above 1), and for outputs checked in
units of roundoff, the ulps that would have been needed.

    .venv/bin/python studies/tolerance_margins.py -- benchmarks/ops -m "cpu"
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from opbench.suites.ops import prepare
from opbench.workloads import ops

WORST: dict[tuple, tuple[float, str]] = {}


def _recording(real):
    def compare(what, got, want, case, tol, floor=None, absolute=None):
        result = real(what, got, want, case, tol, floor, absolute)  # raises on failure, as in the suite
        diff = np.abs(np.asarray(got, dtype=np.float64).reshape(want.shape) - want)
        limit = ops.allowed_error(want, case.dtype, tol, ops.rms(want) if floor is None else floor, absolute)
        share = float(np.max(diff / limit)) if want.size else 0.0
        key = (case.name, case.direction, case.dtype, what.split()[-1])
        if share >= WORST.get(key, (-1.0, ""))[0]:
            WORST[key] = (share, f"{case.framework}-{case.mode}", tol)
        return result

    return compare


def main(argv: list[str]) -> int:
    prepare._compare = _recording(prepare._compare)
    code = pytest.main(["-q", "--benchmark-disable", "-p", "no:cacheprovider", *argv])
    print(f"\n{'operator':14} {'direction':9} {'dtype':9} {'output':8} {'share of tolerance':>19}  "
          f"{'worst in':15} rtol")
    for (name, direction, dtype, what), (share, where, tol) in sorted(WORST.items()):
        print(f"{name:14} {direction:9} {dtype:9} {what:8} {share:19.3g}  {where:15} {tol:.3g}")
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else sys.argv[1:]))
