"""The pytest plugin: options, markers, parametrisation, skips with reasons, report header.

Benchmarks ask for the `op_case` (or `model_case`) fixture; this plugin expands the options into
Cases, one test item each, with ids like `torch-cpu-eager-float32-1024x1024x1024` and markers for
framework, device, mode, operator, family and direction.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from opbench import frameworks
from opbench.core.case import Case
from opbench.core.errors import one_line
from opbench.core.schema import DIRECTIONS
from opbench.frameworks.base import Unavailable
from opbench.harness import config as cfg
from opbench.harness.config import ConfigError, Settings
from opbench.harness.session import Session
from opbench.suites import registry
from opbench.suites.distributed.cases import DistCase
from opbench.suites.distributed.engines import ENGINES
from opbench.suites.distributed.group import DistributedError
from opbench.suites.distributed.link import LinkError
from opbench.workloads import ops
from opbench.workloads.models import catalogue

STATE = pytest.StashKey["State"]()


@dataclass
class RunStatus:
    """How the session is ending, saved with its results (machine_info['opbench']['run']) so that
    compare refuses an interrupted run and flags one in which benchmarks failed."""

    failed: list[str] = field(default_factory=list)
    interrupted: bool = False

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.failed.append(report.nodeid)

    def pytest_keyboard_interrupt(self, excinfo) -> None:
        self.interrupted = True

    def as_dict(self) -> dict:
        status = "interrupted" if self.interrupted else "failed" if self.failed else "complete"
        return {"status": status, "failed": list(self.failed)}


@dataclass
class State(Session):
    """A pytest session's measuring Session and how its run is going."""

    run: RunStatus = field(default_factory=RunStatus)
    active: bool = False  # opbench benchmarks were collected in this session
    frameworks_used: tuple[str, ...] = ()  # the frameworks of the collected benchmarks: the only ones imported
    selected: int | None = None  # test items left after collection and deselection
    warmup_by_opbench: bool = False  # opbench turned pytest-benchmark's warm-up on (its header says off)
    baseline_note: str | None = None  # which saved run --benchmark-compare took, where opbench chose it
    workload_models: tuple[str, ...] = ()  # the models of --workloads, run beside the catalogue's own


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("opbench", "opbench: frameworks, devices, modes and sizes")
    for opt in cfg.OPTIONS:
        group.addoption(
            opt.flag, dest=f"opbench_{opt.name}", default=None, metavar=opt.name.upper(),
            help=f"{opt.help} [env {opt.env}; default: {opt.default!r}]",
        )


def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """A list of thread counts runs one child pytest per count (opbench.harness.sweep); --isolate
    framework runs each framework's benchmarks in workers of their own (opbench.harness.isolation).
    Either way this process collects nothing and imports no framework."""
    import os

    from opbench.harness import isolation, sweep

    raw = {opt.name: config.getoption(f"opbench_{opt.name}") for opt in cfg.OPTIONS}
    try:
        settings = cfg.resolve(raw)
    except ConfigError:
        return None  # reported as a usage error by pytest_configure
    args = list(config.invocation_params.args)
    if len(settings.threads) > 1 and not os.environ.get(sweep.CHILD):
        return sweep.run(args, settings.threads, config.option)
    if settings.isolate == "framework" and not os.environ.get(isolation.CHILD):
        limits = isolation.Limits(settings.worker_max_rss, settings.worker_max_growth, settings.worker_max_rss_auto)
        return isolation.run(args, settings.frameworks, config.option, limits, show=_show_merged,
                             processes=settings.processes,
                             modes={f: settings.framework_modes(f) for f in settings.frameworks},
                             refuse=lambda selected, reasons: refusal(settings, selected, reasons))
    return None


def _between_cases() -> int:
    """opbench's side of a worker's step between two cases: the operators' inputs let go (the next
    case makes its own); returns what the model references hold, kept on purpose for the next case
    of the same model (suites/model_reference.py), which the worker does not count as left over.
    Only what this worker imported is looked at."""
    prepare = sys.modules.get("opbench.suites.ops.prepare")
    if prepare is not None:
        prepare.host_inputs.cache_clear()
    references = sys.modules.get("opbench.suites.model_reference")
    return references.held_bytes() if references is not None else 0


def _show_merged(document: dict) -> None:
    """After an isolated run's workers, one grid of all their cases, frameworks side by side."""
    from opbench.results.summary import document_run, grid_lines

    for line in grid_lines(document_run(document, Path("this run"))):
        print(line)


def marker_names() -> dict[str, str]:
    """Every marker the suite attaches, with its description."""
    names = {f: f"framework {f}" for f in cfg.FRAMEWORKS}
    names |= {d: f"device {d}" for d in cfg.DEVICES}
    names |= {m: f"execution mode {m}" for m in cfg.MODES}
    names |= {o: f"operator {o}" for o in ops.REGISTRY}
    names |= {f: f"operator family {f}" for f in ops.FAMILIES}
    names |= {d: f"{d} pass" for d in DIRECTIONS}
    names |= {m: f"model {m}" for m in catalogue.MODELS}
    names |= {"e2e": "end-to-end model benchmark"}
    names |= {"function": "your own code timed through the fw fixture (opbench.api)"}
    names |= {"amp": "end-to-end model in automatic mixed precision (--precision amp)"}
    names |= {"distributed": "data-parallel training over several worker processes"}
    names |= {e.name: f"distributed engine: {e.title}" for e in ENGINES.values()}
    names |= {r: f"{r}hronous parameter updates" for e in ENGINES.values() for r in e.rules}
    names |= {"strong": "strong scaling: the global batch stays as workers grow",
              "weak": "weak scaling: each worker's batch stays as workers grow"}
    names |= {f"{registry.MARKER}(op, direction)": "binds an op_case benchmark to an operator and direction"}
    return names


def pytest_configure(config: pytest.Config) -> None:
    for name, description in marker_names().items():
        config.addinivalue_line("markers", f"{name}: {description}")
    raw = {opt.name: config.getoption(f"opbench_{opt.name}") for opt in cfg.OPTIONS}
    try:
        settings = cfg.resolve(raw)
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    from opbench.harness import allocator, isolation

    _check_json_target(config)
    state = State(settings, malloc=allocator.apply(settings.malloc))
    state.workload_models = _load_workloads(settings.workloads)
    config.stash[STATE] = state
    isolation.register(config, _between_cases)  # in an --isolate worker: its progress, case by case
    state.baseline_note = _complete_baseline(config)
    config.pluginmanager.register(state.run, "opbench-run-status")


def _load_workloads(path: str) -> tuple[str, ...]:
    """The models of the blueprint file `path` (--workloads), registered; a usage error, one line,
    for a file opbench cannot build."""
    if not path:
        return ()
    from opbench.core.errors import DeclarationError
    from opbench.workloads.models import blueprint

    try:
        return tuple(spec.name for spec in blueprint.register_file(path))
    except DeclarationError as exc:
        raise pytest.UsageError(f"--workloads: {exc}") from None


def _check_json_target(config: pytest.Config) -> None:
    """--benchmark-json is written at the very end: refuse a folder or an unwritable place now,
    before anything is measured, rather than lose the whole run then."""
    from opbench.core.files import NotWritable, option_path, writable_file

    target = option_path(getattr(config.option, "benchmark_json", None))
    if target is None:
        return
    try:
        writable_file(target, "--benchmark-json", create_folder=False)
    except NotWritable as exc:
        raise pytest.UsageError(str(exc)) from None


def _complete_baseline(config: pytest.Config) -> str | None:
    """An interrupted run is never a baseline. --benchmark-compare without an id takes the latest
    complete run of this machine's storage folder (pytest-benchmark would take the latest, whatever
    it holds) and the returned line says which, where that is not the latest; an id or file that
    names an interrupted run is a usage error. Runs before pytest-benchmark reads the option."""
    from pytest_benchmark.utils import get_machine_id

    from opbench.results.store import ResultsError, load_run, storage_folder

    compare = getattr(config.option, "benchmark_compare", None)
    if not compare:
        return None
    try:
        folder = storage_folder(getattr(config.option, "benchmark_storage", None) or ".benchmarks") / get_machine_id()
    except ResultsError:
        return None  # another kind of store: pytest-benchmark's own choice

    def interrupted(path) -> bool:
        try:
            return load_run(path).interrupted
        except ResultsError:
            return False  # pytest-benchmark reports what it cannot read

    if compare is not True:  # the runs it names: a file, or an id (pytest-benchmark compares with each match)
        named = Path(str(compare))
        runs = [named] if named.is_file() else (
            sorted(folder.glob(f"{str(compare).rstrip('*')}*.json")) if folder.is_dir() and "/" not in str(compare)
            else [])
        bad = [p.stem for p in runs if interrupted(p)]
        if bad:
            raise pytest.UsageError(f"--benchmark-compare {compare}: {', '.join(bad)} was interrupted, its timings "
                                    "are incomplete; compare with a complete run")
        return None
    runs = sorted(folder.glob("[0-9][0-9][0-9][0-9]_*.json"), key=lambda p: p.name) if folder.is_dir() else []
    passed_over = []
    for path in reversed(runs):
        if not interrupted(path):
            break
        passed_over.append(path.stem)
    else:
        return None  # none complete: pytest-benchmark's own choice, and opbench's summary refuses it
    if not passed_over:
        return None
    config.option.benchmark_compare = str(path.resolve())
    return (f"--benchmark-compare: against {path.stem}, the latest complete run ({', '.join(passed_over)} "
            f"{'was' if len(passed_over) == 1 else 'were'} interrupted)")


def _warmup_on_by_default(config: pytest.Config) -> None:
    """pytest-benchmark warms up only on PyPy unless told; frameworks need it everywhere. Only
    sessions that collected opbench benchmarks get it, and never against the user's own
    --benchmark-warmup, given on the command line, in an ini file's addopts or in PYTEST_ADDOPTS."""
    import os
    import shlex

    env = shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
    args = [*config.invocation_params.args, *config.getini("addopts"), *env]
    given = any(a.startswith("--benchmark-warmup") and not a.startswith("--benchmark-warmup-") for a in args)
    bs = getattr(config, "_benchmarksession", None)
    if not given and bs is not None and not bs.options["warmup"]:
        bs.options["warmup"] = True
        config.stash[STATE].warmup_by_opbench = True


def as_params(cases: list[Case]) -> list:
    return [pytest.param(c, id=c.id, marks=[getattr(pytest.mark, m) for m in c.markers]) for c in cases]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Each benchmark that asks for a suite's fixture (opbench.suites.registry) gets the cases the
    suite lists for it; a benchmark the suite cannot list (an unknown operator or model, a wrong
    binding) is a usage error that names it."""
    for suite in registry.SUITES:
        if suite.fixture not in metafunc.fixturenames:
            continue
        state = metafunc.config.stash[STATE]
        request = registry.Request(metafunc.function.__name__, metafunc.definition.get_closest_marker(registry.MARKER),
                                   state.settings, state.workload_models)
        try:
            listed = suite.cases(request)
        except KeyError as exc:
            raise pytest.UsageError(f"{metafunc.function.__name__}: {exc.args[0]}") from None
        except ConfigError as exc:  # OPBENCH_DIST_NODES
            raise pytest.UsageError(str(exc)) from None
        for names, what in listed.markers:
            _declare_markers(metafunc.config, names, what)
        metafunc.parametrize(suite.fixture, as_params(listed.cases), indirect=True)


def _declare_markers(config: pytest.Config, names, what: str) -> None:
    """Markers for what a user's own file declared (opbench.api), which pytest_configure could not
    know: `-m swish` selects, and --strict-markers accepts, them as it does opbench's own."""
    known = {line.split(":")[0].split("(")[0].strip() for line in config.getini("markers")}
    for name in names:
        if name not in known:
            config.addinivalue_line("markers", f"{name}: {what} {name} (declared through opbench.api)")


def _fixture(suite: registry.Suite):
    """The pytest fixture of a suite's row: its binder given the item's case, the request and the
    run's state."""
    def fixture(request: pytest.FixtureRequest):
        return suite.binds(request.param, request, request.config.stash[STATE])

    fixture.__doc__ = suite.doc
    return pytest.fixture(name=suite.fixture)(fixture)


for _suite in registry.SUITES:  # pytest finds a plugin's fixtures among its module's names
    globals()[f"_{_suite.fixture}_fixture"] = _fixture(_suite)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A benchmark the options leave no case for (a creation operator under --mode xla: creation
    runs eager only) is not generated: pytest's placeholder item for an empty parametrisation
    carries no case and no marker, and is dropped here, counted as deselected so that pytest's
    'N collected' adds up to what runs. Benchmarks of frameworks that share one
    OpenMP runtime run one framework after another, the one that slows the others most last
    (opbench.harness.openmp); every other order is kept."""
    from opbench.harness import openmp

    kept, dropped = [], []
    for item in items:
        (dropped if _without_case(item) else kept).append(item)
    if dropped:
        items[:] = kept
        config.hook.pytest_deselected(items=dropped)

    def framework(item: pytest.Item) -> str | None:
        return next((f for f in openmp.ORDER if item.get_closest_marker(f)), None)

    items.sort(key=lambda item: openmp.run_order(framework(item)))


def _without_case(item: pytest.Item) -> bool:
    """An opbench benchmark whose parametrisation was empty: its fixture's value is no case."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return any(f in params and not isinstance(params[f], (Case, DistCase)) for f in registry.FIXTURES)


def case_of(item: pytest.Item):
    """The opbench case a collected test item runs, or None for another suite's test."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return next((params[f] for f in registry.FIXTURES if f in params), None)


def unavailable(case) -> str | None:
    """Why `case` cannot run here (its framework, device, mode or dtype), or None."""
    from opbench.suites import prepared
    from opbench.suites.measure import admit

    if case.kind != "dist":
        return admit(case).unavailable
    try:
        prepared.require_framework(case.framework, case.device)
    except Unavailable as exc:
        return str(exc)
    return None


def nothing_measurable(settings: Settings, cases: list) -> str | None:
    """A usage error when the user's own choice of device, framework, mode, dtype or precision
    leaves nothing that can run here (--device gpu on a machine without one): a CI job that
    measured nothing must not pass. With the defaults, what cannot run is skipped with its reason."""
    return refusal(settings, len(cases), none_runs(cases))


def none_runs(cases: list) -> list[str] | None:
    """Why none of `cases` can run here, each reason once; None where one of them can."""
    reasons: dict[str, None] = {}
    seen = set()
    for case in cases:
        key = (case.framework, case.device, case.mode, case.dtype, case.kind, case.name)
        if key in seen:
            continue
        seen.add(key)
        why = unavailable(case)
        if why is None:
            return None
        reasons[why] = None
    return list(reasons)


def refusal(settings: Settings, selected: int, reasons: list[str] | None) -> str | None:
    """The usage error's line for `selected` benchmarks none of which can run (for `reasons`),
    where the user chose the options that leave them: None where something runs or they chose none."""
    asked = dict(settings.asked)
    chosen = [asked[o] for o in ("device", "framework", "mode", "dtype", "precision") if o in asked]
    if not chosen or not reasons:
        return None
    shown = reasons[:3] + ([f"and {len(reasons) - 3} more"] if len(reasons) > 3 else [])
    return f"{', '.join(chosen)}: none of the {selected} selected benchmarks can run here ({'; '.join(shown)})"


def pytest_collection_finish(session: pytest.Session) -> None:
    """The header, once opbench benchmarks were collected: the frameworks they use (imported here,
    and only those, threads pinned), settings and roofline. A session without them imports, pins
    and measures nothing, so the plugin costs nothing where it is not used. A selection the user
    chose that nothing here can run is a usage error, before anything starts."""
    state = session.config.stash.get(STATE, None)
    if state is not None:
        state.selected = len(session.items)
    cases = [c for c in map(case_of, session.items) if c is not None]
    if state is None or not cases:
        return
    state.active = True
    used = {c.framework for c in cases}
    state.frameworks_used = tuple(f for f in state.settings.frameworks if f in used)
    frameworks.expect(state.frameworks_used)  # `-m tensorflow` alone: TensorFlow loads without torch first
    from opbench.harness import isolation

    worker = isolation.progress(session.config)
    if worker is not None:  # the parent judges the whole run: this worker's cases are one part of it
        worker.selected([item.nodeid for item in session.items if case_of(item) is not None], none_runs(cases))
    else:
        line = nothing_measurable(state.settings, cases)
        if line:
            raise pytest.UsageError(line)
    _warmup_on_by_default(session.config)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or session.config.getoption("collectonly") or reporter.verbosity < 0:
        return
    for line in header(session.config, state):
        reporter.write_line(line)


def header(config: pytest.Config, state: State) -> list[str]:
    s = state.settings
    bs = getattr(config, "_benchmarksession", None)
    lines = [
        f"opbench: profile={s.profile} devices={','.join(s.devices)} dtypes={','.join(s.dtypes)} "
        f"precisions={','.join(s.precisions)} "
        f"threads={state.threads} modes={','.join(s.modes)} malloc={state.malloc.split()[0]} "
        f"warmup={'on' if bs is not None and bs.options['warmup'] else 'off'}"
        + (" (opbench's default, after pytest-benchmark's line above; --benchmark-warmup=off to refuse it)"
           if state.warmup_by_opbench else "")
        + (f" breakdown={s.breakdown}" if s.breakdown != "off" else "")
    ]
    for name in state.frameworks_used:
        lines.append("  " + framework_line(name, s, state.threads))
    if "cpu" in s.devices:
        ceiling = state.roofline.ceiling("cpu", "float32")
        lines.append(f"  roofline: {ceiling.gflops:,.0f} GFLOP/s fp32 x{s.roofline_slack:g} slack "
                     f"[{ceiling.derivation}]")
    return lines


def framework_line(name: str, settings: Settings, threads: int) -> str:
    """'torch 2.13.0: threads 2; modes eager, compile; gpu: ...' or why it is unavailable."""
    from opbench.suites.measure import ThreadMismatch, pin_threads

    try:
        backend = frameworks.load(name)
    except Unavailable as exc:
        return f"{name}: unavailable ({exc})"
    try:
        effective = str(pin_threads(backend, threads))
    except ThreadMismatch as exc:
        effective = f"MISMATCH: {exc}"
    modes = ", ".join(settings.framework_modes(name)) or "none selected"
    parts = [f"{name} {backend.version()}: threads {effective}; modes {modes}"]
    if "gpu" in settings.devices:
        parts.append(f"gpu: {backend.gpu_unavailable() or 'yes'}")
    return "; ".join(parts)


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """opbench's summary of the run; when the selection left nothing, why (exit status pytest's)."""
    state = config.stash.get(STATE, None)
    if state is not None and state.baseline_note:
        terminalreporter.write_line(f"opbench: {state.baseline_note}")
    if state is not None and state.selected == 0:
        from opbench.harness.selection import why_nothing

        for line in why_nothing(state.settings, config.getoption("markexpr", "")):
            terminalreporter.write_line(f"opbench: {line}")
    bs = getattr(config, "_benchmarksession", None)
    if bs is None or bs.disabled or not bs.benchmarks:
        return
    from opbench.results.summary import lines

    for line in lines(bs):
        terminalreporter.write_line(line)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A distributed case that failed for a reason its workers or its nodes gave (a worker died,
    hung or failed a request; another node left or disagreed) is reported as that one line, the
    engine and the worker or node named: the traceback would show only opbench's group and link
    code. --tb=long (or any style asked for) shows it all."""
    outcome = yield
    report = outcome.get_result()
    if (report.failed and call.excinfo is not None and item.config.option.tbstyle == "auto"
            and call.excinfo.errisinstance((DistributedError, LinkError))):
        report.longrepr = one_line(call.excinfo.value, limit=600)


@pytest.hookimpl(hookwrapper=True)
def pytest_benchmark_compare_machine_info(config, benchmarksession, machine_info, compared_benchmark):
    """pytest-benchmark compares machine_info as it loads the compared run, in its pytest_configure:
    before opbench's block exists (it is built once benchmarks are collected and their frameworks
    imported). So every compare drew its 5,000-character warning, and with the storage outside the
    working directory the warning itself crashed the session (pytest-benchmark issue 217: it
    prints the storage path relative to the working directory). Its check is handed the current
    machine_info as the saved one, so it neither warns nor crashes, and the saved one is put back;
    opbench's summary compares the complete environments after the run, one line per difference
    (opbench.results.summary)."""
    saved = compared_benchmark.get("machine_info")
    compared_benchmark["machine_info"] = machine_info
    try:
        yield
    finally:
        compared_benchmark["machine_info"] = saved


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    from opbench.harness.fingerprint import update_machine_info

    state = config.stash.get(STATE, None)
    if state is not None and state.active:  # another suite's benchmarks get pytest-benchmark's info only
        update_machine_info(machine_info, state.settings, state.threads, state.malloc, state.roofline,
                            state.frameworks_used)
        machine_info["opbench"]["run"] = state.run.as_dict()
