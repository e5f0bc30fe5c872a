"""What the paired gate leaves behind: each side's timings as a pytest-benchmark document (so
that `opbench report` and `opbench compare` read them), every trial in paired.json, and the
Comparison the terminal and --markdown show.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import numpy as np
from pytest_benchmark.stats import Stats

from opbench.core.files import write_text_atomic
from opbench.regression import intervals as ps
from opbench.regression.coordinator import SIDES, UNCONFIRMED, PairedGate, Record
from opbench.results.compare import Comparison, Row, environment_diff
from opbench.results.store import Run
from opbench.results.tables import fmt_time

STATISTIC = "burst min"
FAULTING = 1.0  # minor page faults per call from which a pair's calls count as faulting their memory in afresh


def side_document(gate: PairedGate, side: str) -> dict:
    """One side as pytest-benchmark saves a run: each burst's fastest call is one round."""
    benchmarks = []
    for rec in gate.records.values():
        times = [t[f"{side}_min"] for t in rec.trials]
        if not times:
            continue
        stats = Stats()
        for value in times:
            stats.update(value)
        benchmarks.append({"group": rec.group, "name": rec.name, "fullname": rec.id, "params": None,
                           "param": None, "extra_info": {**rec.extra.get(side, {}), "design": "paired"},
                           "options": {"timer": "perf_counter", "design": "paired interleaved bursts"},
                           "stats": stats.as_dict()})
    return {"machine_info": gate.machine_info.get(side, {}), "commit_info": gate.commit_info,
            "benchmarks": benchmarks, "datetime": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "version": _pytest_benchmark_version()}


def _pytest_benchmark_version() -> str:
    from importlib.metadata import version

    return version("pytest-benchmark")


def save(gate: PairedGate, folder: Path, complete: bool = True) -> dict[str, Path]:
    """baseline.json, candidate.json and paired.json in `folder`; an interrupted run's are marked
    incomplete (paired.json's "complete", each side's machine_info run status)."""
    paths = {}
    for side in SIDES:
        paths[side] = folder / f"{side}.json"
        doc = side_document(gate, side)
        if not complete:
            doc["machine_info"] = {**doc["machine_info"], "opbench": {
                **(doc["machine_info"].get("opbench") or {}), "run": {"status": "interrupted", "failed": []}}}
        write_text_atomic(paths[side], json.dumps(doc, indent=2))
    log = {"plan": vars(gate.plan), "complete": complete, "stage": list(gate.stage), "notes": gate.notes,
           "benchmarks": [
        {"id": r.id, "name": r.name, "verdict": r.verdict, "problem": r.problem, "trials": r.trials}
        for r in gate.records.values()]}
    paths["paired"] = folder / "paired.json"
    write_text_atomic(paths["paired"], json.dumps(log, indent=1))
    return paths


def _row(rec: Record, gate: PairedGate) -> Row | None:
    confirmed = any(t["stage"] == "confirm" for t in rec.trials)
    est = rec.estimate("confirm" if confirmed else "screen")
    if est is None:
        return None
    ratio = est.ratio(rec.level or gate.plan.confidence)
    base = float(np.median([t["baseline_min"] for t in rec.trials]))
    cand = float(np.median([t["candidate_min"] for t in rec.trials]))
    samples = _samples(rec, "screen") + (f" + {_samples(rec, 'confirm')} confirm" if confirmed else "")
    return Row(rec.id, rec.name, rec.group, ratio, rec.verdict, base, cand, samples)


def _samples(rec: Record, stage: str) -> str:
    trials = [t for t in rec.trials if t["stage"] == stage]
    return f"{len({t['pair'] for t in trials})}x{len(trials) / max(1, len({t['pair'] for t in trials})):.0f}"


def _known_issue(rec: Record, result: Comparison) -> None:
    """A benchmark timed with a known issue on a side: unchanged when both sides showed the same
    deviation, fixed when only the baseline did, worse (failing the gate) when only the candidate did."""
    base, cand = rec.known.get("baseline", ""), rec.known.get("candidate", "")
    if base and cand:
        result.known.append(f"{rec.id}: unchanged: {cand}" if base == cand
                            else f"{rec.id}: changed within its bound: baseline: {base}; candidate: {cand}")
    elif base:
        result.fixed.append(f"{rec.id}: the candidate no longer shows the baseline's known issue ({base})")
    elif cand:
        result.worse.append(f"{rec.id}: the candidate shows a known issue the baseline did not: {cand}")


def spread(rec: Record) -> str:
    """How the ratios of a benchmark's worker pairs (each pair's median trial) spread over the stage
    its row reports: their range and quartiles. An undecided benchmark whose pairs split into two
    levels (a candidate slower in some of its processes only) shows it here, where its interval
    alone reads as noise."""
    stage = "confirm" if any(t["stage"] == "confirm" for t in rec.trials) else "screen"
    ratios = np.exp([float(np.median(p)) for p in rec.stage_pairs(stage)])  # as the row's estimate takes them
    if not len(ratios):
        return ""
    q1, q2, q3 = np.quantile(ratios, [0.25, 0.5, 0.75])
    return (f"{rec.id}: {len(ratios)} {stage} pairs, their ratios {ratios.min():.3f} to {ratios.max():.3f} "
            f"(quartiles {q1:.3f} / {q2:.3f} / {q3:.3f})")


def faults(rec: Record, threshold: float) -> str:
    """Where one side's calls faulted their memory in afresh (FAULTING or more minor page faults a
    call, the median over a pair's trials) in more worker pairs than the other side's, and that
    side's calls took `threshold` (the rule's, a share) longer in those pairs than in its others, or
    faulted in every pair: how many pairs each, and the faults a call and time there against the
    other pairs. "" where the sides faulted in as many pairs (none, or every one: an operator that
    allocates fresh memory by design), or where the faults did not cost the side's calls that much."""
    pairs = rec.pairs()
    faulted = {side: [float(np.median([t.get(f"{side}_faults", 0.0) for t in ts])) >= FAULTING for ts in pairs]
               for side in SIDES}
    if sum(faulted["baseline"]) == sum(faulted["candidate"]):
        return ""
    more = max(SIDES, key=lambda side: sum(faulted[side]))

    def median(side: str, key: str, hit: bool) -> float:
        """The median of `key` over the trials of the pairs where `side` faulted (hit) or did not."""
        return float(np.median([t[key] for ts, f in zip(pairs, faulted[side], strict=True) if f == hit for t in ts]))

    if not all(faulted[more]):
        there, elsewhere = (median(more, f"{more}_min", hit) for hit in (True, False))
        if there < (1 + threshold) * elsewhere:
            return ""

    def said(side: str) -> str:
        if not any(faulted[side]):
            return f"the {side}'s in none"
        text = (f"the {side}'s in {sum(faulted[side])} (about {median(side, f'{side}_faults', True):.0f} a call, "
                f"{fmt_time(median(side, f'{side}_min', True))} a call there")
        if not all(faulted[side]):
            text += f" against {fmt_time(median(side, f'{side}_min', False))} elsewhere"
        return text + ")"

    return f"{rec.id}: of {len(pairs)} worker pairs, {said('candidate')}; {said('baseline')}"


def comparison(gate: PairedGate) -> Comparison:
    """The gate's outcome in compare's terms, plus the benchmarks that failed on a side."""
    compared = [r for r in gate.records.values() if r.kind != "new"]
    flagged = sum(1 for r in compared if any(t["stage"] == "confirm" for t in r.trials))
    strict = ps.confirm_confidence(flagged, gate.plan.alpha)
    rows = [row for r in compared if not r.kind and (row := _row(r, gate))]
    if not gate.confirmed:  # interrupted: a flagged change the confirmation did not decide is no verdict
        for row in rows:
            if row.verdict in ("regression", "improvement"):
                row.verdict = UNCONFIRMED
    runs = {side: [Run(Path(side), gate.machine_info.get(side, {}), "", {})] for side in SIDES}
    result = Comparison(
        rows, missing=[f"{r.id}: {r.problem}" for r in compared if r.kind == "missing"],
        new=[f"{r.id}: {r.problem}" for r in gate.records.values() if r.kind == "new"],
        env=environment_diff(runs["baseline"], runs["candidate"]), statistic=STATISTIC,
        confidence=gate.plan.confidence, broken=[f"{r.id}: {r.problem}" for r in compared if r.kind == "failed"],
        skipped=[f"{r.id}: {r.problem}" for r in compared if r.kind == "skipped"],
        worse=[f"{r.id}: {r.problem}" for r in compared if r.kind == "worse"],
        fixed=[f"{r.id}: {r.problem}" for r in compared if r.kind == "fixed"],
        intermittent=[f"{r.id}: {r.problem}" for r in compared if r.kind == "intermittent"],
        faults=[said for r in compared if not r.kind and (said := faults(r, gate.rule_for(r.name).threshold))],
        spread={r.id: said for r in compared if r.verdict == "noisy" and (said := spread(r))})
    for r in compared:
        if not r.kind:
            _known_issue(r, result)
    timed = {stage: len({t["pair"] for r in compared for t in r.trials if t["stage"] == stage})
             for stage in ("screen", "confirm")}
    others = gate.pairs_started - sum(timed.values())
    if not gate.confirmed:
        stage, number, planned = gate.stage
        result.warnings.append(f"INCOMPLETE: interrupted in the {stage} stage (pair {number} of {planned}): the "
                               f"verdicts so far; a change flagged but not confirmed says {UNCONFIRMED!r}")
    result.warnings += [
        *gate.notes,
        f"paired design: {timed['screen']} worker pairs timed the screen and {timed['confirm']} the confirmation"
        + (f" ({others} more only collected the selection, replaced a failed pair or verified a "
           "one-sided check failure again)" if others else "")
        + f"; {flagged} benchmark(s) flagged by the "
        f"{100 * gate.plan.confidence:g}% screen were re-measured on fresh pairs and a change stands only in the "
        f"screen's direction at Holm's step-down levels (one-sided; the interval shown is two-sided, "
        f"{100 * strict:.4g}% for the strongest; suite-wide false-alarm budget {100 * gate.plan.family_alpha:g}%"
        + (f", this shard's {100 * gate.plan.alpha:.3g}%" if gate.plan.shard[1] > 1 else "") + ")"]
    k, n = gate.plan.shard
    if n > 1:
        result.warnings.append(
            f"shard {k} of {n}: {len(gate.records)} of the selection's {gate.selected} benchmarks (one in {n} of its "
            f"sorted ids, from number {k}); the {n} shards' runs together keep the suite-wide false-alarm budget")
    return result
