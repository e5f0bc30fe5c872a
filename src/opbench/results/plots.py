"""Plots of saved runs with matplotlib (headless): medians with their spread per operator, time against
problem size with the fitted scaling exponent, thread scaling, training-step time per model, and
data-parallel samples/s against workers, and where each model step's time goes (stacked per family).
Reads stored JSON only."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib import ticker

from opbench.core import schema
from opbench.core.files import replace_atomic
from opbench.results.breakdown import FAMILIES
from opbench.results.breakdown import found as profiled
from opbench.results.convergence import found as converged
from opbench.results.scaling import curves as worker_curves
from opbench.results.store import Bench, Identity, Run, combined
from opbench.results.tables import natural

DPI = 110  # with the figure sizes below: 880 x 550 pixels and more, readable on a laptop screen
FIGSIZE = (8, 5)
MAX_WIDTH_IN = 14  # 1540 pixels: a laptop screen's width, however many bars (7 models x 9 modes gave 2425)
plt.rcParams.update({"font.size": 10, "axes.titlesize": 11, "legend.fontsize": 9, "xtick.labelsize": 9,
                     "ytick.labelsize": 9})


def _benches(runs: list[Run]) -> list[Bench]:
    """Every benchmark once, combined over the runs by the report's one rule (store.COMBINING)."""
    return combined(runs)


def _source(runs: list[Run]) -> str:
    """The caption's 'where from': the runs, the rule that combined them, and the host."""
    mine = (runs[0].machine_info.get("opbench") or {}) if runs else {}
    def short(run: Run) -> str:  # a storage run by its id: 0003_<commit>_<date> -> 0003
        head = run.label.split("_", 1)[0]
        return head if head.isdigit() and len(head) == 4 else run.label[:24]

    names = ", ".join(short(r) for r in runs[:4]) + (f" and {len(runs) - 4} more" if len(runs) > 4 else "")
    rule = f"median over {len(runs)} runs" if len(runs) > 1 else "one run"
    return f"run {names} ({rule}); {mine.get('cpu_model', 'unknown CPU')}, {mine.get('threads', '?')} threads"


def _log_ticks(axis) -> None:
    """Log-axis ticks labelled once, as plain numbers (no 10^x beside minor labels)."""
    axis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_locator(ticker.NullLocator())


def _identified(runs: list[Run]) -> list[tuple[Bench, Identity]]:
    """opbench's results with what each measured; thread sweeps are plotted on their own."""
    return [(b, who) for b in _benches(runs) if (who := b.identity) is not None and b.thread_sweep is None]


CAPTION = "caption"  # the text under a saved figure, kept in its PNG metadata for the HTML page


def _save(fig, folder: Path, name: str, caption: str = "") -> Path:
    """Save with the caption (what the plot shows and where its data came from) under the axes."""
    path = folder / name
    if caption:
        fig.text(0.01, 0.01, caption, fontsize=8, color="#444", ha="left", va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.07 if caption else 0, 1, 1))
    try:
        replace_atomic(path, lambda tmp: fig.savefig(tmp, dpi=DPI, format="png",
                                                     metadata={"Description": caption}))
    finally:
        plt.close(fig)
    return path


def _line_plot(ax, folder: Path, name: str, xlabel: str, ylabel: str, title: str, caption: str = "") -> Path:
    """Label a line plot, add its legend and save it."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    for axis in (ax.xaxis, ax.yaxis):
        if axis.get_scale() == "log":
            _log_ticks(axis)
    return _save(ax.figure, folder, name, caption)


def _size(bench: Bench) -> float | None:
    return bench.extra.get("flops") or bench.extra.get("bytes") or None


def fit_exponent(sizes, times) -> float | None:
    """The slope of log(time) against log(size): 1 is linear scaling."""
    if len(set(sizes)) < 2:
        return None
    return float(np.polyfit(np.log(sizes), np.log(times), 1)[0])


def bars_per_operator(runs: list[Run], folder: Path) -> list[Path]:
    """One chart per operator and direction: sizes on x, a point per framework/mode with its
    interquartile range."""
    by_op: dict[str, dict[str, dict[str, Bench]]] = defaultdict(lambda: defaultdict(dict))
    for b, who in _identified(runs):
        by_op[f"{who.subject}-{who.direction} {who.where}"][who.size][b.column] = b
    return [_grouped_points(folder, f"bars-{_slug(op)}.png", f"{op}: median time per call", sizes,
                            caption=f"Lower is better; sizes on x, a point per framework/mode. {SPREAD} "
                            f"From {_source(runs)}.")
            for op, sizes in sorted(by_op.items())]


SPREAD = "Bars: the interquartile range of the rounds; hollow: timed on a busy machine."
LOG_SPAN = 10.0  # a time axis is logarithmic only when its values span this factor or more
LABELLED = 24  # at most this many points carry their value beside them


def _quartiles(b: Bench) -> tuple[float, float]:
    """(q1, q3) of a benchmark's rounds: saved by pytest-benchmark, else its IQR centred on the median."""
    if b.q1 is not None and b.q3 is not None:
        return b.q1, b.q3
    return max(b.median - b.iqr / 2, 0.0), b.median + b.iqr / 2


def _hollow_where_busy(ax, line, busy) -> None:
    """Redraw the markers of `line` whose figure rests on a busy machine's time as hollow ones."""
    xs, ys = line.get_xdata(), line.get_ydata()
    marked = [(x, y) for x, y, b in zip(xs, ys, busy, strict=True) if b]
    if marked:
        ax.plot(*zip(*marked, strict=True), linestyle="none", marker=line.get_marker(), markerfacecolor="white",
                markeredgecolor=line.get_color(), zorder=line.get_zorder() + 1)


def _time_axis(ax, times: list[float], ylabel: str) -> None:
    """Logarithmic where the times span LOG_SPAN or more, else linear from 0; labelled ticks either way."""
    if max(times) >= LOG_SPAN * min(times):
        ax.set_yscale("log")
        _log_ticks(ax.yaxis)
        ylabel += ", log scale"
    else:
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_locator(ticker.MaxNLocator(nbins=6))
    ax.set_ylabel(ylabel)


def _grouped_points(folder: Path, name: str, title: str, categories: dict[str, dict[str, Bench]],
                    ylabel: str = "median time per call (ms)", caption: str = "") -> Path:
    """Medians (in ms) as points with their interquartile range: one cluster per category (in natural
    order), one point per column; hollow where timed on a busy machine. No bars: a bar on a log axis
    starts at an arbitrary floor and turns 8.7 against 11.1 ms into a tenfold look. The axis is
    logarithmic only where the values span LOG_SPAN or more, and its ticks are labelled either way."""
    categories = {k: categories[k] for k in sorted(categories, key=natural)}
    columns = sorted({c for cells in categories.values() for c in cells})
    width_in = min(MAX_WIDTH_IN, max(FIGSIZE[0], 0.35 * len(categories) * len(columns)))
    fig, ax = plt.subplots(figsize=(width_in, FIGSIZE[1]))
    step = 0.8 / len(columns)
    points = [b for cells in categories.values() for b in cells.values()]
    for i, col in enumerate(columns):
        found = [(k + i * step, cells[col]) for k, cells in enumerate(categories.values()) if col in cells]
        xs = [x for x, _ in found]
        med = np.array([b.median for _, b in found]) * 1e3
        q = np.array([_quartiles(b) for _, b in found]).reshape(-1, 2) * 1e3
        shown = ax.errorbar(xs, med, yerr=[med - q[:, 0], q[:, 1] - med], fmt="o", capsize=3, label=col)
        _hollow_where_busy(ax, shown[0], [schema.busy(b.extra) for _, b in found])
        if len(points) <= LABELLED:
            for x, m in zip(xs, med, strict=True):
                ax.annotate(f"{m:.3g}", (x, m), textcoords="offset points", xytext=(5, 3), fontsize=8)
    ax.set_xticks(np.arange(len(categories)) + 0.4 - step / 2, list(categories), rotation=15, ha="right")
    _time_axis(ax, [b.median for b in points], ylabel)
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1, 1))
    return _save(fig, folder, name, caption)


def scaling(runs: list[Run], folder: Path) -> list[Path]:
    """Time against FLOPs (or bytes) on log-log axes per operator, with each column's exponent."""
    by_op: dict[str, dict[str, list[tuple[float, float, bool]]]] = defaultdict(lambda: defaultdict(list))
    for b, who in _identified(runs):
        if _size(b):
            by_op[f"{who.subject}-{who.direction} {who.where}"][b.column].append((_size(b), b.median,
                                                                                   schema.busy(b.extra)))
    paths = []
    for op, columns in sorted(by_op.items()):
        if max(len({s for s, _, _ in pts}) for pts in columns.values()) < 2:
            continue
        _, ax = plt.subplots(figsize=FIGSIZE)
        for col, pts in sorted(columns.items()):
            pts.sort()
            sizes, times, busy = zip(*pts, strict=True)
            slope = fit_exponent(sizes, times)
            label = f"{col} (exponent {slope:.2f})" if slope is not None else col
            _hollow_where_busy(ax, ax.loglog(sizes, times, marker="o", label=label)[0], busy)
        paths.append(_line_plot(ax, folder, f"scaling-{_slug(op)}.png", "problem size: FLOPs per call (bytes "
                                "where no FLOP count)", "median time (s)", f"{op}: time against problem size",
                                "Log-log; an exponent of 1 is linear scaling, below 1 the small sizes pay a fixed "
                                f"cost; hollow: timed on a busy machine. From {_source(runs)}."))
    return paths


def thread_scaling(runs: list[Run], folder: Path) -> list[Path]:
    """Speedup over the fewest threads, per benchmark group, where a run swept thread counts."""
    curves: dict[str, dict[str, list[tuple[int, float, bool]]]] = defaultdict(lambda: defaultdict(list))
    for b in _benches(runs):
        if b.thread_sweep is not None:
            curves[b.group][b.column].append((b.thread_sweep, b.median, schema.busy(b.extra)))
    paths = []
    for group, columns in sorted(curves.items()):
        _, ax = plt.subplots(figsize=FIGSIZE)
        for col, pts in sorted(columns.items()):
            pts.sort()
            threads, times, busy = zip(*pts, strict=True)
            # a speedup rests on both times: hollow where either the point's or the fewest threads' is busy
            line = ax.plot(threads, [times[0] / t for t in times], marker="o", label=col)[0]
            _hollow_where_busy(ax, line, [b or busy[0] for b in busy])
        paths.append(_line_plot(ax, folder, f"threads-{_slug(group)}.png", "threads",
                                "speedup over the fewest threads", f"{group}: thread scaling",
                                "Higher is better; one process per thread count; hollow: resting on a time taken "
                                f"on a busy machine. From {_source(runs)}."))
    return paths


def training_steps(runs: list[Run], folder: Path) -> list[Path]:
    """Training-step time per model, a bar per framework/mode."""
    models: dict[str, dict[str, Bench]] = defaultdict(dict)
    for b, who in _identified(runs):
        if who.kind == "model" and who.direction == "training" and "workers" not in b.extra:
            models[who.subject][b.column] = b
    if not models:
        return []
    return [_grouped_points(folder, "training-steps.png", "training-step time per model", models,
                            "training step, median (ms)",
                            f"Lower is better; each model at its own batch. {SPREAD} From {_source(runs)}.")]


def data_parallel(runs: list[Run], folder: Path) -> list[Path]:
    """Samples/s against workers, one plot per model, device, scaling rule and batch, a line per
    engine, with the ideal (linear from one worker) dotted."""
    by_plot: dict[tuple[str, str], list] = defaultdict(list)
    for curve in worker_curves(runs):
        by_plot[curve.model, curve.where].append(curve)
    paths = []
    for (model, where), found in sorted(by_plot.items()):
        _, ax = plt.subplots(figsize=FIGSIZE)
        for curve in found:
            for nodes in sorted({n for n, _ in curve.samples}):
                points = curve.by_world(nodes)
                label = curve.column if nodes == 1 else f"{curve.column}, {nodes} nodes"
                line = ax.plot(list(points), list(points.values()), marker="o" if nodes == 1 else "s", label=label)[0]
                _hollow_where_busy(ax, line, [(nodes, world // nodes) in curve.busy for world in points])
                if (1, 1) in curve.samples:
                    ax.plot(list(points), [w * curve.samples[1, 1] for w in points], ":", color=line.get_color())
        paths.append(_line_plot(ax, folder, f"data-parallel-{_slug(model + '-' + where)}.png",
                                "workers (every node's)",
                                "samples/s (global)", f"{model} data-parallel training, {where}",
                                f"Higher is better; dotted: linear scaling from one worker; hollow: timed on a busy "
                                f"machine. From {_source(runs)}."))
    return paths


def convergence(runs: list[Run], folder: Path) -> list[Path]:
    """Held-out accuracy against training time and against steps, one figure per convergence
    group (model, batch, epochs, device, precision), a line per framework/mode, the target dotted."""
    by_row: dict[str, list] = defaultdict(list)
    for c in converged(runs):
        by_row[c.row].append(c)
    paths = []
    for row, items in sorted(by_row.items()):
        fig, (by_time, by_step) = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
        for c in sorted(items, key=lambda c: c.column):
            points = c.extra["curve"]
            acc = [p["heldout_acc"] for p in points]
            by_time.plot([p["seconds"] for p in points], acc, marker="o", label=c.column)
            by_step.plot([p["step"] for p in points], acc, marker="o", label=c.column)
        target = items[0].extra.get("target_accuracy")
        for ax, xlabel in ((by_time, "training time (s, synchronised steps)"), (by_step, "steps")):
            if target:
                ax.axhline(target, linestyle=":", color="grey")
            ax.set_xlabel(xlabel)
        by_time.set_ylabel("held-out accuracy")
        by_time.legend()
        fig.suptitle(f"{row}: held-out accuracy")
        paths.append(_save(fig, folder, f"convergence-{_slug(row)}.png",
                           f"Dotted: the target accuracy. From {_source(runs)}."))
    return paths


def breakdowns(runs: list[Run], folder: Path) -> list[Path]:
    """Per model group, a stacked bar per framework/mode: its timed median split by the family
    shares of its profiled step; a black marker where the operator suite predicted the step."""
    by_row: dict[str, list] = defaultdict(list)
    for p in profiled(runs):
        by_row[p.row].append(p)
    paths = []
    for row, items in sorted(by_row.items()):
        items.sort(key=lambda p: p.column)
        fig, ax = plt.subplots(figsize=(max(FIGSIZE[0], 1.1 * len(items)), FIGSIZE[1]))
        x, bottom = np.arange(len(items)), np.zeros(len(items))
        for family in FAMILIES:
            ms = np.array([p.shares().get(family, 0.0) * p.median * 1e3 for p in items])
            if ms.any():
                bars = ax.bar(x, ms, 0.7, bottom=bottom, label=family)
                for bar, p in zip(bars, items, strict=True):
                    if p.busy:  # timed, or profiled, on a busy machine
                        bar.set_hatch("//")
                bottom += ms
        _predictions(ax, [(i, p.info["prediction"]["predicted_s"] * 1e3) for i, p in enumerate(items)
                          if p.info.get("prediction")], float(bottom.max()))
        ax.set_xticks(x, [p.column for p in items], rotation=20, ha="right")
        ax.set_ylabel("timed median (ms), split by the profiled shares")
        ax.set_title(f"{row}: where the step's time goes")
        ax.legend(loc="upper left", bbox_to_anchor=(1, 1))
        paths.append(_save(fig, folder, f"breakdown-{_slug(row)}.png",
                           f"Bars: timed median split by the profiler's family shares, hatched where the step was "
                           f"timed or profiled on a busy machine; diamonds: the operator suite's prediction (an "
                           f"arrow and its value where it lies off the scale). From {_source(runs)}."))
    return paths


OFF_SCALE = 1.5  # a prediction above this many times the tallest bar is drawn at the top with its value


def _predictions(ax, points: list[tuple[int, float]], tallest: float) -> None:
    """The prediction markers, without squashing the bars: the axis stops at OFF_SCALE x the tallest
    bar, and a prediction above it is an arrow at the top, labelled with its value."""
    if not points:
        return
    top = OFF_SCALE * tallest if tallest > 0 else max(v for _, v in points)
    inside = [(i, v) for i, v in points if v <= top]
    if inside:
        ax.scatter(*zip(*inside, strict=True), marker="D", color="black", zorder=3,
                   label="operator suite's prediction")
    for i, v in points:
        if v > top:
            ax.annotate(f"prediction {v:,.3g} ms", (i, top * 0.98), xytext=(i, top * 0.8), ha="center",
                        fontsize=8, arrowprops={"arrowstyle": "->"}, zorder=3)
    ax.set_ylim(0, top * 1.02)


def all_plots(runs: list[Run], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return bars_per_operator(runs, folder) + scaling(runs, folder) + thread_scaling(runs, folder) + \
        training_steps(runs, folder) + data_parallel(runs, folder) + convergence(runs, folder) + \
        breakdowns(runs, folder)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")
