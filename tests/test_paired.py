"""The paired gate: its statistics on known inputs, the suite-wide false-alarm control, the
coordinator against fake workers (protocol, crashes, hangs, one-sided benchmarks), the real
worker process, and one real run end to end."""

from __future__ import annotations

import json
import math
import os
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from opbench.results import paired_results
from opbench.results import paired_stats as ps
from opbench.results.pairs import PairedGate, Plan, Side
from opbench.results.stats import Rule
from opbench.workers import WorkerDied, WorkerHung, WorkerProcess

ROOT = Path(__file__).resolve().parents[1]
SIDES = (Side("baseline", sys.executable, dict(os.environ)), Side("candidate", sys.executable, dict(os.environ)))


# --- statistics on known inputs ----------------------------------------------------------------

def test_point_is_the_mean_over_pairs_of_each_pairs_median():
    pairs = [np.array([0.0, 0.1, 0.5]), np.array([0.2, 0.2, -1.0]), np.array([0.3])]
    assert ps.point(pairs) == pytest.approx((0.1 + 0.2 + 0.3) / 3)


def test_identical_trials_give_a_degenerate_interval_at_their_ratio():
    est = ps.estimate([np.full(8, math.log(1.1))] * 3)
    r = est.ratio(0.97)
    assert (r.ratio, r.low, r.high) == pytest.approx((1.1, 1.1, 1.1))
    assert r.runs == (3, 24)


def test_the_bootstrap_is_reproducible_and_resamples_both_levels():
    rng = np.random.default_rng(1)
    pairs = [rng.normal(0, 0.02, 8) for _ in range(3)]
    a, b = ps.bootstrap(pairs, 500, seed=7), ps.bootstrap(pairs, 500, seed=7)
    assert np.array_equal(a, b)
    # trials resampled inside pairs: more distinct values than the 10 multisets of 3 pair medians
    assert np.unique(np.round(a, 12)).size > 50


def test_from_five_pairs_on_only_pairs_are_resampled():
    pairs = [np.array([0.0, 1.0, 2.0]) + k for k in range(5)]  # pair medians 1, 2, 3, 4, 5
    draws = ps.bootstrap(pairs, 500, seed=1)
    assert np.allclose(draws * 5, np.round(draws * 5))  # every draw is a mean of five pair medians
    assert ps.bootstrap(pairs[:4], 500, seed=1).size == 500


@pytest.mark.parametrize(("pairs", "trials", "between", "within", "expected"), [
    (4, 8, 0.01, 0.02, 0.9),  # two levels resampled: errs wide
    (6, 4, 0.025, 0.04, 0.95),  # the defaults at the noise measured here; a plain percentile interval: 0.907
])
def test_the_interval_covers_the_truth_at_about_its_confidence(pairs, trials, between, within, expected):
    """Simulated A/A benchmarks: how often the 97% interval covers a ratio of 1."""
    rng = np.random.default_rng(5)
    covered = 0
    for k in range(300):
        sample = [rng.normal(rng.normal(0, between), within, trials) for _ in range(pairs)]
        r = ps.estimate(sample, seed=k, resamples=1000).ratio(0.97)
        covered += r.low <= 1 <= r.high
    assert covered / 300 >= expected


@pytest.mark.parametrize(("p", "df", "exact", "rel"), [(0.985, 5, 3.0029, 0.003), (0.985, 11, 2.4907, 0.003),
                                                        (0.975, 4, 2.7765, 0.003), (0.9997, 5, 7.6707, 0.03)])
def test_t_quantiles(p, df, exact, rel):  # exact values by numerical integration of the t density
    assert ps.t_quantile(p, df) == pytest.approx(exact, rel=rel)


def test_extreme_levels_use_the_bootstrap_standard_error():
    rng = np.random.default_rng(4)
    est = ps.estimate([rng.normal(0, 0.02, 8) for _ in range(3)], resamples=1000)
    usual, strict = est.ratio(0.97), est.ratio(ps.confirm_confidence(168))
    assert strict.low < usual.low and strict.high > usual.high
    spread = math.log(strict.high) - est.log_ratio
    assert spread == pytest.approx(3.6 * np.std(est.draws, ddof=1), rel=0.05)  # z(1 - 0.05/336) = 3.6


def test_confirmation_level_is_bonferroni_over_the_flagged_set():
    assert ps.confirm_confidence(168) == pytest.approx(1 - 0.05 / 168)
    assert ps.confirm_confidence(2) == pytest.approx(0.975)
    assert ps.confirm_confidence(0) == pytest.approx(0.95)


def test_a_non_finite_log_ratio_is_refused():
    with pytest.raises(ValueError, match="not finite"):
        ps.estimate([np.array([0.0, math.nan])])


def _suite(rng, shift: float, n: int, pairs: int = 3, trials: int = 8) -> list[list[np.ndarray]]:
    return [[rng.normal(shift + rng.normal(0, 0.01), 0.03, trials) for _ in range(pairs)] for _ in range(n)]


def test_the_two_stage_rule_keeps_the_suite_wide_false_alarm_budget():
    """200 simulated A/A suites of 40 benchmarks with no margin: the 97% screen alone raises a
    false alarm in most suites; confirmation on fresh pairs at Bonferroni over the flagged set
    keeps the share of suites with any false alarm within the 5% budget (plus sampling error)."""
    rng = np.random.default_rng(11)
    rule, n, suites = Rule(margin=0.0, threshold=0.0), 40, 200
    screen_alarms = confirmed_alarms = 0
    for _ in range(suites):
        screened = [ps.screen(ps.estimate(p, seed=i, resamples=400), rule, 0.97)
                    for i, p in enumerate(_suite(rng, 0.0, n, pairs=6))]
        flagged = [i for i, v in enumerate(screened) if v in ("regression", "improvement")]
        screen_alarms += bool(flagged)
        strict = ps.confirm_confidence(len(flagged))
        confirmed = [ps.confirm(ps.estimate(p, seed=i, resamples=400), rule, 0.97, strict)
                     for i, p in enumerate(_suite(rng, 0.0, len(flagged), pairs=6))]
        confirmed_alarms += bool({"regression", "improvement"} & set(confirmed))
    assert screen_alarms / suites > 0.5
    assert confirmed_alarms / suites <= 0.05 + 3 * (0.05 * 0.95 / suites) ** 0.5


def test_a_real_ten_percent_change_survives_confirmation():
    rng = np.random.default_rng(12)
    for i, pairs in enumerate(_suite(rng, math.log(1.10), 20)):
        assert ps.confirm(ps.estimate(pairs, seed=i, resamples=1000), Rule(), 0.97,
                          ps.confirm_confidence(168)) == "regression"


# --- the coordinator against fake workers ----------------------------------------------------

IDS = [f"benchmarks/ops/test_x.py::test_relu[fake-cpu-eager-float32-{n}]" for n in (8, 16, 32)]


class FakeWorker:
    """Answers the worker protocol in-process. `world` sets per side: the ids it collects, the
    time of a call per id, outcomes per id, and ids on which it dies or hangs."""

    started: list[FakeWorker] = []

    def __init__(self, world: dict, side: str, command, env, log: Path) -> None:
        self.world, self.side, self.current, self.closed = world, side, None, False
        self.rng = np.random.default_rng(len(FakeWorker.started))
        FakeWorker.started.append(self)

    def ask(self, request: dict, timeout: float) -> dict:
        w = self.world[self.side]
        cmd = request["cmd"]
        if cmd == "collect":
            return {"ok": True, "ids": w.get("ids", IDS)}
        if cmd == "machine_info":
            return {"ok": True, "machine_info": {"opbench": {"frameworks": {"fake": w.get("version", "1.0")}}},
                    "commit_info": {}}
        if cmd == "prepare":
            i = request["id"]
            if i in w.get("die", ()):
                raise WorkerDied(f"the {self.side} worker died (killed by signal 11)")
            outcome = w.get("outcomes", {}).get(i, "ready")
            self.current = i
            return {"ok": True, "outcome": outcome, "message": f"{outcome} here", "name": i.split("::")[1],
                    "group": "relu", "call_s": 1e-3, "extra_info": {"framework": "fake"}}
        if cmd == "burst":
            if self.current in w.get("hang", ()):
                raise WorkerHung(f"the {self.side} worker did not answer 'burst' within {timeout:.0f} s")
            t = w.get("time", {}).get(self.current, 1e-3)
            times = list(t * np.exp(self.rng.normal(0, 0.005, request["rounds"])))
            return {"ok": True, "times": times, "wall": sum(times), "cpu_per_call": t, "wall_per_call": t,
                    "steal": 0, "switches": 0}
        return {"ok": True}

    def close(self) -> None:
        self.closed = True


SMALL = {"budget_s": 600, "trials": 8, "min_pairs": 3, "max_pairs": 8, "confirm_pairs": 3}


def run_fake(tmp_path, world, **plan) -> PairedGate:
    FakeWorker.started = []
    gate = PairedGate(SIDES, ["benchmarks"], tmp_path, Plan(**{**SMALL, **plan}), lambda name: Rule(),
                      spawn=lambda *a: FakeWorker(world, *a), progress=lambda line: None)
    gate.run()
    return gate


def test_aa_with_fake_workers_is_unchanged_everywhere_and_leaves_no_worker_running(tmp_path):
    gate = run_fake(tmp_path, {"baseline": {}, "candidate": {}})
    result = paired_results.comparison(gate)
    assert [r.verdict for r in result.rows] == ["unchanged"] * 3 and not result.failed
    assert gate.pairs_started == 3 and all(w.closed for w in FakeWorker.started)
    trials = gate.records[IDS[0]].trials
    assert len(trials) == 3 * 8 and {t["pair"] for t in trials} == {1, 2, 3}
    # every trial alternates single rounds: as many rounds on each side
    assert all(len(t["baseline_rounds"]) == len(t["candidate_rounds"]) >= 3 for t in trials)


def test_a_slower_candidate_is_screened_then_confirmed_on_fresh_pairs(tmp_path):
    gate = run_fake(tmp_path, {"baseline": {}, "candidate": {"time": {IDS[1]: 1.2e-3}}})
    result = paired_results.comparison(gate)
    verdicts = {r.fullname: r.verdict for r in result.rows}
    assert verdicts[IDS[1]] == "regression" and result.failed
    assert verdicts[IDS[0]] == verdicts[IDS[2]] == "unchanged"
    confirm = [t for t in gate.records[IDS[1]].trials if t["stage"] == "confirm"]
    assert {t["pair"] for t in confirm} == {4, 5, 6}  # pairs that did not screen it
    assert not any(t["stage"] == "confirm" for t in gate.records[IDS[0]].trials)


def test_a_benchmark_collected_on_one_side_only(tmp_path):
    gate = run_fake(tmp_path, {"baseline": {}, "candidate": {"ids": IDS[:2]}})
    result = paired_results.comparison(gate)
    assert result.failed and len(result.missing) == 1 and result.missing[0].startswith(IDS[2])
    gate = run_fake(tmp_path, {"baseline": {"ids": IDS[:2]}, "candidate": {}})
    result = paired_results.comparison(gate)
    assert not result.failed and len(result.new) == 1


def test_a_failed_check_on_one_side_fails_that_benchmark_and_the_gate(tmp_path):
    gate = run_fake(tmp_path, {"baseline": {}, "candidate": {"outcomes": {IDS[0]: "failed"}}})
    result = paired_results.comparison(gate)
    assert result.failed and "failed on the candidate" in result.broken[0]
    assert len(result.rows) == 2
    skipped = run_fake(tmp_path, {"baseline": {"outcomes": {IDS[0]: "skipped"}},
                                  "candidate": {"outcomes": {IDS[0]: "skipped"}}})
    assert not paired_results.comparison(skipped).failed


@pytest.mark.parametrize("fault", ["die", "hang"])
def test_a_crashing_or_hanging_worker_fails_its_benchmark_and_a_fresh_pair_goes_on(tmp_path, fault):
    gate = run_fake(tmp_path, {"baseline": {}, "candidate": {fault: {IDS[1]}}})
    result = paired_results.comparison(gate)
    assert result.failed and len(result.broken) == 1 and result.broken[0].startswith(IDS[1])
    assert {r.fullname for r in result.rows} == {IDS[0], IDS[2]}
    assert all(len(gate.records[i].trials) == 24 for i in (IDS[0], IDS[2]))  # nothing lost after the fault
    assert gate.pairs_started == 4 and all(w.closed for w in FakeWorker.started)


class Noisy(FakeWorker):
    """The candidate's first benchmark is 10% slower or faster in alternate worker pairs."""

    def ask(self, request, timeout):
        reply = super().ask(request, timeout)
        if request["cmd"] == "burst" and self.side == "candidate" and self.current == IDS[0]:
            sign = (-1) ** (len(FakeWorker.started) // 2)
            reply["times"] = [t * math.exp(0.1 * sign) for t in reply["times"]]
        return reply


def run_noisy(tmp_path, **plan) -> PairedGate:
    FakeWorker.started = []
    gate = PairedGate(SIDES, ["b"], tmp_path, Plan(**{**SMALL, **plan}), lambda name: Rule(),
                      spawn=lambda *a: Noisy({"baseline": {}, "candidate": {}}, *a), progress=lambda line: None)
    gate.run()
    return gate


def test_noisy_benchmarks_get_more_pairs_until_max_pairs(tmp_path):
    gate = run_noisy(tmp_path, max_pairs=5, budget_s=600)
    pairs = {i: len({t["pair"] for t in gate.records[i].trials}) for i in IDS}
    assert pairs == {IDS[0]: 5, IDS[1]: 3, IDS[2]: 3}
    assert gate.records[IDS[0]].verdict == "noisy" and not gate.notes


def test_the_budget_stops_the_extension(tmp_path):
    gate = run_noisy(tmp_path, min_pairs=2, max_pairs=5, budget_s=1e-6)
    assert len({t["pair"] for t in gate.records[IDS[0]].trials}) == 2
    assert gate.notes == ["note: the budget was spent with 1 benchmark(s) still noisy"]


def test_saved_sides_are_pytest_benchmark_documents_that_compare_reads(tmp_path):
    from opbench.results.store import load_run

    gate = run_fake(tmp_path, {"baseline": {}, "candidate": {}})
    paths = paired_results.save(gate, tmp_path)
    base, cand = load_run(paths["baseline"]), load_run(paths["candidate"])
    assert set(base.benchmarks) == set(cand.benchmarks) == set(IDS)
    assert base.benchmarks[IDS[0]].rounds == 24
    log = json.loads(paths["paired"].read_text())
    assert {b["verdict"] for b in log["benchmarks"]} == {"unchanged"}


# --- the real worker process ---------------------------------------------------------------

def _script(tmp_path, body: str) -> list[str]:
    path = tmp_path / "w.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def test_a_hanging_worker_is_stopped_with_everything_it_started(tmp_path):
    cmd = _script(tmp_path, """
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print(child.pid, file=sys.stderr, flush=True)
        time.sleep(60)
    """)
    w = WorkerProcess("candidate", cmd, dict(os.environ), tmp_path / "w.log")
    with pytest.raises(WorkerHung, match="candidate worker did not answer 'prepare' within 1 s"):
        w.ask({"cmd": "prepare"}, timeout=1.0)
    child = int((tmp_path / "w.log").read_text().split()[0])
    assert w.proc.poll() is not None
    with pytest.raises(ProcessLookupError):  # the grandchild went with its process group
        for _ in range(50):
            os.kill(child, 0)
            time.sleep(0.1)


def test_a_dying_worker_reports_its_last_words(tmp_path):
    cmd = _script(tmp_path, """
        import sys
        sys.stdin.readline()
        sys.exit("ModuleNotFoundError: No module named 'opbench'")
    """)
    w = WorkerProcess("baseline", cmd, dict(os.environ), tmp_path / "w.log")
    with pytest.raises(WorkerDied, match=r"baseline worker died \(exit code 1\): ModuleNotFoundError"):
        w.ask({"cmd": "collect"}, timeout=30)
    w.close()


def test_the_real_worker_answers_the_protocol(tmp_path):
    w = WorkerProcess("baseline", [sys.executable, "-m", "opbench.results.worker"], dict(os.environ),
                      tmp_path / "w.log")
    try:
        ids = w.ask({"cmd": "collect", "args": [str(ROOT / "benchmarks/ops/test_activations.py"), "-m",
                                                 "torch and relu and eager and forward"]}, 300)
        assert ids["ok"] and ids["ids"] and all("torch-cpu-eager" in i for i in ids["ids"])
        ready = w.ask({"cmd": "prepare", "id": ids["ids"][0]}, 300)
        assert ready["outcome"] == "ready" and ready["extra_info"]["max_abs_err"] >= 0
        burst = w.ask({"cmd": "burst", "loops": 2, "rounds": 3}, 60)
        assert len(burst["times"]) == 3 and all(t > 0 for t in burst["times"]) and burst["cpu_per_call"] > 0
        assert not w.ask({"cmd": "prepare", "id": "no::such"}, 60)["ok"]
        assert w.ask({"cmd": "nonsense"}, 60) == {"ok": False, "error": "unknown request 'nonsense'"}
    finally:
        w.close()
    assert w.proc.returncode is not None


# --- the command line ---------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "message"), [
    (["--baseline-python", "/no/such/python", "--candidate-python", sys.executable, "--", "benchmarks"],
     "--baseline-python /no/such/python: not an executable interpreter"),
    (["--baseline-python", sys.executable, "--candidate-python", sys.executable],
     "give the benchmarks to compare after '--'"),
    (["--baseline-python", sys.executable, "--candidate-python", sys.executable, "--budget", "0", "--", "b"],
     "argument --budget: expected a number above 0, got '0'"),
    (["--baseline-python", sys.executable, "--candidate-python", sys.executable, "--candidate-env", "X", "--", "b"],
     "argument --candidate-env: expected NAME=VALUE, got 'X'"),
    (["--baseline-python", sys.executable, "--candidate-python", sys.executable, "--false-alarm", "100", "--", "b"],
     "argument --false-alarm: expected a percentage between 0 and 100"),
])
def test_bad_ab_arguments_are_one_line_errors(tmp_path, args, message):
    import subprocess

    p = subprocess.run([sys.executable, "-m", "opbench", "ab", "--workdir", str(tmp_path), *args],
                       capture_output=True, text=True, check=False)
    assert p.returncode == 2 and message in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_a_worker_that_cannot_start_is_one_line(tmp_path):
    import subprocess

    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'No module named opbench' >&2\nexit 1\n")
    fake.chmod(0o755)
    p = subprocess.run([sys.executable, "-m", "opbench", "ab", "--baseline-python", str(fake), "--candidate-python",
                        sys.executable, "--workdir", str(tmp_path), "--", "benchmarks"],
                       capture_output=True, text=True, check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "the baseline worker died (exit code 1): No module named opbench" in p.stderr


def test_an_interrupt_leaves_no_worker_running(tmp_path):
    class Interrupted(FakeWorker):
        def ask(self, request, timeout):
            if request["cmd"] == "burst" and len(FakeWorker.started) >= 4:
                raise KeyboardInterrupt
            return super().ask(request, timeout)

    FakeWorker.started = []
    gate = PairedGate(SIDES, ["b"], tmp_path, Plan(**SMALL), lambda name: Rule(),
                      spawn=lambda *a: Interrupted({"baseline": {}, "candidate": {}}, *a), progress=lambda line: None)
    with pytest.raises(KeyboardInterrupt):
        gate.run()
    assert len(FakeWorker.started) == 4 and all(w.closed for w in FakeWorker.started)


def test_sigterm_stops_the_gate_and_its_workers_in_one_line(tmp_path):
    """A cancelled CI job (SIGTERM) ends `opbench ab` like Ctrl-C: exit 130, one line, and no
    worker left running (here a worker that never answers its collect request)."""
    import os
    import signal
    import subprocess
    import time

    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\necho $$ > {tmp_path}/worker.pid\nexec sleep 60\n")
    fake.chmod(0o755)
    p = subprocess.Popen([sys.executable, "-m", "opbench", "ab", "--baseline-python", str(fake), "--candidate-python",
                          str(fake), "--workdir", str(tmp_path), "--", "benchmarks"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pidfile = tmp_path / "worker.pid"
    for _ in range(200):
        if pidfile.exists() and pidfile.read_text().strip():
            break
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 130 and err.strip() == "opbench: interrupted", err
    worker = int(pidfile.read_text())
    time.sleep(0.2)
    with pytest.raises(ProcessLookupError):
        os.kill(worker, 0)
