"""The process design of the upgrade gate: the selected benchmarks run K whole times per side,
alternating A B B A ..., in two environments that differ only in the named requirements; the
saved runs are then compared like `opbench compare` does.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from opbench.regression.envs import fresh_folder, make_envs
from opbench.results.store import ResultsError

# runs per side: the K at which studies/gate_quality.py measured the gate's quality (docs: the gate)
DEFAULT_RUNS = 7


def abba(k: int) -> list[str]:
    """The order of K runs per side: A B B A A B B A ... (drifts cancel between the sides)."""
    return [side for i in range(k) for side in (("A", "B") if i % 2 == 0 else ("B", "A"))]


def run_gate(baseline: list[str], candidate: list[str], pytest_args: list[str], k: int, workdir: Path,
             runner=None, strict_env: bool = False) -> tuple[list[Path], list[Path]]:
    """Build both environments and run the benchmarks K times per side in ABBA order. Returns the
    result files of each side."""
    runner = runner or subprocess.run
    if k < 1:
        raise ResultsError("--runs must be at least 1")
    pythons = dict(zip("AB", make_envs(baseline, candidate, workdir, runner, strict_env), strict=True))
    results = fresh_folder(workdir)
    files: dict[str, list[Path]] = {"A": [], "B": []}
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    for i, side in enumerate(abba(k)):
        out = results / f"{'baseline' if side == 'A' else 'candidate'}-{len(files[side]) + 1:02d}.json"
        print(f"opbench upgrade-check: run {i + 1}/{2 * k}: {'baseline' if side == 'A' else 'candidate'}",
              flush=True)
        result = runner([str(pythons[side]), "-m", "pytest", *pytest_args, f"--benchmark-json={out}", "-q",
                         "-p", "no:cacheprovider"], env=env, check=False)
        if not out.exists():
            raise ResultsError(f"the {'baseline' if side == 'A' else 'candidate'} run {i + 1} "
                               f"(pytest exit {result.returncode}) saved no result in this invocation")
        files[side].append(out)
    return files["A"], files["B"]
