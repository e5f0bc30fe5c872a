"""The noise-aware comparison of two sets of runs, for gating framework upgrades.

For every benchmark: the ratio of medians candidate / baseline with a bootstrap interval over
runs, and a verdict. Each run contributes one time per benchmark, its fastest round by default
(`min`; interference only ever adds time, so the minimum moves least between processes: measured
by studies/gate_quality.py) or its median round; the medians of those per-run times are
compared. Benchmarks missing from the candidate fail the gate (a framework whose
import broke skips all its benchmarks); new ones are listed. The environment difference comes
first, and runs from different machines draw a loud warning.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field
from typing import Any

from opbench.core import schema
from opbench.results.stats import CONFIDENCE, NO_INTERVAL, Ratio, Rule, ratio_of_medians, single_run_verdict, verdict
from opbench.results.store import ResultsError, Run
from opbench.results.tables import fmt_time, table

STATISTICS = ("min", "median")  # the per-run time a comparison uses, default first

# machine_info keys that identify the machine rather than the software
MACHINE_KEYS = ("node", "machine", "opbench.cpu_model", "opbench.cores", "cpu.brand_raw")


def flatten(info: Any, prefix: str = "") -> dict[str, str]:
    """{"a.b": "value"} for every leaf of nested dicts; lists become comma-joined text."""
    if isinstance(info, dict):
        out: dict[str, str] = {}
        for key, value in info.items():
            if key == "flags":  # CPU flag lists: long and never what changed
                continue
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    if isinstance(info, (list, tuple)):
        return {prefix[:-1]: ", ".join(map(str, info))}
    return {prefix[:-1]: str(info)}


RUN_STATUS_PREFIX = "opbench.run."  # how a run ended: not part of its environment


def environment_diff(baseline: list[Run], candidate: list[Run]) -> list[tuple[str, str, str]]:
    """(key, baseline value, candidate value) for every machine_info leaf that differs."""
    a, b = flatten(baseline[0].machine_info), flatten(candidate[0].machine_info)
    keys = sorted(k for k in set(a) | set(b) if not k.startswith(RUN_STATUS_PREFIX))
    return [(k, a.get(k, "-"), b.get(k, "-")) for k in keys if a.get(k) != b.get(k)]


@dataclass
class Row:
    fullname: str
    name: str
    group: str
    ratio: Ratio
    verdict: str
    baseline_median: float
    candidate_median: float
    samples: str = ""  # the paired gate's worker pairs x trials
    busy: str = ""  # the side(s) with a result timed on a busy machine: "baseline", "candidate", "both"


@dataclass
class Comparison:
    rows: list[Row]
    missing: list[str]
    new: list[str]
    env: list[tuple[str, str, str]]
    warnings: list[str] = field(default_factory=list)
    statistic: str = STATISTICS[0]
    confidence: float = CONFIDENCE
    broken: list[str] = field(default_factory=list)  # benchmarks that crashed, hung or failed a check
    skipped: list[str] = field(default_factory=list)  # benchmarks neither side could run here
    # the paired gate's correctness changes: a check (or a known issue) the candidate fails where the baseline
    # passed, which fails the gate, and one the candidate passes where the baseline failed
    worse: list[str] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)
    known: list[str] = field(default_factory=list)  # timed with a known issue on both sides
    # a check the baseline failed once and passed on a fresh pair, which the candidate passed: no timing, no fix
    intermittent: list[str] = field(default_factory=list)
    # benchmarks whose calls faulted in fresh pages in more pairs on one side than on the other
    faults: list[str] = field(default_factory=list)
    # the paired gate's undecided benchmarks: how their worker pairs' ratios spread, by full name
    spread: dict[str, str] = field(default_factory=dict)
    fail_on_noisy: bool = False  # an undecided benchmark fails the gate too
    single_run: float | None = None  # the threshold gate asked for one run per side, if any
    fail_on_busy: bool = False  # a benchmark timed on a busy machine on either side fails the gate

    @property
    def failed(self) -> bool:
        fails = ("regression", "noisy") if self.fail_on_noisy else ("regression",)
        return (bool(self.missing or self.broken or self.worse) or any(r.verdict in fails for r in self.rows)
                or (self.fail_on_busy and any(r.busy for r in self.rows)))

    def count(self, what: str) -> int:
        return sum(1 for r in self.rows if r.verdict == what)


def parse_rule(text: str) -> tuple[str, Rule]:
    """'GLOB=MARGIN:THRESHOLD' in percent, e.g. 'test_conv2d*=5:10'; both finite and non-negative."""
    try:
        pattern, numbers = text.split("=", 1)
        margin, threshold = (float(v.rstrip("%")) / 100 for v in numbers.split(":"))
    except ValueError:
        raise ResultsError(
            f"bad --rule {text!r}: expected GLOB=MARGIN:THRESHOLD in percent, e.g. 'test_conv2d*=5:10'"
        ) from None
    if not all(math.isfinite(v) and v >= 0 for v in (margin, threshold)):
        raise ResultsError(f"bad --rule {text!r}: the margin and threshold must be finite and not negative")
    return pattern, Rule(margin=margin, threshold=threshold)


def check_runs(side: str, runs: list[Run]) -> list[str]:
    """Refuse what a gate must not decide on: the same run twice on a side (it would count as two
    independent runs and shrink the interval), and interrupted runs (their timings are partial).
    Returns warnings for runs in which some benchmark failed."""
    seen: dict[str, Run] = {}
    for run in runs:
        if run.digest and run.digest in seen:
            raise ResultsError(f"the {side} lists the same run twice ({seen[run.digest].path} and {run.path}): "
                               "each run must be a distinct measurement")
        seen[run.digest] = run
        if run.interrupted:
            raise ResultsError(f"{run.path}: the run was interrupted, its timings are incomplete; run it again")
    return [f"note: {run.path} is from a run in which {len(run.status.get('failed', []))} test(s) failed: "
            "those benchmarks have no timing" for run in runs if run.status.get("status") == "failed"]


def rule_for(name: str, rules: list[tuple[str, Rule]], default: Rule) -> Rule:
    for pattern, rule in rules:
        if fnmatch.fnmatchcase(name, pattern):
            return rule
    return default


def check_sides(baseline: list[Run], candidate: list[Run]) -> None:
    """A run on both sides compares a measurement with itself: a usage error, not 'unchanged'."""
    base = {r.digest: r for r in baseline if r.digest}
    for run in candidate:
        if run.digest in base:
            raise ResultsError(f"the same run is on both sides ({base[run.digest].path} and {run.path}): "
                               "compare two different runs")


def compare(baseline: list[Run], candidate: list[Run], default: Rule | None = None,
            rules: list[tuple[str, Rule]] | None = None, statistic: str = STATISTICS[0],
            confidence: float = CONFIDENCE, single_run: float | None = None) -> Comparison:
    """Compare every benchmark the two sides share, from each run's `statistic` ('min' or
    'median' of its rounds), with intervals at `confidence`. A benchmark with one run per side
    gets no verdict, unless `single_run` (a fraction) asks for a threshold gate on its ratio."""
    if statistic not in STATISTICS:
        raise ResultsError(f"unknown statistic {statistic!r}: choose one of {', '.join(STATISTICS)}")
    default, rules = default or Rule(), rules or []
    run_notes = check_runs("baseline", baseline) + check_runs("candidate", candidate)
    check_sides(baseline, candidate)
    base_names = set().union(*(r.benchmarks for r in baseline))
    cand_names = set().union(*(r.benchmarks for r in candidate))
    common = sorted(base_names & cand_names)
    if not common:
        raise ResultsError("the baseline and candidate runs have no benchmark in common")
    rows = []
    for full in common:
        base = [getattr(r.benchmarks[full], statistic) for r in baseline if full in r.benchmarks]
        cand = [getattr(r.benchmarks[full], statistic) for r in candidate if full in r.benchmarks]
        ratio = ratio_of_medians(base, cand, confidence)
        bench = next(r.benchmarks[full] for r in candidate if full in r.benchmarks)
        said = (single_run_verdict(ratio, single_run) if ratio.runs == (1, 1)
                else verdict(ratio, rule_for(bench.name, rules, default)))
        rows.append(Row(full, bench.name, bench.group, ratio, said, sorted(base)[len(base) // 2],
                        sorted(cand)[len(cand) // 2], busy=_busy_sides(full, baseline, candidate)))
    result = Comparison(rows, sorted(base_names - cand_names), sorted(cand_names - base_names),
                        environment_diff(baseline, candidate), statistic=statistic, confidence=confidence,
                        single_run=single_run)
    result.warnings += run_notes
    busy = [r for r in rows if r.busy]
    if busy:
        sides = {side: sum(1 for r in busy if r.busy in (side, "both")) for side in ("baseline", "candidate")}
        result.warnings.append(
            f"WARNING: {len(busy)} of {len(rows)} benchmarks rest on a result timed on a busy machine "
            f"({sides['baseline']} on the baseline, {sides['candidate']} on the candidate): their verdicts are "
            "marked (busy ...) and say little; run them again alone, or --fail-on-busy refuses to decide on them")
    changed_machine = [k for k, _, _ in result.env if k in MACHINE_KEYS]
    if changed_machine:
        result.warnings.append(
            f"WARNING: the runs come from different machines ({', '.join(changed_machine)} differ): "
            "differences below are not only the software's"
        )
    for side, runs in (("baseline", baseline), ("candidate", candidate)):
        inner = environment_diff(runs[:1], runs[1:]) if len(runs) > 1 else []
        if any(k not in ("datetime",) for k, _, _ in inner):
            result.warnings.append(f"note: the {side} runs differ among themselves in: "
                                   f"{', '.join(sorted({k for k, _, _ in inner})[:6])}")
    if result.count(NO_INTERVAL):
        result.warnings.append(
            f"note: one run per side: no interval, so no verdict ({result.count(NO_INTERVAL)} benchmarks); compare "
            "K >= 3 runs per side (opbench upgrade-check does), or ask for a threshold on the ratio alone "
            "(opbench compare --single-run-threshold; in pytest, --benchmark-compare-fail)")
    elif single_run is not None and any(r.ratio.runs == (1, 1) for r in rows):
        result.warnings.append(
            f"note: one run per side: verdicts from the ratio alone beyond +-{100 * single_run:g}% "
            "(--single-run-threshold), blind to run-to-run noise")
    elif min(len(baseline), len(candidate)) < 2:
        result.warnings.append(
            "note: one run on a side: the intervals show only the other side's run-to-run noise; compare "
            "K >= 3 runs per side (opbench upgrade-check does)"
        )
    return result


def _busy_sides(full: str, baseline: list[Run], candidate: list[Run]) -> str:
    """Which side has a result of benchmark `full` that was timed on a busy machine."""
    hit = [any(schema.busy(r.benchmarks[full].extra) for r in runs if full in r.benchmarks)
           for runs in (baseline, candidate)]
    return "both" if all(hit) else "baseline" if hit[0] else "candidate" if hit[1] else ""


def _said(r: Row) -> str:
    word = r.verdict.upper() if r.verdict == "regression" else r.verdict
    return f"{word} (busy {r.busy})" if r.busy else word


def _short(name: str, width: int = 70) -> str:
    return name if len(name) <= width else name[: width - 1] + "~"


def _interval(r: Ratio) -> str:
    return "one run per side" if r.runs == (1, 1) else f"[{r.low:.3f}, {r.high:.3f}]"


def format_text(c: Comparison, markdown: bool = False) -> str:
    lines = []
    if c.env:
        lines.append("environment difference (baseline -> candidate):")
        lines += [f"  {k}: {a} -> {b}" for k, a, b in c.env]
    else:
        lines.append("environment: identical machine_info on both sides")
    lines += c.warnings
    lines.append("")
    header = ("benchmark", f"baseline ({c.statistic})", f"candidate ({c.statistic})", "ratio",
              f"{100 * c.confidence:g}% interval", "verdict")
    body = [
        (_short(r.name), fmt_time(r.baseline_median), fmt_time(r.candidate_median), f"{r.ratio.ratio:.3f}",
         _interval(r.ratio), _said(r))
        for r in c.rows
    ]
    if any(r.samples for r in c.rows):
        header += ("pairs x trials",)
        body = [(*line, r.samples) for line, r in zip(body, c.rows, strict=True)]
    lines += table(header, body, markdown)
    if c.broken:
        lines += ["", f"FAILED on a side ({len(c.broken)}): a crash, hang or failed check fails the gate"]
        lines += [f"  {m}" for m in c.broken]
    if c.worse:
        lines += ["", f"CORRECTNESS CHANGE: worse in the candidate ({len(c.worse)}): what the framework computes "
                  "fails a check the baseline passed, or shows a known issue the baseline did not; it fails the gate"]
        lines += [f"  {m}" for m in c.worse]
    if c.fixed:
        lines += ["", f"correctness change: fixed in the candidate ({len(c.fixed)}): a check or known issue the "
                  "baseline failed and the candidate passes"] + [f"  {m}" for m in c.fixed]
    if c.intermittent:
        lines += ["", f"intermittent on the baseline ({len(c.intermittent)}): a check the baseline failed once and "
                  "passed on a fresh pair, and the candidate passed; not timed, no fix, does not fail the gate"]
        lines += [f"  {m}" for m in c.intermittent]
    if c.known:
        lines += ["", f"known issue on both sides ({len(c.known)}): timed on both, as the same call"]
        lines += [f"  {m}" for m in c.known]
    if c.faults:
        lines += ["", f"page faults differ between the sides ({len(c.faults)}): where a side's calls fault their "
                  "memory in afresh, their time holds the kernel's work, which depends on what the process allocated "
                  "before (glibc gave the last call's output back), not the operator's alone; --malloc steady keeps "
                  "freed memory in the process and times the operator alone"]
        lines += [f"  {m}" for m in c.faults]
    if c.skipped:
        lines += ["", f"skipped on both sides ({len(c.skipped)}):"] + [f"  {m}" for m in c.skipped]
    if c.missing:
        lines += ["", f"MISSING in the candidate ({len(c.missing)}): a skipped or broken benchmark fails the gate"]
        lines += [f"  {m}" for m in c.missing]
    if c.new:
        lines += ["", f"new in the candidate ({len(c.new)}):"] + [f"  {n}" for n in c.new]
    if c.count("noisy"):
        lines += ["", f"NOISY ({c.count('noisy')}): the data could not decide; --fail-on-noisy fails the gate on them"
                  if c.fail_on_noisy else f"noisy ({c.count('noisy')}): the data could not decide; they do not fail "
                  "the gate unless --fail-on-noisy is given"]
        lines += [f"  {c.spread[r.fullname]}" for r in c.rows if r.verdict == "noisy" and r.fullname in c.spread]
    lines += ["", f"{c.count('regression')} regressions, {c.count('improvement')} improvements, "
              f"{c.count('unchanged')} unchanged, {c.count('noisy')} noisy, {len(c.missing)} missing, {len(c.new)} new"
              + (f", {len(c.broken)} failed" if c.broken else "")
              + (f", {len(c.worse)} worse in correctness" if c.worse else "")
              + (f", {len(c.fixed)} fixed in correctness" if c.fixed else "")
              + (f", {len(c.intermittent)} intermittent on the baseline" if c.intermittent else "")
              + (f", {c.count(NO_INTERVAL)} without a verdict (one run per side)" if c.count(NO_INTERVAL) else "")
              + (f", {sum(1 for r in c.rows if r.busy)} on busy data" if any(r.busy for r in c.rows) else "")]
    if c.fail_on_busy and any(r.busy for r in c.rows):
        lines.append("FAILED: --fail-on-busy: the gate does not decide on results timed on a busy machine")
    return "\n".join(lines)
