"""The registries are the one source of truth: frameworks come from the backend modules'
declarations, operator benchmarks from the operator registry, and the README agrees with both."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import numpy as np
import pytest

from opbench import frameworks
from opbench.core.case import Case
from opbench.frameworks import Unavailable
from opbench.harness import config
from opbench.suites.ops import generate, prepare
from opbench.workloads import ops
from opbench.workloads.models import catalogue
from tests.helpers import load_or_skip

ROOT = Path(__file__).resolve().parents[2]
DECLARED = frameworks.declared()


def test_every_backend_module_is_a_declared_framework():
    modules = {p.parent.name for p in (ROOT / "src/opbench/frameworks").glob("*/backend.py")}
    assert set(DECLARED) == modules
    assert config.FRAMEWORKS == tuple(DECLARED) and config.FRAMEWORKS[0] == "numpy"
    assert set(config.MODES) == {m for f in DECLARED.values() for m in f.modes}
    assert all(set(f.compiled) <= set(f.modes) and f.modes[0] == "eager" for f in DECLARED.values())


@pytest.mark.parametrize("name", list(DECLARED))
def test_the_declaration_read_from_source_is_the_one_the_module_runs_with(name):
    backend = load_or_skip(name)
    module = importlib.import_module(f"opbench.frameworks.{name}.backend")
    assert module.FRAMEWORK == DECLARED[name]
    assert backend.name == name and backend.modes == DECLARED[name].modes


def _case(op: str, direction: str, framework: str, mode: str) -> Case:
    spec = ops.get(op)
    return Case.operator(spec, direction, framework, mode=mode, params=spec.fixed, label="fixed")


# make test's quick checks run every operator in every declared mode through the same preparation and check,
# so there the compiled modes' variants here are second variants (torch.compile's: 17 s of the unit lane, its
# first compile in that process); make test-rest runs them, and the eager ones stay.
@pytest.mark.parametrize("name, mode", [pytest.param(n, m, marks=pytest.mark.full if m != "eager" else ())
                                        for n, f in DECLARED.items() for m in f.modes])
def test_every_declared_mode_is_implemented(name, mode):
    """A declared mode computes the right forward and backward results through the suite's own
    preparation and check; its models build (for frameworks in the model suite)."""
    backend = load_or_skip(name)
    for op, direction in (("relu", "forward"), ("gemm", "backward")):
        if direction in DECLARED[name].directions:
            prepared = prepare.prepare(_case(op, direction, name, mode), backend)
            assert prepared.verify(prepared.call()) >= 0


@pytest.mark.parametrize("name", list(DECLARED))
def test_a_backend_implements_exactly_the_operators_it_does_not_declare_lacking(name):
    """An operator function whose name is not a registered operator (a misspelling, a leftover) is
    an error here, not a benchmark silently skipped; so is a registered operator a framework
    neither implements nor declares in `lacks`."""
    backend = load_or_skip(name)
    registered, lacks, implemented = set(ops.REGISTRY), set(DECLARED[name].lacks), backend.implemented()
    assert lacks <= registered, f"{name} declares it lacks unregistered operators {sorted(lacks - registered)}"
    assert implemented <= registered, f"{name} implements unregistered operators {sorted(implemented - registered)}"
    unaccounted = registered - lacks - implemented
    assert not unaccounted, f"{name} neither implements nor declares it lacks {sorted(unaccounted)}"


@pytest.mark.parametrize("name", list(DECLARED))
def test_an_undeclared_mode_is_an_error_not_an_eager_run(name):
    backend = load_or_skip(name)
    with pytest.raises(Unavailable, match=f"{name} has no mode 'lazy'"):
        prepare.prepare(_case("relu", "forward", name, "lazy"), backend)


@pytest.mark.parametrize(
    "source, message",
    [
        ("import os\n", "declares FRAMEWORK = Framework"),
        ("FRAMEWORK = Framework(name=NAME, title='x', package='x', modes=('eager',), order=9)\n", "literal"),
        ("FRAMEWORK = Framework(name='x', modes=('eager',))\n", "literal"),
    ],
)
def test_a_broken_declaration_is_one_clear_error(source, message):
    with pytest.raises(ValueError, match=message):
        frameworks._declaration(ast.parse(source), Path("fake.py"))


def _benchmark_functions() -> dict[tuple[str, str], str]:
    """(operator, direction) -> the benchmark test bound to it, over benchmarks/ops."""
    bound = {}
    for path in sorted((ROOT / "benchmarks/ops").glob("test_*.py")):
        namespace: dict = {}
        exec(compile(path.read_text(), str(path), "exec"), namespace)
        for name, fn in namespace.items():
            if name.startswith("test_"):
                marks = [m for m in getattr(fn, "pytestmark", []) if m.name == generate.MARKER]
                op, direction = generate.binding(marks[0] if marks else None)
                assert (op, direction) not in bound, f"{op} {direction} has two benchmarks"
                bound[op, direction] = f"{path.name}::{name}"
    return bound


def test_every_registered_operator_has_its_benchmarks():
    bound = _benchmark_functions()
    wanted = {(name, d) for name, spec in ops.REGISTRY.items() for d in generate.directions(spec)}
    assert set(bound) == wanted, f"missing: {sorted(wanted - set(bound))}"
    assert bound["gemm", "backward"] == "test_linalg.py::test_gemm_backward"  # ids as they always were


def test_an_unbound_or_misbound_benchmark_is_a_usage_error(pytester):
    pytester.makepyfile(test_b="""
from opbench.suites.measure import measure

def test_gemm(op_case, benchmark):
    measure(benchmark, op_case)
""", test_c="""
import numpy as np
import pytest
from opbench.suites.measure import measure

@pytest.mark.opbench(op="zeros", direction="backward")
def test_zeros_grad(op_case, benchmark):
    measure(benchmark, op_case)
""")
    result = pytester.runpytest_inprocess("--framework", "numpy", "--benchmark-disable", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED  # a collection error: nothing runs
    result.stdout.fnmatch_lines(["*test_gemm: bind it to an operator with @pytest.mark.opbench(op=..., direction=...)",
                                 "*test_zeros_grad: operator 'zeros' has no 'backward' benchmark*"])


def test_a_hand_written_benchmark_binds_under_any_name(pytester):
    pytester.makepyfile(test_b="""
import numpy as np
import pytest
from opbench.suites.measure import measure

@pytest.mark.opbench(op="gemm", direction="backward")
def test_gemm_nt(op_case, benchmark):
    measure(benchmark, op_case)
""")
    result = pytester.runpytest_inprocess("--framework", "numpy", "--benchmark-disable", "-p", "no:cacheprovider",
                                          "-k", "256")
    result.assert_outcomes(passed=1)


# --- the documentation's reference pages agree with the registries ---------------------------

DOCS = ROOT / "docs"


def _page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def _backticked(text: str) -> set[str]:
    return set(re.findall(r"`([a-z0-9_]+)`", text))


def test_the_options_table_lists_every_option_framework_and_mode():
    rows = [line for line in _page("usage/running.md").splitlines() if line.startswith("| `--")]
    flags = [re.match(r"\| `(--[a-z-]+)`", line).group(1) for line in rows]
    assert flags == [opt.flag for opt in config.OPTIONS]
    assert all(f"`{opt.env}`" in row for opt, row in zip(config.OPTIONS, rows, strict=True))
    framework_row = next(line for line in rows if line.startswith("| `--framework`"))
    mode_row = next(line for line in rows if line.startswith("| `--mode`"))
    assert f"`{','.join(config.FRAMEWORKS)}`" in framework_row
    assert f"`{','.join(config.MODES)}`" in mode_row


def test_the_markers_page_lists_every_framework_mode_family_operator_and_model():
    listed = _backticked(_page("usage/ids-markers.md").split("## Markers")[1])
    assert set(config.FRAMEWORKS) <= listed and set(config.MODES) <= listed
    assert set(ops.FAMILIES) <= listed and set(ops.REGISTRY) <= listed
    assert set(catalogue.MODELS) <= listed


def test_the_execution_modes_table_has_one_row_per_declared_mode():
    section = _page("usage/modes.md").split("\n\n")[1:]
    table = next(block for block in section if block.startswith("| framework"))
    rows = {tuple(cell.strip(" `") for cell in line.strip("|").split("|")[:2]) for line in table.splitlines()[2:]}
    assert rows == {(f.title, m) for f in DECLARED.values() for m in f.modes}


def test_the_layout_page_names_every_module_and_only_existing_ones():
    block = _page("contributing/layout.md").split("```")[1]
    named = set(re.findall(r"([a-z0-9_]+\.py)\b", block))
    package = ROOT / "src/opbench"
    modules = {p.name for p in package.rglob("*.py") if p.name != "__init__.py"}
    assert modules <= named, f"not in the layout page: {sorted(modules - named)}"
    scripts = {p.name for p in (ROOT / "studies").glob("*.py")}
    scripts |= {"mutants.py", "test_mutants.py", "test_layering.py", "record_profiles.py", "__init__.py", "helpers.py",
                "dist_fakes.py"}
    assert named <= modules | scripts, f"in the layout page but not in the tree: {sorted(named - modules - scripts)}"


def test_every_input_is_float32_on_this_numpy():
    """NumPy 2's promotion rules (NEP 50) make float32 / np.float64 scalar a float64 array, where
    NumPy 1 kept float32: every operator's inputs, benchmark and edge, stay float32 on both lines."""
    for spec in ops.REGISTRY.values():
        problems = [*spec.shapes["quick"][:1], *([{**spec.edge_problem, "inputs": "edge"}] if spec.edge else [])]
        for p in problems:
            make = spec.edge if p.get("inputs") == "edge" else spec.make
            for i, x in enumerate(make(np.random.default_rng(0), p)):
                dtype = np.asarray(x).dtype
                assert dtype == np.float32 or dtype.kind in "iub", (spec.name, p, i, dtype)


def test_a_framework_loads_another_first_only_where_the_process_uses_both(monkeypatch):
    """TensorFlow is imported after torch where both run in one process (the other order can crash
    it); a worker of TensorFlow alone imports no torch, whose memory would be in every figure."""
    from opbench.frameworks.base import Framework

    declared = {"first": Framework(name="first", title="First", package="first", modes=("eager",), order=1),
                "second": Framework(name="second", title="Second", package="second", modes=("eager",), order=2,
                                    load_before=("first",))}
    imported: list[str] = []
    monkeypatch.setattr(frameworks, "declared", lambda: declared)
    monkeypatch.setattr(frameworks, "installed", lambda name: True)
    monkeypatch.setattr(frameworks, "_import", lambda name: imported.append(name) or object())
    for expected, loads in ((("second",), ["second"]), (("first", "second"), ["first", "second"])):
        monkeypatch.setattr(frameworks, "_loaded", {})
        monkeypatch.setattr(frameworks, "_start", {})
        frameworks.expect(expected)
        frameworks.load("second")
        assert imported == loads, (expected, imported)
        imported.clear()
    monkeypatch.setattr(frameworks, "_loaded", {})
    monkeypatch.setattr(frameworks, "_start", {})  # a process that said nothing keeps the safe order
    frameworks.load("second")
    assert imported == ["first", "second"]
