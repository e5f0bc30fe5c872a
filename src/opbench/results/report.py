"""Side-by-side tables from saved runs: frameworks and modes as columns, operator/shape (or
model) as rows. Reads stored JSON only; never runs anything."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opbench.results import breakdown, convergence, scaling
from opbench.results.store import Bench, Run
from opbench.results.tables import fmt_time, table

# the percentiles opbench.suites.measure records for inference (kept in step by tests/test_cli.py)
LATENCY_PERCENTILES = (50, 90, 99)


@dataclass
class Cell:
    median: float
    iqr: float
    gflops: float | None
    peak: float | None  # the run's roofline for this device and dtype
    numpy_gemm: float | None = None  # NumPy's fp32 GEMM GFLOP/s in the same run (CPU)
    latency: tuple[float, ...] | None = None  # p50, p90, p99 per call (inference)
    ran: str | None = None  # what was observed to run: threads, and a model's compute type


@dataclass
class Grid:
    """rows x columns of cells; rows are benchmark groups (with @tN for thread sweeps)."""

    rows: list[str]
    columns: list[str]
    cells: dict[tuple[str, str], Cell]

    def row(self, r: str) -> dict[str, Cell]:
        return {c: self.cells[r, c] for c in self.columns if (r, c) in self.cells}


def row_key(bench: Bench) -> str:
    n = bench.thread_sweep
    return f"{bench.group} @t{n}" if n is not None else bench.group


def grid(runs: list[Run]) -> Grid:
    """One grid from one or more runs; a benchmark in several runs gets the median of its medians."""
    seen: dict[tuple[str, str], list[tuple[Bench, Run]]] = {}
    for run in runs:
        for bench in run.benchmarks.values():
            seen.setdefault((row_key(bench), bench.column), []).append((bench, run))
    cells = {}
    for key, entries in seen.items():
        medians = [b.median for b, _ in entries]
        bench, run = entries[0]
        median = float(np.median(medians))
        flops = bench.extra.get("flops")
        cells[key] = Cell(median, float(np.median([b.iqr for b, _ in entries])),
                          flops / median / 1e9 if flops else None,
                          # %-of-peak only for exact FLOP counts (results before the flag: all)
                          bench.extra.get("peak_gflops") if bench.extra.get("flops_exact", True) else None,
                          bench.extra.get("numpy_gemm_gflops"), _latency(entries), _ran(bench.extra))
    rows = sorted({r for r, _ in cells})
    columns = sorted({c for _, c in cells}, key=lambda c: (not c.startswith("numpy"), c))
    return Grid(rows, columns, cells)


def _ran(extra: dict) -> str | None:
    """'2 threads, bfloat16': the threads observed (where they were observed) and the compute type
    a model was observed in (compute_dtype; its compute_types say where)."""
    parts = []
    if "threads_observed" in extra:
        observed = not str(extra["threads_observed"]).startswith(("not observed", "the framework"))
        parts.append(f"{extra.get('threads')} threads{'' if observed else ' (said)'}")
    if "compute_dtype" in extra:
        parts.append(str(extra["compute_dtype"]))
    if extra.get("computed_in") and extra["computed_in"] != extra.get("dtype"):
        parts.append(f"{extra.get('dtype')} label, products in {extra['computed_in']}")
    if extra.get("openmp_shared_with"):
        parts.append(str(extra["openmp_shared_with"]))
    return ", ".join(parts) or None


def _latency(entries: list[tuple[Bench, Run]]) -> tuple[float, ...] | None:
    """The median over runs of each latency percentile, where every run recorded them."""
    keys = [f"latency_p{q}_s" for q in LATENCY_PERCENTILES]
    values = [[b.extra.get(k) for k in keys] for b, _ in entries]
    if not values or any(v is None for row in values for v in row):
        return None
    return tuple(float(np.median(column)) for column in zip(*values, strict=True))


def _metric_rows(g: Grid, metric) -> list[tuple[str, ...]]:
    return [(r, *(metric(g, r, c) for c in g.columns)) for r in g.rows]


def _time(g: Grid, r: str, c: str) -> str:
    cells = g.row(r)
    if c not in cells:
        return "-"
    fastest = min(cells, key=lambda k: cells[k].median)
    return fmt_time(cells[c].median) + (" *" if c == fastest and len(cells) > 1 else "")


def _iqr(g, r, c):
    cell = g.row(r).get(c)
    return f"{cell.iqr / cell.median:.1%}" if cell else "-"


def _gflops(g, r, c):
    cell = g.row(r).get(c)
    return f"{cell.gflops:,.1f}" if cell and cell.gflops else "-"


def _peak_share(g, r, c):
    cell = g.row(r).get(c)
    return f"{cell.gflops / cell.peak:.0%}" if cell and cell.gflops and cell.peak else "-"


def _numpy_gemm_share(g, r, c):
    cell = g.row(r).get(c)
    return f"{cell.gflops / cell.numpy_gemm:.0%}" if cell and cell.gflops and cell.numpy_gemm else "-"


def _latencies(g, r, c):
    cell = g.row(r).get(c)
    return " / ".join(fmt_time(t) for t in cell.latency) if cell and cell.latency else "-"


def _vs_numpy(g, r, c):
    cells = g.row(r)
    ref = next((cells[k].median for k in cells if k.startswith("numpy/")), None)
    return f"x{ref / cells[c].median:.2f}" if c in cells and ref else "-"


def _vs_slowest(g, r, c):
    cells = g.row(r)
    return f"x{max(x.median for x in cells.values()) / cells[c].median:.2f}" if c in cells else "-"


METRICS = (
    ("median time (* fastest)", _time),
    ("IQR / median", _iqr),
    ("GFLOP/s", _gflops),
    ("share of the device's ceiling", _peak_share),
    ("share of NumPy's fp32 GEMM on the same host", _numpy_gemm_share),
    ("speedup over NumPy", _vs_numpy),
    ("speedup over the slowest", _vs_slowest),
)


LATENCY_TITLE = f"latency per call, {' / '.join(f'p{q}' for q in LATENCY_PERCENTILES)} (inference)"


AMP_TITLE = "mixed-precision speed-up: float32 time / amp time (models)"
RAN_TITLE = ("what ran, observed: threads (per-thread CPU time), a model's compute type and a 16-bit operator's "
             "product type (read from the framework), another framework's team on the same OpenMP runtime")


def _what_ran(g, r, c):
    cell = g.row(r).get(c)
    return cell.ran if cell and cell.ran else "-"


def float32_twin(row: str) -> str | None:
    """The row of the float32 run of an amp model row ("resnet20-training[cpu-amp-...]" ->
    "resnet20-training[cpu-float32-...]"); None for any other row."""
    head, sep, rest = row.partition("[")
    device, _, tail = rest.partition("-")
    return f"{head}{sep}{device}-float32-{tail.removeprefix('amp-')}" if tail.startswith("amp-") else None


def _amp_rows(g: Grid) -> list[tuple[str, ...]]:
    out = []
    for r in g.rows:
        twin = float32_twin(r)
        if twin is None or twin not in g.rows:
            continue
        amp, full = g.row(r), g.row(twin)
        out.append((r, *(f"x{full[c].median / amp[c].median:.2f}" if c in amp and c in full else "-"
                         for c in g.columns)))
    return out


def tables(g: Grid) -> list[tuple[str, tuple[str, ...], list[tuple[str, ...]]]]:
    """(title, header, rows) for every metric; the latency table only over the rows that have
    latencies, the mixed-precision table only over amp rows with a float32 twin, each only when
    there are any."""
    header = ("benchmark", *g.columns)
    out = [(title, header, _metric_rows(g, metric)) for title, metric in METRICS]
    rows = [row for row in _metric_rows(g, _latencies) if any(cell != "-" for cell in row[1:])]
    out += [(LATENCY_TITLE, header, rows)] if rows else []
    amp = _amp_rows(g)
    out += [(AMP_TITLE, header, amp)] if amp else []
    ran = [row for row in _metric_rows(g, _what_ran) if any(cell != "-" for cell in row[1:])]
    return out + ([(RAN_TITLE, header, ran)] if ran else [])


def format_text(runs: list[Run], markdown: bool = False) -> str:
    g = grid(runs)
    lines = [f"runs: {', '.join(str(r.path) for r in runs)}"]
    for run in runs:
        status = run.status.get("status")
        if status == "interrupted":
            lines.append(f"WARNING: {run.path} was interrupted: its figures cover only the benchmarks that finished")
        elif status == "failed":
            lines.append(f"note: {run.path}: {len(run.status.get('failed', []))} test(s) failed in that run and "
                         "have no figures")
    for title, header, rows in tables(g):
        lines += ["", f"## {title}" if markdown else f"{title}:"]
        lines += table(header, rows, markdown)
    lines += scaling.format_lines(runs, markdown)
    lines += convergence.format_lines(runs, markdown)
    lines += breakdown.format_lines(runs, markdown)
    return "\n".join(lines)
