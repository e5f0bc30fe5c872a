"""The `opbench` command: report and compare saved runs, and gate framework upgrades.

report and compare read saved pytest-benchmark runs (opbench.results); upgrade-check and ab run
two environments and judge them (opbench.regression). This module parses arguments and dispatches.

Exit codes: 0 clean, 1 regression or missing benchmark, 2 usage or input error (one line on
stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from pathlib import Path

from opbench.core.files import NotWritable, writable_file, writable_folder
from opbench.core.processes import WorkerFailure, kill_all, terminate_as_interrupt
from opbench.harness.config import ConfigError, parse_count, parse_number
from opbench.regression.process import DEFAULT_RUNS
from opbench.results.compare import STATISTICS
from opbench.results.stats import CONFIDENCE
from opbench.results.store import DEFAULT_STORAGE, ResultsError, resolve

USAGE_ERROR = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse's own convention)
        self.exit(USAGE_ERROR, f"opbench: error: {message}\n")


def _rules(args) -> tuple:
    from opbench.results.compare import parse_rule
    from opbench.results.stats import Rule

    default = Rule(margin=args.margin / 100, threshold=args.threshold / 100)
    return default, [parse_rule(r) for r in args.rule]


def cmd_report(args) -> int:
    from opbench.results import report

    if args.html:
        writable_file(Path(args.html), "--html")
    if args.plots:
        writable_folder(Path(args.plots), "--plots")
    runs = resolve(args.runs, args.storage)
    text = report.format_text(runs, markdown=args.markdown)
    print(text)
    if args.html or args.plots:
        from opbench.results import htmlpage, plots

        if args.html:
            images = htmlpage.write(runs, Path(args.html), Path(args.plots) if args.plots else None)
            print(f"\nwrote {args.html}" + (f" and {len(images)} plots in {args.plots}" if images else ""))
        else:
            images = plots.all_plots(runs, Path(args.plots))
            print(f"\nwrote {len(images)} plots in {args.plots}")
    return 0


def _compare_and_print(baseline, candidate, args) -> int:
    from opbench.results.compare import compare, format_text

    default, rules = _rules(args)
    single = getattr(args, "single_run_threshold", None)
    result = compare(baseline, candidate, default, rules, args.statistic, args.confidence / 100,
                     single_run=None if single is None else single / 100)
    result.fail_on_noisy = args.fail_on_noisy
    result.fail_on_busy = getattr(args, "fail_on_busy", False)
    print(format_text(result, markdown=getattr(args, "markdown", False)))
    return 1 if result.failed else 0


def cmd_compare(args) -> int:
    if not args.baseline or not args.candidate:
        raise ResultsError("compare needs baseline runs, then '--', then candidate runs")
    return _compare_and_print(resolve(args.baseline, args.storage), resolve(args.candidate, args.storage), args)


@contextlib.contextmanager
def _workdir(args):
    """The gate's working folder: --workdir, kept whole for reuse, or a new temporary one that
    keeps only the results once the command ends, however it ends."""
    from opbench.regression import envs

    if args.workdir:
        writable_folder(Path(args.workdir), "--workdir")
        yield Path(args.workdir)
        return
    workdir = Path(tempfile.mkdtemp(prefix="opbench-upgrade-"))
    try:
        yield workdir
    finally:
        kill_all()  # an interrupted gate's workers run from these environments
        envs.tidy(workdir)


def cmd_upgrade_check(args) -> int:
    from opbench.regression import envs, process
    from opbench.results.store import load_run

    if args.design == "paired" and args.runs is not None:
        raise ResultsError("--runs counts the process design's runs: add --design process, or leave it out")
    if args.design == "process" and args.shard != (1, 1):
        raise ResultsError("--shard splits the paired design's selection: leave out --design process")
    with _workdir(args) as workdir:
        if args.design == "paired":
            pythons = envs.make_envs(args.baseline, args.candidate, workdir, strict=args.strict_env)
            return _paired(pythons, ({}, {}), args, workdir)
        runs = args.runs or DEFAULT_RUNS
        base_files, cand_files = process.run_gate(args.baseline, args.candidate, args.pytest_args, runs, workdir,
                                                  strict_env=args.strict_env)
        print(f"results in {base_files[0].parent}")
        return _compare_and_print([load_run(p) for p in base_files], [load_run(p) for p in cand_files], args)


def cmd_ab(args) -> int:
    pythons = []
    for option, path in (("--baseline-python", args.baseline_python), ("--candidate-python", args.candidate_python)):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise ResultsError(f"{option} {path}: not an executable interpreter")
        pythons.append(path)
    with _workdir(args) as workdir:
        return _paired(pythons, (dict(args.baseline_env), dict(args.candidate_env)), args, workdir)


def _paired(pythons: list[str], envs: tuple[dict, dict], args, workdir: Path) -> int:
    """Run the paired gate between two interpreters and print the comparison (exit 0/1)."""
    from opbench.regression import paired
    from opbench.regression.coordinator import Plan
    from opbench.results.compare import format_text, rule_for

    default, rules = _rules(args)
    plan = Plan(trials=args.trials, min_pairs=args.pairs, max_pairs=max(args.pairs, args.max_pairs),
                budget_s=None if args.budget is None else 60 * args.budget, timeout_s=args.timeout,
                confidence=args.confidence / 100, family_alpha=args.false_alarm / 100, seed=args.seed,
                shard=args.shard)
    try:
        result, folder = paired.run(pythons, envs, args.pytest_args, plan,
                                    lambda name: rule_for(name, rules, default), workdir)
    except paired.Interrupted as stop:  # the table so far, marked incomplete; then exit 130 as any interrupt
        print(format_text(stop.result, markdown=args.markdown))
        print(f"INCOMPLETE: results so far in {stop.folder} (paired.json: \"complete\": false)")
        raise KeyboardInterrupt from None
    result.fail_on_noisy = args.fail_on_noisy
    print(format_text(result, markdown=args.markdown))
    print(f"results in {folder}")
    return 1 if result.failed else 0


def _paired_options(p: argparse.ArgumentParser) -> None:
    from opbench.regression.coordinator import Plan

    p.add_argument("--budget", type=_positive, metavar="MINUTES",
                   help="time for both stages: undecided benchmarks get more worker pairs while the rest "
                        "still pays for the confirmation's minimum, which gets what is left (default: "
                        f"{Plan.budget_per_benchmark_s / 60:.3g} per benchmark, at least {Plan.min_budget_s / 60:g})")
    p.add_argument("--trials", type=_at_least_one, default=Plan.trials,
                   help="paired trials per benchmark and worker pair (default %(default)s)")
    p.add_argument("--pairs", type=_at_least_one, default=Plan.min_pairs,
                   help="worker pairs every benchmark gets (default %(default)s)")
    p.add_argument("--max-pairs", type=_at_least_one, default=Plan.max_pairs,
                   help="worker pairs a benchmark may get in either stage (default %(default)s)")
    p.add_argument("--false-alarm", type=_percent, default=100 * Plan.family_alpha, metavar="PERCENT",
                   help="suite-wide false-alarm budget of the confirmation stage (default %(default)g)")
    p.add_argument("--timeout", type=_positive, default=Plan.timeout_s, metavar="SECONDS",
                   help="deadline for a worker to collect or prepare one benchmark (default %(default)g)")
    p.add_argument("--seed", type=int, default=Plan.seed, help="seed of the random orders (default %(default)s)")
    p.add_argument("--shard", type=_shard, default=(1, 1), metavar="K/N",
                   help="gate the K-th of N parts of the selection (every N-th of its sorted ids), at 1/N of the "
                        "false-alarm budget, so that N CI jobs, one per part, gate the whole selection together "
                        "(default 1/1: all of it)")


def _gate_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--margin", type=_non_negative, default=3.0,
                   help="percent the whole interval must clear (default 3)")
    p.add_argument("--threshold", type=_non_negative, default=5.0, help="percent the ratio must clear (default 5)")
    p.add_argument("--rule", action="append", default=[], metavar="GLOB=MARGIN:THRESHOLD",
                   help="per-benchmark override by test name, e.g. 'test_conv2d*=5:10' (repeatable)")
    p.add_argument("--statistic", choices=STATISTICS, default=STATISTICS[0],
                   help="each run's time per benchmark: its fastest or its median round (default %(default)s)")
    p.add_argument("--confidence", type=_percent, default=100 * CONFIDENCE,
                   help="confidence of the intervals in percent (default %(default)g)")
    p.add_argument("--markdown", action="store_true", help="Markdown output for CI summaries")
    p.add_argument("--fail-on-noisy", action="store_true",
                   help="a benchmark the data could not decide (noisy) fails the gate (exit 1) too")


def _checked(parse, **bounds):
    """An argparse `type` from one of config's validators: its one-line message, argparse's exit 2."""

    def convert(text: str):
        try:
            return parse(text, **bounds)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


_non_negative = _checked(parse_number, at_least=0)
_percent = _checked(parse_number, above=0, below=100)
_positive = _checked(parse_number, above=0)
_at_least_one = _checked(parse_count, at_least=1)


def _shard(text: str) -> tuple[int, int]:
    k, sep, n = text.partition("/")
    if not (sep and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise argparse.ArgumentTypeError(f"expected K/N with 1 <= K <= N (the K-th of N parts), got {text!r}")
    return int(k), int(n)


def _assignment(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


EXIT_CODES = """exit codes:
  0  {ok}{fail}
  2  usage or input error (one line on stderr)
  130  interrupted (Ctrl-C or SIGTERM){kept}"""


def _subcommand(sub, name: str, summary: str, description: str, examples: list[str], ok: str, fail: str = "",
                kept: str = "", **kw) -> argparse.ArgumentParser:
    """A subcommand whose --help gives a description, examples and its exit codes."""
    epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples) + "\n\n" + EXIT_CODES.format(
        ok=ok, fail=f"\n  1  {fail}" if fail else "", kept=kept)
    return sub.add_parser(name, help=summary, description=description, epilog=epilog,
                          formatter_class=argparse.RawDescriptionHelpFormatter, **kw)


def parser() -> argparse.ArgumentParser:
    from opbench import __version__

    top = _Parser(prog="opbench", description=__doc__.splitlines()[0],
                  epilog="'opbench COMMAND --help' describes each command, with examples and exit codes.")
    top.add_argument("--version", action="version", version=f"opbench {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--storage", default=DEFAULT_STORAGE, metavar="FOLDER",
                        help="pytest-benchmark storage: a folder or file://FOLDER, as --benchmark-storage "
                             "takes it (default %(default)s)")
    sub = top.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")

    rep = _subcommand(
        sub, "report", "side-by-side tables (and plots) of saved runs",
        "Tables of saved runs, frameworks and modes side by side, after the environment each run measured. "
        "Several runs are combined by one stated rule (the median over runs of each run's median).",
        ["opbench report                          # the latest run in .benchmarks",
         "opbench report 0003 0004 --html report.html --plots plots/",
         "opbench report --storage file:///data/opbench-runs latest --markdown"],
        "the report was written", parents=[common])
    rep.add_argument("runs", nargs="*", help="files or storage ids (default: the latest run)")
    rep.add_argument("--markdown", action="store_true", help="Markdown tables")
    rep.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page with plots")
    rep.add_argument("--plots", metavar="DIR", help="also save the plots as PNG files here")
    rep.set_defaults(func=cmd_report)

    cmp = _subcommand(
        sub, "compare", "noise-aware comparison: BASELINE... -- CANDIDATE...",
        "Compare saved runs: the ratio of medians candidate/baseline per benchmark, with a bootstrap "
        "interval over runs and a verdict. With one run per side there is no interval and no verdict "
        "(unless --single-run-threshold asks for one).",
        ["opbench compare 0001 0002 0003 -- 0004 0005 0006",
         "opbench compare base/*.json -- cand/*.json --rule 'test_conv2d*=5:10' --markdown",
         "opbench compare 0001 -- 0002 --single-run-threshold 10"],
        "no regression and nothing missing (noisy passes unless --fail-on-noisy)",
        "a regression, a benchmark missing or failed in the candidate", parents=[common],
        usage="opbench compare [options] BASELINE [BASELINE ...] -- CANDIDATE [CANDIDATE ...]")
    cmp.add_argument("baseline", nargs="*", metavar="BASELINE", help="baseline runs (files or storage ids)")
    cmp.add_argument("--candidate", nargs="*", default=[], help=argparse.SUPPRESS)
    _gate_options(cmp)
    cmp.add_argument("--single-run-threshold", type=_non_negative, metavar="PERCENT",
                     help="with one run per side, call a ratio beyond +-PERCENT a regression or improvement "
                          "(blind to run-to-run noise; default: no verdict)")
    cmp.add_argument("--fail-on-busy", action="store_true",
                     help="a benchmark timed on a busy machine on either side fails the gate (exit 1): CI refuses "
                          "to decide on busy data (default: its verdict is marked 'busy')")
    cmp.set_defaults(func=cmd_compare)

    up = _subcommand(
        sub, "upgrade-check", "run the benchmarks in two environments and compare",
        "Build a baseline and a candidate environment (pip requirements), run the selected benchmarks in "
        "both, interleaved, and judge every benchmark. The plan (environments, benchmarks, pairs per stage, "
        "estimated time) is printed first.",
        ["opbench upgrade-check --candidate jax==0.10.2 -- benchmarks/ops -m 'jax and gemm and forward'",
         "opbench upgrade-check --baseline 'numpy<2' --candidate 'numpy>=2' --budget 10 -- benchmarks/ops -m relu"],
        "no regression and nothing missing", "a regression, a benchmark missing or failed in the candidate",
        kept=": workers stopped; the table so far is printed and saved, marked incomplete", parents=[common],
        usage="opbench upgrade-check [options] --candidate REQ [REQ ...] -- PYTEST_ARGS")
    up.add_argument("--baseline", nargs="*", default=[], metavar="REQ", help="requirements of the baseline side")
    up.add_argument("--candidate", nargs="+", required=True, metavar="REQ", help="requirements of the candidate")
    up.add_argument("--runs", type=_at_least_one, metavar="K",
                    help=f"--design process: runs per side, alternating A B B A (default {DEFAULT_RUNS})")
    up.add_argument("--design", choices=("process", "paired"), default="paired",
                    help="paired: interleaved trials between two live workers; process: K whole runs per side, "
                         "ABBA (default %(default)s: docs/explanation/paired-gate.md has the measurements)")
    up.add_argument("--workdir", help="where environments, caches and results go, kept for the next run (default: a "
                                      "new temporary folder that keeps only the results)")
    up.add_argument("--strict-env", action="store_true",
                    help="stop when installing a side changes a package it did not name, or leaves one unsatisfied")
    up.add_argument("pytest_args", nargs="*", help="pytest arguments after '--' (e.g. benchmarks/ops -m gemm)")
    _gate_options(up)
    _paired_options(up)
    up.set_defaults(func=cmd_upgrade_check)

    ab = _subcommand(
        sub, "ab", "paired gate between two existing interpreters (e.g. two venvs)",
        "The paired gate of upgrade-check between two interpreters you already have: nothing is installed.",
        ["opbench ab --baseline-python .venv-numpy1/bin/python --candidate-python .venv/bin/python "
         "-- benchmarks/ops -m 'gemm and forward'",
         "opbench ab --baseline-python .venv/bin/python --candidate-python .venv/bin/python "
         "--candidate-env OMP_NUM_THREADS=1 -- benchmarks/ops -m relu"],
        "no regression and nothing missing", "a regression, a benchmark missing or failed in the candidate",
        kept=": workers stopped; the table so far is printed and saved, marked incomplete",
        usage="opbench ab [options] --baseline-python PYTHON --candidate-python PYTHON -- PYTEST_ARGS")
    ab.add_argument("--baseline-python", required=True, metavar="PYTHON", help="the baseline's interpreter")
    ab.add_argument("--candidate-python", required=True, metavar="PYTHON", help="the candidate's interpreter")
    for side in ("baseline", "candidate"):
        ab.add_argument(f"--{side}-env", type=_assignment, action="append", default=[], metavar="NAME=VALUE",
                        help=f"an environment variable for the {side}'s worker (repeatable)")
    ab.add_argument("--workdir", help="where caches, results and worker logs go, kept for the next run (default: a "
                                      "new temporary folder that keeps only the results and logs)")
    ab.add_argument("pytest_args", nargs="*", help="pytest arguments after '--' (e.g. benchmarks/ops -m gemm)")
    _gate_options(ab)
    _paired_options(ab)
    ab.set_defaults(func=cmd_ab)
    return top


PYTEST_AFTER_DASHES = ("upgrade-check", "ab")


def _command(argv: list[str]) -> str | None:
    """The subcommand: the first argument that is not an option."""
    return next((a for a in argv if not a.startswith("-")), None)


def _split_compare(argv: list[str]) -> list[str]:
    """`compare A B -- C D` -> `compare A B --candidate C D` (argparse cannot take two lists). Only
    for the compare command: elsewhere '--' starts pytest's arguments, which may say 'compare'."""
    if _command(argv) == "compare" and "--" in argv:
        i = argv.index("--")
        return [*argv[:i], "--candidate", *argv[i + 1 :]]
    return argv


def _missing_dashes(argv: list[str]) -> str | None:
    """The hint for pytest options given without the '--' that must come before them."""
    command = _command(argv)
    if command in PYTEST_AFTER_DASHES and "--" not in argv:
        return (f"pytest's arguments go after '--': opbench {command} [options] -- benchmarks/ops -m 'gemm and "
                "forward'")
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args, unknown = parser().parse_known_args(_split_compare(argv))
    if unknown:
        hint = _missing_dashes(argv)
        print(f"opbench: error: unrecognized arguments: {' '.join(unknown)}" + (f" ({hint})" if hint else ""),
              file=sys.stderr)
        return USAGE_ERROR
    with terminate_as_interrupt():  # SIGTERM as Ctrl-C: workers stopped, what finished kept, one line, exit 130
        try:
            return args.func(args)
        except (ResultsError, WorkerFailure, NotWritable) as exc:
            print(f"opbench: error: {exc}", file=sys.stderr)
            return USAGE_ERROR
        except KeyboardInterrupt:
            kill_all()
            print("opbench: interrupted", file=sys.stderr)
            return 130


if __name__ == "__main__":
    sys.exit(main())
