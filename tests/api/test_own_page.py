"""The page "your own benchmarks" (docs/usage/own.md) runs as it is written, from a folder outside
opbench's tree: its files are its Python blocks, each named by its first line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "usage" / "own.md"
BLOCK = re.compile(r"```(?:python|toml)\n# (\w+\.(?:py|toml))\n(.*?)```", re.S)
BOUND_S = 900  # a hang, not a speed: the page's files, two frameworks, every mode


def page_files() -> dict[str, str]:
    return {name: body for name, body in BLOCK.findall(PAGE.read_text(encoding="utf-8"))}


def run(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                           "--benchmark-disable", *args], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=BOUND_S, check=False)


def write(folder: Path, files: dict[str, str]) -> None:
    for name, body in files.items():
        (folder / name).write_text(body, encoding="utf-8")


def test_the_page_has_an_operator_a_model_and_a_fw_test():
    assert set(page_files()) == {"test_swish.py", "test_tiny.py", "models.toml", "test_blueprints.py",
                                 "test_softsign.py"}


def outcome(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:]


# make test runs the page in NumPy and JAX's jit, a compiled mode (eager JAX compiles every primitive of the
# models on first use: 6 of the run's 11.5 s on the Xeon, 2026-12-04); make test-rest runs every framework and mode.
def test_the_page_runs_from_outside_the_tree_in_numpy_and_jax(tmp_path):
    write(tmp_path, page_files())
    proc = run(tmp_path, "--framework", "numpy,jax", "-k", "not (jax and eager)",
               "-W", "error::pytest.PytestUnknownMarkWarning")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    # swish: numpy eager and jax jit, forward and backward; tiny and tinyconv: jax jit, training and
    # inference (at batch 1 and their own); softsign: numpy eager and jax jit
    assert re.search(r"\b12 passed\b", outcome(proc)), outcome(proc)
    assert "skipped" not in outcome(proc)


def test_a_wrong_implementation_fails_its_check(tmp_path):
    """The page's own example: `* 1.001` in torch's line fails with the error the page quotes."""
    files = page_files()
    text = PAGE.read_text(encoding="utf-8")
    assert "with `* 1.001` in torch's line above" in text
    quoted = " ".join(re.search(r"```text\n(CorrectnessError: torch eager swish .*?)```", text, re.S)[1].split())
    files["test_swish.py"] = files["test_swish.py"].replace("x * torch.sigmoid(x)", "x * torch.sigmoid(x) * 1.001")
    write(tmp_path, {"test_swish.py": files["test_swish.py"]})
    proc = run(tmp_path, "--framework", "torch", "--mode", "eager", "-m", "not backward")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert quoted in proc.stdout, proc.stdout[-3000:]
    assert re.search(r"\b1 failed\b", outcome(proc)), outcome(proc)


@pytest.mark.full
def test_the_page_runs_in_every_framework_and_mode(tmp_path):
    write(tmp_path, page_files())
    proc = run(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "skipped" not in outcome(proc), proc.stdout[-3000:]
