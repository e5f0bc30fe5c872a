"""The framework-upgrade gate: two environments that differ only in the named requirements,
the selected benchmarks run K times alternating (A B B A ...), then the comparison.

Each environment is a virtual environment that sees this one's packages through a site
directory (so nothing else differs) and has the named requirements installed on top, which
shadow the shared copies.
"""

from __future__ import annotations

import os
import subprocess
import sysconfig
import tempfile
import time
import venv
from pathlib import Path

from opbench.results.store import ResultsError

# runs per side: the K at which benchmarks/gate_quality.py measured the gate's quality (README)
DEFAULT_RUNS = 7


def abba(k: int) -> list[str]:
    """The order of K runs per side: A B B A A B B A ... (drifts cancel between the sides)."""
    return [side for i in range(k) for side in (("A", "B") if i % 2 == 0 else ("B", "A"))]


def make_env(folder: Path, requirements: list[str], runner=None) -> Path:
    """A venv at `folder` layered on this interpreter's site-packages, with `requirements` on top.
    Returns its python."""
    runner = runner or subprocess.run
    venv.EnvBuilder(with_pip=True, clear=True).create(folder)
    python = folder / "bin" / "python"
    site = runner([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                  capture_output=True, text=True, check=True).stdout.strip()
    shared = sysconfig.get_paths()["purelib"]
    Path(site, "_opbench_shared.pth").write_text(f"import site; site.addsitedir({shared!r})\n")
    if requirements:
        result = runner([str(python), "-m", "pip", "install", "-q", *requirements], check=False)
        if result.returncode != 0:
            raise ResultsError(f"pip could not install {' '.join(requirements)} into {folder}")
    return python


def make_envs(baseline: list[str], candidate: list[str], workdir: Path, runner=None) -> list[str]:
    """The baseline's and the candidate's interpreters, built under `workdir`."""
    workdir.mkdir(parents=True, exist_ok=True)
    return [str(make_env(workdir / "env-baseline", baseline, runner)),
            str(make_env(workdir / "env-candidate", candidate, runner))]


def run_gate(baseline: list[str], candidate: list[str], pytest_args: list[str], k: int, workdir: Path,
             runner=None) -> tuple[list[Path], list[Path]]:
    """Build both environments and run the benchmarks K times per side in ABBA order. Returns the
    result files of each side."""
    runner = runner or subprocess.run
    if k < 1:
        raise ResultsError("--runs must be at least 1")
    pythons = dict(zip("AB", make_envs(baseline, candidate, workdir, runner), strict=True))
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


def fresh_folder(workdir: Path) -> Path:
    """A results folder that belongs to this invocation alone: files of an earlier invocation in
    the same --workdir can never be mistaken for this one's."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(tempfile.mkdtemp(prefix=f"results-{stamp}-", dir=workdir))

