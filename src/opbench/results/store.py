"""Reading saved pytest-benchmark runs: files or `.benchmarks` ids, validated.

Everything that reads results goes through here, so a missing, empty, truncated or foreign file,
an empty storage folder or an unknown id is one ResultsError with one line to show.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opbench.core import schema

DEFAULT_STORAGE = ".benchmarks"


class ResultsError(Exception):
    """Results cannot be read or used; the message is one line for the terminal."""


@dataclass(frozen=True)
class Identity:
    """An opbench result's operator or model, direction, device, dtype and problem size."""

    subject: str  # the operator or model name
    kind: str  # "op" or "model"
    direction: str
    device: str
    dtype: str
    size: str

    @property
    def where(self) -> str:
        return f"{self.device}-{self.dtype}"


_OLD_GROUP = re.compile(r"^(?P<subject>.+)-(?P<direction>forward|backward|training|inference)"
                        r"\[(?P<device>[^-\]]+)-(?P<dtype>[^-\]]+)-(?P<size>.+)\]$")

_OLD_SWEEP = re.compile(r"@t(\d+)$")


@dataclass(frozen=True)
class Bench:
    """One benchmark of one run: what the report and the comparison need."""

    fullname: str
    name: str
    group: str
    median: float
    iqr: float
    min: float
    rounds: int
    extra: dict[str, Any] = field(default_factory=dict)
    q1: float | None = None  # the rounds' quartiles, where the run saved them (pytest-benchmark does)
    q3: float | None = None

    @property
    def identity(self) -> Identity | None:
        """What was measured, from extra_info; None for a result that is not opbench's. Runs saved
        before the fields existed have them parsed from the group, here and nowhere else."""
        e = self.extra
        said = schema.subject(e)
        if "direction" in e and said:
            return Identity(said[1], said[0], e["direction"], e.get("device", ""), e.get("dtype", ""),
                            str(e.get("shape", "")))
        m = _OLD_GROUP.match(self.group) if "framework" in e else None
        if m is None:
            return None
        kind = "model" if m["direction"] in schema.MODEL_DIRECTIONS else "op"
        return Identity(m["subject"], kind, m["direction"], m["device"], m["dtype"], m["size"])

    @property
    def thread_sweep(self) -> int | None:
        """The thread count of a result merged from a --threads sweep (None otherwise)."""
        if "thread_sweep" in self.extra:
            return int(self.extra["thread_sweep"])
        old = _OLD_SWEEP.search(self.name)  # merged before the field existed
        return int(old.group(1)) if old else None

    @property
    def column(self) -> str:
        """framework/mode, the report's column (or the test name when not an opbench result)."""
        if "framework" in self.extra:
            return f"{self.extra['framework']}/{self.extra.get('mode', '')}"
        return self.name


@dataclass
class Run:
    path: Path
    machine_info: dict[str, Any]
    datetime: str
    benchmarks: dict[str, Bench]
    digest: str = ""  # identifies the run's content: the same run copied or listed twice has the same digest

    @property
    def label(self) -> str:
        return self.path.stem

    @property
    def status(self) -> dict[str, Any]:
        """How the run ended, as opbench's plugin recorded it: {"status": "complete" | "failed" |
        "interrupted", "failed": [test ids]}; {} for runs saved without opbench's plugin."""
        return dict((self.machine_info.get("opbench") or {}).get("run") or {})

    @property
    def interrupted(self) -> bool:
        return self.status.get("status") == "interrupted"


COMBINING = ("a benchmark in several runs counts with the median of its runs' medians (and of their IQRs, "
             "latency percentiles and peak memory), the same in every table and plot")


def combined(runs: list[Run]) -> list[Bench]:
    """Every benchmark of the runs once, combined by the one rule in COMBINING; a benchmark timed on
    a busy machine in any run stays marked busy."""
    seen: dict[str, list[Bench]] = {}
    for run in runs:
        for bench in run.benchmarks.values():
            seen.setdefault(bench.fullname, []).append(bench)
    out = []
    for entries in seen.values():
        if len(entries) == 1:
            out.append(entries[0])
            continue
        extra = dict(entries[-1].extra)
        for key in extra:
            values = [b.extra.get(key) for b in entries]
            numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
            if numbers and (key.startswith(("latency_p", "peak_")) or key.endswith("_per_s")):
                extra[key] = statistics.median(values)
        busy = [b.extra[schema.LOAD] for b in entries if schema.busy(b.extra)]
        if busy:
            extra[schema.LOAD] = busy[0]
        first = entries[0]
        quartiles = [(b.q1, b.q3) for b in entries if b.q1 is not None and b.q3 is not None]
        q1, q3 = ((statistics.median(q for q, _ in quartiles), statistics.median(q for _, q in quartiles))
                  if len(quartiles) == len(entries) else (None, None))
        out.append(Bench(first.fullname, first.name, first.group, statistics.median(b.median for b in entries),
                         statistics.median(b.iqr for b in entries), min(b.min for b in entries),
                         sum(b.rounds for b in entries), extra, q1, q3))
    return out


def _optional(value: Any) -> float | None:
    """A saved statistic that older or other runs may lack: a finite float, else None."""
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def bench_of(raw: dict, path: Path) -> Bench:
    try:
        stats = raw["stats"]
        bench = Bench(
            fullname=raw["fullname"], name=raw["name"], group=raw.get("group") or raw["name"],
            median=float(stats["median"]), iqr=float(stats["iqr"]), min=float(stats["min"]),
            rounds=int(stats["rounds"]),
            extra=dict(raw.get("extra_info") or {}),
            q1=_optional(stats.get("q1")), q3=_optional(stats.get("q3")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultsError(f"{path}: a benchmark lacks its statistics ({type(exc).__name__}: {exc})") from None
    for what in ("median", "min"):
        value = getattr(bench, what)
        if not (math.isfinite(value) and value > 0):
            raise ResultsError(f"{path}: {bench.name} has a {what} time of {value!r}: every time must be finite "
                               "and positive (a corrupt or hand-edited file?)")
    if not (math.isfinite(bench.iqr) and bench.iqr >= 0) or bench.rounds < 1:
        raise ResultsError(f"{path}: {bench.name} has an impossible IQR ({bench.iqr!r}) "
                           f"or round count ({bench.rounds})")
    return bench


def _digest(doc: dict) -> str:
    """A fingerprint of what was measured: the time of the run and every benchmark's statistics."""
    content = [doc.get("datetime"), sorted((b.get("fullname"), json.dumps(b.get("stats"), sort_keys=True))
                                           for b in doc["benchmarks"])]
    return hashlib.sha256(json.dumps(content).encode()).hexdigest()


def load_run(path: str | Path) -> Run:
    """One saved run; ResultsError if it is not a readable pytest-benchmark JSON with benchmarks."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: cannot be read ({exc})") from None
    if not text.strip():
        raise ResultsError(f"{path}: empty file")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: not valid JSON, truncated? ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list) or "machine_info" not in doc:
        raise ResultsError(f"{path}: not a pytest-benchmark result (no 'benchmarks' and 'machine_info')")
    benches = [bench_of(b, path) for b in doc["benchmarks"]]
    if not benches:
        raise ResultsError(f"{path}: holds no benchmarks (was it run with --benchmark-disable?)")
    return Run(path, doc.get("machine_info") or {}, str(doc.get("datetime", "")), {b.fullname: b for b in benches},
               _digest(doc))


def storage_folder(storage: str | Path = DEFAULT_STORAGE) -> Path:
    """The folder of a storage given as pytest-benchmark's --benchmark-storage takes it: a folder,
    or 'file://' and a folder ('file:///abs/path', 'file://relative'). Other stores (Elasticsearch)
    are refused by name: opbench reads saved files."""
    text = str(storage)
    if text.startswith("file://"):
        text = text[len("file://"):]
    elif "://" in text:
        raise ResultsError(f"--storage {storage}: opbench reads file storage only (a folder or file://FOLDER), "
                           "not " + text.split("://", 1)[0])
    if not text:
        raise ResultsError(f"--storage {storage!r}: no folder given")
    return Path(text).expanduser()


def saved_runs(storage: str | Path = DEFAULT_STORAGE) -> list[Path]:
    """Every saved run under the storage folder, oldest first (by number, then name)."""
    folder = storage_folder(storage)
    if not folder.is_dir():
        raise ResultsError(f"{folder}: no such storage folder (run 'make bench' or pytest --benchmark-autosave)")
    runs = sorted(folder.glob("*/[0-9][0-9][0-9][0-9]_*.json"), key=lambda p: (p.name, str(p)))
    if not runs:
        raise ResultsError(f"{folder}: holds no saved runs (run 'make bench' or pytest --benchmark-autosave)")
    return runs


def resolve(specs: list[str], storage: str | Path = DEFAULT_STORAGE) -> list[Run]:
    """Runs named by file paths or storage ids ("0003", "0003_mylabel", "latest"); none: the latest."""
    if not specs:
        return [load_run(saved_runs(storage)[-1])]
    runs = []
    for spec in specs:
        path = Path(spec)
        if path.suffix == ".json" or path.exists():
            runs.append(load_run(path))
            continue
        candidates = saved_runs(storage)
        if spec == "latest":
            runs.append(load_run(candidates[-1]))
            continue
        matches = [p for p in candidates if p.stem == spec or p.stem.split("_", 1)[0] == spec]
        if not matches:
            raise ResultsError(f"unknown run {spec!r}: not a file, nor an id in {storage} "
                               f"(ids there: {', '.join(p.stem.split('_', 1)[0] for p in candidates[-5:])}, ...)")
        if len(matches) > 1:
            raise ResultsError(f"run id {spec!r} is ambiguous in {storage}: {', '.join(str(p) for p in matches)}")
        runs.append(load_run(matches[0]))
    return runs
