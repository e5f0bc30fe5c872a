"""--isolate framework: each framework's benchmarks in workers of their own, merged into one run; a
worker that dies costs the case it was in, and one past --worker-max-rss is replaced between cases."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest

from opbench.harness import isolation
from tests.helpers import study as study_module

BENCHMARKS = """
import os, signal
import pytest
from opbench.suites.measure import measure

@pytest.mark.opbench(op="relu")
def test_relu(op_case, benchmark):
    if os.environ.get("CRASH_IN") == op_case.case.framework:
        os.kill(os.getpid(), signal.SIGSEGV)  # what a framework's native code does on a bad day
    measure(benchmark, op_case)

@pytest.mark.opbench(op="sigmoid")
def test_sigmoid(op_case, benchmark):
    measure(benchmark, op_case)

def test_plain():
    pass
"""

# Each process of the run notes, as it ends, whether it was a worker and which frameworks it imported.
IMPORTS = """
import atexit, json, os, sys

def _note():
    seen = sorted(m for m in ("torch", "tensorflow", "jax", "mxnet") if m in sys.modules)
    with open(os.path.join(os.path.dirname(__file__), "imports.jsonl"), "a") as f:
        f.write(json.dumps({"worker": bool(os.environ.get("OPBENCH_ISOLATED_CHILD")), "imported": seen}) + "\\n")

atexit.register(_note)
"""


def _run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    pytester.makepyfile(test_b=BENCHMARKS)
    pytester.makeconftest(IMPORTS)
    out = pytester.path / "run.json"
    result = pytester.runpytest_subprocess("--isolate", "framework", "--mode", "eager", "--benchmark-max-time=0.01",
                                           f"--benchmark-json={out}", "-p", "no:cacheprovider", *args)
    return result, json.loads(out.read_text()) if out.exists() else {}


def _names(doc: dict) -> set[str]:
    return {b["name"] for b in doc["benchmarks"]}


def test_each_framework_runs_in_its_own_worker_and_the_run_is_one(pytester):
    if importlib.util.find_spec("torch") is None:  # not imported here: this process must not hold a framework
        pytest.skip("torch is not installed")
    result, doc = _run(pytester, "--framework", "numpy,torch")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert _names(doc) == {f"test_{op}[{fw}-cpu-eager-float32-256x1024]" for op in ("relu", "sigmoid")
                           for fw in ("numpy", "torch")}
    info = doc["machine_info"]["opbench"]
    assert info["run"] == {"status": "complete", "failed": []}
    assert info["isolate"]["workers"] == {"numpy": 1, "torch": 1}
    assert set(info["frameworks"]) >= {"numpy", "torch"}  # each worker's facts, united
    notes = [json.loads(x) for x in (pytester.path / "imports.jsonl").read_text().splitlines()]
    parent = [n for n in notes if not n["worker"]]
    assert parent == [{"worker": False, "imported": []}], notes  # the pytest process imported no framework
    assert {tuple(n["imported"]) for n in notes if n["worker"]} == {(), ("torch",)}
    # a test bound to no framework runs once, in the first worker, not once per framework
    assert result.stdout.str().count("test_b.py::test_plain PASSED") <= 1
    assert "3 passed" in result.stdout.str() and "2 passed" in result.stdout.str()
    # after the workers' own tables, one grid of the whole run: both frameworks side by side
    tail = result.stdout.str().rsplit("frameworks and modes side by side", 1)[-1]
    assert "numpy/eager" in tail and "torch/eager" in tail, tail


def test_node_ids_run_in_the_worker_of_the_framework_they_name(pytester):
    """`pytest file::test[torch-...] --isolate framework`: the numpy worker, which never collects a
    torch case, must not stop the run with pytest's 'not found' (it did, exit 4, before any case)."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    result, doc = _run(pytester, "--framework", "numpy,torch", "test_b.py::test_relu[torch-cpu-eager-float32-256x1024]",
                       "test_b.py::test_sigmoid")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert _names(doc) == {"test_relu[torch-cpu-eager-float32-256x1024]",
                           "test_sigmoid[numpy-cpu-eager-float32-256x1024]",
                           "test_sigmoid[torch-cpu-eager-float32-256x1024]"}
    assert "test_plain" not in result.stdout.str()  # not named: not run, as without workers


def test_a_node_id_no_worker_collects_is_pytests_usage_error(pytester):
    result, doc = _run(pytester, "--framework", "numpy", "test_b.py::test_relu[torch-cpu-eager-float32-256x1024]")
    assert result.ret == isolation.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    said = [x for x in result.stderr.str().splitlines() if x.startswith("ERROR: not found")]
    assert said == ["ERROR: not found: test_b.py::test_relu[torch-cpu-eager-float32-256x1024] "
                    "(in no framework's worker: numpy)"], result.stderr.str()
    assert not doc.get("benchmarks")


def test_a_workers_arguments_name_each_node_ids_file_once_and_keep_every_other_argument():
    picks = ["a.py::t[1]", "a.py::t[2]", "b.py::u"]
    assert isolation.narrowed(["-k", "x", *picks, "-m", "x", "c.py"], picks) == ["-k", "x", "a.py", "b.py", "-m", "x",
                                                                                "c.py"]
    assert isolation.narrowed(["benchmarks/ops", "-q"], []) == ["benchmarks/ops", "-q"]  # make bench: as given


def test_a_worker_that_dies_costs_the_case_it_was_in_and_the_rest_is_saved(pytester, monkeypatch):
    monkeypatch.setenv("CRASH_IN", "numpy")
    result, doc = _run(pytester, "--framework", "numpy")
    assert result.ret == 1
    case = "test_b.py::test_relu[numpy-cpu-eager-float32-256x1024]"
    said = [x for x in result.stderr.str().splitlines() if x.startswith("opbench: numpy worker")]
    assert len(said) == 1 and re.fullmatch(rf"opbench: numpy worker killed by SIGSEGV in {re.escape(case)} "
                                           r"\(at test_b\.py:\d+ in test_relu\); a fresh worker runs the cases left",
                                           said[0]), said
    assert "Fatal Python error" not in result.stderr.str()  # the frames went to the worker's file, not here
    assert _names(doc) == {"test_sigmoid[numpy-cpu-eager-float32-256x1024]"}  # the next case, in a fresh worker
    info = doc["machine_info"]["opbench"]
    assert info["run"] == {"status": "failed", "failed": [case]}
    assert info["isolate"]["workers"] == {"numpy": 2}
    assert info["isolate"]["crashed"] == [{"case": case, "how": "killed by SIGSEGV"}]


def test_a_worker_past_its_memory_limit_is_replaced_between_cases(pytester):
    result, doc = _run(pytester, "--framework", "numpy", "--worker-max-rss", "1")  # every worker is past 1 byte
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert _names(doc) == {f"test_{op}[numpy-cpu-eager-float32-256x1024]" for op in ("relu", "sigmoid")}
    info = doc["machine_info"]["opbench"]
    assert info["run"]["status"] == "complete"
    assert info["isolate"]["workers"] == {"numpy": 3}  # one case each: relu, sigmoid, the plain test
    for bench in doc["benchmarks"]:
        assert bench["extra_info"]["peak_rss_bytes"] >= bench["extra_info"]["rss_before_bytes"] > 0


def test_the_automatic_memory_bound_gives_way_where_a_fresh_worker_would_pass_it_too(pytester):
    """On an H200, every JAX worker held 4.0 to 4.4 GiB after one case (a softmax: the CUDA libraries
    it loads), past auto's 4 GiB, and each case took a worker of its own for nothing. Here auto's
    bound is 1 byte: the first worker is replaced (its own first case may have been a large one),
    but the next has what it held to go by (the growth bound's references, measured where that bound
    is on: here at 1000%, so that it never replaces one) and runs the rest; a bound the user gave
    still holds (the test above: one case per worker)."""
    pytester.makepyfile(test_b=BENCHMARKS)
    pytester.makeconftest("import opbench.harness.config as config\nconfig.AUTO_WORKER_RSS = 1\n")
    out = pytester.path / "run.json"
    result = pytester.runpytest_subprocess("--isolate", "framework", "--framework", "numpy", "--mode", "eager",
                                           "--benchmark-max-time=0.01", f"--benchmark-json={out}",
                                           "-p", "no:cacheprovider", "--worker-max-growth", "1000%")
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, text
    info = json.loads(out.read_text())["machine_info"]["opbench"]
    assert info["isolate"]["workers"] == {"numpy": 2}, text  # the plain test, then relu and sigmoid together
    assert info["isolate"]["worker_max_rss"] == 1 and info["isolate"]["worker_max_rss_auto"] is True
    said = [line for line in text.splitlines() if "a fresh one would pass it too" in line]
    assert len(said) == 1 and "past --worker-max-rss 0.0 GiB" in said[0], said


def test_a_worker_whose_share_holds_nothing_that_runs_skips_it_and_the_run_goes_on(pytester):
    """make bench ended in exit 4 after MXNet: its last recycled worker was left one amp case MXNet
    cannot run, stopped the run with the usage error meant for a selection of the user's, and JAX
    never ran. Here every worker takes one case (past 1 byte) and the GPU cases of a CPU machine
    come last: their workers skip them, and the run, which measured the CPU cases, passes."""
    pytester.makepyfile(test_b=BENCHMARKS)
    out = pytester.path / "run.json"
    result = pytester.runpytest_subprocess("--isolate", "framework", "--framework", "numpy", "--device", "cpu,gpu",
                                           "--worker-max-rss", "1", "--benchmark-max-time=0.01", "-rs",
                                           f"--benchmark-json={out}", "-p", "no:cacheprovider")
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, text
    assert "none of the" not in text and "SKIPPED [1] test_b.py:5: NumPy runs on the CPU only" in text, text
    doc = json.loads(out.read_text())
    assert _names(doc) == {f"test_{op}[numpy-cpu-eager-float32-256x1024]" for op in ("relu", "sigmoid")}
    assert doc["machine_info"]["opbench"]["run"]["status"] == "complete"


def test_a_run_none_of_whose_benchmarks_can_run_is_one_usage_error_as_without_workers(pytester):
    pytester.makepyfile(test_b=BENCHMARKS)
    result = pytester.runpytest_subprocess("--isolate", "framework", "--framework", "numpy", "--device", "gpu",
                                           "--benchmark-max-time=0.01", "-p", "no:cacheprovider")
    assert result.ret == isolation.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    said = [x for x in result.stderr.str().splitlines() if x.startswith("ERROR:")]
    # the user's own options only, not the mode the parent gave its worker; counted over the whole run
    assert said == ["ERROR: --device gpu, --framework numpy: none of the 2 selected benchmarks can run here "
                    "(NumPy runs on the CPU only)"], result.stderr.str()


KEEPING = """
import numpy as np
import pytest
from opbench.suites.measure import measure

KEPT = []

@pytest.mark.opbench(op="relu")
def test_relu(op_case, benchmark):
    measure(benchmark, op_case)

@pytest.mark.opbench(op="sigmoid")
def test_sigmoid(op_case, benchmark):
    KEPT.append(np.ones(256 * 2**17))  # 256 MiB, written: what a framework's cache keeps after the case
    measure(benchmark, op_case)

@pytest.mark.opbench(op="tanh")
def test_tanh(op_case, benchmark):
    measure(benchmark, op_case)
"""


def _numpy_worker_run(pytester, source: str, growth: str):
    """`source` as a benchmark file, run through NumPy's workers with --worker-max-growth `growth`:
    pytest's result, the saved run, and each test's resident set before its rounds."""
    pytester.makepyfile(test_growth=source)  # alone: _run adds test_b's benchmarks and a conftest
    out = pytester.path / "run.json"
    result = pytester.runpytest_subprocess("--isolate", "framework", "--framework", "numpy", "--mode", "eager",
                                           "--benchmark-max-time=0.01", f"--benchmark-json={out}",
                                           "-p", "no:cacheprovider", "--worker-max-growth", growth)
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    doc = json.loads(out.read_text())
    return result, doc, {b["name"].split("[")[0]: b["extra_info"]["rss_before_bytes"] for b in doc["benchmarks"]}


@pytest.mark.parametrize("growth", ["10%", "off"])
def test_a_worker_that_kept_memory_after_a_case_is_replaced_before_the_next(pytester, growth):
    """sigmoid keeps 256 MiB past its end, as a framework's cache would. With --worker-max-growth (10%
    by default) the worker, measured against what it held after its first case (relu), is replaced
    after sigmoid, so tanh starts in a fresh worker and its memory does not count sigmoid's; with
    off, tanh inherits the 256 MiB."""
    result, doc, before = _numpy_worker_run(pytester, KEEPING, growth)
    info = doc["machine_info"]["opbench"]["isolate"]
    if growth == "off":
        assert info["workers"] == {"numpy": 1} and info["worker_max_growth"] is None
        assert before["test_tanh"] - before["test_relu"] > 200 * 2**20, before
    else:
        assert info["workers"] == {"numpy": 2} and info["worker_max_growth"] == 0.1
        assert "past --worker-max-growth 10%: a fresh worker runs the 1 case left" in result.stdout.str()
        assert abs(before["test_tanh"] - before["test_relu"]) < 100 * 2**20, before


# tanh keeps 256 MiB as well: the first case of the worker that follows sigmoid's
KEEPING_FIRST = KEEPING.replace("""def test_tanh(op_case, benchmark):
    measure""", """def test_tanh(op_case, benchmark):
    KEPT.append(np.ones(256 * 2**17))
    measure""") + """
@pytest.mark.opbench(op="softsign")
def test_softsign(op_case, benchmark):
    measure(benchmark, op_case)
"""


def test_a_fresh_worker_is_held_to_what_the_first_worker_held_after_its_first_case(pytester):
    """A fresh worker measured against itself took its first case's leftovers as its starting
    point (in make bench, TensorFlow's graph-mode worker that began with VGG-16 held 1,841 MiB
    against 1,161 after an operator, and ResNet-20's peak was 1.67x alone). Here the worker that
    follows sigmoid starts with tanh, which keeps 256 MiB: it is replaced after tanh too, and
    softsign starts as relu did."""
    result, doc, before = _numpy_worker_run(pytester, KEEPING_FIRST, "10%")
    assert doc["machine_info"]["opbench"]["isolate"]["workers"] == {"numpy": 3}
    assert result.stdout.str().count("past --worker-max-growth 10%") == 2
    assert abs(before["test_softsign"] - before["test_relu"]) < 100 * 2**20, before


# the backward passes set up 128 MiB at their first use and keep it, as torch's autograd engine does
SETTING_UP = """
import numpy as np
import pytest
from opbench.suites.measure import measure

SET_UP = []

def bench(op, direction):
    @pytest.mark.opbench(op=op, direction=direction)
    def test(op_case, benchmark):
        if direction == "backward" and not SET_UP:
            SET_UP.append(np.ones(128 * 2**17))  # written, so resident
        measure(benchmark, op_case)
    return test

test_relu, test_relu_backward = bench("relu", "forward"), bench("relu", "backward")
test_sigmoid, test_sigmoid_backward = bench("sigmoid", "forward"), bench("sigmoid", "backward")
"""


def test_a_worker_runs_the_forward_passes_first_and_keeps_what_the_backward_passes_set_up(pytester):
    """What a direction sets up once (torch's autograd engine: 36 MiB, against a worker's 277 after
    an operator) a backward case alone pays too. In pytest's order (each operator's forward, then its
    backward) every backward case was followed by a forward one that carried it, and the worker was
    replaced after every other case: 88 workers for torch's share of make bench. The worker runs
    the forward cases first, the backward ones are measured against what a worker holds after its
    first backward case, and one worker runs all four, the forward cases' memory their own."""
    # 50%: the 128 MiB are more than that of a NumPy worker's 75-100, the noise between two cases is not
    result, doc, before = _numpy_worker_run(pytester, SETTING_UP, "50%")
    assert [b["name"].split("[")[0] for b in doc["benchmarks"]] == [
        "test_relu", "test_sigmoid", "test_relu_backward", "test_sigmoid_backward"]
    assert doc["machine_info"]["opbench"]["isolate"]["workers"] == {"numpy": 1}, result.stdout.str()
    assert "past --worker-max-growth" not in result.stdout.str()
    # the second forward case did not carry the 128 MiB, the second backward case did (the same worker)
    # (the first case's own resident set before its rounds varies by 70 MiB with the machine's load)
    assert before["test_relu_backward"] - before["test_sigmoid"] > 100 * 2**20, before
    assert before["test_sigmoid_backward"] - before["test_sigmoid"] > 100 * 2**20, before


def test_worker_max_growth_is_a_percentage_or_off():
    from opbench.harness.config import ConfigError, parse_growth

    assert parse_growth("10%", "--worker-max-growth") == 0.1 == parse_growth("10", "--worker-max-growth")
    assert parse_growth("off", "--worker-max-growth") == 0.0
    with pytest.raises(ConfigError, match="--worker-max-growth: expected a number above 0, got '-5%'"):
        parse_growth("-5%", "--worker-max-growth")


def test_each_case_is_timed_in_as_many_fresh_workers_as_processes_asks_and_saved_once(pytester):
    result, doc = _run(pytester, "--framework", "numpy", "--processes", "2", "--benchmark-min-rounds=4")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert _names(doc) == {f"test_{op}[numpy-cpu-eager-float32-256x1024]" for op in ("relu", "sigmoid")}
    info = doc["machine_info"]["opbench"]
    assert info["run"]["status"] == "complete"
    assert info["isolate"]["workers"] == {"numpy": 2} and info["isolate"]["processes"] == 2
    for bench in doc["benchmarks"]:
        stats, processes = bench["stats"], bench["extra_info"]["processes"]
        assert processes["count"] == 2 and len(processes["medians_s"]) == 2 and processes["spread"] >= 0
        assert stats["rounds"] == len(stats["data"]) >= 4  # at least 2 rounds in each of the 2 processes
        assert stats["min"] == min(stats["data"]) and min(processes["medians_s"]) <= stats["median"]
        assert stats["median"] <= max(processes["medians_s"])


def _bench(name: str, data: list[float], peak: int, busy: bool, anon: int | None = None) -> dict:
    return {"fullname": name, "name": name, "stats": {"data": data, "median": sorted(data)[len(data) // 2],
                                                      "iterations": 1},
            "extra_info": {"peak_rss_bytes": peak, "peak_anon_bytes": anon,
                           "load": {"busy": busy, "other_cpus": 0.5 * busy}}}


def test_a_case_is_pooled_over_every_process_or_left_out():
    benches = [_bench("a", [1.0, 2.0], 10, False, anon=8), _bench("b", [5.0], 1, False), _bench("c", [3.0], 1, False),
               _bench("a", [3.0, 4.0], 30, True, anon=25), _bench("c", [3.0], 1, False)]
    failed = ["c"]  # timed twice, but failed in a third worker
    out = isolation.pooled(benches, 2, failed)
    assert [b["fullname"] for b in out] == ["a"] and failed == ["c", "b"]  # b: timed in one process of two
    a = out[0]
    assert a["stats"]["data"] == [1.0, 2.0, 3.0, 4.0] and a["stats"]["median"] == 2.5 and a["stats"]["rounds"] == 4
    assert a["extra_info"]["peak_rss_bytes"] == 30 and a["extra_info"]["load"]["busy"] is True
    assert a["extra_info"]["peak_anon_bytes"] == 25  # the largest process's, in either figure
    half = isolation.pooled([_bench("d", [1.0], 10, False, anon=8), _bench("d", [2.0], 30, False)], 2, [])
    assert half[0]["extra_info"]["peak_anon_bytes"] is None  # one process without it: no largest to give
    assert a["extra_info"]["processes"] == {"count": 2, "medians_s": [2.0, 4.0], "spread": 2 / 3}


def test_processes_split_the_rounds_and_the_time_between_them():
    class Option:
        benchmark_min_rounds, benchmark_max_time = 5, 1.0

    args = ["benchmarks", "--benchmark-max-time=2", "-m", "relu"]
    assert isolation.split_rounds(args, Option, 1) is args
    assert isolation.split_rounds(args, Option, 2) == ["benchmarks", "-m", "relu", "--benchmark-min-rounds=3",
                                                       "--benchmark-max-time=0.5"]


def test_a_worker_keeps_the_flags_but_saving_and_the_framework():
    args = ["benchmarks", "--isolate", "framework", "--framework=numpy,torch", "--benchmark-autosave",
            "--benchmark-json", "x.json", "--worker-max-rss=8G", "-m", "relu"]
    assert isolation.child_args(args, "torch", "/t/w.json") == [
        "benchmarks", "-m", "relu", "--framework=torch", "--isolate=none", "--processes=1",
        "--benchmark-json=/t/w.json", "-p", "no:faulthandler"]


def test_each_mode_of_a_framework_gets_workers_of_its_own(monkeypatch, tmp_path):
    """torch.compile's first case imports inductor (66 MiB a worker keeps): an eager case after it in
    the same worker would carry it. Each (framework, mode) runs in workers of its own, the user's
    --mode replaced by the worker's one mode; the tests bound to no framework run in the first."""
    args = ["benchmarks", "--mode", "eager,compile", "--isolate=framework", "-m", "relu"]
    assert isolation.child_args(args, "torch", "/t/w.json", "compile") == [
        "benchmarks", "-m", "relu", "--framework=torch", "--mode=compile", "--isolate=none", "--processes=1",
        "--benchmark-json=/t/w.json", "-p", "no:faulthandler"]
    ran: list[tuple[str, str | None, bool]] = []
    monkeypatch.setattr(isolation, "_run_framework", lambda framework, *a, first, mode=None, **k:
                        ran.append((framework, mode, first)))
    isolation.run(args, ("numpy", "torch"), type("Option", (), {})(), isolation.Limits(),
                  modes={"numpy": ("eager",), "torch": ("eager", "compile")})
    assert ran == [("numpy", "eager", True), ("torch", "eager", False), ("torch", "compile", False)]


def test_a_torn_last_line_is_what_a_dying_worker_wrote_last(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"start": "a"}\n{"bench": {"name": "a"}}\n{"end": "a", "failed": false}\n{"start": "b"}\n{"ben')
    progress = isolation.read_progress(path)
    assert progress.running == "b" and [b["name"] for b in progress.benches] == ["a"]
    assert isolation.how_it_died(-11) == "killed by SIGSEGV" and isolation.how_it_died(134) == "exit code 134"


@pytest.mark.parametrize(("codes", "benches", "crashes", "expected"), [
    ([0, 5], 1, 0, 0),  # a framework with nothing selected beside one that ran
    ([5, 5], 0, 0, 5),  # nothing selected anywhere: pytest's "no tests"
    ([0, 1], 2, 0, 1),
    ([0], 1, 1, 1),  # a worker died: the run failed, whatever its last worker said
    ([4], 0, 0, 4),
])
def test_the_runs_exit_code_is_its_worst_frameworks(codes, benches, crashes, expected):
    outcome = isolation.Outcome(benches=[{}] * benches, crashes=[{}] * crashes, codes=codes)
    assert outcome.code == expected


@pytest.mark.parametrize(("stopped", "failed", "status"), [
    ([], [], "complete"), ([], ["t[x]"], "failed"),
    (["mxnet"], [], "interrupted"), (["mxnet"], ["t[x]"], "interrupted"),
])
def test_a_run_a_worker_error_stopped_is_saved_as_interrupted_not_complete(stopped, failed, status):
    # a fresh-clone make bench ended in exit 4 when MXNet's last worker stopped on a usage error,
    # JAX never ran, and the saved run said "complete"
    outcome = isolation.Outcome(benches=[{"fullname": "t[y]"}], failed=failed, stopped=stopped,
                                codes=[4 if stopped else 0])
    run = isolation.merge(outcome, isolation.Limits(0, 0))["machine_info"]["opbench"]["run"]
    assert run["status"] == status and run.get("stopped", []) == stopped


def test_auto_bounds_a_worker_at_4g_or_half_the_memory():
    from opbench.harness.config import AUTO_WORKER_RSS, machine_memory, parse_size

    assert parse_size("auto", "--worker-max-rss") == min(AUTO_WORKER_RSS, machine_memory() // 2)
    assert AUTO_WORKER_RSS == 4 * 2**30 and parse_size("8G", "--worker-max-rss") == 8 * 2**30


def test_order_study_counts_what_chance_alone_puts_outside_the_spread(tmp_path):
    study = study_module("isolation_order")  # do a case's figures depend on what ran before it?
    # Runs 1, 1, 1 alone and 2, 2, 2 another way: of the 8 ways to swap the two within each run,
    # only the two that keep the ones together (either way round) leave alone's spread at 1.
    assert study.outside([1.0, 1.0, 1.0], [2.0, 2.0, 2.0])
    assert study.outside_by_chance([1.0, 1.0, 1.0], [2.0, 2.0, 2.0]) == pytest.approx(2 / 8)
    assert not study.outside([1.0, 2.0, 4.0], [2.0, 2.0, 2.0])
    # The Poisson-binomial tail.
    assert study.at_least([0.5, 0.5], 1) == pytest.approx(0.75)
    assert study.at_least([0.5, 0.5], 2) == pytest.approx(0.25)
    assert study.at_least([0.1, 0.2, 0.3], 0) == pytest.approx(1.0)
    # With no order effect (every way's runs drawn alike), the count outside matches what the study
    # expects by chance: 400 simulated cases of three runs a way.
    rng = __import__("random").Random(7)
    cases = [([rng.lognormvariate(0, 0.2) for _ in range(3)], [rng.lognormvariate(0, 0.2) for _ in range(3)])
             for _ in range(400)]
    seen = sum(study.outside(a, b) for a, b in cases)
    expected = sum(study.outside_by_chance(a, b) for a, b in cases)
    assert abs(seen - expected) < 4 * expected ** 0.5, (seen, expected)
    # An order effect (the other way 16% slower, runs 5% apart) puts far more outside than chance.
    shifted = [([rng.lognormvariate(0, 0.05) for _ in range(3)], [rng.lognormvariate(0.15, 0.05) for _ in range(3)])
               for _ in range(100)]
    chances = [study.outside_by_chance(a, b) for a, b in shifted]
    assert study.at_least(chances, sum(study.outside(a, b) for a, b in shifted)) < 1e-6
    # --from reads an earlier study's --out file; one that lacks a way is one line.
    kept = tmp_path / "study.jsonl"
    kept.write_text(json.dumps({"run": 0, "way": "alone", "results": {"a": [1.0, 2.0]}}) + "\n")
    with pytest.raises(SystemExit, match="lacks a way"):
        study.kept(kept)
