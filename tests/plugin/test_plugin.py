"""The pytest interface, run as a user runs it (pytester): ids, groups, markers, selection,
skips with reasons, usage errors and the report header."""

from __future__ import annotations

import json
import re
import sys

import pytest

from opbench import frameworks as backends
from opbench.harness import config

BENCH = """
import pytest
from opbench.suites.measure import measure

@pytest.mark.opbench(op="gemm")
def test_gemm(op_case, benchmark):
    measure(benchmark, op_case)

@pytest.mark.opbench(op="gemm", direction="backward")
def test_gemm_backward(op_case, benchmark):
    measure(benchmark, op_case)

@pytest.mark.opbench(op="relu")
def test_relu(op_case, benchmark):
    measure(benchmark, op_case)
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_bench=BENCH)
    pytester.makeini("[pytest]\naddopts = --strict-markers\n")
    return pytester


def test_ids_and_markers(suite):
    result = suite.runpytest("--framework", "numpy", "--collect-only", "-q")
    result.stdout.fnmatch_lines([
        "test_bench.py::test_gemm[[]numpy-cpu-eager-float32-256x256x256[]]",
        "test_bench.py::test_gemm[[]numpy-cpu-eager-float32-1024x1024x1024[]]",
        "test_bench.py::test_gemm_backward[[]numpy-cpu-eager-float32-256x256x256[]]",
        "test_bench.py::test_relu[[]numpy-cpu-eager-float32-256x1024[]]",
    ])


def test_marker_selection(suite):
    selection = "numpy and gemm and not backward"
    result = suite.runpytest("--framework", "numpy,torch", "-m", selection, "--collect-only", "-q")
    lines = [line for line in result.stdout.lines if "::" in line]
    assert lines and all("test_gemm[numpy-" in line for line in lines)
    assert len(lines) == 2


def test_env_variable_selects_framework(suite, monkeypatch):
    monkeypatch.setenv("OPBENCH_FRAMEWORK", "numpy")
    monkeypatch.setenv("OPBENCH_PROFILE", "quick")
    result = suite.runpytest("--collect-only", "-q")
    assert all("-numpy-" not in line or "numpy-cpu" in line for line in result.stdout.lines)
    assert not any("torch-cpu" in line for line in result.stdout.lines)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--framework", "numpy,caffe"], f"unknown framework 'caffe'; valid: {', '.join(config.FRAMEWORKS)}"),
        (["--device", "tpu"], "unknown device 'tpu'; valid: cpu, gpu"),
        (["--mode", "lazy"], f"unknown mode 'lazy'; valid: {', '.join(config.MODES)}"),
        (["--dtype", "float64"], "unknown dtype 'float64'; valid: float32, float16, bfloat16"),
        (["--profile", "huge"], "unknown profile 'huge'; valid: quick, full"),
        (["--threads", "two"], "--threads takes whole numbers, got 'two'"),
    ],
)
def test_bad_option_is_one_usage_error(suite, args, message):
    result = suite.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: *{message}"])
    assert "Traceback" not in result.stderr.str()


def test_asking_for_a_device_nothing_can_use_is_a_usage_error(suite, monkeypatch):
    """--device gpu where nothing selected can run on a GPU measures nothing: one usage line and
    exit 4, not 'all skipped' and exit 0, from the flag and from the variable alike."""
    result = suite.runpytest("--framework", "numpy", "--device", "gpu", "--benchmark-disable")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --device gpu, --framework numpy: none of the 5 selected benchmarks can run "
                                 "here (NumPy runs on the CPU only)"])
    monkeypatch.setenv("OPBENCH_DEVICE", "gpu")
    result = suite.runpytest("--framework", "numpy", "--benchmark-disable")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --device gpu (from OPBENCH_DEVICE), --framework numpy: none of the 5 *"])


def test_what_cannot_run_beside_what_can_is_skipped_with_its_reason(suite):
    result = suite.runpytest("--framework", "numpy", "--device", "all", "-rs", "--benchmark-disable")
    result.stdout.fnmatch_lines(["*SKIPPED*NumPy runs on the CPU only*"])
    result.assert_outcomes(passed=5, skipped=5)


def test_a_session_imports_only_the_frameworks_it_selected(suite):
    """`-m numpy` (or --framework numpy) must not pay for TensorFlow's or JAX's start-up."""
    code = ("import sys, pytest; code = pytest.main(['-q', '-p', 'no:cacheprovider', '--benchmark-disable', "
            "'-m', 'numpy and relu']); print('IMPORTED', sorted(m for m in ('torch', 'tensorflow', 'jax', 'mxnet') "
            "if m in sys.modules)); sys.exit(code)")
    result = suite.run(sys.executable, "-c", code)
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["IMPORTED []"])


def test_missing_framework_skips_with_reason(suite, monkeypatch):
    """Beside a framework that runs, a missing one is skipped with the reason; asked for alone, it
    would measure nothing: a usage error."""
    monkeypatch.setitem(backends.PACKAGES, "mxnet", "no_such_package_for_opbench")
    monkeypatch.setattr(backends, "_loaded", {})  # a private cache for this test, restored after
    result = suite.runpytest_inprocess("--framework", "numpy,mxnet", "-rs", "--benchmark-disable", "-p",
                                       "no:cacheprovider")
    result.stdout.fnmatch_lines(["*SKIPPED*mxnet is not installed*"])
    result.assert_outcomes(passed=5, skipped=10)  # MXNet's two modes
    alone = suite.runpytest_inprocess("--framework", "mxnet", "--benchmark-disable", "-p", "no:cacheprovider")
    assert alone.ret == pytest.ExitCode.USAGE_ERROR
    alone.stderr.fnmatch_lines(["ERROR: --framework mxnet: none of the 10 selected benchmarks can run here "
                                "(mxnet is not installed*)"])


def test_broken_framework_import_becomes_skip_reason(monkeypatch, tmp_path):
    (tmp_path / "brokenfw").mkdir()
    (tmp_path / "brokenfw" / "__init__.py").write_text("raise RuntimeError('libfoo.so: cannot open shared object')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(backends.PACKAGES, "mxnet", "brokenfw")
    monkeypatch.setattr(backends, "_loaded", {})
    monkeypatch.setattr(backends.importlib, "import_module", lambda name: __import__("brokenfw"))
    with pytest.raises(backends.Unavailable, match=r"mxnet failed to import: RuntimeError: libfoo\.so"):
        backends.load("mxnet")


def test_header_and_saved_result(suite, monkeypatch):
    out = suite.path / "run.json"
    monkeypatch.setenv("GOMP_SPINCOUNT", "10000")  # how idle OpenMP workers wait is recorded where set
    result = suite.runpytest(
        "--framework", "numpy", "-k", "relu", "--benchmark-json", str(out), "--benchmark-max-time=0.01",
    )
    result.stdout.fnmatch_lines(["opbench: profile=quick devices=cpu dtypes=float32 precisions=float32 threads=*",
                                 "  numpy *: threads *"])
    result.assert_outcomes(passed=1)
    saved = json.loads(out.read_text())
    bench = saved["benchmarks"][0]
    assert bench["group"] == "relu-forward[cpu-float32-256x1024]"
    for key in ("framework", "framework_version", "device", "mode", "dtype", "shape", "threads", "flops", "bytes",
                "gflops", "gbps", "max_abs_err", "first_call_s", "load"):
        assert key in bench["extra_info"], key
    info = saved["machine_info"]
    assert "hz_actual" not in info["cpu"] and "hz_advertised" not in info["cpu"]
    assert info["opbench"]["frameworks"]["numpy"]["version"]
    assert info["opbench"]["threads"] >= 1
    assert info["opbench"]["malloc"].split()[0] in ("steady", "default")  # default where there is no glibc
    assert info["opbench"]["openmp_wait"]["GOMP_SPINCOUNT"] == "10000"


def test_compare_shows_side_by_side_and_verdicts(suite):
    args = ["--framework", "numpy", "-k", "relu", "--benchmark-max-time=0.01", "--benchmark-storage=store"]
    first = suite.runpytest(*args, "--benchmark-autosave")
    first.assert_outcomes(passed=1)
    first.stdout.fnmatch_lines(["opbench: median time (* fastest, ! timed on a busy machine), frameworks and modes "
                                "side by side",
                                "relu-forward[[]cpu-float32-256x1024[]]*"])
    second = suite.runpytest(*args, "--benchmark-compare")
    second.stdout.fnmatch_lines(["opbench: against *0001_*.json (candidate: this session)",
                                 "environment: identical machine_info on both sides",
                                 "note: one run per side: no interval, so no verdict (1 benchmarks)*",
                                 # "(busy baseline)" and the like where the machine was loaded: that is
                                 # opbench saying so, not the outcome this test holds
                                 "test_relu[[]numpy-cpu-eager-float32-256x1024[]]*one run per side*no interval*",
                                 "*0 regressions, 0 improvements*1 without a verdict (one run per side)*"])
    assert "machine_info is different" not in second.stdout.str() + second.stderr.str()
    assert second.ret == 0


def test_an_interrupted_run_is_never_the_baseline(suite):
    """After Ctrl-C the saved run is marked interrupted: --benchmark-compare takes the latest complete
    run and says so; naming the interrupted one is a usage error, one line."""
    args = ["--framework", "numpy", "-k", "relu", "--benchmark-max-time=0.01", "--benchmark-storage=store"]
    suite.runpytest(*args, "--benchmark-autosave").assert_outcomes(passed=1)
    (first,) = suite.path.glob("store/*/0001_*.json")
    doc = json.loads(first.read_text())
    doc["machine_info"]["opbench"]["run"]["status"] = "interrupted"
    (first.parent / "0002_interrupted.json").write_text(json.dumps(doc))
    again = suite.runpytest(*args, "--benchmark-compare")
    assert again.ret == 0, again.stdout.str()
    again.stdout.fnmatch_lines([f"opbench: --benchmark-compare: against {first.stem}, the latest complete run "
                                "(0002_interrupted was interrupted)", f"opbench: against *{first.name}*"])
    named = suite.runpytest(*args, "--benchmark-compare=0002")
    assert named.ret == pytest.ExitCode.USAGE_ERROR
    named.stderr.fnmatch_lines(["ERROR: --benchmark-compare 0002: 0002_interrupted was interrupted, its timings "
                                "are incomplete; compare with a complete run"])


def test_pytest_benchmarks_compare_crash_is_still_there_to_work_around(tmp_path, monkeypatch):
    """pytest-benchmark (issue 217) crashes when it warns about a different machine_info with its
    storage outside the working directory. If this test fails, pytest-benchmark fixed it and the
    hook wrapper in opbench.pytest_plugin (pytest_benchmark_compare_machine_info) can go."""
    import logging

    from pytest_benchmark import plugin
    from pytest_benchmark.storage.file import FileStorage

    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    outside = FileStorage(tmp_path / "store", logger=logging.getLogger("t"))
    session = type("Session", (), {"storage": outside, "logger": type("L", (), {"warning": print})()})()
    with pytest.raises(ValueError, match="subpath"):
        plugin.pytest_benchmark_compare_machine_info(None, session, {"a": 1}, {"machine_info": {"a": 2}})


def test_compare_with_storage_outside_the_working_directory(suite, tmp_path_factory):
    """The README's compare workflow with the storage elsewhere, a framework version changed in the
    saved run: no crash, no pytest-benchmark warning, and the difference as one line."""
    store = tmp_path_factory.mktemp("outside-store")
    args = ["--framework", "numpy", "-k", "relu", "--benchmark-max-time=0.01", f"--benchmark-storage=file://{store}"]
    suite.runpytest(*args, "--benchmark-autosave").assert_outcomes(passed=1)
    (saved,) = store.glob("*/0001_*.json")
    doc = json.loads(saved.read_text())
    doc["machine_info"]["opbench"]["frameworks"]["numpy"]["version"] = "0.9.9"  # a version no line of opbench runs
    saved.write_text(json.dumps(doc))
    second = suite.runpytest(*args, "--benchmark-compare")
    text = second.stdout.str() + second.stderr.str()
    assert second.ret == 0, text
    assert "INTERNALERROR" not in text and "machine_info is different" not in text
    second.stdout.fnmatch_lines(["environment difference (baseline -> candidate):",
                                 "  opbench.frameworks.numpy.version: 0.9.9 -> *"])


@pytest.mark.parametrize("args", [["--mode", "compile", "-m", "not relu"], ["--mode", "eager,compile"]])
def test_a_benchmark_without_a_case_in_the_chosen_modes_is_not_generated(suite, args):
    """Creation operators run eager only: under --mode compile they have no case. That was an empty
    parametrisation, a NOTSET item without markers, and an INTERNALERROR when the plugin read it.
    (In a subprocess: the selection imports torch, and an in-process run would import it again.)"""
    suite.makepyfile(test_creation="from opbench import api\n"
                                   "for op in api.builtin_operators('creation'):\n"
                                   "    globals().update(op.benchmarks())\n")
    result = suite.runpytest_subprocess("--framework", "numpy,torch", *args, "--collect-only", "-q")
    text = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in text and "NOTSET" not in text, text
    ids = [line for line in result.stdout.lines if "::" in line]
    assert ids and all("-compile-" in i or "-eager-" in i for i in ids), text
    assert any("test_creation.py" in i for i in ids) == ("eager" in args[1])
    # the dropped placeholders count as deselected: pytest's count is what runs (it said "N
    # collected" and listed fewer)
    counted = re.search(r"(\d+)(?:/\d+)? tests? collected", result.stdout.str())
    assert counted and int(counted[1]) == len(ids), text


@pytest.mark.parametrize("args, line", [
    (["--framework", "torch", "--mode", "jit"], "opbench: torch has no mode 'jit'; its modes: eager, compile"),
    (["--framework", "numpy", "-m", "gpu"], "opbench: no gpu cases: devices are chosen with --device (now: cpu)"),
])
def test_a_selection_that_leaves_nothing_says_why(suite, args, line):
    result = suite.runpytest(*args, "--benchmark-disable")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines([line])
    assert "INTERNALERROR" not in result.stdout.str()


def test_inference_runs_at_batch_1_beside_the_models_batch_and_training_at_its_batch_only():
    from opbench.harness.config import Settings
    from opbench.suites.models.cases import model_cases

    settings = Settings(frameworks=("torch",), modes=("eager",))
    inference = [c.id for c in model_cases(settings, "inference") if c.name == "mlp"]
    training = [c.id for c in model_cases(settings, "training") if c.name == "mlp"]
    assert inference == ["torch-cpu-eager-float32-mlp-b1", "torch-cpu-eager-float32-mlp-b128"]
    assert training == ["torch-cpu-eager-float32-mlp-b128"]


def test_data_dir_errors_are_one_line(pytester: pytest.Pytester, tmp_path):
    pytest.importorskip("torch")  # its MLP reads the data; the legacy line has no PyTorch
    pytester.makepyfile(test_e2e="""
from opbench.suites.measure import measure

def test_inference(model_case, benchmark):
    measure(benchmark, model_case)
""")
    result = pytester.runpytest_subprocess("--framework", "torch", "--mode", "eager", "-k", "mlp and b128",
                                           "--benchmark-disable", "--data-dir", str(tmp_path))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*--data-dir: missing data file */train-images-idx3-ubyte (or *.gz)"])
    assert "Traceback" not in result.stdout.str()
    missing = pytester.runpytest("--data-dir", str(tmp_path / "nope"))
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["ERROR: --data-dir '*nope' is not a folder"])


def test_a_session_without_opbench_benchmarks_pays_nothing(pytester):
    """The plugin is active in every pytest session of its environment: where no opbench
    benchmark is collected it imports no framework, pins no thread, measures no peak and prints
    no header."""
    pytester.makepyfile(test_other="""
        import sys

        def test_unrelated():
            from opbench import frameworks as backends

            assert not (set(backends.PACKAGES.values()) - {"numpy"}) & set(sys.modules)
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "opbench:" not in result.stdout.str() and "roofline" not in result.stdout.str()
    result.stdout.fnmatch_lines(["benchmark: * warmup=False *"])  # pytest-benchmark's own default, untouched


def test_a_benchmark_that_fails_in_its_first_timed_round_leaves_the_summary_whole(pytester):
    """Node 1 killed during the timed steps: pedantic's first round raised, its statistics were
    empty, and opbench's summary crashed the session with 'min() arg is an empty sequence'."""
    pytester.makepyfile(test_rounds="""
        def test_dies_while_timed(benchmark):
            def step():
                raise RuntimeError("Connection closed by peer")
            benchmark.pedantic(step, rounds=5, iterations=1)

        def test_fine(benchmark):
            benchmark(lambda: sum(range(10)))
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    assert "INTERNALERROR" not in result.stdout.str() and "Traceback" not in result.stderr.str()


def test_a_distributed_failure_is_reported_as_its_one_line_unless_a_traceback_is_asked_for(pytester):
    pytester.makepyfile(test_dist="""
        from opbench.suites.distributed.group import DistributedError

        def test_group():
            raise DistributedError("torch ddp: the rank 1 worker died (exit code 3): boom")

        def test_other():
            raise ValueError("an ordinary failure keeps its traceback")
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "DistributedError: torch ddp: the rank 1 worker died (exit code 3): boom" in out
    assert 'raise DistributedError("torch ddp' not in out and 'raise ValueError("an ordinary' in out
    long = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--tb=long").stdout.str()
    assert 'raise DistributedError("torch ddp' in long


@pytest.mark.parametrize("where", ["ini", "env", "command line"])
def test_a_warmup_setting_is_respected_wherever_it_is_given(suite, monkeypatch, where):
    args = ["--framework", "numpy", "-k", "relu", "--benchmark-max-time=0.01"]
    if where == "ini":
        suite.makeini("[pytest]\naddopts = --strict-markers --benchmark-warmup=off\n")
    elif where == "env":
        monkeypatch.setenv("PYTEST_ADDOPTS", "--benchmark-warmup=off")
    else:
        args.append("--benchmark-warmup=off")
    result = suite.runpytest(*args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["opbench: * warmup=off"])


def test_warmup_is_on_by_default_in_opbench_sessions(suite):
    """pytest-benchmark prints its header (warmup=False) before opbench turns warm-up on: opbench's
    line says so, rather than contradict it."""
    result = suite.runpytest("--framework", "numpy", "-k", "relu", "--benchmark-max-time=0.01")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["benchmark: * warmup=False *",
                                 "opbench: * warmup=on (opbench's default, after pytest-benchmark's line above; *"])


def test_frameworks_sharing_an_openmp_runtime_run_apart_mxnet_last(suite):
    """torch and MXNet share libgomp (opbench.harness.openmp): their benchmarks are not interleaved."""
    result = suite.runpytest("--framework", "numpy,torch,mxnet", "-m", "gemm and not backward", "--collect-only", "-q")
    frameworks = [line.split("[")[1].split("-")[0] for line in result.stdout.lines if "::" in line]
    assert frameworks, result.stdout.str()
    order = [f for i, f in enumerate(frameworks) if i == 0 or frameworks[i - 1] != f]
    assert order == [f for f in ("numpy", "torch", "mxnet") if f in frameworks]
