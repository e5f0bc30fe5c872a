"""The paired gate's coordinator: randomized interleaved trials between two live workers.

For every benchmark of the selection, both workers of a pair prepare it (the plugin's own code
path, NumPy check included), then each trial times a short burst on each side in a random
order, so that the two sides of a trial are measured a fraction of a second apart and a
tenant's load episode hits both. A trial gives one log-ratio of the bursts' fastest calls.
Fresh worker pairs, each with its own random order of benchmarks, sample between-process
effects (Abedi & Brecht, ICPE 2017; Kalibera & Jones, ISMM 2013).

Two stages fixed in advance (see intervals): a screen at the usual confidence on at least
`min_pairs` pairs, extended pair by pair for undecided benchmarks while the budget lasts; then
every benchmark the screen flagged is measured again on fresh pairs and its change stands only
at the family-wise level (Holm's step-down over the flagged set). One budget covers both: the
screen's extension stops where the rest would no longer pay for the confirmation's minimum
over the benchmarks flagged so far, and the confirmation's number of pairs is fixed before its
first pair from what is left, at the pace measured (never from the confirmation's own data). A worker that
crashes, hangs or fails a check fails that benchmark (and the gate); a fresh pair takes over for the rest.
A check that fails on one side only is verified again on a fresh pair before it is reported: repeated,
it is a correctness change of the framework; not repeated, it is said as intermittent.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from opbench.core.processes import WorkerFailure, WorkerProcess
from opbench.regression import intervals as ps
from opbench.results.stats import CONFIDENCE, Rule

SIDES = ("baseline", "candidate")
WARM_UP_S = 0.1  # per side, untimed, after calibration
MAX_ROUNDS = 25  # alternations per trial
STOLEN = 0.10  # a trial during which other guests took more than this share of the CPUs is repeated


@dataclass(frozen=True)
class Side:
    """One environment: its interpreter and the environment variables its worker gets."""

    name: str
    python: str
    env: dict[str, str]


@dataclass
class Plan:
    """How much to sample. Defaults chosen with studies/paired_quality.py (docs: the paired gate)."""

    trials: int = 8  # trials per benchmark and worker pair (docs: why many short pairs)
    min_pairs: int = 8  # screen: worker pairs every benchmark gets (7 reach a 97% signed-rank interval)
    max_pairs: int = 60  # at most this many in either stage (a new pair starts in about 2 s)
    confirm_pairs: int = 24  # the confirmation's minimum of fresh pairs (more when Holm's first level needs them)
    budget_s: float | None = None  # both stages' time (None: budget_for); the confirmation's minimum may overrun it
    budget_per_benchmark_s: float = 80.0  # ... by default this much per benchmark of the selection,
    min_budget_s: float = 20 * 60.0  # ... and at least this
    burst_s: float = 0.04  # target length of one burst
    round_s: float = 0.002  # a timed round holds at least this much work (loops of short calls)
    timeout_s: float = 600.0  # collect and prepare (first calls compile)
    confidence: float = CONFIDENCE
    family_alpha: float = ps.FAMILY_ALPHA  # over the whole selection, all shards together
    seed: int = 0
    # the change the confirmation's power is stated for: the share of the flagged benchmarks it would
    # confirm if each had changed by this much, at the scatter of pair medians the screen measured
    power_change: float = 0.07
    shard: tuple[int, int] = (1, 1)  # (k, n): this run gates the k-th of n parts of the selection (`shard_of`)

    @property
    def alpha(self) -> float:
        """This run's share of the suite-wide false-alarm budget: family_alpha / n over n shards
        (Bonferroni between shards: n runs, each wrong with probability at most alpha / n, are
        together wrong with probability at most alpha, however their benchmarks are split)."""
        return self.family_alpha / self.shard[1]

    def budget_for(self, benchmarks: int) -> float:
        """The run's budget for a selection: the one given, else 80 s per benchmark (about what
        the process gate at K=7 spends on one) and at least 20 minutes."""
        if self.budget_s is not None:
            return self.budget_s
        return max(self.min_budget_s, self.budget_per_benchmark_s * benchmarks)


@dataclass
class Record:
    """Everything measured about one benchmark."""

    id: str
    name: str = ""
    group: str = ""
    extra: dict[str, dict] = field(default_factory=dict)  # side -> extra_info
    trials: list[dict] = field(default_factory=list)
    problem: str = ""  # why it has no verdict
    # "" | failed | missing | new | skipped | worse | fixed (a check that fails on one side only, the candidate's
    # or the baseline's) | intermittent (the baseline's check failed once and passed on a fresh pair)
    kind: str = ""
    known: dict[str, str] = field(default_factory=dict)  # side -> the known issue its result showed ("" none)
    verdict: str = ""
    level: float = 0.0  # the confidence of the interval to report (0: the plan's)

    def pairs(self, stage: str | None = None) -> list[list[dict]]:
        """The trials of one stage (None: both), grouped by worker pair in the order they ran."""
        by_pair: dict[int, list[dict]] = {}
        for t in self.trials:
            if stage is None or t["stage"] == stage:
                by_pair.setdefault(t["pair"], []).append(t)
        return list(by_pair.values())

    def stage_pairs(self, stage: str) -> list[np.ndarray]:
        """Trial log-ratios of one stage, grouped by worker pair; a pair's trials flagged for
        interference are left out when at least three clean ones remain."""
        out = []
        for trials in self.pairs(stage):
            clean = [t for t in trials if not t["interfered"]]
            out.append(np.array([t["log_ratio"] for t in (clean if len(clean) >= 3 else trials)]))
        return out

    def estimate(self, stage: str) -> ps.Estimate | None:
        pairs = self.stage_pairs(stage)
        return ps.estimate(pairs) if pairs else None


GRACE_S = 10.0  # how long a worker asked to exit may take before it is killed


class Pair:
    """Two live workers, one per side, that collected the same selection."""

    def __init__(self, number: int, sides: tuple[Side, Side], pytest_args: list[str], folder: Path,
                 timeout: float, spawn: Callable[..., WorkerProcess] = WorkerProcess) -> None:
        self.number, self.workers, self.ids = number, {}, {}
        try:
            for side in sides:
                self.workers[side.name] = spawn(side.name, [side.python, "-m", "opbench.regression.worker"], side.env,
                                                folder / f"worker-{number:02d}-{side.name}.log")
            for side, reply in self.ask_both({"cmd": "collect", "args": pytest_args}, timeout).items():
                if not reply.get("ok"):
                    raise WorkerFailure(f"the {side} worker: {reply.get('error')}")
                self.ids[side] = list(reply["ids"])
        except BaseException as exc:
            self.close(0.0 if isinstance(exc, KeyboardInterrupt) else GRACE_S)
            raise

    def ask(self, side: str, request: dict, timeout: float) -> dict:
        return self.workers[side].ask(request, timeout)

    def ask_both(self, request: dict, timeout: float) -> dict[str, dict]:
        """The same untimed request (collect, describe, release) to both workers before either
        reply is read, so that the two sides do that work at the same time: work of one thread
        each (imports, pytest's collection, a garbage collection), which two cores run side by side."""
        for worker in self.workers.values():
            worker.send(request)
        return {side: worker.reply(request.get("cmd", "?"), timeout) for side, worker in self.workers.items()}

    def ask_each(self, request: dict, timeout: float) -> dict[str, dict]:
        """The same untimed request (prepare, check) to one worker after the other, the first side
        alternating from pair to pair; the replies by side in SIDES' order. This is work on the
        frameworks' and NumPy's thread pools (builds, first calls and compiles, references, checks):
        side by side, two pools of all the cores each crowd one another (on 2 cores a pair's prepare
        took 3.5 times as long together as one after the other, docs: the paired gate)."""
        order = SIDES if self.number % 2 else SIDES[::-1]
        replies = {side: self.workers[side].ask(request, timeout) for side in order}
        return {side: replies[side] for side in SIDES}

    def close(self, grace: float | None = None) -> None:
        """Ask both workers to exit, each killed after `grace` seconds (0 on an interrupt: Ctrl-C
        and a cancelled job stop at once, not after a hung worker's goodbye)."""
        for w in self.workers.values():
            w.close(GRACE_S if grace is None else grace)


UNCONFIRMED = "unconfirmed"  # flagged by the screen, not confirmed: interrupted, or beyond the budget
PACE_PAIRS = 2  # the screen pair after which the least run's time is known (pair 1 pays for cold caches)
MARGIN = 1.1  # what a budget or a split said after the first warm pairs adds to the least run's estimate


class OverBudget(Exception):
    """The selection's least run (the screen's minimum of pairs and one confirmation) does not fit
    the --budget given: said after the first warm pair instead of running past it."""


def jobs_for(divided_s: float, undivided_s: float, budget_s: float) -> int | None:
    """The fewest jobs of `budget_s` each that a run splits into (--shard) with each job's part,
    MARGIN added, within it: each pays `undivided_s` in full and an equal share of `divided_s`.
    None where the undivided part alone, MARGIN added, does not fit."""
    fixed = MARGIN * undivided_s
    return max(1, math.ceil(MARGIN * max(0.0, divided_s) / (budget_s - fixed))) if budget_s > fixed else None


def shard_of(ids: Iterable[str], shard: tuple[int, int]) -> set[str]:
    """The k-th of n parts of a selection: every n-th of its ids sorted, from the k-th on. A sorted
    list holds each test's parameters side by side (eager and compile, each size), so a test with n
    cases or more spreads over every part rather than filling one (which of its variants a part gets
    follows from the stride, so the parts' costs are alike only roughly); and n jobs of one
    environment, collecting the same ids, split them the same way."""
    k, n = shard
    return set(sorted(ids)[k - 1 :: n])


def _group(node_id: str) -> tuple[str, str]:
    """(framework, mode) of a benchmark id, 'test_x[torch-cpu-compile-float32-...]'; ('', '') for another."""
    params = node_id[node_id.find("[") + 1 : -1].split("-") if node_id.endswith("]") else []
    return (params[0], params[2]) if len(params) > 2 else ("", "")


def _after_first(times: list[float]) -> list[float]:
    """`times` after the first (cold) one; the first alone when there is no other."""
    return times[1:] or times


def _warm(times: list[float]) -> float:
    """The mean of `_after_first(times)`; 0 for none."""
    return float(np.mean(_after_first(times))) if times else 0.0


class PairedGate:
    """Runs the two stages over a selection and keeps every record."""

    def __init__(self, sides: tuple[Side, Side], pytest_args: list[str], folder: Path, plan: Plan,
                 rule_for: Callable[[str], Rule], spawn: Callable[..., WorkerProcess] = WorkerProcess,
                 progress: Callable[[str], None] | None = None) -> None:
        self.sides, self.args, self.folder, self.plan = sides, pytest_args, folder, plan
        self.rule_for, self.spawn = rule_for, spawn
        self.progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))
        self.rng = np.random.default_rng(plan.seed)
        self.records: dict[str, Record] = {}
        self.machine_info: dict[str, dict] = {}
        self.commit_info: dict = {}
        self.pairs_started = 0
        self.selected = 0  # benchmarks the two sides collected, all shards together
        self.start_s: list[float] = []  # seconds each pair took to start (spawn, collect)
        self.turn_s: dict[str, list[float]] = {}  # seconds of each benchmark's turns (prepare to release)
        # seconds a pair's workers take to load a framework and observe its threads in a mode, once per pair
        # for every (framework, mode) its benchmarks use, whether the pair runs 42 benchmarks or 3
        self.group_s: dict[tuple[str, str], list[float]] = {}
        self.pairs: list[Pair] = []  # every pair started, closed again however the run ends
        self.notes: list[str] = []
        self.start = time.monotonic()
        self.budget_s = plan.budget_for(0)  # until the selection is known
        self.stage = ("collect", 0, 0)  # (stage, pair number, pairs planned): what the progress lines say
        self.confirmed = False  # the confirmation's verdicts are in: until then a flagged change is unconfirmed

    # -- workers ---------------------------------------------------------------------------
    def new_pair(self) -> Pair:
        self.pairs_started += 1
        start = time.monotonic()
        pair = Pair(self.pairs_started, self.sides, self.args, self.folder, self.plan.timeout_s, self.spawn)
        self.start_s.append(time.monotonic() - start)
        self.pairs.append(pair)
        return pair

    def pair_s(self, ids: list[str]) -> float:
        """The expected seconds of a pair over `ids` at the pace measured so far: a pair's warm
        start plus each benchmark's warm turn, each the mean over all but the first (`_warm`).
        The first turn that times a benchmark pays for its compiler's cold cache (minutes for
        `torch.compile` cases), so a mean over all turns makes later pairs look slower than they
        are and leaves budget unused; a median over all turns is a little short of a warm pair's
        mean and overruns the budget."""
        every = [t for times in self.turn_s.values() for t in _after_first(times)]
        fallback = float(np.mean(every)) if every else 0.0
        return self._pair_overhead_s(ids) + sum(_warm(self.turn_s[i]) if self.turn_s.get(i) else fallback for i in ids)

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    # -- the run ---------------------------------------------------------------------------
    def run(self) -> None:
        grace = GRACE_S
        try:
            self._run()
        except KeyboardInterrupt:
            grace = 0.0
            raise
        finally:  # an interrupt or an error leaves no worker running
            for p in self.pairs:
                p.close(grace)

    def _run(self) -> None:
        pair = self.new_pair()
        for side, reply in pair.ask_both({"cmd": "machine_info"}, self.plan.timeout_s).items():
            self.machine_info[side] = reply.get("machine_info") or {}
            self.commit_info = reply.get("commit_info") or self.commit_info
        # Describing the environment imports every framework it has (TensorFlow, MXNet, JAX ...):
        # processes that did so time nothing; fresh pairs do.
        pair.close()
        base, cand = pair.ids["baseline"], pair.ids["candidate"]
        collected = set(base) | set(cand)
        self.selected = len(collected)
        if self.plan.shard[1] > 1:
            mine = shard_of(collected, self.plan.shard)
            base, cand = [i for i in base if i in mine], [i for i in cand if i in mine]
        for i in base:
            self.records[i] = Record(i)
        for i in sorted(set(base) - set(cand)):
            self._set(i, "missing", "not collected by the candidate")
        for i in sorted(set(cand) - set(base)):
            self.records[i] = Record(i, name=i.rsplit("::", 1)[-1], kind="new", problem="not collected by the baseline")
        active = [i for i in base if not self.records[i].kind]
        self.budget_s = self.plan.budget_for(len(active))
        for line in self.plan_lines(len(active)):
            self.progress(line)
        number, selection = 0, list(active)
        while active:
            number += 1
            self.stage = ("screen", number, max(self.plan.min_pairs, number))
            self._sweep(self.new_pair(), active, "screen", number).close()
            active = self._undecided(active, number)
            if number == PACE_PAIRS:
                self._least_run_fits(selection, number)
            if active and not self._room_for(active, number):
                self.notes.append(f"note: the budget was spent with {len(active)} benchmark(s) still noisy")
                break
        flagged = self._affordable(self._flagged())
        count = self.confirm_pairs(flagged) if flagged else 0
        left = max(0.0, self.budget_s - self.elapsed()) / 60
        power = self._power(flagged, count) if flagged else ""
        if flagged:
            self.progress(f"confirm: {len(flagged)} flagged benchmark(s) on {count} fresh pairs{power}")
        done = self._confirmation(flagged, count)
        if flagged:
            cut = ("" if done == count else f" of the {count}")
            self.notes.append(f"note: the confirmation measured {len(flagged)} flagged benchmark(s) on {done}{cut} "
                              f"fresh pairs, fixed from the budget left ({left:.1f} min)"
                              + (cut and ": its pairs ran slower than the screen's pace, and the next would have "
                                 "ended past the budget") + power)
        self._confirm(flagged)
        self.confirmed = True

    def _confirmation(self, flagged: list[str], count: int) -> int:
        """The confirmation's pairs: `count`, fewer when the next would end past the budget at the
        pace measured so far, even under the plan's minimum (its pairs can run slower than the
        screen's pace that reserved it), never under `holm_floor`. Cutting it short by the clock
        keeps the false-alarm bound exact: between identical sides a pair's time is both sides'
        together, the same with the sides swapped, so when the clock stops it says nothing of the
        signs of the pair medians, on which the signed-rank levels rest."""
        floor = self.holm_floor(len(flagged))
        for c in range(count):
            if c >= floor and self.elapsed() + self.pair_s(flagged) > self.budget_s:
                return c
            self.stage = ("confirm", c + 1, count)
            self._sweep(self.new_pair(), flagged, "confirm", c + 1).close()
        return count

    def least_run_s(self, selection: list[str], number: int) -> float:
        """The seconds from now to the end of the least run the design allows, at the pace seen: the
        screen's minimum of pairs left over the whole selection, then the confirmation's minimum of
        pairs over one flagged benchmark of median pace (its pair: the start, its group's load, its turn)."""
        return max(0, self.plan.min_pairs - number) * self.pair_s(selection) + self._one_confirmation_s(selection)

    def _one_confirmation_s(self, selection: list[str]) -> float:
        """The confirmation's minimum of pairs over one flagged benchmark of median pace."""
        timed = sorted((i for i in selection if self.turn_s.get(i)), key=lambda i: _warm(self.turn_s[i]))
        return self.confirm_minimum_s(timed[len(timed) // 2 :][:1])

    def _pair_overhead_s(self, ids: list[str]) -> float:
        """The part of `pair_s(ids)` that a share of `ids` pays in full: the pair's start and the
        load of each (framework, mode) group, which every share of a selection holds."""
        return _warm(self.start_s) + sum(_warm(self.group_s.get(g, [])) for g in {_group(i) for i in ids})

    def undivided_s(self, selection: list[str]) -> float:
        """What every job gating a share of `selection` (--shard) pays in full of its least run, at
        the pace seen: each of the screen's least pairs' overhead, and one benchmark's confirmation."""
        return self.plan.min_pairs * self._pair_overhead_s(selection) + self._one_confirmation_s(selection)

    def _least_run_fits(self, selection: list[str], number: int) -> None:
        """After the first warm pair (pair 2: pair 1 pays for cold compiler caches): a --budget the
        least run cannot fit in is refused (OverBudget) rather than overrun; a default budget
        too small for it becomes the least run, said in a note."""
        least = self.elapsed() + self.least_run_s(selection, number)
        if least <= self.budget_s:
            return
        pace = (f"at the pace of its first {number} pairs ({self.pair_s(selection) / 60:.1f} min a pair over "
                f"{len(selection)} benchmarks), the screen's least {self.plan.min_pairs} pairs and the confirmation "
                f"of one flagged benchmark ({self.least_confirm_pairs(1)} pairs) end at about {least / 60:.0f} min")
        if self.plan.budget_s is None:
            self.notes.append(f"note: the default budget ({self.budget_s / 60:.0f} min) is too small for this "
                              f"selection: {pace}, which is its budget now")
            self.budget_s = least
            return
        # what does not divide every job pays; the rest, the benchmarks' turns (the first pairs', cold
        # ones included, and the screen's least pairs still to come), divides between the jobs
        fixed, n = self.undivided_s(selection), self.plan.shard[1]
        jobs = jobs_for(least - fixed, fixed, self.budget_s)
        split = (f", or split it over at least {jobs} jobs of this budget (--shard 1/{jobs * n} ... "
                 f"{jobs * n}/{jobs * n}, one CI job each; more where many of its benchmarks change, as each one "
                 f"flagged is confirmed on {self.least_confirm_pairs(1)} fresh pairs or more), or by operator family "
                 "or mode (-m 'torch and forward and activation', -m 'torch and forward and not activation', ...)"
                 if jobs else f" (no share of it fits {self.plan.budget_s / 60:g} min: the workers' starts over the "
                 f"screen's {self.plan.min_pairs} pairs and one benchmark's confirmation alone take about "
                 f"{fixed / 60:.1f} min)")
        raise OverBudget(f"--budget {self.plan.budget_s / 60:g} min is too small for this selection: {pace}; give "
                         f"--budget {math.ceil(MARGIN * least / 60)}{split}; docs/usage/upgrade.md")

    def _affordable(self, flagged: list[str]) -> list[str]:
        """The flagged benchmarks the budget left can confirm on their least pairs, the largest
        screened changes first (at least one: the least run reserved it). The others are left
        UNCONFIRMED, no verdict, and a note says what budget confirms them all. Choosing by the
        screen's estimates does not bias the confirmation, which measures fresh pairs."""
        if not flagged:
            return []
        order = sorted(flagged, key=lambda i: -abs(math.log(
            self.records[i].estimate("screen").ratio(self.plan.confidence).ratio)))
        left = self.budget_s - self.elapsed()
        m = next((m for m in range(len(order), 0, -1) if self.confirm_minimum_s(order[:m]) <= left), 1)
        if m < len(order):
            full = self.elapsed() + self.confirm_minimum_s(order)
            for i in order[m:]:
                self.records[i].verdict = UNCONFIRMED
            self.notes.append(
                f"note: the budget left ({left / 60:.1f} min) confirms {m} of the {len(order)} flagged benchmarks on "
                f"their least pairs, the largest changes first; the other {len(order) - m} stay {UNCONFIRMED!r} (no "
                f"verdict): --budget {math.ceil(full / 60)} would confirm them all")
        return order[:m]

    def plan_lines(self, benchmarks: int) -> list[str]:
        """What the run will do, before it does it."""
        p, missing = self.plan, sum(1 for r in self.records.values() if r.kind)
        return [
            f"plan: {benchmarks} benchmarks in both environments"
            + (f" ({missing} more only on one side: listed at the end)" if missing else "")
            + (f"; shard {p.shard[0]} of {p.shard[1]} of the selection's {self.selected}, at a false-alarm budget "
               f"of {100 * p.alpha:.3g}% (the {p.shard[1]} shards together {100 * p.family_alpha:g}%)"
               if p.shard[1] > 1 else ""),
            f"  stage 1, screen: every benchmark on {p.min_pairs} fresh worker pairs, {p.trials} paired trials "
            f"each; an undecided one on more, up to {p.max_pairs}, while the budget lasts",
            f"  stage 2, confirm: the benchmarks the screen flags, again on at least "
            f"{self.least_confirm_pairs(1)} fresh pairs (fewer only where they would end past the budget), "
            "a change standing only at Holm's levels",
            f"  budget: {self.budget_s / 60:.1f} min for both stages; the time to go is estimated from the pace "
            "of the first pair on",
        ]

    def to_go_s(self, ids_left_in_pair: list[str]) -> float:
        """An estimate of the seconds left at the pace measured so far: the rest of this pair, the
        screen pairs still planned, and the confirmation's minimum over what is flagged now. More
        screen pairs for undecided benchmarks would add to it (within the budget)."""
        stage, number, planned = self.stage
        rest = sum(_warm(self.turn_s[i]) for i in ids_left_in_pair if self.turn_s.get(i))
        flagged = self._flagged()
        if stage == "screen":
            active = [i for i, r in self.records.items() if not r.kind]
            return rest + max(0, planned - number) * self.pair_s(active) + self.confirm_minimum_s(flagged)
        return rest + max(0, planned - number) * self.pair_s(flagged)

    def confirm_minimum_s(self, flagged: list[str]) -> float:
        """The seconds the confirmation's minimum of pairs over `flagged` takes at the pace seen."""
        return self.least_confirm_pairs(len(flagged)) * self.pair_s(flagged) if flagged else 0.0

    def _flagged(self) -> list[str]:
        return [i for i, r in self.records.items() if r.verdict in ("regression", "improvement")]

    def least_confirm_pairs(self, flagged: int) -> int:
        """The confirmation's minimum, which the plan reserves: the plan's, and at least
        `holm_floor`."""
        return max(self.plan.confirm_pairs, self.holm_floor(flagged))

    def holm_floor(self, flagged: int) -> int:
        """Four more pairs than the signed-rank interval needs to reach Holm's strictest level over
        `flagged` benchmarks at all (16 for 22 at a sixth of 5%): the fewest the clock may leave a
        confirmation whose pairs ran slower than the pace that reserved its minimum."""
        return ps.min_pairs(ps.confirm_confidence(flagged, self.plan.alpha)) + 4

    def confirm_pairs(self, flagged: list[str]) -> int:
        """Fresh pairs for the confirmation of `flagged` benchmarks: as many as the budget left
        pays for at the pace measured, within [least_confirm_pairs, max_pairs]. Fixed before the
        confirmation's first trial from the screen's outcome and timings only, so Holm's levels
        hold as for any fixed number (intervals.holm)."""
        least = self.least_confirm_pairs(len(flagged))
        per_pair = self.pair_s(flagged)
        fits = int((self.budget_s - self.elapsed()) // per_pair) if per_pair > 0 else least
        return max(least, min(self.plan.max_pairs, fits))

    def _power(self, flagged: list[str], count: int) -> str:
        """What `count` confirmation pairs can confirm (intervals.holm_share): the expected share
        of `flagged` if each had changed by the plan's power_change, each one's pair medians
        scattering as its own did in the screen (pooled, every benchmark is lent the widest ones'
        tails, and on kept runs that predicted further below what Holm confirmed:
        docs/explanation/paired-gate.md); and, where that is under 90%, the pairs and budget
        that reach it. Said before the confirmation's first pair, from the screen's data only."""
        rules = [self.rule_for(self.records[i].name) for i in flagged]
        scatter = ps.each_residuals([self.records[i].estimate("screen") for i in flagged])
        change, alpha = self.plan.power_change, self.plan.alpha
        share = ps.holm_share(scatter, change, rules, count, alpha)
        spreads = [100 * ps.spread(s) for s in scatter]
        said = (f"; if each had changed by {100 * change:g}%, {count} pairs would confirm about {100 * share:.0f}% "
                f"of them (each one's pair medians scattering as in the screen: {min(spreads):.1f}% to "
                f"{max(spreads):.1f}%)")
        if share >= 0.9:
            return said
        most = max(count, self.plan.max_pairs)  # `count` pairs fall short: the search starts above them
        needed = ps.pairs_for_share(scatter, change, rules, count + 1, most, 0.9, alpha) if most > count else None
        if needed is None:
            return said + f", and even {most} would confirm under 90%"
        budget = self.elapsed() + needed * self.pair_s(flagged)
        # a job's share: its screen pairs' and needed confirmation pairs' overheads in full, the turns divided
        fixed = self.pairs_started * self._pair_overhead_s(list(self.records)) + needed * self._pair_overhead_s(flagged)
        jobs, n = jobs_for(budget - fixed, fixed, self.budget_s), self.plan.shard[1]
        return said + (f"; {needed} pairs would confirm 90%: --budget {math.ceil(budget / 60)}"
                       + (f", or about {jobs} jobs of this budget (--shard 1/{jobs * n} ... {jobs * n}/{jobs * n}, "
                          "one CI job each)" if jobs and jobs > 1 else ""))

    def _undecided(self, active: list[str], number: int) -> list[str]:
        """Screen verdicts after `number` pairs; those still undecided continue (all continue
        until min_pairs, none after max_pairs)."""
        still = []
        for i in active:
            rec = self.records[i]
            if rec.kind:
                continue
            est = rec.estimate("screen")
            rec.verdict = ps.screen(est, self.rule_for(rec.name), self.plan.confidence) if est else "noisy"
            if number < self.plan.min_pairs or (rec.verdict == "noisy" and number < self.plan.max_pairs):
                still.append(i)
        return still

    def _room_for(self, active: list[str], number: int) -> bool:
        """Whether another screen pair over `active` fits in the budget, at the pace seen so far,
        with the confirmation's minimum over the benchmarks flagged so far after it."""
        if number < self.plan.min_pairs:
            return True
        return self.elapsed() + self.pair_s(active) + self.confirm_minimum_s(self._flagged()) <= self.budget_s

    def _confirm(self, flagged: list[str]) -> None:
        recs = [self.records[i] for i in flagged if not self.records[i].kind]
        estimates = [rec.estimate("confirm") for rec in recs]
        verdicts = ps.holm(estimates, [self.rule_for(rec.name) for rec in recs], [rec.verdict for rec in recs],
                           self.plan.confidence, self.plan.alpha)
        for rec, (verdict, level) in zip(recs, verdicts, strict=True):
            rec.verdict, rec.level = verdict, level

    def _sweep(self, pair: Pair, ids: list[str], stage: str, number: int) -> Pair:
        """One worker pair over `ids` in a random order; a failed pair is replaced by a fresh one."""
        order = [ids[k] for k in self.rng.permutation(len(ids))]
        self._load_groups(pair, [i for i in order if not self.records[i].kind])
        for n, i in enumerate(order):
            if self.records[i].kind:
                continue
            start = time.monotonic()
            try:
                self._benchmark(pair, i, stage)
                self.turn_s.setdefault(i, []).append(time.monotonic() - start)
            except WorkerFailure as exc:
                self._set(i, "failed", str(exc))
                pair.close()
                pair = self.new_pair()
            self._report(i, order[n + 1 :], n + 1, len(order))
        return pair

    def _load_groups(self, pair: Pair, order: list[str]) -> None:
        """Each side loads the framework of every (framework, mode) in `order` and observes its threads
        there, alone, before any benchmark: a cost every pair pays once per group, timed on its own
        (group_s) so that a confirmation pair over three benchmarks is not estimated as 3/42 of a screen
        pair's. A worker that fails here fails again on the benchmark, which reports it."""
        first = {}
        for i in order:
            first.setdefault(_group(i), i)
        for group, i in first.items():
            start = time.monotonic()
            try:
                for side in SIDES:
                    pair.ask(side, {"cmd": "threads", "id": i}, self.plan.timeout_s)
            except WorkerFailure:
                return
            self.group_s.setdefault(group, []).append(time.monotonic() - start)

    def _set(self, i: str, kind: str, problem: str) -> None:
        rec = self.records.setdefault(i, Record(i))
        rec.kind, rec.problem, rec.verdict = kind, problem, kind

    def _benchmark(self, pair: Pair, i: str, stage: str) -> None:
        rec, plan = self.records[i], self.plan
        if not self._prepare(pair, i):
            return
        loops, rounds, timeout = self._calibrate(pair, i)
        clean = extra = 0
        while clean < plan.trials and not rec.kind:
            trial = self._trial(pair, i, loops, rounds, timeout)
            if trial is None:
                break
            trial.update(pair=pair.number, stage=stage)
            rec.trials.append(trial)
            if trial["interfered"] and extra < plan.trials:
                extra += 1  # another trial in its place; the flagged one stays in the log
            else:
                clean += 1
        if not rec.kind:  # the call after its bursts, checked on both sides: a path wrong once warm is no timing
            checked = pair.ask_each({"cmd": "check"}, plan.timeout_s)
            if any(not reply.get("ok") for reply in checked.values()):
                errors = (f"{side}: {reply.get('error')}" for side, reply in checked.items() if not reply.get("ok"))
                self._set(i, "failed", "; ".join(errors))
            elif any(reply.get("outcome") == "wrong" for reply in checked.values()):
                self._correctness(pair, i, {s: {**checked[s], "extra_info": {}, "known": rec.known.get(s)}
                                            for s in SIDES})
            else:  # a known issue the first call did not show, shown warm: judged as if shown at prepare
                for side, reply in checked.items():
                    if reply.get("known") and not rec.known.get(side):
                        rec.known[side] = reply["known"]
        pair.ask_both({"cmd": "release"}, plan.timeout_s)

    def _prepare(self, pair: Pair, i: str) -> bool:
        """Both sides build and verify benchmark `i`; False (and the record says why) unless both are
        ready. Each side first observes its threads alone, one after the other."""
        for side in SIDES:
            pair.ask(side, {"cmd": "threads", "id": i}, self.plan.timeout_s)
        ready = pair.ask_each({"cmd": "prepare", "id": i}, self.plan.timeout_s)
        for side, reply in ready.items():
            if not reply.get("ok"):
                self._set(i, "failed", f"{side}: {reply.get('error')}")
                return False
        outcomes = {s: r["outcome"] for s, r in ready.items()}
        if "failed" in outcomes.values():
            side = next(s for s in SIDES if outcomes[s] == "failed")
            self._set(i, "failed", f"failed on the {side}: {ready[side]['message']}")
        elif "wrong" in outcomes.values():
            self._correctness(pair, i, ready)
        elif outcomes["candidate"] != "ready":
            kind = "skipped" if outcomes["baseline"] != "ready" else "missing"
            self._set(i, kind, f"{outcomes['candidate']} on the candidate: {ready['candidate']['message']}")
        elif outcomes["baseline"] != "ready":
            self._set(i, "new", f"{outcomes['baseline']} on the baseline: {ready['baseline']['message']}")
        else:
            rec = self.records[i]
            rec.name, rec.group = ready["baseline"]["name"], ready["baseline"]["group"]
            rec.extra = {s: ready[s]["extra_info"] for s in SIDES}
            rec.known = {s: ready[s].get("known") or "" for s in SIDES}
        return not self.records[i].kind

    def _correctness(self, pair: Pair, i: str, ready: dict[str, dict]) -> None:
        """A check that failed on one side, or on both: what the framework computes changed, or is
        wrong on both sides. Either way the benchmark is not timed; the record says both sides'.
        A failure on one side only is verified again on a fresh pair first (`_reverify`)."""
        said = "; ".join(_said(s, ready[s]) for s in SIDES)
        if {ready[s]["outcome"] for s in SIDES} == {"wrong", "ready"}:  # wrong on one side, ready on the other
            wrong = next(s for s in SIDES if ready[s]["outcome"] == "wrong")
            self._set(i, *self._reverify(i, wrong, said, pair.number))
        else:
            self._set(i, "failed", f"{said} (pair {pair.number})")

    def _reverify(self, i: str, side: str, said: str, number: int) -> tuple[str, str]:
        """(kind, problem) of a check that failed on `side` only in pair `number` (`said` says how),
        from the same benchmark on a fresh pair: each side's first call, then the call after a short
        burst, as a timed turn checks them. Failing again on `side` alone, it is a correctness change: worse
        (the candidate's) or fixed (the baseline's). Passing on both, it is intermittent, and both
        sides' framework code and inputs were the same: on the candidate still worse (a wrong
        result is never excused by a right one later), on the baseline `intermittent`, which is no
        fix (the candidate passed a few checks, the baseline most) and does not fail the gate. Either
        way the benchmark is not timed: a path that was wrong once is not verified."""
        kind = "worse" if side == "candidate" else "fixed"
        first = f"{said} (pair {number})"
        try:
            fresh = self.new_pair()
            try:
                again = self._verify(fresh, i)
            finally:
                fresh.close()
        except WorkerFailure as exc:
            return kind, f"{first}; not verified again on a fresh pair: {exc}"
        text = "; ".join(_said(s, again[s]) for s in SIDES)
        fresh_said = f"pair {fresh.number}: " + ("the same" if text == said else text)
        outcomes = {s: again[s]["outcome"] for s in SIDES}
        if outcomes[side] == "wrong" and list(outcomes.values()).count("wrong") == 1:
            return kind, f"{first}; again on a fresh {fresh_said}"
        if "wrong" in outcomes.values():
            return "failed", f"{first}; on a fresh {fresh_said}"
        if set(outcomes.values()) != {"ready"}:
            return kind, f"{first}; not verified again on a fresh {fresh_said}"
        if side == "candidate":
            return "worse", f"intermittent: {first}; a fresh {fresh_said}"
        return "intermittent", f"{first}; a fresh {fresh_said}"

    def _verify(self, pair: Pair, i: str) -> dict[str, dict]:
        """Each side's check of benchmark `i` on `pair`: its prepare (the first call's check), then,
        where both are ready, the check of the call after a short burst; nothing is timed or kept.
        A side whose worker answered with an error says outcome 'failed'."""
        def failed(reply: dict) -> dict:
            return {"outcome": "failed", "message": reply.get("error")}

        for side in SIDES:
            pair.ask(side, {"cmd": "threads", "id": i}, self.plan.timeout_s)
        said = {s: r if r.get("ok") else failed(r)
                for s, r in pair.ask_each({"cmd": "prepare", "id": i}, self.plan.timeout_s).items()}
        if all(reply["outcome"] == "ready" for reply in said.values()):
            for side in SIDES:
                reply = pair.ask(side, {"cmd": "burst", "loops": 1, "rounds": 3}, self.plan.timeout_s)
                if not reply.get("ok"):
                    said[side] = failed(reply)
            if all(reply["outcome"] == "ready" for reply in said.values()):
                for side, reply in pair.ask_each({"cmd": "check"}, self.plan.timeout_s).items():
                    if not reply.get("ok") or reply.get("outcome") == "wrong":
                        said[side] = {**reply, "extra_info": {}} if reply.get("ok") else failed(reply)
        pair.ask_both({"cmd": "release"}, self.plan.timeout_s)
        return said

    def _trial(self, pair: Pair, i: str, loops: int, rounds: int, timeout: float) -> dict | None:
        """`rounds` alternations of one timed round on each side, in a random order each time, so
        that the two sides' rounds are never more than a few milliseconds apart."""
        rounds_of: dict[str, list[dict]] = {side: [] for side in SIDES}
        for _ in range(rounds):
            for side in (SIDES if self.rng.random() < 0.5 else SIDES[::-1]):
                reply = pair.ask(side, {"cmd": "burst", "loops": loops, "rounds": 1}, timeout)
                if not reply.get("ok"):
                    self._set(i, "failed", f"failed on the {side}: {reply.get('error')}")
                    return None
                rounds_of[side].append(reply)
        return trial_record(rounds_of)

    def _calibrate(self, pair: Pair, i: str) -> tuple[int, int, float]:
        """A discarded warm-up burst per side; from the faster side's call time, the loops per
        round and rounds per burst both sides then use, and a deadline for one burst."""
        fastest = math.inf
        for side in SIDES:
            reply = pair.ask(side, {"cmd": "burst", "loops": 1, "rounds": 3}, self.plan.timeout_s)
            if not reply.get("ok"):
                self._set(i, "failed", f"failed on the {side}: {reply.get('error')}")
                return 1, 1, 0.0
            fastest = min(fastest, *reply["times"])
        fastest = max(fastest, 1e-7)
        loops = max(1, math.ceil(self.plan.round_s / fastest))
        rounds = min(MAX_ROUNDS, max(3, math.ceil(self.plan.burst_s / (loops * fastest))))
        timeout = max(60.0, 50 * loops * fastest)
        warm = max(1, math.ceil(WARM_UP_S / (loops * fastest)))
        for side in SIDES:  # caches, allocator pools and thread pools settle before the first trial
            pair.ask(side, {"cmd": "burst", "loops": loops, "rounds": min(warm, 100)}, timeout * warm)
        return loops, rounds, timeout

    def _report(self, i: str, left_in_pair: list[str], done: int, total: int) -> None:
        rec = self.records[i]
        counts: dict[str, int] = {}
        for r in self.records.values():
            if r.verdict:
                counts[r.verdict] = counts.get(r.verdict, 0) + 1
        so_far = ", ".join(f"{n} {v}" for v, n in sorted(counts.items())) or "no verdicts yet"
        state = rec.problem or f"{len(rec.trials)} trials"
        stage, number, planned = self.stage
        of = f"{number} of {planned}" + ("+" if stage == "screen" and number >= planned else "")
        self.progress(f"[{stage} pair {of} | {done}/{total}] {rec.name or i}: {state} | {so_far} | "
                      f"{self.elapsed() / 60:.1f} min in, about {self.to_go_s(left_in_pair) / 60:.1f} min to go")


def _said(side: str, reply: dict) -> str:
    """One side's check of a benchmark, as a correctness verdict quotes it."""
    if reply["outcome"] == "wrong":
        return f"{side}: {reply['message']}"
    if reply["outcome"] != "ready":
        return f"{side}: {reply['outcome']} ({reply.get('message', '')})"
    err = reply.get("extra_info", {}).get("max_abs_err")
    return (f"{side}: passes" + (f" (max abs error {err:.3g})" if err is not None else "")
            + (f", {reply['known']}" if reply.get("known") else ""))


def trial_record(rounds_of: dict[str, list[dict]]) -> dict:
    """One trial from each side's timed rounds: the log-ratio of the fastest rounds (time per
    call), the same for mean CPU time and mean wall time per call (to show which metric is
    steadier), and the interference signals summed over the trial."""
    def fastest(side):
        return min(t for r in rounds_of[side] for t in r["times"])

    def mean(side, key):
        return max(float(np.mean([r[key] for r in rounds_of[side]])), 1e-12)

    def total(key):
        return sum(r[key] for side in SIDES for r in rounds_of[side])

    a, b = fastest("baseline"), fastest("candidate")
    per_round = {side: [min(r["times"]) for r in rounds_of[side]] for side in SIDES}
    return {
        "log_ratio": math.log(b / a), "baseline_min": a, "candidate_min": b,
        "baseline_rounds": per_round["baseline"], "candidate_rounds": per_round["candidate"],
        "cpu_log_ratio": math.log(mean("candidate", "cpu_per_call") / mean("baseline", "cpu_per_call")),
        "mean_log_ratio": math.log(mean("candidate", "wall_per_call") / mean("baseline", "wall_per_call")),
        "steal": total("steal"), "switches": total("switches"),
        # minor page faults per call, each side's mean over its rounds (0 from a worker that does not count them)
        **{f"{side}_faults": float(np.mean([r.get("faults_per_call", 0.0) for r in rounds_of[side]]))
           for side in SIDES},
        "interfered": bool(steal_share(total("steal"), total("wall")) > STOLEN),
    }


def steal_share(ticks: int, wall: float) -> float:
    """The share of the machine's CPU time the hypervisor gave to other guests during `wall` seconds."""
    return ticks / os.sysconf("SC_CLK_TCK") / max(wall * (os.cpu_count() or 1), 1e-9)
