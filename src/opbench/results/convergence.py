"""The convergence runs of saved results: time to the target held-out accuracy, final accuracy,
and how long each framework followed the NumPy reference's loss curve, side by side. Reads stored
JSON only."""

from __future__ import annotations

from dataclasses import dataclass

from opbench.results.store import Run
from opbench.results.tables import table


@dataclass(frozen=True)
class Converged:
    """One convergence benchmark: its model row, framework/mode column and what it recorded."""

    row: str  # the benchmark group: model, batch, epochs, device, precision
    column: str
    extra: dict


def found(runs: list[Run]) -> list[Converged]:
    out = []
    for run in runs:
        for b in run.benchmarks.values():
            if b.extra.get("direction") == "convergence" and b.extra.get("curve"):
                out.append(Converged(b.group, b.column, b.extra))
    return out


def _tta(e: dict) -> str:
    t = e.get("time_to_accuracy_s")
    if t is None:
        return "not reached"
    spread = e.get("time_to_accuracy_spread_s")
    return f"{t:.3g} s" + (f" +-{spread / 2:.2g}" if spread else "") + f" ({e.get('epochs_to_accuracy')} ep)"


METRICS = (
    ("time to the target held-out accuracy (convergence; runs trimmed as MLPerf)", _tta),
    ("final held-out accuracy (convergence)", lambda e: f"{e['final_heldout_acc']:.1%}"),
    ("steps following the float64 reference's loss within its band (convergence)",
     lambda e: f"{e['reference_agreement_steps']}"),
)


def format_lines(runs: list[Run], markdown: bool = False) -> list[str]:
    """A table per metric, rows the convergence groups (with their target), frameworks/modes as
    columns; nothing where no run has convergence results."""
    items = found(runs)
    if not items:
        return []
    rows = sorted({(c.row, c.extra.get("target_accuracy")) for c in items})
    columns = sorted({c.column for c in items})
    cell = {(c.row, c.column): c.extra for c in items}
    lines = []
    for title, metric in METRICS:
        body = [(f"{row} (target {target:.0%})", *(metric(cell[row, col]) if (row, col) in cell else "-"
                                                   for col in columns)) for row, target in rows]
        lines += ["", f"## {title}" if markdown else f"{title}:"]
        lines += table(("benchmark", *columns), body, markdown)
    return lines
