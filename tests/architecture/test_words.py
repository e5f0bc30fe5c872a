"""One word per idea (#58): the correctness check is the "check" in code, and "gate" means the
upgrade gate (opbench.regression, `opbench upgrade-check` and `ab`, and the comparison they decide
with) and nothing else. An LSTM's gates are the only other gates there are."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "opbench"
GATE = re.compile(r"\b[Gg]at(e|es|ed|ing)\b|\bgate_\w+|\b\w+_gate\b|\bGATE_\w+")
# Lines that name the upgrade gate, or an LSTM's gates
UPGRADE_GATE = re.compile(r"paired|regression|upgrade|gate (framework )?upgrades|gating framework|fails? the gate|"
                          r"threshold gate|family-wise gate|a gate must|gate_quality|process-gate|"
                          r"LSTM|gates in the order|per gate|four gates|gates' |as the gates", re.I)
GATE_HOMES = ("regression/", "cli.py", "results/compare.py", "results/stats.py", "testing/inject.py")


def test_gate_means_the_upgrade_gate_only():
    stray = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where.startswith(GATE_HOMES):
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            # a phrase may break across lines: read each with the one before it
            if GATE.search(line) and not UPGRADE_GATE.search(f"{lines[number - 2] if number > 1 else ''} {line}"):
                stray.append(f"{where}:{number}: {line.strip()}")
    assert not stray, "'gate' for the correctness check (call it the check):\n" + "\n".join(stray)


def _reads_the_clock(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr in ("perf_counter", "perf_counter_ns")
               and isinstance(n.value, ast.Name) and n.value.id == "time" for n in ast.walk(node))


def test_one_timing_loop():
    """Work is timed in one loop (harness/timing.py: rounds, and once for a single call): no other
    module runs a loop that reads the timer (time.perf_counter). Reading it around a burst that
    timing.rounds makes (the burst's wall time) is no second loop; a deadline that bounds a wait
    reads time.monotonic."""
    stray = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where == "harness/timing.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.For, ast.While)) and _reads_the_clock(node):
                stray.append(f"{where}:{node.lineno}: a loop that reads the clock")
    assert not stray, "time work with opbench.harness.timing:\n" + "\n".join(stray)
