"""Record the profiler outputs that tests/suites/test_breakdown.py reads: one LeNet training step
profile per framework and mode, as each framework's profiler wrote it (gzipped).

    .venv/bin/python -m tests.record_profiles [framework-mode ...]

Writes tests/data/profiles/<framework>-<mode>.<ext>.gz: PyTorch's Chrome trace, MXNet's Chrome
trace (with the step windows opbench took, which MXNet's trace does not hold), TensorFlow's and
JAX's XSpace. Rerun it after a framework upgrade changes what its profiler writes.
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
from pathlib import Path

from tests.helpers import model_step

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "profiles"
CASES = ("torch-eager", "torch-compile", "tensorflow-eager", "tensorflow-graph", "tensorflow-xla", "mxnet-eager",
         "mxnet-hybridize", "jax-eager", "jax-jit")
STEPS = 2


def record(name: str) -> Path:
    framework, mode = name.split("-")
    backend, _, call = model_step(framework, mode)
    with tempfile.TemporaryDirectory() as folder:
        trace = backend.profile(call, STEPS, folder)
        if framework == "mxnet":
            doc = {"marks": trace.steps, "trace": (Path(folder) / "mxnet_trace.json").read_text()}
            data, ext = json.dumps(doc).encode(), "json"
        elif framework == "torch":
            data, ext = (Path(folder) / "torch_trace.json").read_bytes(), "json"
        else:
            data, ext = next(Path(folder).rglob("*.xplane.pb")).read_bytes(), "xplane.pb"
    path = OUT / f"{name}.{ext}.gz"
    path.write_bytes(gzip.compress(data, mtime=0))
    return path


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[1:] or CASES:
        print(record(name))
