"""Why a selection left nothing to run, in one line per cause.

The options decide which cases are generated (--framework, --device, --mode, --precision); markers
(-m) only choose among them. So `-m gpu` without `--device gpu` selects nothing, and so does
`--framework torch --mode jit`: torch has no jit mode. pytest says only "no tests ran"; these
lines name the option or marker that removed everything and the values it can take.
"""

from __future__ import annotations

import re

from opbench.harness.config import DEVICES, FRAMEWORK_MODES, FRAMEWORKS, MODES, Settings

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _wanted(markexpr: str) -> list[str]:
    """The names a marker expression asks for: every name not directly negated by `not`."""
    tokens = _NAME.findall(markexpr or "")
    return [t for i, t in enumerate(tokens) if t not in ("and", "or", "not") and (i == 0 or tokens[i - 1] != "not")]


def _now(values: tuple[str, ...]) -> str:
    return ",".join(values)


def why_nothing(settings: Settings, markexpr: str = "") -> list[str]:
    """The causes, one line each, of an opbench selection that generated or kept no case (empty
    when none of them applies: then the selection was emptied by something else, -k or a path)."""
    lines, wanted = [], _wanted(markexpr)
    named = [f for f in settings.frameworks if f in wanted] or settings.frameworks
    for framework in named:
        if not settings.framework_modes(framework):
            asked = ", ".join(repr(m) for m in settings.modes)
            lines.append(f"{framework} has no mode {asked}; its modes: {', '.join(FRAMEWORK_MODES[framework])}")
    chosen_by = (
        (DEVICES, settings.devices, "devices are chosen with --device"),
        (FRAMEWORKS, settings.frameworks, "frameworks are chosen with --framework"),
        (MODES, settings.modes, "modes are chosen with --mode"),
    )
    for name in dict.fromkeys(wanted):
        for names, selected, how in chosen_by:
            if name in names and name not in selected:
                lines.append(f"no {name} cases: {how} (now: {_now(selected)})")
        if name == "amp" and "amp" not in settings.precisions:
            lines.append(f"no amp cases: precisions are chosen with --precision (now: {_now(settings.precisions)})")
    return lines
