"""One source of settings: command-line option > OPBENCH_* environment variable > default.

Every name a user can type is validated here, so an unknown framework, device, mode, dtype or
profile is one usage error that lists the valid names.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from opbench import frameworks
from opbench.workloads.models.precision import PRECISIONS

# Every name below that concerns frameworks derives from the frameworks' declarations.
FRAMEWORKS = tuple(frameworks.declared())
DEVICES = ("cpu", "gpu")
DTYPES = ("float32", "float16", "bfloat16")
PROFILES = ("quick", "full")
MALLOC_MODES = ("steady", "default")
BREAKDOWNS = ("off", "profile", "predict")
ISOLATIONS = ("none", "framework")
# The execution modes of each framework; known without importing any of them.
FRAMEWORK_MODES = {name: f.modes for name, f in frameworks.declared().items()}
MODES = tuple(dict.fromkeys(m for modes in FRAMEWORK_MODES.values() for m in modes))


class ConfigError(ValueError):
    """A setting a user gave is not valid; the message is one line for the terminal."""


def default_threads() -> int:
    """All cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def parse_names(value: str, valid: tuple[str, ...], what: str) -> tuple[str, ...]:
    """Split a comma list and check every name against `valid`; 'all' means every valid name."""
    names = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    if not names:
        raise ConfigError(f"empty {what} list; valid: {', '.join(valid)}")
    if names == ("all",):
        return valid
    unknown = [n for n in names if n not in valid]
    if unknown:
        raise ConfigError(f"unknown {what} {', '.join(map(repr, unknown))}; valid: {', '.join(valid)}")
    return names


def parse_one(value: str, valid: tuple[str, ...], what: str) -> str:
    """A single name from `valid`."""
    names = parse_names(value, valid, what)
    if len(names) != 1:
        raise ConfigError(f"one {what} at a time, got {value!r}; valid: {', '.join(valid)}")
    return names[0]


THREADS_PER_CORE_LIMIT = 4  # more threads than this many per core is a typo, not a setting


def parse_threads(value: str, what: str = "--threads") -> tuple[int, ...]:
    """A thread count, or a comma list of counts for a sweep: each at least 1 and at most
    THREADS_PER_CORE_LIMIT x the cores (more than the cores draws a warning: oversubscribed)."""
    try:
        counts = tuple(int(v) for v in value.split(","))
    except ValueError:
        raise ConfigError(f"{what} takes whole numbers, got {value!r}") from None
    cores = default_threads()
    if not counts or any(not 1 <= c <= THREADS_PER_CORE_LIMIT * cores for c in counts):
        raise ConfigError(f"{what} takes counts from 1 to {THREADS_PER_CORE_LIMIT * cores} "
                          f"({THREADS_PER_CORE_LIMIT} x the {cores} cores), got {value!r}")
    if max(counts) > cores:
        import warnings

        warnings.warn(f"{what}={value}: more threads than the {cores} cores this process may use; "
                      "timings will include oversubscription", stacklevel=2)
    return counts


def _refuse(what: str, message: str) -> ConfigError:
    return ConfigError(f"{what}: {message}" if what else message)


def parse_number(value: str, what: str = "", *, above: float | None = None, below: float | None = None,
                 at_least: float | None = None) -> float:
    """A finite number within the bounds given (a trailing % is allowed: options in percent).
    NaN, infinities and values out of range are refused with one line naming `what`."""
    try:
        number = float(value.strip().removesuffix("%"))
    except ValueError:
        raise _refuse(what, f"expected a number, got {value!r}") from None
    if not math.isfinite(number):
        raise _refuse(what, f"expected a finite number, got {value!r}")
    if above is not None and below is not None and not above < number < below:
        raise _refuse(what, f"expected a number between {above:g} and {below:g} (both excluded), got {value!r}")
    if above is not None and number <= above:
        raise _refuse(what, f"expected a number above {above:g}, got {value!r}")
    if at_least is not None and number < at_least:
        raise _refuse(what, f"expected a number of {at_least:g} or more, got {value!r}")
    return number


def parse_count(value: str, what: str = "", at_least: int = 1) -> int:
    """A whole number of at least `at_least`."""
    try:
        count = int(value)
    except ValueError:
        raise _refuse(what, f"expected a whole number, got {value!r}") from None
    if count < at_least:
        raise _refuse(what, f"expected at least {at_least}, got {value!r}")
    return count


@dataclass(frozen=True)
class Option:
    """One opbench setting: its flag, environment variable, default and help."""

    name: str
    default: str
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return "OPBENCH_" + self.name.upper()


OPTIONS = (
    Option("framework", "all", f"comma list of {', '.join(FRAMEWORKS)} (or all)"),
    Option("device", "cpu", f"comma list of {', '.join(DEVICES)}"),
    Option("mode", "all", f"comma list of {', '.join(MODES)} (or all: every mode of each framework)"),
    Option("threads", str(default_threads()), "intra-op threads per framework (comma list: one process per count)"),
    Option("dtype", "float32", f"operators' dtypes: comma list of {', '.join(DTYPES)}"),
    Option("precision", "float32", f"models' precision: comma list of {', '.join(PRECISIONS)} (amp: mixed "
           "precision, bfloat16 on a CPU, float16 with loss scaling on a GPU)"),
    Option("profile", "quick", f"problem sizes: {', '.join(PROFILES)}"),
    Option("peak_gflops", "derive", "roofline ceiling in GFLOP/s ('derive': from the hardware, per device and dtype: "
           "cores x SIMD lanes x FMA units x 2 x maximum clock)"),
    Option("roofline_slack", "1.5", "a result above the ceiling x slack fails as implausible"),
    Option("data_dir", "", "folder with real MNIST/CIFAR-10/IMDB files for the e2e suite (default: synthetic)"),
    Option("workloads", "", "a TOML file of model blueprints ([model.NAME] tables, docs/usage/own.md): its models "
           "run in benchmarks/e2e beside the catalogue's own"),
    Option("workers", ",".join(str(w) for w in (1, 2) if w <= default_threads()),
           "data-parallel workers per node for benchmarks/distributed (comma list), one core and one "
           "intra-op thread each"),
    Option("dist_timeout", "300", "seconds a distributed worker may take to answer one request (a training "
           "step, the check) before it counts as hung"),
    Option("breakdown", "off", "after a model's timed rounds, a separate profiled pass: off, profile (each "
           "framework's profiler: time per operator family, phase and operator) or predict (and the operator "
           "suite timed at the model's own layer shapes)"),
    Option("malloc", "default", "CPU allocator: default (glibc's own thresholds) or steady (freed memory stays in "
           "the heap: no page faults per call)"),
    Option("isolate", "none", "framework: each framework's benchmarks run in worker processes of their own (a "
           "crash costs one case, memory stays bounded), merged into one run; none: all in this process"),
    Option("worker_max_rss", "auto", "with --isolate framework, a worker whose resident set passed this (bytes, or "
           "with K, M, G; auto: 4G, or half the machine's memory where that is less, unless earlier workers of the "
           "framework and mode held more than that after one case) is replaced by a fresh one before its next case"),
    Option("worker_max_growth", "10%", "with --isolate framework, a worker whose resident set after a case (its "
           "garbage collected, its framework's compiled programs let go) is more than this above the least a worker of "
           "its framework and mode held after its first case of the next case's direction (a worker runs forward, "
           "backward, inference, training and convergence cases in that order) is replaced by a fresh one before its "
           "next case, so that "
           "no case's peak memory carries what earlier ones left (a percentage, or off)"),
    Option("processes", "1", "time each case in this many fresh workers, its rounds split between them, and save "
           "the statistics over all their rounds with the spread between processes (pyperf's model; turns on "
           "--isolate framework)"),
)


def machine_memory() -> int:
    """The machine's physical memory in bytes (0 where the system does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


# A worker past this has kept more than any one case needs: in `make bench` (2026-11-28, Xeon) the
# TensorFlow worker held 9.3 GB after 148 of its 244 cases, where ResNet-20's training step, the
# largest case measured alone, peaks at 1.7 GB. Replacing a worker costs its start (seconds); the
# run's memory is then about this plus one case.
AUTO_WORKER_RSS = 4 * 2**30


def parse_size(value: str, what: str) -> int:
    """Bytes from '8G', '512M', '1048576' or 'auto' (AUTO_WORKER_RSS, or half the machine's memory
    where that is less)."""
    text = value.strip().upper()
    if text == "AUTO":
        return min(AUTO_WORKER_RSS, machine_memory() // 2)
    scale = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}.get(text[-1:], 1)
    number = text[:-1] if scale > 1 else text
    try:
        size = float(number) * scale
    except ValueError:
        size = float("nan")
    if not size > 0 or size == float("inf"):
        raise ConfigError(f"{what} {value!r} is not a size: give bytes, or a number with K, M or G (e.g. 8G), or auto")
    return int(size)


def parse_growth(value: str, what: str) -> float:
    """A fraction from a percentage ('10%' or '10'); 0 from 'off'."""
    if value.strip().lower() == "off":
        return 0.0
    return parse_number(value, what, above=0) / 100


@dataclass(frozen=True)
class Settings:
    """Validated settings for one pytest session."""

    frameworks: tuple[str, ...] = FRAMEWORKS
    devices: tuple[str, ...] = ("cpu",)
    modes: tuple[str, ...] = MODES
    threads: tuple[int, ...] = (default_threads(),)
    dtypes: tuple[str, ...] = ("float32",)
    precisions: tuple[str, ...] = ("float32",)
    profile: str = "quick"
    peak_gflops: float | None = None
    roofline_slack: float = 1.5
    data_dir: str = ""
    workloads: str = ""  # a blueprint file (opbench.workloads.models.blueprint)
    malloc: str = "default"
    breakdown: str = "off"
    isolate: str = "none"
    worker_max_rss: int = 0  # bytes; 0: no limit
    # auto: a bound opbench chose, which gives way where a fresh worker passes it after one case (a GPU's JAX)
    worker_max_rss_auto: bool = False
    worker_max_growth: float = 0.10  # a fraction of the least a worker held after its first case; 0: no limit
    processes: int = 1  # workers per framework that each time every case (opbench.harness.isolation)
    workers: tuple[int, ...] = (1, 2)
    dist_timeout: float = 300.0
    # (option, how it was given: "--device gpu", "--device gpu (from OPBENCH_DEVICE)") for each choice
    # the user made, a default or 'all' not counted
    asked: tuple[tuple[str, str], ...] = ()

    def framework_modes(self, framework: str) -> tuple[str, ...]:
        """The selected modes that `framework` has."""
        return tuple(m for m in FRAMEWORK_MODES[framework] if m in self.modes)


def resolve(raw: dict[str, str | None], environ: dict[str, str] | None = None) -> Settings:
    """Build Settings from option values (None = not given), falling back to OPBENCH_* and defaults."""
    environ = os.environ if environ is None else environ
    values, sources = {}, {}
    for opt in OPTIONS:
        given = raw.get(opt.name)
        if given is not None:
            values[opt.name], sources[opt.name] = given, opt.flag
        elif opt.env in environ:
            values[opt.name], sources[opt.name] = environ[opt.env], f"{opt.flag} (from {opt.env})"
        else:
            values[opt.name], sources[opt.name] = opt.default, opt.flag
    peak = values["peak_gflops"]
    if values["data_dir"] and not os.path.isdir(values["data_dir"]):
        raise ConfigError(f"{sources['data_dir']} {values['data_dir']!r} is not a folder")
    if values["workloads"] and not os.path.isfile(values["workloads"]):
        raise ConfigError(f"{sources['workloads']} {values['workloads']!r} is not a file")

    def named(parse, option: str, valid: tuple[str, ...]):
        """The names of one option; a bad one is reported under the flag or variable it came from."""
        try:
            return parse(values[option], valid, option.replace("_", " "))
        except ConfigError as exc:
            raise ConfigError(f"{sources[option]}: {exc}") from None

    processes = parse_count(values["processes"], sources["processes"])
    isolate = named(parse_one, "isolate", ISOLATIONS)
    if processes > 1 and isolate == "none":
        if raw.get("isolate") is not None or "OPBENCH_ISOLATE" in environ:  # given, not the default
            raise ConfigError(f"{sources['processes']} {processes} times each case in worker processes: it cannot "
                              f"run with {sources['isolate']} none")
        isolate = "framework"
    return Settings(
        frameworks=named(parse_names, "framework", FRAMEWORKS),
        devices=named(parse_names, "device", DEVICES),
        modes=named(parse_names, "mode", MODES),
        threads=parse_threads(values["threads"], sources["threads"]),
        dtypes=named(parse_names, "dtype", DTYPES),
        precisions=named(parse_names, "precision", PRECISIONS),
        profile=named(parse_one, "profile", PROFILES),
        # "measure" (NumPy's GEMM, before the ceiling was derived) is read as "derive"
        peak_gflops=None if peak in ("derive", "measure") else parse_number(peak, sources["peak_gflops"], above=0),
        roofline_slack=parse_number(values["roofline_slack"], sources["roofline_slack"], above=1),
        data_dir=values["data_dir"],
        workloads=values["workloads"],
        malloc=named(parse_one, "malloc", MALLOC_MODES),
        breakdown=named(parse_one, "breakdown", BREAKDOWNS),
        isolate=isolate,
        worker_max_rss=parse_size(values["worker_max_rss"], sources["worker_max_rss"]),
        worker_max_rss_auto=values["worker_max_rss"].strip().lower() == "auto",
        worker_max_growth=parse_growth(values["worker_max_growth"], sources["worker_max_growth"]),
        processes=processes,
        workers=parse_threads(values["workers"], sources["workers"]),
        dist_timeout=parse_number(values["dist_timeout"], sources["dist_timeout"], above=0),
        asked=tuple((o.name, sources[o.name].replace(o.flag, f"{o.flag} {values[o.name]}", 1)) for o in OPTIONS
                    if values[o.name] not in (o.default, "all")),
    )
