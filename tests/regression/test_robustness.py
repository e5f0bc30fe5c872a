"""Bad input to the real commands: each class gets one line on stderr, the right exit code, no
traceback, and leaves existing result files as they were. The gate never passes on bad data."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from opbench import cli
from opbench.core.files import write_json_atomic, write_text_atomic
from opbench.regression import envs
from opbench.regression import process as upgrade
from opbench.results.store import load_run

from ..helpers import bench, document, gemm_runs, write

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args, cwd=None) -> tuple[int, str, str]:
    p = subprocess.run([sys.executable, "-m", "opbench", *map(str, args)], capture_output=True, text=True,
                       check=False, cwd=cwd)
    return p.returncode, p.stdout, p.stderr


def one_line_error(code: int, err: str, expected_code: int = 2) -> str:
    assert code == expected_code, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in folder.rglob("*.json")}


# --- timings the gate must refuse ------------------------------------------------------------

@pytest.mark.parametrize("value", [math.nan, math.inf, 0.0, -1e-3])
def test_non_finite_or_non_positive_timings_are_refused(tmp_path, value):
    base = gemm_runs(tmp_path, "a", [1e-3, 1.01e-3, 0.99e-3])
    bad = [write(tmp_path / f"b{i}.json", [bench("test_gemm[torch-cpu-eager-float32-64x64x64]", value)])
           for i in range(3)]
    before = snapshot(tmp_path)
    err = one_line_error(*run_cli("compare", *base, "--", *bad)[::2])
    assert "finite and positive" in err
    assert snapshot(tmp_path) == before


def test_the_same_run_twice_on_a_side_is_an_error(tmp_path):
    base = gemm_runs(tmp_path, "a", [1e-3, 1.01e-3, 0.99e-3])
    cand = gemm_runs(tmp_path, "b", [1.06e-3, 1.07e-3])
    copy = tmp_path / "b-copy.json"
    copy.write_bytes(cand[0].read_bytes())
    for listed in ([*cand, cand[0]], [*cand, copy]):  # the same file twice, or a copy of it
        err = one_line_error(*run_cli("compare", *base, "--", *listed)[::2])
        assert "same run twice" in err
    assert run_cli("compare", *base, "--", *cand)[0] in (0, 1)


def _status(path: Path, status: str, failed=()) -> Path:
    doc = json.loads(path.read_text())
    doc["machine_info"]["opbench"]["run"] = {"status": status, "failed": list(failed)}
    path.write_text(json.dumps(doc))
    return path


def test_interrupted_runs_are_refused_and_failed_runs_flagged(tmp_path):
    base = gemm_runs(tmp_path, "a", [1e-3, 1.01e-3, 0.99e-3])
    cand = gemm_runs(tmp_path, "b", [1e-3, 1.01e-3, 0.99e-3])
    _status(cand[1], "interrupted")
    err = one_line_error(*run_cli("compare", *base, "--", *cand)[::2])
    assert "interrupted" in err
    _status(cand[1], "failed", ["t::test_gemm[torch]"])
    code, out, _ = run_cli("compare", *base, "--", *cand)
    assert code == 0 and "test(s) failed" in out
    code, out, _ = run_cli("report", cand[1])
    assert code == 0 and "failed" in out


@pytest.mark.parametrize("option", [["--margin", "nan"], ["--margin", "-3"], ["--threshold", "inf"],
                                    ["--threshold", "-1"], ["--rule", "test_*=nan:5"], ["--rule", "test_*=-3:5"],
                                    ["--confidence", "0"], ["--confidence", "nan"]])
def test_gate_options_are_range_checked(tmp_path, option):
    base = gemm_runs(tmp_path, "a", [1e-3, 1.01e-3, 0.99e-3])
    cand = gemm_runs(tmp_path, "b", [2e-3, 2.01e-3, 1.99e-3])
    err = one_line_error(*run_cli("compare", *base, "--", *cand, *option)[::2])
    assert option[0] in err


def test_runs_must_be_at_least_one(tmp_path):
    err = one_line_error(*run_cli("upgrade-check", "--candidate", "x", "--runs", "0", "--workdir", tmp_path)[::2])
    assert "--runs" in err


# --- upgrade-check never reads another invocation's results -----------------------------------

def test_reused_workdir_never_feeds_stale_results(tmp_path, monkeypatch, capsys):
    work = tmp_path / "w"
    (work / "site").mkdir(parents=True)
    for side in ("baseline", "candidate"):  # what an earlier invocation left
        for i in range(1, 4):
            write(work / f"{side}-{i:02d}.json", [bench("test_x", 1e-3)])
    before = snapshot(work)

    def failing_pytest(cmd, **kw):  # every pytest run fails and saves nothing
        return subprocess.CompletedProcess(cmd, 1 if "pytest" in cmd else 0, stdout=str(work / "site"), stderr="")

    monkeypatch.setattr(envs.venv.EnvBuilder, "create", lambda self, folder: None)
    monkeypatch.setattr(upgrade.subprocess, "run", failing_pytest)
    code = cli.main(["upgrade-check", "--candidate", "torch==2.14.1", "--design", "process", "--runs", "3",
                     "--workdir", str(work),
                     "--", "benchmarks/ops"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if not line.startswith("opbench upgrade-check: ")]  # progress
    assert code == 2 and "saved no result in this invocation" in err and len(errors) == 1
    assert snapshot(work) == before


# --- output paths are checked before any work ------------------------------------------------

def test_output_paths_that_cannot_be_written(tmp_path):
    run = gemm_runs(tmp_path, "a", [1e-3])[0]
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    a_dir = tmp_path / "adir"
    a_dir.mkdir()
    for args, what in ((["report", run, "--html", a_dir], "--html"), (["report", run, "--plots", a_file], "--plots"),
                       (["report", run, "--html", a_file / "page.html"], "--html"),
                       (["upgrade-check", "--candidate", "x", "--workdir", a_file], "--workdir")):
        err = one_line_error(*run_cli(*args)[::2])
        assert what in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_unwritable_workdir(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    err = one_line_error(*run_cli("upgrade-check", "--candidate", "x", "--workdir", locked / "w")[::2])
    assert "cannot write" in err


# --- written files ---------------------------------------------------------------------------

def test_atomic_writes_respect_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        write_json_atomic(tmp_path / "a.json", {"x": 1})
        write_text_atomic(tmp_path / "b.html", "<p>")
    finally:
        os.umask(old)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "b.html").stat().st_mode & 0o777 == 0o644
    assert not list(tmp_path.glob(".*tmp*"))


def test_plots_are_written_atomically(tmp_path, monkeypatch):
    from opbench.results import plots

    run = load_run(write(tmp_path / "r.json", [bench(f"test_gemm[torch-cpu-eager-float32-{s}x{s}x{s}]", 1e-4 * s,
                                                     group=f"gemm-forward[cpu-float32-{s}x{s}x{s}]")
                                               for s in (64, 128)]))
    seen = []
    real = plots.replace_atomic
    monkeypatch.setattr(plots, "replace_atomic", lambda path, w: (seen.append(path), real(path, w))[1])
    images = plots.all_plots([run], tmp_path / "plots")
    assert images and sorted(seen) == sorted(images)
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in images)


# --- real data files -------------------------------------------------------------------------

def _mnist(folder: Path, images: bytes, labels: bytes) -> Path:
    (folder / "train-images-idx3-ubyte").write_bytes(images)
    (folder / "train-labels-idx1-ubyte").write_bytes(labels)
    return folder


def _idx(array: np.ndarray) -> bytes:
    import struct

    return b"\0\0\x08" + bytes([array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


@pytest.mark.parametrize("case", ["truncated header", "corrupt gzip", "too few labels", "label out of range"])
def test_malformed_data_files_are_one_line_data_errors(tmp_path, case):
    from opbench.workloads.models import catalogue, datasets
    from opbench.workloads.models.datasets import DataError

    images = _idx(np.zeros((8, 28, 28), np.uint8))
    labels = _idx(np.arange(8, dtype=np.uint8) % 10)
    if case == "truncated header":
        _mnist(tmp_path, images[:6], labels)
    elif case == "corrupt gzip":
        _mnist(tmp_path, images, labels)
        (tmp_path / "train-images-idx3-ubyte").unlink()
        (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    elif case == "too few labels":
        _mnist(tmp_path, images, _idx(np.zeros(5, np.uint8)))
    else:
        _mnist(tmp_path, images, _idx(np.full(8, 12, np.uint8)))
    with pytest.raises(DataError) as info:
        datasets.batch(catalogue.get("mlp"), 4, str(tmp_path))
    assert "\n" not in str(info.value)


# --- the bootstrap at any K ------------------------------------------------------------------

def test_bootstrap_memory_stays_bounded_at_k_100():
    import tracemalloc

    from opbench.results.stats import ratio_of_medians

    r = np.random.default_rng(0)
    base, cand = 1 + 0.02 * r.standard_normal(100), 1.1 + 0.02 * r.standard_normal(100)
    tracemalloc.start()
    ratio = ratio_of_medians(list(base), list(cand))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 20e6, peak  # the old O(K^4) ratio table needed about 1.2 GB here
    assert ratio.low < ratio.ratio < ratio.high and 1.05 < ratio.low


@pytest.mark.parametrize("k", [2, 3, 4, 5, 8])
def test_bootstrap_quantiles_match_the_full_ratio_table(k):
    from opbench.results.stats import _quantile_of_ratio, median_distribution

    r = np.random.default_rng(k)
    (bm, bp), (cm, cp) = median_distribution(list(r.uniform(1, 2, k))), median_distribution(list(r.uniform(1, 2, k)))
    ratios, probs = (cm[:, None] / bm[None, :]).ravel(), (cp[:, None] * bp[None, :]).ravel()
    order = np.argsort(ratios, kind="stable")
    ratios, cdf = ratios[order], np.cumsum(probs[order])
    for q in (0.005, 0.015, 0.25, 0.5, 0.985, 0.995):
        want = ratios[min(np.searchsorted(cdf, q - 1e-12), ratios.size - 1)]
        assert _quantile_of_ratio(cm, cp, bm, bp, q - 1e-12) == pytest.approx(want, rel=1e-9)


# --- pytest sessions: nothing unverified, implausible or partial is saved --------------------

INTERRUPTING = """
import os
import pytest
from opbench.suites.measure import measure

@pytest.mark.opbench(op="gemm")
def test_gemm(op_case, benchmark):
    measure(benchmark, op_case)

@pytest.mark.opbench(op="relu")
def test_relu(op_case, benchmark):
    calls = []
    def interrupted():
        calls.append(1)
        if len(calls) > 20:
            raise KeyboardInterrupt
    op_case.backend.op  # the case is real; its timing is cut short by Ctrl-C
    benchmark(interrupted)
"""


def test_ctrl_c_saves_what_finished_and_marks_the_run(pytester):
    pytester.makepyfile(test_bench=INTERRUPTING)
    out = pytester.path / "run.json"
    result = pytester.runpytest_subprocess("--framework", "numpy", "-k", "gemm and 256 or relu",
                                           f"--benchmark-json={out}", "--benchmark-max-time=0.01", "-p",
                                           "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    doc = json.loads(out.read_text())
    names = [b["name"] for b in doc["benchmarks"]]
    assert names == ["test_gemm[numpy-cpu-eager-float32-256x256x256]"]  # finished: kept; partial relu: not
    assert doc["machine_info"]["opbench"]["run"]["status"] == "interrupted"
    err = one_line_error(*run_cli("compare", out, "--", out)[::2])
    assert "interrupted" in err


def test_a_roofline_failure_leaves_no_timing(pytester):
    pytester.makepyfile(test_bench="import pytest\nfrom opbench.suites.measure import measure\n\n"
                                   "@pytest.mark.opbench(op='gemm')\n"
                                   "def test_gemm(op_case, benchmark):\n    measure(benchmark, op_case)\n")
    out = pytester.path / "run.json"
    result = pytester.runpytest_subprocess("--framework", "numpy", "-k", "256", "--peak-gflops", "0.001",
                                           f"--benchmark-json={out}", "--benchmark-max-time=0.01", "-p",
                                           "no:cacheprovider")
    result.stdout.fnmatch_lines(["*Implausible*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    if out.exists():  # pytest-benchmark writes nothing when no benchmark is left
        doc = json.loads(out.read_text())
        assert doc["benchmarks"] == [] and doc["machine_info"]["opbench"]["run"]["status"] == "failed"


def test_benchmark_json_into_a_folder_is_refused_up_front(pytester):
    pytester.makepyfile(test_bench="def test_x():\n    pass\n")
    (pytester.path / "folder").mkdir()
    result = pytester.runpytest_subprocess("--benchmark-json=folder", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--benchmark-json folder: is a folder, not a file*"])


@pytest.mark.parametrize("args, env, message", [
    (["--roofline-slack", "nan"], {}, "--roofline-slack: expected a finite number, got 'nan'"),
    (["--roofline-slack", "0.5"], {}, "--roofline-slack: expected a number above 1, got '0.5'"),
    ([], {"OPBENCH_PEAK_GFLOPS": "-5"}, "--peak-gflops (from OPBENCH_PEAK_GFLOPS): expected a number above 0"),
    (["--threads", "100000"], {}, "--threads takes counts from 1 to"),
])
def test_numeric_settings_are_range_checked(pytester, monkeypatch, args, env, message):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    pytester.makepyfile(test_bench="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess(*args, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str() and "Traceback" not in result.stderr.str()


SWEEP_BENCH = """
import os, time
import pytest
from opbench.suites.measure import measure

@pytest.mark.opbench(op="relu")
def test_relu(op_case, benchmark):
    if op_case.state.threads == 2:  # the second count: tell the test we are here, then wait for Ctrl-C
        open(os.environ["OPBENCH_TEST_MARK"], "w").close()
        time.sleep(60)
    measure(benchmark, op_case)
"""


def test_ctrl_c_during_a_sweep_keeps_finished_counts(tmp_path):
    (tmp_path / "test_sweep_bench.py").write_text(SWEEP_BENCH)
    mark, out = tmp_path / "mark", tmp_path / "sweep.json"
    env = {**os.environ, "OPBENCH_TEST_MARK": str(mark)}
    cmd = [sys.executable, "-m", "pytest", str(tmp_path / "test_sweep_bench.py"), "--framework", "numpy",
           "--threads", "1,2", f"--benchmark-json={out}", "--benchmark-max-time=0.01", "-p", "no:cacheprovider",
           "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml")]
    # Ctrl-C as at a terminal: a background job of a non-interactive shell (nohup, `make test &`)
    # inherits SIGINT ignored, and an ignored signal stays ignored across exec; a handled one does not.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        parent = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    deadline = time.monotonic() + 240
    while not mark.exists() and parent.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert mark.exists(), parent.communicate()
    os.killpg(parent.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground group
    stdout, stderr = parent.communicate(timeout=120)
    assert parent.returncode == pytest.ExitCode.INTERRUPTED, stdout + stderr
    assert "Traceback" not in stderr, stderr
    doc = json.loads(out.read_text())
    assert doc["benchmarks"] and all(b["name"].endswith("@t1") for b in doc["benchmarks"])
    assert doc["machine_info"]["opbench"]["run"]["status"] == "interrupted"


def test_document_helper_marks_runs_distinct():
    assert document([])["datetime"] != document([])["datetime"]
