"""The package's floor plan is its folder tree: every top-level folder (or module) of
src/opbench is one layer, and every import of an opbench module, at the top of a file or inside a
function, goes to the same layer or one below. The core types know nothing of what is measured;
the workloads (operators and models, framework-neutral, with their NumPy references) nothing of
frameworks; the frameworks nothing of how one measures; the suites nothing of display; the
results layer only reads saved runs; the pytest face, the upgrade gate and the command line sit
on top."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "opbench"

# The first part of a module's dotted name below `opbench` decides its layer.
LAYERS = {
    0: {"__init__", "core"},
    1: {"workloads"},
    2: {"frameworks"},
    3: {"harness"},
    4: {"suites"},
    5: {"results"},
    6: {"pytest_plugin", "testing", "api"},
    7: {"regression", "cli", "__main__"},
}
LAYER = {part: level for level, parts in LAYERS.items() for part in parts}


def _top(dotted: str) -> str:
    return dotted.split(".")[1] if dotted.startswith("opbench.") else "__init__"


def _is_module(name: str) -> bool:
    return (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file()


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, opbench module) for every import of an opbench module in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "opbench":
            if node.module == "opbench":  # from opbench import frameworks (a module), __version__ (a name)
                found += [(node.lineno, f"opbench.{a.name}" if _is_module(a.name) else "opbench")
                          for a in node.names]
            else:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "opbench"]
    return found


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer():
    parts = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in MODULES}
    assert parts <= set(LAYER), f"modules with no layer: {sorted(parts - set(LAYER))}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_import_runs_back_up(path):
    own = LAYER[path.relative_to(PACKAGE).parts[0].removesuffix(".py")]
    upward = [f"line {line}: {module} (layer {LAYER[_top(module)]})" for line, module in _imports(path)
              if LAYER[_top(module)] > own]
    assert not upward, f"{path.name} (layer {own}) imports from above: {upward}"


def test_the_results_layer_never_imports_the_harness_or_a_framework():
    for path in (PACKAGE / "results").glob("*.py"):
        modules = {_top(m) for _, m in _imports(path)} - {"results", "core"}
        assert not modules, f"{path.name} imports {sorted(modules)}"


def test_each_framework_is_imported_in_its_own_folder_only():
    imports = {"torch": "torch", "tensorflow": "tensorflow", "mxnet": "mxnet", "jax": "jax"}
    for path in MODULES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            for name in names:
                framework = imports.get(name.split(".")[0])
                if framework:
                    assert path.parent == PACKAGE / "frameworks" / framework, (
                        f"{path.relative_to(PACKAGE)} imports {name}: only frameworks/{framework}/ may")


# No suite imports another (#58): what every suite shares lives beside them (suites/prepared.py,
# measure.py, target.py, the model check's model_reference.py and model_check.py), and a case is
# prepared by the suite its kind belongs to through suites/registry.py (the breakdown's prediction
# times operator cases through registry.verified).
def test_no_suite_imports_another():
    suites = PACKAGE / "suites"
    checked = 0
    for path in suites.rglob("*.py"):
        own = path.relative_to(suites).parts
        if len(own) < 2:  # suites/measure.py, prepared.py, ...: what every suite shares
            continue
        checked += 1
        for line, module in _imports(path):
            parts = module.split(".")
            if parts[:2] == ["opbench", "suites"] and len(parts) > 2 and (suites / parts[2]).is_dir() \
                    and parts[2] != own[0]:
                raise AssertionError(
                    f"suites/{'/'.join(own)} line {line} imports {module}: a suite imports what all share from "
                    "suites/prepared.py, measure.py or target.py, never another suite")
    assert checked > 10, "no suite's modules were found under suites/"
