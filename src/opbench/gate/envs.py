"""The gate's environments: a virtual environment per side that sees this interpreter's packages
through a site directory (so that nothing else differs) and has the named requirements installed
on top, shadowing the shared copies; and a results folder per invocation.
"""

from __future__ import annotations

import subprocess
import sysconfig
import tempfile
import time
import venv
from pathlib import Path

from opbench.results.store import ResultsError


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


def fresh_folder(workdir: Path) -> Path:
    """A results folder that belongs to this invocation alone: files of an earlier invocation in
    the same --workdir can never be mistaken for this one's."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(tempfile.mkdtemp(prefix=f"results-{stamp}-", dir=workdir))

