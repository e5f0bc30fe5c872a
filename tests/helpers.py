"""Shared test helpers: a framework's backend or a skip, and synthetic pytest-benchmark documents
for the report and comparison tests."""

from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path

import pytest

from opbench import frameworks


def load_or_skip(name: str) -> frameworks.Backend:
    """The backend of framework `name`, or this test skipped with the reason it cannot run."""
    try:
        return frameworks.load(name)
    except frameworks.Unavailable as exc:
        pytest.skip(str(exc))


def study(name: str):
    """studies/<name>.py, loaded as a module (the studies are scripts, not a package)."""
    path = Path(__file__).resolve().parents[1] / "studies" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_RUN_NUMBER = itertools.count()  # every document a distinct run, as real runs are (their datetime differs)


def bench(name: str, median: float, group: str = "gemm-forward[cpu-float32-64x64x64]", framework="torch",
          mode="eager", flops: float | None = 2 * 64**3, fastest: float | None = None, **extra) -> dict:
    return {
        "name": name, "fullname": f"benchmarks/ops/test_linalg.py::{name}", "group": group,
        "stats": {"median": median, "iqr": median * 0.02, "rounds": 10, "min": fastest or median * 0.9, "mean": median},
        "extra_info": {"framework": framework, "mode": mode, "device": "cpu", "dtype": "float32", "flops": flops,
                       "peak_gflops": 300.0, "numpy_gemm_gflops": 100.0, **extra},
    }


def document(benches: list[dict], node: str = "vm", torch_version: str = "2.13.0") -> dict:
    return {
        "machine_info": {"node": node, "machine": "x86_64",
                         "opbench": {"frameworks": {"torch": {"version": torch_version}}, "cpu_model": "cpu"}},
        "commit_info": {},
        "datetime": f"2026-11-22T00:00:00.{next(_RUN_NUMBER):06d}", "version": "5.3.1", "benchmarks": benches,
    }


def write(path: Path, benches: list[dict], **kw) -> Path:
    path.write_text(json.dumps(document(benches, **kw)))
    return path


def gemm_runs(folder: Path, prefix: str, medians: list[float], **kw) -> list[Path]:
    """One file per median: a run holding test_gemm[torch...] and test_gemm[numpy...] (fixed)."""
    return [
        write(folder / f"{prefix}{i}.json", [
            bench("test_gemm[torch-cpu-eager-float32-64x64x64]", m),
            bench("test_gemm[numpy-cpu-eager-float32-64x64x64]", 2e-4 * (1 + 0.01 * (i % 3 - 1)), framework="numpy"),
        ], **kw)
        for i, m in enumerate(medians)
    ]


def edge_case(name: str, framework: str, mode: str, direction: str, seed: int = 0, dtype: str = "float32"):
    """The operator's edge-regime case (OpSpec.edge at OpSpec.edge_problem) on the CPU."""
    from opbench.core.case import Case
    from opbench.workloads import ops

    spec = ops.get(name)
    p = {**spec.edge_problem, "inputs": "edge"}
    return Case.operator(spec, direction, framework, mode=mode, dtype=dtype, params=p,
                         label=f"{spec.label(p)}-edge-seed{seed}")


def model_step(framework: str, mode: str, name: str = "lenet"):
    """(backend, native model, synchronised training step) of a catalogue model at its quick
    batch on the CPU, already run three times (compiled modes compile on the first)."""
    from opbench.suites.prepared import synchronised
    from opbench.workloads.models import catalogue, datasets
    from opbench.workloads.models.spec import init_params

    backend = load_or_skip(framework)
    backend.set_threads(2)
    model = catalogue.get(name)
    native = backend.build(model, init_params(model), "cpu", "float32", mode)
    x, y = native.inputs(*datasets.batch(model, model.batch["quick"], ""))
    call = synchronised(native.train_step(x, y, model.optimizer), backend, "cpu")
    for _ in range(3):
        call()
    return backend, native, call
