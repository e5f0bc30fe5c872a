"""The per-operator breakdowns of saved runs (--breakdown): per model, each framework/mode's
step split into operator families as shares of its profiled step, the timed median split the
same way, and the operator suite's prediction beside the measured step. Reads stored JSON only."""

from __future__ import annotations

from dataclasses import dataclass

from opbench.core import schema
from opbench.core.schema import FAMILY_NAMES as FAMILIES
from opbench.results.store import Run
from opbench.results.tables import fmt_time, table

OTHER_NAMES = 6  # "other" operators named per row


@dataclass(frozen=True)
class Profiled:
    """One benchmark with a breakdown: its group, framework/mode column, timed median, breakdown."""

    row: str
    column: str
    median: float
    info: dict
    busy: bool = False  # the step was timed, or the breakdown's pass run, on a busy machine

    def shares(self) -> dict[str, float]:
        """Each family's share of the profiled step, unattributed included (they sum to 1)."""
        step = self.info["profiled_step_s"] or 1.0
        out = {f: s / step for f, s in self.info["families"].items()}
        out["unattributed"] = self.info["unattributed_s"] / step
        return out


def found(runs: list[Run]) -> list[Profiled]:
    """Every benchmark with a breakdown; one whose profiled pass failed holds only its "error"."""
    return [Profiled(b.group, b.column, b.median, b.extra["breakdown"],
                     schema.busy(b.extra) or schema.busy(b.extra["breakdown"]))
            for run in runs for b in run.benchmarks.values() if isinstance(b.extra.get("breakdown"), dict)]


def _families(items: list[Profiled]) -> list[str]:
    present = {f for p in items for f, s in p.shares().items() if s > 0}
    return [f for f in FAMILIES if f in present]


def _others(p: Profiled) -> str:
    by_name: dict[str, float] = {}
    for family, _, name, seconds in p.info["ops"]:
        if family == "other":
            by_name[name] = by_name.get(name, 0.0) + seconds
    names = sorted(((s, n) for n, s in by_name.items()), reverse=True)
    return ", ".join(f"{n} {s / p.info['profiled_step_s']:.0%}" for s, n in names[:OTHER_NAMES]) or "-"


def _prediction(p: Profiled) -> tuple[str, str, str]:
    pred = p.info.get("prediction")
    if not pred:
        return "-", "-", "-"
    predicted = pred["predicted_s"]
    missing = f" ({len(pred['failed'])} ops failed)" if pred.get("failed") else ""
    overhead = p.median - predicted
    return (fmt_time(predicted) + missing, (f"{p.median / predicted:.2f}x" if predicted else "-")
            + (schema.BUSY_MARK if p.busy else ""), ("-" if overhead < 0 else "") + fmt_time(abs(overhead)))


def format_lines(runs: list[Run], markdown: bool = False) -> list[str]:
    """Per benchmark group, one table: a row per framework/mode with the family shares of its
    profiled step, the timed median, the prediction and the overhead; then the "other"
    operators by name. Nothing where no run has breakdowns."""
    everything = found(runs)
    items = [p for p in everything if "families" in p.info]
    lines = [f"breakdown failed for {p.row} {p.column}: {p.info.get('error')}" for p in everything
             if "families" not in p.info]
    lines = ["", *lines] if lines else []
    for row in sorted({p.row for p in items}):
        group = sorted((p for p in items if p.row == row), key=lambda p: p.column)
        families = _families(group)
        header = ("framework/mode", "timed", "profiled", *families, "phases f/b/u", "predicted", "timed/pred",
                  "overhead")
        body = []
        for p in group:
            shares = p.shares()
            ph = p.info["phases"]
            phases = "/".join(fmt_time(ph[k]) if k in ph else "-" for k in ("forward", "backward", "update"))
            if "step" in ph:
                phases += f" (+{fmt_time(ph['step'])} unsplit)"
            body.append((p.column, fmt_time(p.median), fmt_time(p.info["profiled_step_s"]),
                         *(f"{shares.get(f, 0):.0%}" for f in families), phases, *_prediction(p)))
        title = f"where the step's time goes, {row} (shares of the profiled step)"
        lines += ["", f"## {title}" if markdown else f"{title}:"]
        lines += table(header, body, markdown)
        lines += ["", "other operators by name:"]
        lines += table(("framework/mode", "largest 'other' operators (share of the step)"),
                       [(p.column, _others(p)) for p in group], markdown)
        notes = sorted({n for p in group for n in p.info.get("notes", ())})
        if any(p.busy for p in group):
            notes.append("! the step was timed, or the profile and prediction taken, on a busy machine (other work "
                         "took more CPUs than were free): its timed/pred is the machine's as much as the framework's")
        lines += [f"note: {n}" for n in notes]
    return lines
