"""The report a person reads: the environment first, one rule for several runs in tables and
plots alike, sizes in numeric order, no empty tables, peak memory, busy results marked, and
plots a breakdown's far-off prediction cannot squash."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from opbench.results import plots, report, scaling
from opbench.results.store import combined, load_run
from opbench.results.tables import natural

from ..helpers import bench, write


def _gemm(size: int, t: float, framework: str = "torch", **extra) -> dict:
    shape = f"{size}x{size}x{size}"
    return bench(f"test_gemm[{framework}-cpu-eager-float32-{shape}]", t, f"gemm-forward[cpu-float32-{shape}]",
                 framework=framework, flops=2 * size**3, op="gemm", direction="forward", shape=shape, **extra)


def test_sizes_sort_by_value_not_as_text():
    rows = ["gemm-forward[cpu-float32-1024x1024x1024]", "gemm-forward[cpu-float32-256x256x256]",
            "mlp-inference[cpu-float32-mlp-b128]", "mlp-inference[cpu-float32-mlp-b1]"]
    assert sorted(rows, key=natural) == [rows[1], rows[0], rows[3], rows[2]]


def test_several_runs_are_combined_by_one_stated_rule_in_tables_and_plots(tmp_path):
    """The table and the plots show the same number for a benchmark in two runs: the median of
    their medians (one point per size: no zigzag), and the report says so."""
    a = load_run(write(tmp_path / "a.json", [_gemm(256, 1e-3), _gemm(1024, 40e-3)]))
    b = load_run(write(tmp_path / "b.json", [_gemm(256, 3e-3), _gemm(1024, 60e-3)]))
    (small,) = [x for x in combined([a, b]) if "256x" in x.name]
    assert small.median == 2e-3
    g = report.grid([a, b])
    assert g.cells["gemm-forward[cpu-float32-256x256x256]", "torch/eager"].median == 2e-3
    assert g.rows == ["gemm-forward[cpu-float32-256x256x256]", "gemm-forward[cpu-float32-1024x1024x1024]"]
    points = {(w.size, x.median) for x, w in plots._identified([a, b])}
    assert points == {("256x256x256", 2e-3), ("1024x1024x1024", 50e-3)}
    text = report.format_text([a, b])
    assert "2 runs: a benchmark in several runs counts with the median of its runs' medians" in text


def test_the_report_begins_with_the_environment_and_how_each_run_ended(tmp_path):
    busy = {"load": {"other_cpus": 1.8, "steal": 0.0, "run_queue": 5, "cpus": 2, "team": 2, "wall_s": 1.0,
                     "busy": True}}
    a = load_run(write(tmp_path / "a.json", [_gemm(256, 1e-3, **busy), _gemm(1024, 4e-2)]))
    b = load_run(write(tmp_path / "b.json", [_gemm(256, 1e-3)], torch_version="2.14.1"))
    lines = report.format_text([a, b]).splitlines()
    assert lines[0].startswith(f"run {a.path}: 2026-11-22 00:00:00, status not recorded, 2 benchmarks, "
                               "1 timed on a busy machine (marked !)")
    assert lines[1].startswith("  CPU cpu") and lines[2] == "  torch 2.13.0"
    assert lines[3].startswith(f"run {b.path}") and "machine load not recorded" in lines[3]
    assert lines[4] == "  opbench.frameworks.torch.version: 2.13.0 -> 2.14.1"
    alone = report.format_text([a])
    assert "  1 ms !" in alone and "40 ms !" not in alone and "  40 ms" in alone


def test_empty_tables_are_left_out_and_peak_memory_is_shown(tmp_path):
    """Models alone have no GFLOP/s, ceiling or NumPy share: those tables would be all '-'."""
    model = bench("test_training[torch-cpu-eager-float32-mlp-b128]", 1e-3, "mlp-training[cpu-float32-mlp-b128]",
                  flops=None, model="mlp", direction="training", shape="mlp-b128", peak_rss_bytes=300 * 2**20,
                  peak_device_bytes=None)
    titles = [t for t, _, _ in report.tables(report.grid([load_run(write(tmp_path / "m.json", [model]))]))]
    assert not any(t.startswith(("GFLOP/s", "share of", "speedup over NumPy")) for t in titles), titles
    memory = next(rows for t, _, rows in report.tables(report.grid([load_run(tmp_path / "m.json")]))
                  if t == report.MEMORY_TITLE)
    assert memory == [("mlp-training[cpu-float32-mlp-b128]", "300 MiB +files")]  # a run saved before the split
    # The figure is the peak less the mapped files' pages, which follow the page cache, not the case.
    model["extra_info"].update(peak_anon_bytes=220 * 2**20, rss_file_bytes=80 * 2**20)
    memory = next(rows for t, _, rows in report.tables(report.grid([load_run(write(tmp_path / "a.json", [model]))]))
                  if t == report.MEMORY_TITLE)
    assert memory == [("mlp-training[cpu-float32-mlp-b128]", "220 MiB")]


def test_a_device_peak_the_framework_cannot_reset_is_shown_as_a_bound(tmp_path):
    """JAX's allocator keeps only its process's peak: the case's own is at most that."""
    def gpu(framework, scope):
        name, group = f"test_training[{framework}-gpu-eager-float32-mlp-b128]", "mlp-training[gpu-float32-mlp-b128]"
        return bench(name, 1e-3, group, framework=framework, flops=None, model="mlp", direction="training",
                     shape="mlp-b128", device="gpu", peak_rss_bytes=900 * 2**20, peak_device_bytes=70 * 2**20,
                     peak_device_scope=scope)
    run = load_run(write(tmp_path / "g.json", [gpu("torch", "block"), gpu("jax", "process")]))
    g = report.grid([run])
    rows = next(rows for t, _, rows in report.tables(g) if t == report.MEMORY_TITLE)
    assert rows == [("mlp-training[gpu-float32-mlp-b128]", "900 MiB +files / <= 70 MiB",
                     "900 MiB +files / 70 MiB")], rows


def test_the_spread_between_processes_has_its_table_only_where_a_case_was_timed_in_several(tmp_path):
    pooled = _gemm(256, 1e-3, processes={"count": 3, "medians_s": [1e-3, 1.1e-3, 0.9e-3], "spread": 0.2})
    titles = [t for t, _, _ in report.tables(report.grid([load_run(write(tmp_path / "one.json", [_gemm(256, 1e-3)]))]))]
    assert report.PROCESSES_TITLE not in titles
    rows = next(rows for t, _, rows in report.tables(report.grid([load_run(write(tmp_path / "p.json", [pooled]))]))
                if t == report.PROCESSES_TITLE)
    assert rows == [("gemm-forward[cpu-float32-256x256x256]", "20.0% over 3")]


def test_a_far_off_prediction_does_not_squash_the_breakdown_bar():
    """A 99 ms prediction beside a 3.4 ms step: the axis stops at 1.5 x the bar, and the
    prediction is an arrow at the top with its value."""
    fig, ax = plt.subplots()
    ax.bar([0], [3.4])
    plots._predictions(ax, [(0, 99.0)], 3.4)
    assert ax.get_ylim()[1] < 6
    assert any("prediction 99 ms" in t.get_text() for t in ax.texts)
    plt.close(fig)


@pytest.mark.parametrize("times_ms", [[8.67, 11.09], [0.05, 3.0, 400.0]])
def test_a_time_axis_has_labelled_ticks_and_no_arbitrary_floor(times_ms):
    """GEMM at 8.67 against 11.09 ms on a log axis with a raised floor showed one '10' tick and looked
    tenfold apart: a narrow span is drawn on a linear axis from 0, a wide one on a log axis, and
    either has at least three labelled ticks over the data."""
    fig, ax = plt.subplots()
    ax.plot([0, 1, 2][: len(times_ms)], times_ms, "o")
    plots._time_axis(ax, times_ms, "median time per call (ms)")
    fig.canvas.draw()
    low, high = ax.get_ylim()
    labelled = [t for t in ax.get_yticklabels() if t.get_text() and low <= t.get_position()[1] <= high]
    assert len(labelled) >= 3, [t.get_text() for t in labelled]
    assert (ax.get_yscale() == "log") == (max(times_ms) >= 10 * min(times_ms))
    assert ax.get_yscale() == "log" or low == 0
    plt.close(fig)


def test_the_markdown_report_nests_each_runs_details_under_its_item(tmp_path):
    """Indented lines under a '- ' item join its paragraph in Markdown: each detail is a nested item."""
    a = load_run(write(tmp_path / "a.json", [_gemm(256, 1e-3)]))
    b = load_run(write(tmp_path / "b.json", [_gemm(256, 2e-3)]))
    lines = report.runs_lines([a, b], markdown=True)
    assert [line[:4] for line in lines if line.startswith(" ")] == ["  - "] * sum(1 for x in lines if x[0] == " ")
    assert lines[0].startswith("- ") and any(line.startswith("  - CPU ") for line in lines)
    assert report.runs_lines([a], markdown=False)[1].startswith("  CPU ")


def test_a_busy_result_is_a_hollow_point_in_the_plots(tmp_path):
    """The time plots mark a figure resting on a busy machine's time as a hollow marker."""
    busy = {"load": {"busy": True, "cpus": 2, "team": 2, "other_cpus": 1.2}}
    run = load_run(write(tmp_path / "r.json", [_gemm(256, 1e-3, **busy), _gemm(1024, 40e-3)]))
    fig, ax = plt.subplots()
    line = ax.plot([1, 2], [1e-3, 40e-3], marker="o")[0]
    plots._hollow_where_busy(ax, line, [True, False])
    (hollow,) = ax.lines[1:]
    assert list(hollow.get_xdata()) == [1] and hollow.get_markerfacecolor() == "white"
    plt.close(fig)
    assert len(plots.scaling([run], tmp_path)) == 1 and len(plots.bars_per_operator([run], tmp_path)) == 1


BUSY_LOAD = {"load": {"busy": True, "cpus": 2, "team": 2, "other_cpus": 1.2}}


def _kept_figures(monkeypatch) -> list:
    """The figures the plot functions save, kept open to be read."""
    kept = []
    monkeypatch.setattr(plots, "_save", lambda fig, folder, name, caption="": kept.append((fig, caption)) or name)
    return kept


def _data_parallel(workers: int, median: float, **extra) -> dict:
    return bench(f"test_data_parallel[torch-cpu-ddp-sync-w{workers}-float32-mlp-b128-strong]", median,
                 "mlp-data-parallel[cpu-float32-mlp-b128-strong]", mode="ddp-sync", flops=None, model="mlp",
                 direction="training", workers=workers, nodes=1, scaling="strong", global_batch=128, **extra)


def test_data_parallel_figures_resting_on_a_busy_time_are_marked(tmp_path, monkeypatch):
    """The scaling table marks the busy width's samples/s and every efficiency resting on it; the
    data-parallel plot draws that point hollow."""
    run = load_run(write(tmp_path / "d.json", [_data_parallel(1, 4e-3), _data_parallel(2, 2.5e-3, **BUSY_LOAD)]))
    row = next(line for line in scaling.format_lines([run]) if "ddp-sync" in line)
    assert "32,000 " in row and "51,200 !" in row and "80% !" in row, row
    quiet = load_run(write(tmp_path / "q.json", [_data_parallel(1, 4e-3), _data_parallel(2, 2.5e-3)]))
    assert "!" not in next(line for line in scaling.format_lines([quiet]) if "ddp-sync" in line)
    kept = _kept_figures(monkeypatch)
    plots.data_parallel([run], tmp_path)
    (fig, caption), = kept
    hollow = [line for line in fig.axes[0].lines if line.get_markerfacecolor() == "white"]
    assert [list(line.get_xdata()) for line in hollow] == [[2]] and "hollow: timed on a busy machine" in caption
    plt.close(fig)


def test_breakdown_bars_of_a_busy_step_are_hatched(tmp_path, monkeypatch):
    group = "lenet-training[cpu-float32-lenet-b32]"
    info = {"profiler": "torch.profiler", "steps": 5, "profiled_step_s": 2e-3, "attributed_s": 1.5e-3,
            "unattributed_s": 0.5e-3, "families": {"conv": 1e-3, "other": 0.5e-3}, "phases": {},
            "ops": [["conv", "forward", "aten::conv2d", 1e-3]], "notes": []}
    run = load_run(write(tmp_path / "b.json", [
        bench("test_training[torch-cpu-eager-float32-lenet-b32]", 2e-3, group=group, flops=None, breakdown=info),
        bench("test_training[jax-cpu-jit-float32-lenet-b32]", 3e-3, group=group, flops=None, framework="jax",
              mode="jit", breakdown=info, **BUSY_LOAD)]))
    kept = _kept_figures(monkeypatch)
    plots.breakdowns([run], tmp_path)
    (fig, caption), = kept
    hatched = {round(p.get_x() + p.get_width() / 2) for p in fig.axes[0].patches if p.get_hatch()}
    columns = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert [columns[i] for i in sorted(hatched)] == ["jax/jit"] and "hatched where" in caption
    plt.close(fig)
