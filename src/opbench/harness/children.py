"""The child pytest processes of one run (a thread sweep's counts, --isolate's framework workers):
their arguments, their start and interruption, and the one document saved from what they measured.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from urllib.parse import urlparse

from opbench.core.files import option_path, write_json_atomic
from opbench.core.processes import interrupts_deferred

INTERRUPTED = 2  # pytest.ExitCode.INTERRUPTED
SAVE_FLAGS = ("--benchmark-json", "--benchmark-save", "--benchmark-autosave")
_VALUELESS = ("--benchmark-autosave",)


def without(args: list[str], flags: tuple[str, ...]) -> list[str]:
    """`args` less every flag in `flags` and its value ('--flag value' or '--flag=value')."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        flag = arg.split("=", 1)[0]
        if flag in flags:
            skip = "=" not in arg and flag not in _VALUELESS
            continue
        out.append(arg)
    return out


def storage_folder(storage: str) -> Path:
    """pytest-benchmark's storage folder for this machine (file:// storage only)."""
    from pytest_benchmark.utils import get_machine_id

    url = urlparse(storage)
    base = Path(url.netloc + url.path) if url.scheme == "file" else Path(storage)
    return base / get_machine_id()


def next_number(folder: Path) -> str:
    numbers = [int(p.name[:4]) for p in folder.glob("[0-9][0-9][0-9][0-9]_*.json")] if folder.exists() else []
    return f"{max(numbers, default=0) + 1:04d}"


def run_child(cmd: list[str], env: dict) -> tuple[int, bool]:
    """Run one child pytest; on Ctrl-C forward the interrupt to it and let it save what it
    finished. Returns (exit code, interrupted). The child runs in its own session, so a
    terminal's Ctrl-C reaches it once, through this process, and not twice."""
    with interrupts_deferred():  # an interrupt inside Popen would leave the child running unheld
        child = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        return child.wait(), False
    except KeyboardInterrupt:
        if child.poll() is None:
            child.send_signal(signal.SIGINT)
        try:
            child.wait(timeout=60)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            child.kill()
            child.wait()
        return INTERRUPTED, True


def save(document: dict, option, autosave_name: str, what: str) -> list[Path]:
    """Write the merged `document` where the parent was asked to save (--benchmark-json, and
    --benchmark-save or --benchmark-autosave in pytest-benchmark's storage, numbered after the runs
    there); stats' raw data go to the storage only with --benchmark-save-data, as pytest-benchmark
    does. `what` names the run in the line printed per file."""
    targets = []
    if json_target := option_path(getattr(option, "benchmark_json", None)):
        targets.append((json_target, document))
    name = getattr(option, "benchmark_save", None) or (autosave_name if getattr(option, "benchmark_autosave", False)
                                                       else None)
    if name:
        folder = storage_folder(option.benchmark_storage)
        stored = document if getattr(option, "benchmark_save_data", False) else _without_data(document)
        targets.append((folder / f"{next_number(folder)}_{name}.json", stored))
    for target, doc in targets:
        write_json_atomic(target, doc)
        print(f"opbench: {what} saved in {target}", flush=True)
    return [t for t, _ in targets]


def _without_data(document: dict) -> dict:
    benches = [{**b, "stats": {k: v for k, v in (b.get("stats") or {}).items() if k != "data"}}
               for b in document.get("benchmarks", [])]
    return {**document, "benchmarks": benches}
