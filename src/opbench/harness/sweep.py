"""Thread sweeps: `--threads 1,2,4` runs the selected benchmarks once per count, each in its own
process (TensorFlow fixes its thread pools when its runtime starts), and merges the results into
one pytest-benchmark JSON whose benchmarks carry their thread count.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlparse

from opbench.core.files import option_path, write_json_atomic
from opbench.core.processes import interrupts_deferred

CHILD = "OPBENCH_SWEEP_CHILD"
INTERRUPTED = 2  # pytest.ExitCode.INTERRUPTED
_SAVE_FLAGS = ("--benchmark-json", "--benchmark-save", "--benchmark-autosave", "--threads")


def child_args(args: list[str], threads: int, json_path: str) -> list[str]:
    """The parent's pytest arguments with saving and --threads replaced for one child."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        flag = arg.split("=", 1)[0]
        if flag in _SAVE_FLAGS:
            skip = "=" not in arg and flag != "--benchmark-autosave"
            continue
        out.append(arg)
    return [*out, f"--threads={threads}", f"--benchmark-json={json_path}"]


def merge(runs: dict[int, dict]) -> dict:
    """One pytest-benchmark document from one run per thread count; names get an @tN suffix."""
    counts = sorted(runs)
    merged = dict(runs[counts[0]])
    merged["benchmarks"] = []
    for n in counts:
        for bench in runs[n].get("benchmarks", []):
            renamed = {**bench, "name": f"{bench['name']}@t{n}", "fullname": f"{bench['fullname']}@t{n}",
                       "extra_info": {**(bench.get("extra_info") or {}), "thread_sweep": n}}
            merged["benchmarks"].append(renamed)
    opbench = merged.setdefault("machine_info", {}).setdefault("opbench", {})
    opbench["thread_sweep"] = counts
    statuses = [(runs[n].get("machine_info", {}).get("opbench") or {}).get("run") or {} for n in counts]
    if any(statuses):  # the sweep ended as its worst child did
        failed = [f"{t}@t{n}" for n, st in zip(counts, statuses, strict=True) for t in st.get("failed", [])]
        worst = next((w for w in ("interrupted", "failed") if any(st.get("status") == w for st in statuses)),
                     "complete")
        opbench["run"] = {"status": worst, "failed": failed}
    return merged


def storage_folder(storage: str) -> Path:
    """pytest-benchmark's storage folder for this machine (file:// storage only)."""
    from pytest_benchmark.utils import get_machine_id

    url = urlparse(storage)
    base = Path(url.netloc + url.path) if url.scheme == "file" else Path(storage)
    return base / get_machine_id()


def next_number(folder: Path) -> str:
    numbers = [int(p.name[:4]) for p in folder.glob("[0-9][0-9][0-9][0-9]_*.json")] if folder.exists() else []
    return f"{max(numbers, default=0) + 1:04d}"


def _run_child(cmd: list[str], env: dict) -> tuple[int, bool]:
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


def run(args: list[str], counts: tuple[int, ...], option) -> int:
    """Run one child pytest per thread count, merge, save as the parent was asked to. Ctrl-C stops
    the sweep after forwarding it to the running child: the counts that finished are saved, the
    run is marked interrupted, and the exit code is pytest's for an interruption."""
    env = {**os.environ, CHILD: "1"}
    results, code, interrupted = {}, 0, False
    with tempfile.TemporaryDirectory(prefix="opbench-sweep-") as tmp:
        for n in counts:
            path = os.path.join(tmp, f"t{n}.json")
            print(f"opbench: thread sweep: running with --threads={n}", flush=True)
            child_code, interrupted = _run_child([sys.executable, "-m", "pytest", *child_args(args, n, path)], env)
            code = max(code, child_code)
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    results[n] = json.load(f)
            if interrupted or child_code == INTERRUPTED:
                interrupted = True
                print(f"opbench: thread sweep interrupted during --threads={n}; saving the counts that ran",
                      file=sys.stderr, flush=True)
                break
    if not results:
        return code or 1
    merged = merge(results)
    if interrupted:
        merged["machine_info"]["opbench"].setdefault("run", {})["status"] = "interrupted"
    targets = []
    if json_target := option_path(getattr(option, "benchmark_json", None)):
        targets.append(json_target)
    save = getattr(option, "benchmark_save", None) or (
        "sweep-t" + "-".join(map(str, sorted(results))) if getattr(option, "benchmark_autosave", False) else None
    )
    if save:
        folder = storage_folder(option.benchmark_storage)
        targets.append(folder / f"{next_number(folder)}_{save}.json")
    for target in targets:
        write_json_atomic(target, merged)
        print(f"opbench: thread sweep saved in {target}")
    return INTERRUPTED if interrupted else code
