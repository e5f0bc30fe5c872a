"""Side-by-side tables from saved runs: frameworks and modes as columns, operator/shape (or
model) as rows. Reads stored JSON only; never runs anything."""

from __future__ import annotations

from dataclasses import dataclass

from opbench.core import schema
from opbench.results import breakdown, convergence, scaling
from opbench.results.store import COMBINING, Bench, Run, combined
from opbench.results.tables import fmt_time, natural, table

# the percentiles opbench.suites.measure records for inference (kept in step by tests/results/test_cli.py)
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
    busy: bool = False  # timed while other work took more CPUs than were free
    # peak memory less the mapped files' pages (harness/memory.py), peak device memory (bytes), whether the
    # device's is the process's since it began (JAX: the framework cannot reset it), which bounds the case's
    # from above, and whether the first is the whole resident set (a run saved before the files were kept apart)
    memory: tuple[float | None, float | None, bool, bool] = (None, None, False, False)
    processes: tuple[int, float] | None = None  # --processes: how many, and the spread of their medians


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


def cell_of(bench: Bench) -> Cell:
    e = bench.extra
    flops = e.get("flops")
    latency = tuple(e.get(f"latency_p{q}_s") for q in LATENCY_PERCENTILES)
    rss = e.get("peak_rss_bytes")
    rss = max(rss) if isinstance(rss, list) and rss else rss  # a distributed run: its largest worker
    anon = e.get("peak_anon_bytes")
    return Cell(bench.median, bench.iqr, flops / bench.median / 1e9 if flops else None,
                # %-of-peak only for exact FLOP counts (results before the flag: all)
                e.get("peak_gflops") if e.get("flops_exact", True) else None,
                e.get("numpy_gemm_gflops"), None if None in latency else latency, _ran(e), schema.busy(e),
                (anon if anon is not None else rss, e.get("peak_device_bytes"),
                 e.get("peak_device_scope") == "process", anon is None and rss is not None), _processes(e))


def _processes(extra: dict) -> tuple[int, float] | None:
    """(count, spread) of a case timed in several processes (--processes; isolation.pooled)."""
    p = extra.get("processes")
    if not isinstance(p, dict) or not isinstance(p.get("spread"), int | float):
        return None
    return int(p.get("count") or 0), float(p["spread"])


def grid(runs: list[Run]) -> Grid:
    """One grid from one or more runs, combined by store.COMBINING."""
    cells = {(row_key(b), b.column): cell_of(b) for b in combined(runs)}
    rows = sorted({r for r, _ in cells}, key=natural)
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


def _metric_rows(g: Grid, metric) -> list[tuple[str, ...]]:
    return [(r, *(metric(g, r, c) for c in g.columns)) for r in g.rows]


def _busy(*cells: Cell | None) -> str:
    return schema.BUSY_MARK if any(cell is not None and cell.busy for cell in cells) else ""


def _time(g: Grid, r: str, c: str) -> str:
    cells = g.row(r)
    if c not in cells:
        return "-"
    fastest = min(cells, key=lambda k: cells[k].median)
    return fmt_time(cells[c].median) + (" *" if c == fastest and len(cells) > 1 else "") + _busy(cells[c])


def _iqr(g, r, c):
    cell = g.row(r).get(c)
    return f"{cell.iqr / cell.median:.1%}{_busy(cell)}" if cell else "-"


def _gflops(g, r, c):
    cell = g.row(r).get(c)
    return f"{cell.gflops:,.1f}{_busy(cell)}" if cell and cell.gflops else "-"


def _peak_share(g, r, c):
    cell = g.row(r).get(c)
    return f"{cell.gflops / cell.peak:.0%}{_busy(cell)}" if cell and cell.gflops and cell.peak else "-"


def _numpy_gemm_share(g, r, c):
    cell = g.row(r).get(c)
    return f"{cell.gflops / cell.numpy_gemm:.0%}{_busy(cell)}" if cell and cell.gflops and cell.numpy_gemm else "-"


def _latencies(g, r, c):
    cell = g.row(r).get(c)
    return " / ".join(fmt_time(t) for t in cell.latency) + _busy(cell) if cell and cell.latency else "-"


def _vs_numpy(g, r, c):
    cells = g.row(r)
    ref = next((cells[k] for k in cells if k.startswith("numpy/")), None)
    return f"x{ref.median / cells[c].median:.2f}{_busy(cells[c], ref)}" if c in cells and ref else "-"


def _vs_slowest(g, r, c):
    cells = g.row(r)
    if c not in cells:
        return "-"
    slowest = max(cells.values(), key=lambda x: x.median)
    return f"x{slowest.median / cells[c].median:.2f}{_busy(cells[c], slowest)}"


def _memory(g, r, c):
    cell = g.row(r).get(c)
    rss, device, since_start, whole = cell.memory if cell else (None, None, False, False)
    if not rss and not device:
        return "-"
    mib = [f"{v / 2**20:,.0f} MiB" if v else "-" for v in (rss, device)]
    mib[0] += " +files" if whole and rss else ""
    return mib[0] if not device else f"{mib[0]} / {'<= ' if since_start else ''}{mib[1]}"


ON_BUSY = "! rests on a result timed on a busy machine"
METRICS = (
    ("median time (* fastest, ! timed on a busy machine)", _time),
    (f"IQR / median ({ON_BUSY})", _iqr),
    (f"GFLOP/s ({ON_BUSY})", _gflops),
    (f"share of the device's ceiling ({ON_BUSY})", _peak_share),
    (f"share of NumPy's fp32 GEMM on the same host ({ON_BUSY})", _numpy_gemm_share),
    (f"speedup over NumPy ({ON_BUSY})", _vs_numpy),
    (f"speedup over the slowest ({ON_BUSY})", _vs_slowest),
)


LATENCY_TITLE = f"latency per call, {' / '.join(f'p{q}' for q in LATENCY_PERCENTILES)} (inference; {ON_BUSY})"


AMP_TITLE = f"mixed-precision speed-up: float32 time / amp time (models; {ON_BUSY})"
MEMORY_TITLE = ("peak memory: resident set less mapped files' pages (+files: the whole resident set, as runs "
                "saved before 2026-11-30 hold it; / device memory on a GPU; <= where the framework keeps only its "
                "process's peak), models")
RAN_TITLE = ("what ran, observed: threads (per-thread CPU time), a model's compute type and a 16-bit operator's "
             "product type (read from the framework), another framework's team on the same OpenMP runtime")


def _between_processes(g, r, c):
    cell = g.row(r).get(c)
    return f"{cell.processes[1]:.1%} over {cell.processes[0]}{_busy(cell)}" if cell and cell.processes else "-"


PROCESSES_TITLE = (f"spread between processes: (max - min) / median of each process's median, over N processes "
                   f"(--processes; {ON_BUSY})")


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
        out.append((r, *(f"x{full[c].median / amp[c].median:.2f}{_busy(full[c], amp[c])}"
                         if c in amp and c in full else "-" for c in g.columns)))
    return out


def _filled(rows: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """The rows with at least one value."""
    return [row for row in rows if any(cell != "-" for cell in row[1:])]


def tables(g: Grid) -> list[tuple[str, tuple[str, ...], list[tuple[str, ...]]]]:
    """(title, header, rows) for every metric, each over only the rows that have a value in it, and
    only when there are any (a GFLOP/s table of models alone would be all '-'); the mixed-precision
    table over amp rows with a float32 twin."""
    metrics = (*METRICS, (PROCESSES_TITLE, _between_processes), (LATENCY_TITLE, _latencies), (MEMORY_TITLE, _memory),
               (RAN_TITLE, _what_ran))
    out = []
    for title, metric in metrics:
        rows = _metric_rows(g, metric) if metric is _time else _filled(_metric_rows(g, metric))
        out += [(title, ("benchmark", *g.columns), rows)] if rows else []
    amp = _amp_rows(g)
    if amp:
        out.insert(len(METRICS), (AMP_TITLE, ("benchmark", *g.columns), amp))
    return out


def _builds(info: dict) -> str:
    """'torch 2.13.0 (mkldnn, openmp, cuda 12.8)' from a framework's saved facts."""
    if "unavailable" in info:
        return f"unavailable: {info['unavailable']}"
    def text(v) -> str:
        return ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)

    parts = [k if v is True else f"{k} {text(v)}" for k, v in info.items()
             if k != "version" and v not in (False, None, "", [], ())]
    return f"{info.get('version', '?')}" + (f" ({', '.join(map(str, parts))})" if parts else "")


def environment(run: Run) -> list[str]:
    """What a run measured on, from its machine_info: CPU, threads, allocator, frameworks."""
    mine = run.machine_info.get("opbench") or {}
    cpu = mine.get("cpu_model") or (run.machine_info.get("cpu") or {}).get("brand_raw") or "unknown CPU"
    host = [f"CPU {cpu}", f"{mine.get('cores', '?')} cores ({mine.get('affinity', '?')} usable)",
            f"threads {mine.get('threads', '?')}", f"malloc {str(mine.get('malloc', '?')).split()[0]}",
            f"profile {mine.get('profile', '?')}", f"python {run.machine_info.get('python_version', '?')}"]
    lines = ["  " + ", ".join(host)]
    lines += [f"  {name} {_builds(info)}" for name, info in (mine.get("frameworks") or {}).items()]
    return lines


def headline(run: Run) -> str:
    """'<path>: <date>, complete, 20 benchmarks, 2 timed on a busy machine'."""
    status = run.status.get("status") or "status not recorded"
    failed = len(run.status.get("failed", []))
    busy = sum(1 for b in run.benchmarks.values() if schema.busy(b.extra))
    load = (f"{busy} timed on a busy machine (marked !)" if busy else "none timed on a busy machine"
            if any(schema.LOAD in b.extra for b in run.benchmarks.values()) else "machine load not recorded")
    return (f"{run.path}: {run.datetime.replace('T', ' ')[:19] or 'date unknown'}, {status}"
            + (f" ({failed} failed)" if failed else "") + f", {len(run.benchmarks)} benchmarks, {load}")


def runs_lines(runs: list[Run], markdown: bool = False) -> list[str]:
    """The report's opening: each run's headline and environment (a later run's differences from
    the first only), and the rule that combines several."""
    from opbench.results.compare import environment_diff

    lines = []
    for i, run in enumerate(runs):
        lines.append(("- " if markdown else "run ") + headline(run))
        if i == 0:
            lines += environment(run)
        else:
            diff = [d for d in environment_diff(runs[:1], [run]) if d[0] != "datetime"]
            lines += [f"  {k}: {a} -> {b}" for k, a, b in diff] or ["  the same environment as the first run"]
        if run.interrupted:
            lines.append("  WARNING: interrupted: its figures cover only the benchmarks that finished")
    if len(runs) > 1:
        lines.append(f"{len(runs)} runs: {COMBINING}")
    if markdown:  # a run's details as a list nested under its item: indented text would join its paragraph
        lines = [f"  - {line.strip()}" if line.startswith("  ") else line for line in lines]
    return lines


def format_text(runs: list[Run], markdown: bool = False) -> str:
    lines = runs_lines(runs, markdown)
    for title, header, rows in tables(grid(runs)):
        lines += ["", f"## {title}" if markdown else f"{title}:"]
        lines += table(header, rows, markdown)
    lines += scaling.format_lines(runs, markdown)
    lines += convergence.format_lines(runs, markdown)
    lines += breakdown.format_lines(runs, markdown)
    return "\n".join(lines)
