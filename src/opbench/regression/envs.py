"""The gate's environments: a virtual environment per side that sees this interpreter's packages
through a site directory (so that nothing else differs) and has the named requirements installed
on top, shadowing the shared copies; and a results folder per invocation.

What pip installs beyond the named requirements is said before anything is measured: upgrading
JAX from 0.7 to 0.10 also moves NumPy from 1.26 to 2.x, and a verdict blamed on the one may come
from the other. pip's installation report (`pip install --report`) names every package it
installed; each one that was not asked for becomes one line (name, the version this environment
has, the version the side gets, and what required it), and `pip check` in the side names every
requirement left unsatisfied. `--strict-env` stops the gate there instead.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import venv
from dataclasses import dataclass
from pathlib import Path

from opbench.results.store import ResultsError

# The folders a workdir holds beside its results: each side's environment, and the gate's caches
ENV_FOLDERS = {"baseline": "env-baseline", "candidate": "env-candidate"}
CACHES_FOLDER = "caches"


@dataclass(frozen=True)
class Change:
    """A package a side's install changed without being named."""

    name: str
    old: str | None  # the version this environment has (None: not installed)
    new: str
    required_by: str

    def line(self, side: str) -> str:
        return (f"{side}: also {'installs' if self.old is None else 'changes'} {self.name} "
                f"{self.old or ''}{' -> ' if self.old else ''}{self.new} (required by {self.required_by})")


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _requirement_name(spec: str) -> str:
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        return _canonical(Requirement(spec).name)
    except InvalidRequirement:
        return _canonical(spec)


def _installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _requires(meta: dict, name: str) -> bool:
    return any(_requirement_name(d.split(";")[0]) == name for d in meta.get("requires_dist") or [])


def changes(report: dict, requirements: list[str]) -> list[Change]:
    """The packages pip's installation report installed that `requirements` did not name, each with
    the version here and the installed package (or named requirement) that required it."""
    items = [i.get("metadata", {}) for i in report.get("install", [])]
    named = {_requirement_name(r) for r in requirements}
    out = []
    for meta in items:
        name = _canonical(meta.get("name", ""))
        if not name or name in named:
            continue
        old, new = _installed_version(name), meta.get("version", "?")
        if old == new:
            continue
        required_by = sorted(f"{other.get('name')} {other.get('version')}" for other in items if _requires(other, name))
        out.append(Change(meta.get("name", name), old, new, ", ".join(required_by) or "pip's resolver"))
    return sorted(out, key=lambda c: _canonical(c.name))


def unsatisfied(python: Path, runner) -> list[str]:
    """What `pip check` in a side reports as broken, one line per requirement ('' when none)."""
    result = runner([str(python), "-m", "pip", "check"], capture_output=True, text=True, check=False)
    lines = (result.stdout or "").strip().splitlines() if result.returncode else []
    return [line.strip() for line in lines if line.strip()]


def make_env(folder: Path, requirements: list[str], runner=None, side: str = "", strict: bool = False) -> Path:
    """A venv at `folder` layered on this interpreter's site-packages, with `requirements` on top.
    Says (stderr, before any measurement) what else the install changed and what it left
    unsatisfied; with `strict`, raises instead. Returns its python."""
    runner = runner or subprocess.run
    venv.EnvBuilder(with_pip=True, clear=True).create(folder)
    python = folder / "bin" / "python"
    site = runner([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                  capture_output=True, text=True, check=True).stdout.strip()
    shared = sysconfig.get_paths()["purelib"]
    Path(site, "_opbench_shared.pth").write_text(f"import site; site.addsitedir({shared!r})\n")
    if requirements:
        side, report = side or folder.name, folder / "pip-report.json"
        print(f"opbench upgrade-check: {side}: installing {' '.join(requirements)}", file=sys.stderr, flush=True)
        result = runner([str(python), "-m", "pip", "install", "-q", "--report", str(report), *requirements],
                        check=False)
        if result.returncode != 0:
            raise ResultsError(f"pip could not install {' '.join(requirements)} into {folder}")
        said = [c.line(side) for c in changes(_read_report(report), requirements)]
        said += [f"{side}: pip check: {line}" for line in unsatisfied(python, runner)]
        for line in said:
            print(f"opbench upgrade-check: {line}", file=sys.stderr, flush=True)
        if said and strict:
            raise ResultsError(f"--strict-env: {said[0]}" + (f" (and {len(said) - 1} more)" if len(said) > 1 else ""))
    return python


def _read_report(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # an older pip without --report, or a runner that wrote none: nothing to say


def make_envs(baseline: list[str], candidate: list[str], workdir: Path, runner=None,
              strict: bool = False) -> list[str]:
    """The baseline's and the candidate's interpreters, built under `workdir`."""
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"opbench upgrade-check: building two environments in {workdir}, each this interpreter's packages "
          f"and its own requirements (baseline: {' '.join(baseline) or 'none'}; candidate: {' '.join(candidate)})",
          file=sys.stderr, flush=True)
    return [str(make_env(workdir / ENV_FOLDERS[side], requirements, runner, side, strict))
            for side, requirements in (("baseline", baseline), ("candidate", candidate))]


def fresh_folder(workdir: Path) -> Path:
    """A results folder that belongs to this invocation alone: files of an earlier invocation in
    the same --workdir can never be mistaken for this one's."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(tempfile.mkdtemp(prefix=f"results-{stamp}-", dir=workdir))


# What an invocation leaves in its workdir beside its results: both sides' environments (each a
# full install of the named requirements, 2-3 GB for a torch) and the caches (float64 references,
# JAX's and TensorFlow's executables: opbench.regression.paired).
BUILT = (*ENV_FOLDERS.values(), CACHES_FOLDER)


def _size(path: Path) -> int:
    total = 0
    for file in path.rglob("*"):
        try:
            if file.is_file() and not file.is_symlink():
                total += file.stat().st_size
        except OSError:
            continue
    return total


def tidy(workdir: Path) -> None:
    """Remove the environments and caches from a workdir that opbench made for this invocation
    alone (no --workdir): nobody can reuse them there, and every run left another few GB in the
    temporary folder. The results stay, and a folder left with none is removed whole."""
    workdir = Path(workdir)
    built = [workdir / name for name in BUILT if (workdir / name).exists()]
    size = sum(_size(path) for path in built)
    for path in built:
        shutil.rmtree(path, ignore_errors=True)
    if workdir.is_dir() and not any(workdir.iterdir()):
        workdir.rmdir()
    if built:
        amount = f"{size / 1e9:.1f} GB" if size >= 1e9 else f"{size / 1e6:.0f} MB"
        print(f"opbench: removed {', '.join(p.name for p in built)} ({amount}) from "
              f"{workdir}; give --workdir to keep them for reuse", file=sys.stderr, flush=True)
