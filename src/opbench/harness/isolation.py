"""--isolate framework: each framework's benchmarks in worker processes of their own.

One pytest process that runs every framework grows to what all of them keep (20 GB for `make
bench`), gives a case figures that depend on what ran before it, and loses the whole run when one
framework's native code crashes. With --isolate framework the pytest process that the user started
collects nothing and imports no framework: it runs one child pytest per framework and mode (the
worker), with the same arguments and that framework and mode alone, one after the other, and
merges what they measured into one run, saved as the user asked. A mode's compiler and what its
first use imports and keeps (torch.compile's inductor: 66 MiB) stay out of the other modes' cases.

- A worker writes each case's start, end and saved benchmark to a progress file as they happen
  (WorkerProgress, the child's side). A worker that dies (a signal, an abort, the OOM killer)
  fails the case it was in with one line that says how it died; a fresh worker runs the cases
  left, and what finished is kept.
- A worker whose resident set passed --worker-max-rss after a case stops there, and a fresh one
  runs the cases left: memory stays bounded by the largest case, not the sum. The automatic bound
  (auto, 4 GiB) gives way where earlier workers of the framework and mode held more after one case
  (JAX on an H200: 4.0 to 4.5 GiB after one operator), since a fresh worker would pass it too; a
  bound the user gave holds, and so does auto's with --worker-max-growth off, which measures none.
- After each case a worker collects its garbage and lets its framework's compiled programs go
  (Backend.forget). One that still holds more than --worker-max-growth above what a case of the
  next case's direction starts from stops there too: a case's peak memory (`peak_anon_bytes`, the
  peak less the mapped files' pages, which follow the page cache rather than the case:
  harness/memory.py) then carries at most that much of what earlier cases left, and agrees with
  the same case's peak in a process of its own where the framework lets its compiled programs go
  (TensorFlow's XLA does not: docs/usage/running.md).
- What a case starts from depends on its direction (forward, backward, inference, training,
  convergence): a framework sets up what a direction needs at its first use and keeps it (torch's
  autograd engine, 36 MiB; its optimizers import the compiler front end, 80 MiB), and a case of
  that direction alone pays it too. So a worker runs its cases by direction in that order (the
  lighter first: an operator's forward pass never follows a backward one), and the reference of a
  direction is the least any worker of its framework and mode held after its first case of that
  direction (not what this worker's own first case left: in make bench TensorFlow's graph-mode
  worker that began with VGG-16 held 1,841 MiB, against 1,161 after an operator, and ResNet-20's
  peak was 1.67 times its peak alone). For a direction no worker has run yet, the reference is
  the least of any direction, so a worker is replaced before it takes what one direction set up
  into the next.

Each worker prints its own pytest output and pytest-benchmark table; the merged run is what is
saved (--benchmark-json, --benchmark-save, --benchmark-autosave) and what `opbench report` and
`--benchmark-compare` read afterwards.
"""

from __future__ import annotations

import faulthandler
import itertools
import json
import os
import re
import signal
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pytest

from opbench.core import schema
from opbench.core.processes import plain, terminate_as_interrupt
from opbench.harness import children
from opbench.harness.memory import anon_rss, current_rss

CHILD = "OPBENCH_ISOLATED_CHILD"  # in a worker's environment: its progress file
SKIP = "OPBENCH_ISOLATED_SKIP"  # a file of node ids the worker leaves out (what earlier workers started)
MAX_RSS = "OPBENCH_ISOLATED_MAX_RSS"  # bytes; 0: no limit
MAX_RSS_AUTO = "OPBENCH_ISOLATED_MAX_RSS_AUTO"  # set: MAX_RSS is --worker-max-rss auto's
MAX_GROWTH = "OPBENCH_ISOLATED_MAX_GROWTH"  # a fraction of what a worker holds after a first case (BASE); 0: none
# JSON {direction: bytes}: the least earlier workers of its framework and mode held after their first case of it
BASE = "OPBENCH_ISOLATED_BASE"
FIRST = "OPBENCH_ISOLATED_FIRST"  # set in the first framework's workers: they also run tests bound to no framework
PICKS = "OPBENCH_ISOLATED_PICKS"  # JSON: the node ids the user named ('file::test[id]'), which the worker selects
NO_TESTS, USAGE_ERROR, INTERNAL_ERROR = 5, 4, 3  # pytest's exit codes
_OWN_FLAGS = ("--framework", "--isolate", "--worker-max-rss", "--worker-max-growth", "--processes")


def child_args(args: list[str], framework: str, json_path: str, mode: str | None = None) -> list[str]:
    """The parent's pytest arguments for one framework's worker: saving replaced by a JSON file
    the parent merges, the framework (and the mode, where given) fixed, isolation off."""
    fixed = (*children.SAVE_FLAGS, *_OWN_FLAGS, *(("--mode",) if mode else ()))
    return [*children.without(args, fixed), f"--framework={framework}", *((f"--mode={mode}",) if mode else ()),
            "--isolate=none", "--processes=1", f"--benchmark-json={json_path}", "-p", "no:faulthandler"]


# ---- the worker's side -------------------------------------------------------------------------


class WorkerProgress:
    """The worker's plugin: leaves out what earlier workers started, and writes one JSON line per
    event, flushed at once, so that the parent keeps what finished if this process dies."""

    def __init__(self, config: pytest.Config, path: str, skip: str, max_rss: int, first: bool,
                 picks: tuple[str, ...] = (), max_growth: float = 0.0,
                 between: Callable[[], int] = lambda: 0, bases: dict[str, int] | None = None,
                 rss_auto: bool = False) -> None:
        self.config, self.max_rss, self.first, self.picks = config, max_rss, first, picks
        self.rss_auto = rss_auto  # max_rss is auto's: it gives way where a fresh worker would pass it too
        self.max_growth, self.between = max_growth, between
        # By direction, what a worker of this framework and mode holds once its first case of that
        # direction is over (left()): the least of the earlier workers' (from the parent) and, once it
        # has run one, this worker's own.
        self.bases: dict[str, int] = dict(bases or {})
        self.inherited = dict(self.bases)  # the earlier workers' alone
        self.ran: set[str] = set()  # the directions this worker has run a case of
        self.directions: list[str] = []  # its cases' directions in the order it runs them ('' for a test of none)
        self.out = open(path, "a", encoding="utf-8")  # open for the session, closed at its end
        self.skip = set(Path(skip).read_text().splitlines()) if skip and os.path.exists(skip) else set()
        self.total = self.ended = self.saved = 0
        self.failed: set[str] = set()
        # Where this worker dies, Python's frames go to a file beside the progress (pytest's own
        # faulthandler, off in workers, printed them to the terminal): the parent names the innermost.
        self.fault = open(path + ".fault", "w", encoding="utf-8")  # open while the process lives
        faulthandler.enable(file=self.fault)

    def _write(self, record: dict) -> None:
        self.out.write(json.dumps(record, default=plain) + "\n")
        self.out.flush()

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """Keep only the node ids the user named (where they named any), leave out what an earlier
        worker started, and a test bound to no framework (no framework marker) unless this is the
        first framework's worker: it runs once per run."""
        from opbench.harness.config import FRAMEWORKS

        named = None  # every item, where the user named no node id
        if self.picks:
            names = {pick: picker(pick) for pick in self.picks}
            hits = {pick: {id(i) for i in items if named_by(i)} for pick, named_by in names.items()}
            self._write({"matched": [pick for pick, ids in hits.items() if ids]})
            named = set().union(*hits.values())

        def mine(item: pytest.Item) -> bool:
            bound = any(m.name in FRAMEWORKS for m in item.iter_markers())
            return (item.nodeid not in self.skip and (bound or self.first)
                    and (named is None or id(item) in named))

        left = [i for i in items if not mine(i)]
        if left:
            items[:] = [i for i in items if mine(i)]
            config.hook.pytest_deselected(items=left)
        items.sort(key=lambda i: _RANK.get(direction_of(i), -1))  # stable: pytest's order within one
        self.directions = [direction_of(i) for i in items]
        self.total = len(items)

    def selected(self, cases: list[str], none_runs: list[str] | None) -> None:
        """The benchmarks this worker selected, and why none of them can run here (None where one
        can): whether a whole run measured nothing is the parent's to say, over every worker."""
        self._write({"cases": cases, "none_runs": none_runs})

    def pytest_runtest_logstart(self, nodeid: str, location) -> None:
        self._write({"start": nodeid})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.failed.add(report.nodeid)

    def pytest_runtest_logfinish(self, nodeid: str, location) -> None:
        bs = getattr(self.config, "_benchmarksession", None)
        benches = list(bs.benchmarks) if bs is not None else []
        for bench in benches[self.saved:]:
            if not bench.has_error:  # what pytest-benchmark itself saves
                self._write({"bench": bench.as_dict(include_data=True)})
        self.saved = len(benches)
        self.ended += 1
        self._write({"end": nodeid, "failed": nodeid in self.failed})
        if self.ended >= self.total or not (self.max_rss or self.max_growth):
            return
        rss, n = current_rss() or 0, self.total - self.ended
        left = f"{n} case{'s' if n != 1 else ''} left"
        done, upcoming = self.directions[self.ended - 1], self.directions[self.ended]
        held = self.left() if self.max_growth else None  # the growth bound's measure, and its reference points'
        if held is not None and done not in self.ran:  # what this direction set up, paid once: its cases start there
            self.ran.add(done)
            self.bases[done] = min(held, self.bases.get(done, held))
            self._write({"base": {done: self.bases[done]}})
        if self.max_rss and rss > self.max_rss:
            # auto's bound against what earlier workers held after one case (the growth bound's reference
            # points): where even that passes it, a fresh worker would pass it too after its first case (JAX on
            # an H200: 4.0 GiB after a softmax) and replacing this one only costs a start (a bound the user gave
            # holds); not this worker's own first case, which may have been a large one
            floor = reference(self.inherited, upcoming) if self.rss_auto else None
            if floor is None or floor <= self.max_rss:
                self._recycle(rss, f"holds {rss / 2**30:.1f} GiB, past --worker-max-rss "
                                   f"{self.max_rss / 2**30:.1f} GiB: a fresh worker runs the {left}")
                return
            self._write({"floor_over_max_rss": floor})  # the parent says so once per framework and mode
        if held is None:
            return
        ref = reference(self.bases, upcoming)
        if held - ref > self.max_growth * ref:
            after = f"its first {upcoming} case" if upcoming in self.bases else "its first case of any direction"
            self._recycle(rss, f"holds {(held - ref) / 2**20:,.0f} MiB more than one holds after {after} "
                               f"({ref / 2**20:,.0f} MiB), past --worker-max-growth "
                               f"{self.max_growth:.0%}: a fresh worker runs the {left}, so that their memory is "
                               "their own")

    def left(self) -> int:
        """What this worker holds between cases: its framework's compiled programs let go, its
        garbage collected, its heap trimmed, less what opbench keeps on purpose for the next case,
        and less the mapped files' pages (the figure a case's peak is read in: peak_anon_bytes)."""
        kept = self.between()
        forget(_framework(self.config))
        return (anon_rss() or 0) - kept

    def _recycle(self, rss: int, why: str) -> None:
        self._write({"recycle": rss})
        self.config.stash[_SESSION].shouldstop = f"opbench: this {_framework(self.config)} worker {why}"

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.config.stash[_SESSION] = session

    def pytest_unconfigure(self) -> None:
        self.out.close()


_SESSION = pytest.StashKey[pytest.Session]()


_RANK = {direction: rank for rank, direction in enumerate(schema.DIRECTIONS)}


def reference(bases: dict[str, int], direction: str) -> int | None:
    """What a worker holds once its first case of `direction` is over (`bases`: the least seen, by
    direction); for a direction none has run, the least after any case of a framework's (a test
    of none imports none). None where nothing was seen."""
    if direction in bases:
        return bases[direction]
    seen = [b for d, b in bases.items() if d or len(bases) == 1]
    return min(seen, default=None)


def direction_of(item: pytest.Item) -> str:
    """The direction of an item's case (its marker: forward, backward, inference, training,
    convergence), or '' for a test of none."""
    return next((m.name for m in item.iter_markers() if m.name in _RANK), "")


def _framework(config: pytest.Config) -> str:
    return config.getoption("opbench_framework") or "framework"


def progress(config: pytest.Config) -> WorkerProgress | None:
    """This process's progress plugin where it is a worker, else None."""
    return config.pluginmanager.get_plugin("opbench-worker-progress")


def register(config: pytest.Config, between: Callable[[], int] = lambda: 0) -> None:
    """In a worker (CHILD in its environment), add the progress plugin; `between` is the caller's
    step between two cases, which returns the bytes it keeps on purpose for the next one."""
    path = os.environ.get(CHILD)
    if path:
        config.pluginmanager.register(
            WorkerProgress(config, path, os.environ.get(SKIP, ""), int(os.environ.get(MAX_RSS) or 0),
                           bool(os.environ.get(FIRST)), tuple(json.loads(os.environ.get(PICKS) or "[]")),
                           float(os.environ.get(MAX_GROWTH) or 0), between, json.loads(os.environ.get(BASE) or "{}"),
                           bool(os.environ.get(MAX_RSS_AUTO))),
            "opbench-worker-progress")


def picker(pick: str) -> Callable[[pytest.Item], bool]:
    """Whether a node id as the user wrote it ('benchmarks/ops/test_gemm.py::test_gemm[torch-...]',
    relative to where pytest was started) names an item, as pytest's own selection would: the same
    file, and the same test, one of its parametrizations ('::test_gemm'), or a test of a named
    class. The node id is parsed and its file resolved once, not per item."""
    path, _, rest = pick.partition("::")
    file = Path(path).resolve()

    def names(item: pytest.Item) -> bool:
        own = item.nodeid.partition("::")[2]
        return ((own == rest or own.startswith(rest + "::") or ("[" not in rest and own.startswith(rest + "[")))
                and Path(item.path).resolve() == file)

    return names


def narrowed(args: list[str], picks: list[str]) -> list[str]:
    """The workers' arguments where the user named node ids: each node id becomes its file (once),
    and the worker selects the node ids itself (PICKS). A worker given a node id of another
    framework's case would stop with pytest's 'not found': it never collects that case."""
    out: list[str] = []
    files: set[str] = set()
    for arg in args:
        if arg not in picks:
            out.append(arg)
        elif (file := arg.partition("::")[0]) not in files:
            files.add(file)
            out.append(file)
    return out


# ---- the parent's side -------------------------------------------------------------------------


@dataclass
class Progress:
    """What one worker's progress file says."""

    started: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    benches: list[dict] = field(default_factory=list)
    matched: list[str] = field(default_factory=list)  # the user's node ids this worker collected
    cases: list[str] = field(default_factory=list)  # the benchmarks it selected
    none_runs: list[str] | None = None  # why none of them can run here; None where one can
    bases: dict[str, int] = field(default_factory=dict)  # by direction: what it held after its first case of
    # that direction, or an earlier worker's where that was less
    recycled: bool = False
    floor_over_max_rss: int = 0  # what earlier workers held after one case, where that passed --worker-max-rss

    @property
    def running(self) -> str | None:
        """The case the worker started and did not end: where it died."""
        ended = set(self.ended)
        open_cases = [n for n in self.started if n not in ended]
        return open_cases[-1] if open_cases else None


def read_progress(path: Path) -> Progress:
    progress = Progress()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return progress
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # the torn last line of a worker that died writing it
        if "start" in record:
            progress.started.append(record["start"])
        elif "bench" in record:
            progress.benches.append(record["bench"])
        elif "end" in record:
            progress.ended.append(record["end"])
            if record.get("failed"):
                progress.failed.append(record["end"])
        elif "recycle" in record:
            progress.recycled = True
        elif "matched" in record:
            progress.matched += record["matched"]
        elif "cases" in record:
            progress.cases, progress.none_runs = record["cases"], record["none_runs"]
        elif "base" in record:
            progress.bases.update(record["base"])
        elif "floor_over_max_rss" in record:
            progress.floor_over_max_rss = record["floor_over_max_rss"]
    return progress


def where_it_died(progress_path: Path) -> str:
    """' (at test_conv.py:41 in test_conv2d)': the innermost Python frame the dying worker's
    faulthandler wrote, or '' where it wrote none."""
    try:
        text = Path(str(progress_path) + ".fault").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    frame = re.search(r'File "([^"]+)", line (\d+) in (\S+)', text)
    return f" (at {Path(frame[1]).name}:{frame[2]} in {frame[3]})" if frame else ""


def how_it_died(code: int) -> str:
    """'killed by SIGSEGV', 'exit code 134'."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


@dataclass
class Outcome:
    """The parent's account of every worker of a run."""

    benches: list[dict] = field(default_factory=list)
    documents: list[dict] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    crashes: list[dict] = field(default_factory=list)
    workers: dict[str, int] = field(default_factory=dict)
    codes: list[int] = field(default_factory=list)  # each framework's last worker's exit code
    matched: set[str] = field(default_factory=set)  # the user's node ids some worker collected
    selected: set[str] = field(default_factory=set)  # the benchmarks the workers selected
    runnable: bool = False  # whether one of them can run here
    none_runs: dict[str, None] = field(default_factory=dict)  # why the others cannot
    interrupted: bool = False
    stopped: list[str] = field(default_factory=list)  # frameworks whose worker ended in an error, cases left

    @property
    def code(self) -> int:
        """pytest's exit code for the whole run: the worst of the frameworks' (a framework with
        nothing selected counts only if none had anything), and a failure where a worker died."""
        if self.interrupted:
            return children.INTERRUPTED
        ran = [c for c in self.codes if c != NO_TESTS]
        code = max(ran) if ran else (NO_TESTS if not self.benches else 0)
        return max(code, 1) if self.crashes else code


@dataclass(frozen=True)
class Limits:
    """When a worker is replaced between cases: past `max_rss` bytes (0: never), or more than
    `max_growth` (a fraction; 0: never) above what it held after its first case, or what an earlier
    worker of the same framework and mode did where that was less (WorkerProgress.left)."""

    max_rss: int = 0
    max_growth: float = 0.0
    rss_auto: bool = False  # max_rss is opbench's choice (auto), not the user's

    def env(self) -> dict[str, str]:
        return {MAX_RSS: str(self.max_rss), MAX_GROWTH: repr(self.max_growth),
                MAX_RSS_AUTO: "1" if self.rss_auto else ""}

    def info(self) -> dict:
        return {"worker_max_rss": self.max_rss or None, "worker_max_rss_auto": self.rss_auto,
                "worker_max_growth": self.max_growth or None}


def forget(framework: str) -> None:
    """Between a worker's cases: its framework's compiled programs let go (Backend.forget), the
    garbage collected and the heap handed back to the kernel, so that what stays resident is what
    the next case inherits."""
    from opbench import frameworks
    from opbench.harness.allocator import release

    try:
        frameworks.load(framework).forget()
    except Exception:  # a framework that is not there holds nothing; one whose release failed keeps what it
        pass  # holds, which the growth check then sees
    release()


def run(args: list[str], frameworks: tuple[str, ...], option, limits: Limits,
        show: Callable[[dict], None] | None = None, processes: int = 1,
        modes: dict[str, tuple[str, ...]] | None = None,
        refuse: Callable[[int, list[str]], str | None] = lambda selected, reasons: None) -> int:
    """Run each framework's benchmarks in workers, merge, hand the merged document to `show` (the
    plugin prints its side-by-side grid), save as the parent was asked to. With `processes` N > 1,
    every framework's cases run N times over, in fresh workers each time (frameworks alternated),
    each with 1/N of the rounds, and each case is saved once with the statistics of all its rounds
    (pooled). A run whose benchmarks none can run here is pytest's usage error where `refuse`
    gives its line (the user chose the options that leave nothing), as it is without workers;
    a worker whose share happens to hold nothing that runs (the cases left after a recycling,
    a framework without the precision asked) skips them, as a case does in a plain run.
    Returns pytest's exit code for the whole run."""
    outcome = Outcome()
    picks = [a for a in getattr(option, "file_or_dir", None) or () if "::" in a]
    groups = [(f, m) for f in frameworks for m in (modes or {}).get(f) or (None,)]
    with terminate_as_interrupt(), tempfile.TemporaryDirectory(prefix="opbench-isolate-") as tmp:
        worker_args = narrowed(split_rounds(args, option, processes), picks)
        for turn, (framework, mode) in itertools.product(range(processes), groups):
            _run_framework(framework, worker_args, Path(tmp) / f"p{turn}", limits, outcome,
                           first=(framework, mode) == groups[0], picks=picks, mode=mode)
            if outcome.interrupted or USAGE_ERROR in outcome.codes:
                break
    if outcome.interrupted:
        print("opbench: interrupted; saving the cases that finished", file=sys.stderr, flush=True)
    elif USAGE_ERROR not in outcome.codes:
        line = refuse(len(outcome.selected), list(outcome.none_runs)) if not outcome.runnable else None
        if line:  # pytest's own form for a usage error
            print(f"ERROR: {line}", file=sys.stderr, flush=True)
            outcome.codes.append(USAGE_ERROR)
        for pick in picks:
            if pick not in outcome.matched:  # pytest's own words for a node id that names nothing
                print(f"ERROR: not found: {pick} (in no framework's worker: {', '.join(frameworks)})",
                      file=sys.stderr, flush=True)
                outcome.codes.append(USAGE_ERROR)
    if outcome.benches or outcome.failed:
        merged = merge(outcome, limits, processes)
        if show is not None and not getattr(option, "benchmark_disable", False):
            show(merged)  # every worker's cases, side by side
        children.save(merged, option, _autosave_name(), "isolated run")
    return outcome.code


_ROUNDS_FLAGS = ("--benchmark-min-rounds", "--benchmark-max-time")


def split_rounds(args: list[str], option, processes: int) -> list[str]:
    """The arguments of one of `processes` workers that time the same cases: pytest-benchmark's
    least rounds and time per case divided between them (each still warms up and calibrates on its
    own, as a fresh process must)."""
    if processes == 1:
        return args
    rounds = -(-int(getattr(option, "benchmark_min_rounds", 5) or 5) // processes)
    seconds = float(getattr(option, "benchmark_max_time", 1.0) or 1.0) / processes
    return [*children.without(args, _ROUNDS_FLAGS), f"--benchmark-min-rounds={rounds}",
            f"--benchmark-max-time={seconds:g}"]


def _run_framework(framework: str, args: list[str], tmp: Path, limits: Limits, outcome: Outcome, first: bool,
                   picks: Sequence[str] = (), mode: str | None = None) -> None:
    """One framework's workers (of one mode, where given: a mode's compiler, its caches and its
    first-use imports stay out of the other modes' figures), a fresh one after each death or
    recycling, until its cases are done.
    Each worker leaves out every case an earlier one started, so the loop ends: a worker that
    starts no case is the last."""
    started: list[str] = []
    bases: dict[str, int] = {}  # by direction, the least any of these workers held after its first case of it
    said_floor = False
    tmp.mkdir(exist_ok=True)
    for attempt in itertools.count(1):
        stem = tmp / f"{framework}{'-' + mode if mode else ''}-{attempt}"
        skip, progress_path, json_path = (stem.with_suffix(x) for x in (".skip", ".jsonl", ".json"))
        skip.write_text("\n".join(started))
        env = {**os.environ, CHILD: str(progress_path), SKIP: str(skip), **limits.env(),
               FIRST: "1" if first else "", PICKS: json.dumps(list(picks)), BASE: json.dumps(bases)}
        cmd = [sys.executable, "-m", "pytest", *child_args(args, framework, str(json_path), mode)]
        code, stopped = children.run_child(cmd, env)
        outcome.workers[framework] = outcome.workers.get(framework, 0) + 1
        progress = read_progress(progress_path)
        bases.update(progress.bases)  # the worker wrote the least of its own and what it was given
        if progress.floor_over_max_rss and not said_floor:
            said_floor = True
            print(f"opbench: a {framework}{' ' + mode if mode else ''} worker holds "
                  f"{progress.floor_over_max_rss / 2**30:.1f} GiB after one case, past --worker-max-rss "
                  f"{limits.max_rss / 2**30:.1f} GiB: a fresh one would pass it too, so these workers are "
                  "replaced for --worker-max-growth alone", file=sys.stderr, flush=True)
        outcome.benches += progress.benches
        outcome.failed += progress.failed
        outcome.matched.update(progress.matched)
        outcome.selected.update(progress.cases)
        if progress.cases:
            if progress.none_runs is None:
                outcome.runnable = True
            else:
                outcome.none_runs.update(dict.fromkeys(progress.none_runs))
        started += progress.started
        if json_path.exists():
            try:
                outcome.documents.append(json.loads(json_path.read_text(encoding="utf-8")))
            except (OSError, json.JSONDecodeError):
                pass
        if stopped or (code == children.INTERRUPTED and not progress.recycled):
            outcome.interrupted = True
            return
        if progress.recycled and progress.ended:
            continue
        dead = code < 0 or code not in (0, 1, 2, 3, 4, 5)
        if dead and progress.running is not None:
            case = progress.running
            line = (f"opbench: {framework} worker {how_it_died(code)} in {case}{where_it_died(progress_path)}; "
                    "a fresh worker runs the cases left")
            print(line, file=sys.stderr, flush=True)
            outcome.failed.append(case)
            outcome.crashes.append({"case": case, "how": how_it_died(code)})
            continue
        if dead:  # outside any case: at start-up, in collection or at the end
            print(f"opbench: {framework} worker {how_it_died(code)} outside any case", file=sys.stderr, flush=True)
            outcome.crashes.append({"case": None, "how": how_it_died(code)})
            code = 1
        if code in (INTERNAL_ERROR, USAGE_ERROR):  # pytest stopped that worker before its cases ran out
            outcome.stopped.append(framework)
        outcome.codes.append(code)
        return


def merge(outcome: Outcome, limits: Limits, processes: int = 1) -> dict:
    """One pytest-benchmark document from every worker's: their benchmarks in the order they ran
    (with `processes` N > 1, each case's N processes pooled into one: pooled()), machine_info's
    per-framework facts united, and the run's status over all of them."""
    docs = outcome.documents
    failed = list(dict.fromkeys(outcome.failed))
    merged = dict(docs[0]) if docs else {"machine_info": {}, "commit_info": {}, "version": _version()}
    merged["datetime"] = datetime.now(timezone.utc).isoformat()
    merged["benchmarks"] = list(outcome.benches) if processes == 1 else pooled(outcome.benches, processes, failed)
    machine = merged["machine_info"] = dict(merged.get("machine_info") or {})
    info = machine["opbench"] = dict(machine.get("opbench") or {})
    for doc in docs[1:]:
        for key, value in ((doc.get("machine_info") or {}).get("opbench") or {}).items():
            if isinstance(value, dict) and isinstance(info.get(key), dict):
                info[key] = {**info[key], **value}
            else:
                info.setdefault(key, value)
    # a framework whose worker pytest stopped (internal or usage error) did not run all it selected,
    # and the frameworks after it none: such a run is not complete, however well its cases went
    stopped = outcome.interrupted or bool(outcome.stopped)
    status = "interrupted" if stopped else "failed" if failed else "complete"
    info["run"] = {"status": status, "failed": failed, **({"stopped": outcome.stopped} if outcome.stopped else {})}
    info["isolate"] = {"by": "framework", "workers": dict(outcome.workers), "crashed": list(outcome.crashes),
                       **limits.info(), "processes": processes}
    return merged


def pooled(benches: list[dict], processes: int, failed: list[str]) -> list[dict]:
    """Each case timed in `processes` workers as one benchmark, in the order the first ran them:
    pytest-benchmark's statistics over every round of every process (each round's time per call),
    extra_info from the first process but for what the processes tell apart: the largest peak
    memory, the busiest machine load, and `processes`, each process's median and their spread
    ((max - min) / median of the medians: what the process lifetime alone moves, pyperf's point).
    A case that failed in any process, or was not timed in all of them, is left out (the run's
    failed list names it): a figure over fewer processes than asked is not the figure asked for."""
    from pytest_benchmark.stats import Stats

    from opbench.core import schema

    runs: dict[str, list[dict]] = {}
    for bench in benches:
        runs.setdefault(bench["fullname"], []).append(bench)
    out = []
    for name, each in runs.items():
        if name in failed or len(each) != processes or any(not (b.get("stats") or {}).get("data") for b in each):
            if name not in failed:
                failed.append(name)
            continue
        stats = Stats()
        for bench in each:
            for value in bench["stats"]["data"]:
                stats.update(value)
        medians = [float(b["stats"]["median"]) for b in each]
        first = each[0]
        extra = dict(first.get("extra_info") or {})
        for key in ("peak_rss_bytes", "peak_anon_bytes"):  # a case's peak: its largest process's
            peaks = [(b.get("extra_info") or {}).get(key) for b in each]
            if all(isinstance(p, int | float) for p in peaks):
                extra[key] = max(peaks)
            elif any(p is not None for p in peaks):  # not the largest when one process has none
                extra[key] = None
        loads = [(b.get("extra_info") or {}).get(schema.LOAD) for b in each]
        if all(isinstance(load, dict) for load in loads):
            extra[schema.LOAD] = max(loads, key=lambda load: (bool(load.get("busy")), load.get("other_cpus", 0)))
        middle = statistics.median(medians)
        extra["processes"] = {"count": processes, "medians_s": medians,
                              "spread": (max(medians) - min(medians)) / middle if middle > 0 else None}
        out.append({**first, "extra_info": extra, "stats": {**stats.as_dict(), "data": list(stats.data),
                                                            "iterations": first["stats"].get("iterations", 1)}})
    return out


def _version() -> str:
    from pytest_benchmark import __version__

    return __version__


def _autosave_name() -> str:
    try:
        from pytest_benchmark.utils import get_tag

        return get_tag()
    except Exception:  # a folder that is no repository: pytest-benchmark's own name is unavailable
        return "isolated"
