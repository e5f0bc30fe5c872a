"""What opbench adds to pytest's terminal summary after a timed session: the side-by-side table
of this session, and with --benchmark-compare the verdicts against the compared run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from opbench.core import schema
from opbench.results import report
from opbench.results.compare import compare, format_text
from opbench.results.store import ResultsError, Run, bench_of, load_run
from opbench.results.tables import table as text_table


def _benches(raws, where: Path) -> dict:
    """Saved-form benchmarks as Bench objects by full name; an unusable timing is left out of the
    table, as pytest-benchmark leaves it unsaved."""
    benches = {}
    for raw in raws:
        try:
            bench = bench_of(raw, where)
        except ResultsError:
            continue
        benches[bench.fullname] = bench
    return benches


def session_run(bs) -> Run:
    """This session's benchmarks as a Run (nothing saved is read)."""
    # one that failed while timed (a distributed step whose peer died in round 1) has no statistics
    raws = [meta.as_dict(include_data=False) for meta in bs.benchmarks
            if not meta.has_error and getattr(meta.stats, "data", None)]
    hook = bs.config.hook
    machine_info = hook.pytest_benchmark_generate_machine_info(config=bs.config)
    hook.pytest_benchmark_update_machine_info(config=bs.config, machine_info=machine_info)
    return Run(Path("this session"), machine_info, "", _benches([r for r in raws if r.get("stats")],
                                                                 Path("this session")))


def busy_lines(run: Run, most: int = 10) -> list[str]:
    """The benchmarks timed while other work took more CPUs than were free: their times are the
    machine's as much as the framework's."""
    busy = [b for b in run.benchmarks.values() if schema.busy(b.extra)]
    if not busy:
        return []
    out = ["", f"opbench: WARNING: {len(busy)} of {len(run.benchmarks)} benchmarks were timed on a busy machine "
               "(other work took more CPUs than they left free; marked ! in opbench report): run them again alone"]
    out += [f"  {b.name}: {schema.load_line(b.extra[schema.LOAD])}" for b in busy[:most]]
    return out + ([f"  ... and {len(busy) - most} more"] if len(busy) > most else [])


def _only(saved: Run, now: Run) -> Run:
    """The saved run's benchmarks that this session ran too: a session that selects fewer is not
    a candidate with missing benchmarks."""
    kept = {name: b for name, b in saved.benchmarks.items() if name in now.benchmarks}
    return replace(saved, benchmarks=kept or saved.benchmarks)


def grid_lines(run: Run) -> list[str]:
    """The median-time grid of `run`, frameworks and modes side by side, and its busy warnings."""
    if not run.benchmarks:
        return []
    title, header, rows = report.tables(report.grid([run]))[0]
    return ["", f"opbench: {title}, frameworks and modes side by side", *text_table(header, rows), *busy_lines(run)]


def document_run(document: dict, where: Path) -> Run:
    """A merged document (--isolate's workers, a sweep's counts) as a Run, before it is saved."""
    return Run(where, document.get("machine_info") or {}, document.get("datetime", ""),
               _benches(document.get("benchmarks", []), where))


def lines(bs) -> list[str]:
    """Lines for the terminal: the median-time grid, then the comparison if one was asked for."""
    now = session_run(bs)
    if not now.benchmarks:
        return []
    out = grid_lines(now)
    for path in (bs.compared_mapping or {}):
        try:
            saved = Path(path)
            baseline = load_run(saved if saved.is_absolute() else Path(str(bs.storage.path)) / saved)
            out += ["", f"opbench: against {path} (candidate: this session)"]
            out += format_text(compare([_only(baseline, now)], [now])).splitlines()
        except ResultsError as exc:
            out.append(f"opbench: cannot compare with {path}: {exc}")
    return out
