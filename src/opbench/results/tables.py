"""Text the results layer prints: durations with readable units, and aligned or Markdown tables.
Every table opbench shows (report, compare, scaling, the session summary) is made here."""

from __future__ import annotations

import re


def fmt_time(seconds: float) -> str:
    """A duration with a unit that keeps 3 to 4 significant digits readable."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.4g} {unit}"
    return f"{seconds / 1e-9:.4g} ns"


def table(header: tuple[str, ...], rows: list[tuple[str, ...]], markdown: bool = False) -> list[str]:
    """Rows as an aligned text table, or a Markdown table."""
    if markdown:
        out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return out + ["| " + " | ".join(r) + " |" for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]

    def fmt(row):
        cells = zip(row, widths, strict=True)
        return "  ".join(str(x).ljust(w) if i == 0 else str(x).rjust(w) for i, (x, w) in enumerate(cells))

    return [fmt(header), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows]


def natural(text: str) -> tuple:
    """A sort key that orders numbers inside text by value: 256x256 before 1024x1024, b1 before b128."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text))
