"""The opbench command: report, compare, bad input (one line, exit 2), HTML and PNG output."""

from __future__ import annotations

import argparse
import base64
import json
import re
import subprocess
import sys

import pytest

from opbench import cli
from opbench.regression import envs
from opbench.regression import process as upgrade
from opbench.results.compare import compare, environment_diff
from opbench.results.store import load_run

from ..helpers import bench, gemm_runs, write


def run_cli(*args) -> tuple[int, str, str]:
    p = subprocess.run([sys.executable, "-m", "opbench", *args], capture_output=True, text=True, check=False)
    return p.returncode, p.stdout, p.stderr


def test_compare_flags_a_regression_and_exits_1(tmp_path):
    base = gemm_runs(tmp_path, "a", [1e-3, 1.01e-3, 0.99e-3, 1.0e-3])
    cand = gemm_runs(tmp_path, "b", [1.2e-3, 1.21e-3, 1.19e-3, 1.2e-3])
    code, out, err = run_cli("compare", *map(str, base), "--", *map(str, cand))
    assert code == 1, out + err
    assert re.search(r"test_gemm\[torch-cpu-eager-float32-64x64x64\].*1\.200.*REGRESSION", out)
    assert re.search(r"test_gemm\[numpy.*unchanged", out)
    assert "1 regressions, 0 improvements, 1 unchanged" in out


def test_compare_clean_exits_0_and_rules_override(tmp_path):
    base = gemm_runs(tmp_path, "a", [1e-3, 1.01e-3, 0.99e-3])
    cand = gemm_runs(tmp_path, "b", [1.1e-3, 1.11e-3, 1.09e-3])
    assert cli.main(["compare", *map(str, base), "--", *map(str, cand)]) == 1
    assert cli.main(["compare", *map(str, base), "--", *map(str, cand), "--rule", "test_gemm[[]torch*=15:20"]) == 0


def test_noisy_passes_unless_fail_on_noisy(tmp_path):
    """Spread-out candidate runs whose interval straddles the margin: undecided, which passes the
    gate by default and fails it with --fail-on-noisy."""
    base = gemm_runs(tmp_path, "a", [1e-3, 1.01e-3, 0.99e-3])
    cand = gemm_runs(tmp_path, "b", [0.95e-3, 1.1e-3, 1.25e-3])
    files = [*map(str, base), "--", *map(str, cand)]
    code, out, _ = run_cli("compare", *files)
    assert code == 0 and re.search(r"test_gemm\[torch.*noisy", out)
    assert "they do not fail the gate unless --fail-on-noisy" in out
    code, out, _ = run_cli("compare", *files, "--fail-on-noisy")
    assert code == 1 and "NOISY (1)" in out


def test_statistic_and_confidence_choose_what_is_compared(tmp_path, capsys):
    """Slower median rounds with unchanged fastest rounds: a regression only by the median."""
    def runs(side, medians):
        return [write(tmp_path / f"{side}{i}.json", [bench("test_x", m, fastest=1e-3)]) for i, m in enumerate(medians)]

    base, cand = runs("a", (1.1e-3, 1.11e-3, 1.09e-3)), runs("b", (1.4e-3, 1.41e-3, 1.39e-3))
    files = [*map(str, base), "--", *map(str, cand)]
    assert cli.main(["compare", *files]) == 0
    assert "baseline (min)" in capsys.readouterr().out
    assert cli.main(["compare", *files, "--statistic", "median", "--confidence", "99"]) == 1
    out = capsys.readouterr().out
    assert "baseline (median)" in out and "99% interval" in out and "REGRESSION" in out
    for bad in (["--confidence", "100"], ["--confidence", "high"], ["--statistic", "mean"]):
        code, _, err = run_cli("compare", *files, *bad)
        assert code == 2 and len(err.strip().splitlines()) == 1, err


def test_missing_benchmark_fails_and_new_is_listed(tmp_path, capsys):
    base = write(tmp_path / "a.json", [bench("test_a", 1e-3), bench("test_b", 1e-3)])
    cand = write(tmp_path / "b.json", [bench("test_a", 1e-3), bench("test_c", 1e-3)])
    assert cli.main(["compare", str(base), "--", str(cand)]) == 1
    out = capsys.readouterr().out
    assert "MISSING in the candidate (1)" in out and "test_b" in out
    assert "new in the candidate (1)" in out and "test_c" in out


def test_environment_diff_and_machine_warning(tmp_path):
    a = load_run(write(tmp_path / "a.json", [bench("t", 1e-3)], node="ci-1", torch_version="2.13.0"))
    b = load_run(write(tmp_path / "b.json", [bench("t", 1e-3)], node="ci-2", torch_version="2.14.1"))
    diff = environment_diff([a], [b])
    assert ("opbench.frameworks.torch.version", "2.13.0", "2.14.1") in diff
    result = compare([a], [b])
    assert any("different machines" in w for w in result.warnings)


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such file"),
        ("", "empty file"),
        ('{"benchmarks": [', "not valid JSON, truncated?"),
        ('{"hello": 1}', "not a pytest-benchmark result"),
        ('{"machine_info": {}, "benchmarks": []}', "holds no benchmarks"),
        ('{"machine_info": {}, "benchmarks": [{"name": "x"}]}', "lacks its statistics"),
    ],
)
def test_bad_files_are_one_line_and_exit_2(tmp_path, content, message):
    path = tmp_path / "run.json"
    if content is not None:
        path.write_text(content)
    code, _, err = run_cli("report", str(path))
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_storage_errors(tmp_path):
    code, _, err = run_cli("report", "--storage", str(tmp_path / "none"))
    assert code == 2 and "no such storage folder" in err
    (tmp_path / "st" / "Linux").mkdir(parents=True)
    code, _, err = run_cli("report", "--storage", str(tmp_path / "st"))
    assert code == 2 and "holds no saved runs" in err
    gemm_runs(tmp_path / "st" / "Linux", "0001_x", [1e-3])
    (tmp_path / "st" / "Linux" / "0001_x0.json").rename(tmp_path / "st" / "Linux" / "0001_x.json")
    code, _, err = run_cli("compare", "--storage", str(tmp_path / "st"), "0042", "--", "0001")
    assert code == 2 and "unknown run '0042'" in err
    code, out, _ = run_cli("report", "--storage", str(tmp_path / "st"))
    assert code == 0 and "0001_x.json" in out


def test_no_common_benchmarks(tmp_path):
    a = write(tmp_path / "a.json", [bench("test_a", 1e-3)])
    b = write(tmp_path / "b.json", [bench("test_b", 1e-3)])
    code, _, err = run_cli("compare", str(a), "--", str(b))
    assert code == 2 and "no benchmark in common" in err


def test_usage_errors_exit_2(tmp_path):
    assert run_cli("frobnicate")[0] == 2
    code, _, err = run_cli("compare", str(tmp_path / "a.json"))
    assert code == 2 and "compare needs baseline runs" in err
    a = write(tmp_path / "a.json", [bench("test_a", 1e-3)])
    code, _, err = run_cli("compare", str(a), "--", str(a), "--rule", "nonsense")
    assert code == 2 and "bad --rule" in err


def test_report_tables(tmp_path, capsys):
    run = write(tmp_path / "r.json", [
        bench("test_gemm[torch-cpu-eager-float32-64x64x64]", 1e-4),
        bench("test_gemm[numpy-cpu-eager-float32-64x64x64]", 2e-4, framework="numpy"),
        bench("test_gemm[mxnet-cpu-eager-float32-64x64x64]", 4e-4, framework="mxnet"),
    ])
    assert cli.main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    row = lambda title: next(line for line in out.split(title, 1)[1].splitlines() if line.startswith("gemm-forward"))
    assert row("median time").split()[1:] == ["200", "us", "400", "us", "100", "us", "*"]
    assert row("speedup over NumPy").split()[1:] == ["x1.00", "x0.50", "x2.00"]
    assert row("speedup over the slowest").split()[1:] == ["x2.00", "x1.00", "x4.00"]
    assert row("GFLOP/s").split()[1:] == ["2.6", "1.3", "5.2"]
    assert row("share of the device's ceiling").split()[1:] == ["1%", "0%", "2%"]
    assert row("share of NumPy's fp32 GEMM").split()[1:] == ["3%", "1%", "5%"]


def test_every_table_that_derives_from_a_busy_time_says_so(tmp_path, capsys):
    """A result timed on a busy machine is marked ! in the median table and in every figure derived from
    its time: its spread, GFLOP/s and shares, and a ratio that has it on either side."""
    busy = {"load": {"busy": True, "cpus": 2, "team": 2, "other_cpus": 1.2}}
    run = write(tmp_path / "r.json", [
        bench("test_gemm[torch-cpu-eager-float32-64x64x64]", 1e-4),
        bench("test_gemm[numpy-cpu-eager-float32-64x64x64]", 2e-4, framework="numpy", **busy),
        bench("test_gemm[mxnet-cpu-eager-float32-64x64x64]", 4e-4, framework="mxnet"),
    ])
    assert cli.main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    row = lambda title: next(line for line in out.split(title, 1)[1].splitlines() if line.startswith("gemm-forward"))
    assert row("median time").split()[1:] == ["200", "us", "!", "400", "us", "100", "us", "*"]
    assert row("GFLOP/s").split()[1:] == ["2.6", "!", "1.3", "5.2"]
    assert row("IQR / median").split()[2] == "!"
    # against NumPy's busy time every ratio is marked; against the slowest (MXNet's, not busy) only NumPy's own
    assert row("speedup over NumPy").split()[1:] == ["x1.00", "!", "x0.50", "!", "x2.00", "!"]
    assert row("speedup over the slowest").split()[1:] == ["x2.00", "!", "x1.00", "x4.00"]
    assert "GFLOP/s (! rests on a result timed on a busy machine)" in out


def test_report_shows_inference_latency_percentiles_only_where_recorded(tmp_path, capsys):
    latency = {"latency_p50_s": 1e-3, "latency_p90_s": 1.5e-3, "latency_p99_s": 4e-3, "latency_calls_per_round": 1}
    run = write(tmp_path / "r.json", [
        bench("test_inference[torch-cpu-eager-float32-mlp-b1]", 1e-3, group="mlp-inference[cpu-float32-mlp-b1]",
              flops=None, model="mlp", **latency),
        bench("test_gemm[torch-cpu-eager-float32-64x64x64]", 1e-4),
    ])
    assert cli.main(["report", str(run)]) == 0
    section = capsys.readouterr().out.split("latency per call, p50 / p90 / p99 (inference")[1]
    assert "mlp-inference[cpu-float32-mlp-b1]  1 ms / 1.5 ms / 4 ms" in section
    assert "gemm-forward" not in section


def test_report_shows_the_amp_speedup_over_each_models_float32_run(tmp_path, capsys):
    model = {"flops": None, "model": "resnet20"}
    run = write(tmp_path / "r.json", [
        bench("test_training[torch-cpu-eager-float32-resnet20-b8]", 30e-3,
              group="resnet20-training[cpu-float32-resnet20-b8]", **model),
        bench("test_training[torch-cpu-eager-amp-resnet20-b8]", 20e-3,
              group="resnet20-training[cpu-amp-resnet20-b8]", **model),
        bench("test_training[jax-cpu-eager-float32-resnet20-b8]", 40e-3, framework="jax",
              group="resnet20-training[cpu-float32-resnet20-b8]", **model),
        bench("test_gemm[torch-cpu-eager-float32-64x64x64]", 1e-4),
    ])
    assert cli.main(["report", str(run)]) == 0
    section = capsys.readouterr().out.split("mixed-precision speed-up: float32 time / amp time (models")[1]
    rows = [line.split() for line in section.splitlines() if line.startswith(("resnet20", "gemm"))]
    assert rows == [["resnet20-training[cpu-amp-resnet20-b8]", "-", "x1.50"]]  # columns jax/eager, torch/eager


def test_report_shows_what_ran_as_observed(tmp_path, capsys):
    seen = "thread states and CPU time from /proc/self/task/*/stat, 2048^3 float32 GEMMs in eager mode: 2 threads"
    run = write(tmp_path / "r.json", [
        bench("test_training[torch-cpu-eager-amp-lenet-b32]", 2e-3, group="lenet-training[cpu-amp-lenet-b32]",
              flops=None, model="lenet", threads=2, threads_observed=seen, compute_dtype="bfloat16",
              compute_types={"0": "bfloat16", "weights": "float32", "loss": "float32"}),
        bench("test_gemm[mxnet-cpu-eager-float32-64x64x64]", 1e-4, framework="mxnet", threads=1,
              threads_observed="not observed (/proc/self/task does not exist): the framework's own count"),
    ])
    assert cli.main(["report", str(run)]) == 0
    section = capsys.readouterr().out.split("what ran, observed:")[1]
    rows = {line.split("  ")[0]: line for line in section.splitlines() if line.startswith(("lenet", "gemm"))}
    assert "2 threads, bfloat16" in rows["lenet-training[cpu-amp-lenet-b32]"]
    assert "1 threads (said)" in rows["gemm-forward[cpu-float32-64x64x64]"]


def test_no_amp_table_without_an_amp_run(tmp_path, capsys):
    run = write(tmp_path / "r.json", [bench("test_gemm[torch-cpu-eager-float32-64x64x64]", 1e-4)])
    assert cli.main(["report", str(run)]) == 0
    assert "mixed-precision" not in capsys.readouterr().out


def test_the_report_reads_the_percentiles_measure_records():
    from opbench.results import report
    from opbench.suites import measure

    assert report.LATENCY_PERCENTILES == measure.LATENCY_PERCENTILES


def test_html_and_png_output(tmp_path):
    from opbench.results.htmlpage import caption

    benches = [bench(f"test_gemm[{fw}-cpu-eager-float32-{s}x{s}x{s}]", t * s**3 / 64**3,
                     group=f"gemm-forward[cpu-float32-{s}x{s}x{s}]", framework=fw, flops=2 * s**3)
               for fw, t in (("torch", 1e-4), ("numpy", 2e-4)) for s in (64, 128, 256)]
    benches += [bench(f"test_gemm[torch-cpu-eager-float32-64x64x64]@t{n}", 1e-4 / n, framework="torch")
                for n in (1, 2)]
    benches += [bench("test_training[torch-cpu-eager-float32-mlp-b128]", 1e-3,
                      group="mlp-training[cpu-float32-mlp-b128]", flops=None, model="mlp")]
    run = write(tmp_path / "r.json", benches)
    page, plots = tmp_path / "out" / "report.html", tmp_path / "plots"
    assert cli.main(["report", str(run), "--html", str(page), "--plots", str(plots)]) == 0
    pngs = sorted(p.name for p in plots.glob("*.png"))
    assert any(p.startswith("bars-gemm") for p in pngs) and any(p.startswith("scaling-gemm") for p in pngs)
    assert any(p.startswith("threads-") for p in pngs) and "training-steps.png" in pngs
    text = page.read_text()
    for name in pngs:
        png = (plots / name).read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 1000
        assert f'title="{name}"' in text and f"<code>{name}</code>" in text
        assert base64.b64encode(png).decode() in text
        assert "From run r (one run); cpu, " in caption(plots / name)  # where the data came from
    assert "median time" in text and "speedup over NumPy" in text


def test_scaling_exponent():
    from opbench.results.plots import fit_exponent

    assert fit_exponent([1, 10, 100], [2, 20, 200]) == pytest.approx(1.0)
    assert fit_exponent([1, 10, 100], [1, 100, 10000]) == pytest.approx(2.0)
    assert fit_exponent([5, 5], [1, 2]) is None


def test_upgrade_check_runs_abba_and_compares(tmp_path, monkeypatch):
    assert upgrade.abba(3) == ["A", "B", "B", "A", "A", "B"]
    calls = []

    def fake_runner(cmd, **kw):
        calls.append(cmd)
        out = next((c.split("=", 1)[1] for c in cmd if c.startswith("--benchmark-json=")), None)
        if out:
            side = "baseline" if "baseline" in out else "candidate"
            med = 1e-3 if side == "baseline" else 1.3e-3
            write(__import__("pathlib").Path(out), [bench("test_x", med * (1 + 0.001 * len(calls)))])
        return subprocess.CompletedProcess(cmd, 0, stdout=str(tmp_path / "site"), stderr="")

    (tmp_path / "site").mkdir()
    monkeypatch.setattr(envs.venv.EnvBuilder, "create", lambda self, folder: None)
    monkeypatch.setattr(upgrade.subprocess, "run", fake_runner)
    code = cli.main(["upgrade-check", "--baseline", "torch==2.13.0", "--candidate", "torch==2.14.1",
                     "--design", "process", "--runs", "3",
                     "--workdir", str(tmp_path / "w"), "--", "benchmarks/ops", "-m", "gemm"])
    assert code == 1  # 30% slower: a regression
    pip = [c for c in calls if "install" in c]
    assert [c[-1] for c in pip] == ["torch==2.13.0", "torch==2.14.1"]
    runs = [c for c in calls if "pytest" in c]
    assert len(runs) == 6 and all(c[3:6] == ["benchmarks/ops", "-m", "gemm"] for c in runs)
    sides = ["baseline" if "baseline" in next(x for x in c if x.startswith("--benchmark-json")) else "candidate"
             for c in runs]
    assert sides == ["baseline", "candidate", "candidate", "baseline", "baseline", "candidate"]
    assert "site.addsitedir" in (tmp_path / "site" / "_opbench_shared.pth").read_text()


def test_saved_json_round_trips(tmp_path):
    path = gemm_runs(tmp_path, "a", [1e-3])[0]
    run = load_run(path)
    assert json.loads(path.read_text())["benchmarks"][0]["fullname"] in run.benchmarks


def test_an_interrupted_command_leaves_no_worker_running_even_one_nobody_holds(tmp_path, monkeypatch):
    """SIGTERM landing between a worker's start and its owner storing it left the worker running
    after `opbench ab` ended (seen on a busy machine): every started worker is registered, and an
    interrupted command kills whatever is still registered."""
    from opbench.core.processes import LIVE, WorkerProcess

    started = []

    def interrupted(args):
        started.append(WorkerProcess("baseline", ["sleep", "60"], {}, tmp_path / "w.log"))
        raise KeyboardInterrupt  # before anyone could close it

    monkeypatch.setattr(cli, "parser", lambda: _Parser(interrupted))
    assert cli.main(["ab"]) == 130
    (worker,) = started
    assert worker.proc.poll() is not None and worker not in LIVE


def test_an_interrupt_that_lands_while_a_worker_starts_still_leaves_none_running(tmp_path, monkeypatch):
    """CI saw a worker outlive `opbench ab`: SIGTERM went to another thread (NumPy's BLAS threads
    do not block it), so the Python handler raised inside subprocess.Popen even with the signal
    blocked in the main thread, and the started worker was never registered. Here the signal is
    sent from inside Popen with such a thread running; the worker must be killed all the same."""
    import os
    import signal
    import threading
    import types

    from opbench.core import processes

    stop = threading.Event()
    other = threading.Thread(target=stop.wait, args=(60,), daemon=True)  # a thread that does not block signals
    other.start()
    started = []

    def popen(*args, **kwargs):
        proc = subprocess.Popen(*args, **kwargs)
        started.append(proc)
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100):  # 1 s for the signal's handler to run here, if it would
            threading.Event().wait(0.01)
        return proc

    monkeypatch.setattr(processes, "subprocess", types.SimpleNamespace(Popen=popen, PIPE=subprocess.PIPE,
                                                                       TimeoutExpired=subprocess.TimeoutExpired))

    def command(args):
        processes.WorkerProcess("baseline", ["sleep", "60"], {}, tmp_path / "w.log")
        pytest.fail("the interrupt was lost")

    monkeypatch.setattr(cli, "parser", lambda: _Parser(command))
    try:
        assert cli.main(["ab"]) == 130
    finally:
        stop.set()
    (proc,) = started
    running = proc.poll() is None
    if running:  # not left behind by a failing test
        proc.kill()
        proc.wait()
    assert not running, "the worker started while the interrupt landed still runs"
    assert not processes.LIVE


class _Parser:
    def __init__(self, func):
        self.func = func

    def parse_known_args(self, argv):
        return type("Args", (), {"func": staticmethod(self.func)})(), []


def test_one_run_per_side_gives_no_verdict_and_exits_0(tmp_path):
    """Two single runs of one environment differ by run-to-run noise: the ratio is shown with no
    verdict and exit 0, unless a single-run threshold is asked for explicitly."""
    base = write(tmp_path / "a.json", [bench("test_x", 1.0e-3), bench("test_y", 1.0e-3)])
    cand = write(tmp_path / "b.json", [bench("test_x", 1.3e-3), bench("test_y", 0.7e-3)])
    code, out, err = run_cli("compare", str(base), "--", str(cand))
    assert code == 0, out + err
    assert re.search(r"test_x .*1\.300 .*one run per side .*no interval", out), out
    assert "0 regressions, 0 improvements" in out and "2 without a verdict (one run per side)" in out
    code, out, _ = run_cli("compare", str(base), "--", str(cand), "--single-run-threshold", "10")
    assert code == 1 and re.search(r"test_x .*REGRESSION", out) and re.search(r"test_y .*improvement", out)
    assert "blind to run-to-run noise" in out


def test_busy_data_never_decides_unmarked(tmp_path):
    """Two runs wholly timed on a busy machine (an A/A pair: the same code), compared with a single-run
    threshold: every verdict says it rests on busy data, the summary counts them per side, and
    --fail-on-busy refuses to decide (exit 1) even where the ratio alone says unchanged."""
    load = {"busy": True, "cpus": 2, "team": 2, "other_cpus": 1.2}
    base = write(tmp_path / "a.json", [bench("test_x", 1.0e-3, load=load), bench("test_y", 1.0e-3, load=load)])
    cand = write(tmp_path / "b.json", [bench("test_x", 95e-3, load=load), bench("test_y", 1.01e-3)])
    code, out, _ = run_cli("compare", str(base), "--", str(cand), "--single-run-threshold", "10")
    assert code == 1 and re.search(r"test_x .*REGRESSION \(busy both\)", out), out
    assert re.search(r"test_y .*unchanged \(busy baseline\)", out), out
    assert "2 of 2 benchmarks rest on a result timed on a busy machine (2 on the baseline, 1 on the candidate)" in out
    assert out.rstrip().endswith("2 on busy data"), out
    verdicts = [line for line in out.splitlines() if line.startswith("test_")]
    assert len(verdicts) == 2 and all("(busy " in line for line in verdicts), out
    code, out, _ = run_cli("compare", str(base), "--", str(cand), "--single-run-threshold", "10", "--fail-on-busy")
    assert code == 1 and "FAILED: --fail-on-busy" in out
    quiet = write(tmp_path / "c.json", [bench("test_x", 1.0e-3), bench("test_y", 1.0e-3)])
    code, out, _ = run_cli("compare", str(quiet), "--", str(cand), "--single-run-threshold", "10", "--fail-on-busy")
    assert code == 1 and re.search(r"test_x .*REGRESSION \(busy candidate\)", out), out
    calm = write(tmp_path / "d.json", [bench("test_x", 1.01e-3), bench("test_y", 0.99e-3)])
    code, out, _ = run_cli("compare", str(quiet), "--", str(calm), "--single-run-threshold", "10", "--fail-on-busy")
    assert code == 0 and "busy" not in out, out


def test_the_same_run_on_both_sides_is_a_usage_error(tmp_path):
    run = write(tmp_path / "a.json", [bench("test_x", 1.0e-3)])
    copy = tmp_path / "copy.json"
    copy.write_text(run.read_text())
    for other in (run, copy):
        code, _, err = run_cli("compare", str(run), "--", str(other))
        assert code == 2 and "the same run is on both sides" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("form", ["{}", "file://{}"])
def test_storage_takes_pytest_benchmarks_forms(tmp_path, form):
    folder = tmp_path / "store" / "Linux-CPython-3.11-64bit"
    folder.mkdir(parents=True)
    write(folder / "0001_first.json", [bench("test_x", 1.0e-3)])
    code, out, err = run_cli("report", "--storage", form.format(tmp_path / "store"))
    assert code == 0 and "0001_first" in out, err


def test_other_storage_kinds_are_refused_by_name():
    code, _, err = run_cli("report", "--storage", "elasticsearch+https://host/index/doctype")
    assert code == 2 and "file storage only" in err and len(err.strip().splitlines()) == 1


def test_version():
    from opbench import __version__

    code, out, _ = run_cli("--version")
    assert code == 0 and out.strip() == f"opbench {__version__}"


@pytest.mark.parametrize("command", ["report", "compare", "upgrade-check", "ab"])
def test_every_command_explains_itself(command):
    """--help: a description, at least one example, every exit code; no short option a user could
    mistake for pytest's (pytest's options go after '--')."""
    code, out, _ = run_cli(command, "--help")
    assert code == 0
    description = out.split("\n\n")[1]
    assert len(description.split()) > 8, description
    assert f"\n  opbench {command} " in out.split("examples:")[1]
    codes = out.split("exit codes:")[1]
    assert all(f"\n  {c}  " in codes for c in ("0", "2", "130"))
    sub = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    shorts = [o for a in sub._actions for o in a.option_strings if not o.startswith("--")]
    assert shorts == ["-h"], shorts


def test_compare_usage_names_the_candidate():
    _, out, _ = run_cli("compare", "--help")
    assert out.startswith("usage: opbench compare") and "-- CANDIDATE" in out.splitlines()[0]


@pytest.mark.parametrize("command", [["upgrade-check", "--candidate", "jax==0.10.2"],
                                     ["ab", "--baseline-python", sys.executable, "--candidate-python", sys.executable]])
def test_pytest_options_without_the_dashes_get_a_hint(command):
    code, _, err = run_cli(*command, "benchmarks/ops", "-m", "gemm")
    assert code == 2 and "unrecognized arguments: -m" in err and "go after '--'" in err
    assert len(err.strip().splitlines()) == 1
