"""What opbench adds to pytest's terminal summary after a timed session: the side-by-side table
of this session, and with --benchmark-compare the verdicts against the compared run."""

from __future__ import annotations

from pathlib import Path

from opbench.results import report
from opbench.results.compare import compare, format_text
from opbench.results.store import ResultsError, Run, bench_of, load_run
from opbench.results.tables import table as text_table


def session_run(bs) -> Run:
    """This session's benchmarks as a Run (nothing saved is read)."""
    benches = {}
    for meta in bs.benchmarks:
        raw = meta.as_dict(include_data=False)
        if raw.get("stats") and not meta.has_error:
            try:
                bench = bench_of(raw, Path("this session"))
            except ResultsError:  # an unusable timing is left out of the table, as pytest-benchmark leaves it unsaved
                continue
            benches[bench.fullname] = bench
    hook = bs.config.hook
    machine_info = hook.pytest_benchmark_generate_machine_info(config=bs.config)
    hook.pytest_benchmark_update_machine_info(config=bs.config, machine_info=machine_info)
    return Run(Path("this session"), machine_info, "", benches)


def lines(bs) -> list[str]:
    """Lines for the terminal: the median-time grid, then the comparison if one was asked for."""
    now = session_run(bs)
    if not now.benchmarks:
        return []
    title, header, rows = report.tables(report.grid([now]))[0]
    out = ["", f"opbench: {title}, frameworks and modes side by side", *text_table(header, rows)]
    for path in (bs.compared_mapping or {}):
        try:
            saved = Path(path)
            baseline = load_run(saved if saved.is_absolute() else Path(str(bs.storage.path)) / saved)
            out += ["", f"opbench: verdicts against {path} (candidate: this session)"]
            out += format_text(compare([baseline], [now])).splitlines()
        except ResultsError as exc:
            out.append(f"opbench: cannot compare with {path}: {exc}")
    return out
