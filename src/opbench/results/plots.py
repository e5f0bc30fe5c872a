"""Plots of saved runs with matplotlib (headless): grouped bars per operator, time against
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

from opbench.core.files import replace_atomic
from opbench.results.breakdown import FAMILIES
from opbench.results.breakdown import found as profiled
from opbench.results.convergence import found as converged
from opbench.results.scaling import curves as worker_curves
from opbench.results.store import Bench, Identity, Run


def _benches(runs: list[Run]) -> list[Bench]:
    return [b for run in runs for b in run.benchmarks.values()]


def _identified(runs: list[Run]) -> list[tuple[Bench, Identity]]:
    """opbench's results with what each measured; thread sweeps are plotted on their own."""
    return [(b, who) for b in _benches(runs) if (who := b.identity) is not None and b.thread_sweep is None]


def _save(fig, folder: Path, name: str) -> Path:
    path = folder / name
    fig.tight_layout()
    try:
        replace_atomic(path, lambda tmp: fig.savefig(tmp, dpi=90, format="png"))
    finally:
        plt.close(fig)
    return path


def _line_plot(ax, folder: Path, name: str, xlabel: str, ylabel: str, title: str) -> Path:
    """Label a line plot, add its legend and save it."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7)
    return _save(ax.figure, folder, name)


def _size(bench: Bench) -> float | None:
    return bench.extra.get("flops") or bench.extra.get("bytes") or None


def fit_exponent(sizes, times) -> float | None:
    """The slope of log(time) against log(size): 1 is linear scaling."""
    if len(set(sizes)) < 2:
        return None
    return float(np.polyfit(np.log(sizes), np.log(times), 1)[0])


def bars_per_operator(runs: list[Run], folder: Path) -> list[Path]:
    """One grouped bar chart per operator and direction: sizes on x, a bar per framework/mode."""
    by_op: dict[str, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for b, who in _identified(runs):
        by_op[f"{who.subject}-{who.direction} {who.where}"][who.size][b.column] = b.median
    return [_grouped_bars(folder, f"bars-{_slug(op)}.png", op, sizes) for op, sizes in sorted(by_op.items())]


def _grouped_bars(folder: Path, name: str, title: str, categories: dict[str, dict[str, float]],
                  ylabel: str = "median time (ms)") -> Path:
    """Bars of seconds (shown in ms, log scale): one cluster per category, one bar per column."""
    columns = sorted({c for cells in categories.values() for c in cells})
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(categories) * len(columns) / 4), 4))
    width = 0.8 / len(columns)
    for i, col in enumerate(columns):
        ax.bar(np.arange(len(categories)) + i * width, [cells.get(col, 0) * 1e3 for cells in categories.values()],
               width, label=col)
    ax.set_xticks(np.arange(len(categories)) + 0.4 - width / 2, list(categories), rotation=15, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7)
    return _save(fig, folder, name)


def scaling(runs: list[Run], folder: Path) -> list[Path]:
    """Time against FLOPs (or bytes) on log-log axes per operator, with each column's exponent."""
    by_op: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for b, who in _identified(runs):
        if _size(b):
            by_op[f"{who.subject}-{who.direction} {who.where}"][b.column].append((_size(b), b.median))
    paths = []
    for op, columns in sorted(by_op.items()):
        if max(len({s for s, _ in pts}) for pts in columns.values()) < 2:
            continue
        _, ax = plt.subplots(figsize=(6, 4))
        for col, pts in sorted(columns.items()):
            pts.sort()
            sizes, times = zip(*pts, strict=True)
            slope = fit_exponent(sizes, times)
            label = f"{col} (exponent {slope:.2f})" if slope is not None else col
            ax.loglog(sizes, times, marker="o", label=label)
        paths.append(_line_plot(ax, folder, f"scaling-{_slug(op)}.png", "problem size: FLOPs per call (bytes "
                                "where no FLOP count)", "median time (s)", f"{op}: time against problem size"))
    return paths


def thread_scaling(runs: list[Run], folder: Path) -> list[Path]:
    """Speedup over the fewest threads, per benchmark group, where a run swept thread counts."""
    curves: dict[str, dict[str, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
    for b in _benches(runs):
        if b.thread_sweep is not None:
            curves[b.group][b.column].append((b.thread_sweep, b.median))
    paths = []
    for group, columns in sorted(curves.items()):
        _, ax = plt.subplots(figsize=(6, 4))
        for col, pts in sorted(columns.items()):
            pts.sort()
            threads, times = zip(*pts, strict=True)
            ax.plot(threads, [times[0] / t for t in times], marker="o", label=col)
        paths.append(_line_plot(ax, folder, f"threads-{_slug(group)}.png", "threads",
                                "speedup over the fewest threads", group))
    return paths


def training_steps(runs: list[Run], folder: Path) -> list[Path]:
    """Training-step time per model, a bar per framework/mode."""
    models: dict[str, dict[str, float]] = defaultdict(dict)
    for b, who in _identified(runs):
        if who.kind == "model" and who.direction == "training" and "workers" not in b.extra:
            models[who.subject][b.column] = b.median
    if not models:
        return []
    return [_grouped_bars(folder, "training-steps.png", "training-step time per model", models,
                          "training step, median (ms)")]


def data_parallel(runs: list[Run], folder: Path) -> list[Path]:
    """Samples/s against workers, one plot per model, device, scaling rule and batch, a line per
    engine, with the ideal (linear from one worker) dotted."""
    by_plot: dict[tuple[str, str], list] = defaultdict(list)
    for curve in worker_curves(runs):
        by_plot[curve.model, curve.where].append(curve)
    paths = []
    for (model, where), found in sorted(by_plot.items()):
        _, ax = plt.subplots(figsize=(6, 4))
        for curve in found:
            workers = sorted(curve.samples)
            line = ax.plot(workers, [curve.samples[w] for w in workers], marker="o", label=curve.column)[0]
            if 1 in curve.samples:
                ax.plot(workers, [w * curve.samples[1] for w in workers], ":", color=line.get_color())
        paths.append(_line_plot(ax, folder, f"data-parallel-{_slug(model + '-' + where)}.png", "workers",
                                "samples/s (global)", f"{model} data-parallel training, {where} (dotted: linear)"))
    return paths


def convergence(runs: list[Run], folder: Path) -> list[Path]:
    """Held-out accuracy against training time and against steps, one figure per convergence
    group (model, batch, epochs, device, precision), a line per framework/mode, the target dotted."""
    by_row: dict[str, list] = defaultdict(list)
    for c in converged(runs):
        by_row[c.row].append(c)
    paths = []
    for row, items in sorted(by_row.items()):
        fig, (by_time, by_step) = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
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
        by_time.legend(fontsize=7)
        fig.suptitle(f"{row}: held-out accuracy (dotted: target)")
        paths.append(_save(fig, folder, f"convergence-{_slug(row)}.png"))
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
        fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(items)), 4.5))
        x, bottom = np.arange(len(items)), np.zeros(len(items))
        for family in FAMILIES:
            ms = np.array([p.shares().get(family, 0.0) * p.median * 1e3 for p in items])
            if ms.any():
                ax.bar(x, ms, 0.7, bottom=bottom, label=family)
                bottom += ms
        predicted = [(i, p.info["prediction"]["predicted_s"] * 1e3) for i, p in enumerate(items)
                     if p.info.get("prediction")]
        if predicted:
            ax.scatter(*zip(*predicted, strict=True), marker="D", color="black", zorder=3,
                       label="operator suite's prediction")
        ax.set_xticks(x, [p.column for p in items], rotation=20, fontsize=7)
        ax.set_ylabel("timed median (ms), split by the profiled shares")
        ax.set_title(f"{row}: where the step's time goes", fontsize=9)
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1, 1))
        fig.tight_layout()
        paths.append(_save(fig, folder, f"breakdown-{_slug(row)}.png"))
    return paths


def all_plots(runs: list[Run], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return bars_per_operator(runs, folder) + scaling(runs, folder) + thread_scaling(runs, folder) + \
        training_steps(runs, folder) + data_parallel(runs, folder) + convergence(runs, folder) + \
        breakdowns(runs, folder)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")
