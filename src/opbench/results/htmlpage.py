"""A self-contained HTML report: the side-by-side tables and every plot embedded as a PNG."""

from __future__ import annotations

import base64
import html
import tempfile
from pathlib import Path

from opbench.core.files import write_text_atomic
from opbench.results import plots, report
from opbench.results.store import Run

STYLE = """
body { font-family: sans-serif; margin: 2em; }
table { border-collapse: collapse; margin-bottom: 1.5em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }
td:first-child, th:first-child { text-align: left; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
pre { background: #f6f6f6; padding: 0.6em; font-size: 0.85em; white-space: pre-wrap; }
figcaption { font-size: 0.85em; color: #444; max-width: 60em; }
"""


def _table(title: str, header, rows) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<h3>{html.escape(title)}</h3><table><tr>{head}</tr>{body}</table>"


def caption(path: Path) -> str:
    """The caption a plot was saved with (its PNG's Description), or ''."""
    from PIL import Image

    with Image.open(path) as image:
        return str(getattr(image, "text", {}).get("Description", ""))


# Each image says whether the browser decoded it (data-decoded="<width>" or data-broken), so a page
# can be checked as rendered, not only as written (tests/results/test_report_browser.py).
_DECODED = "this.dataset.decoded=this.naturalWidth"
_BROKEN = "this.dataset.broken=1"


def _figure(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    name = html.escape(path.name)
    text = html.escape(caption(path))
    img = (f'<img src="data:image/png;base64,{data}" alt="{text or name}" title="{name}" '
           f'onload="{_DECODED}" onerror="{_BROKEN}">')
    # the caption is drawn under the plot in the image itself (a PNG saved alone keeps it): the page
    # names the file and gives the caption to screen readers (alt), and does not print it a second time
    return f"<figure>{img}<figcaption><code>{name}</code></figcaption></figure>"


def _environment(runs: list[Run]) -> str:
    lines = "\n".join(report.runs_lines(runs))
    return f"<h2>runs and environment</h2><pre>{html.escape(lines)}</pre>"


def write(runs: list[Run], target: Path, plots_dir: Path | None = None) -> list[Path]:
    """Write the page to `target` (atomically); PNGs go to `plots_dir` (else a temporary folder)."""
    with tempfile.TemporaryDirectory(prefix="opbench-plots-") as tmp:
        folder = plots_dir or Path(tmp)
        images = plots.all_plots(runs, folder)
        parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>opbench report</title>"
                 f"<style>{STYLE}</style></head><body><h1>opbench report</h1>", _environment(runs),
                 "<h2>tables</h2>"]
        parts += [_table(*t) for t in report.tables(report.grid(runs))]
        parts.append("<h2>plots</h2>")
        parts += [_figure(p) for p in images]
        parts.append("</body></html>")
        write_text_atomic(target, "\n".join(parts))
        return images if plots_dir else []
