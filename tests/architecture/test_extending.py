"""The steps docs/contributing/extending.md gives, each taken for real on a toy: a framework kept in
a folder of its own, a forward-only inference engine, an operator added to an existing family, and
a suite. Each is collected and run by pytest through the suite's own preparation and check."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from opbench.frameworks import EXTRA_PATH
from opbench.workloads import ops
from tests.helpers import load_or_skip

ROOT = Path(__file__).resolve().parents[2]

TOY = '''"""A toy framework: NumPy under another name (docs/contributing/extending.md, "A framework")."""

from opbench.frameworks.base import Framework
from opbench.frameworks.numpy.backend import NumpyBackend

FRAMEWORK = Framework(name="toy", title="Toy", package="numpy", modes=("eager",), order=90, suites=("ops",))


class ToyBackend(NumpyBackend):
    framework = FRAMEWORK


BACKEND = ToyBackend
'''

ENGINE = '''"""A forward-only inference engine with two operators (extending.md, "A forward-only engine")."""

import numpy as np

from opbench.frameworks.base import Backend, Framework
from opbench.frameworks.numpy.backend import NumpyBackend

FRAMEWORK = Framework(name="fwdonly", title="Forward-only", package="numpy", modes=("eager",), order=91,
                      suites=("ops",), directions=("forward",), lacks={lacks!r})


class _Ops:
    relu = staticmethod(lambda p, x: np.maximum(x, 0))
    gemm = staticmethod(lambda p, a, b: a @ b)


class EngineBackend(Backend):
    framework = FRAMEWORK

    def version(self):
        return "0.1"

    def gpu_unavailable(self):
        return "a CPU engine"

    def dtypes(self, device):
        return ("float32",)

    def from_numpy(self, array, device, dtype):
        return np.array(array, dtype=np.float32)

    def to_numpy(self, tensor):
        return np.asarray(tensor)

    def sync(self, device):
        pass

    # its GEMM is NumPy's, so its threads are NumPy's BLAS threads (opbench observes them: a
    # threads() that said 1 while the BLAS ran 2 failed with ThreadMismatch)
    def set_threads(self, n):
        NumpyBackend().set_threads(n)

    def threads(self):
        return NumpyBackend().threads()

    def _ops_module(self):
        return _Ops

    def forward(self, impl, p, args, mode, device):
        if mode != "eager":
            raise self.no_mode(mode)
        return lambda: impl(p, *args)


BACKEND = EngineBackend
'''


def pytest_run(cwd: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", *args, "--benchmark-disable", "-p", "no:cacheprovider",
                           "-q", "-rs", "--threads", "1"], cwd=cwd, env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=900, check=False)


def tree_copy(tmp_path: Path) -> Path:
    """A copy of the project's sources, benchmarks and pytest configuration to change a step in."""
    tree = tmp_path / "opbench"
    for part in ("src", "benchmarks"):
        shutil.copytree(ROOT / part, tree / part, ignore=shutil.ignore_patterns("__pycache__"))
    for part in ("conftest.py", "pyproject.toml"):
        shutil.copy(ROOT / part, tree / part)
    return tree


def framework_folder(root: Path, name: str, source: str) -> Path:
    """Step 1 of a framework: its folder, with backend.py declaring it (and an empty __init__.py)."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "backend.py").write_text(source)
    return root


def test_a_framework_is_one_folder_kept_anywhere(tmp_path):
    path = framework_folder(tmp_path, "toy", TOY)
    out = pytest_run(ROOT, "benchmarks/ops/test_activations.py", "--framework", "toy", "-m", "relu or tanh",
                     env={EXTRA_PATH: str(path)})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert re.search(r"\b4 passed\b", out.stdout), out.stdout[-2000:]  # relu and tanh, forward and backward


def test_a_forward_only_engine_runs_forward_and_says_why_not_backward(tmp_path):
    lacks = tuple(sorted(set(ops.REGISTRY) - {"relu", "gemm"}))
    path = framework_folder(tmp_path, "fwdonly", ENGINE.replace("{lacks!r}", repr(lacks)))
    out = pytest_run(ROOT, "benchmarks/ops/test_activations.py", "benchmarks/ops/test_linalg.py", "--framework",
                     "fwdonly", "-m", "relu or gemm or tanh", env={EXTRA_PATH: str(path)})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert re.search(r"\b3 passed\b", out.stdout), out.stdout[-2000:]  # relu and the quick GEMMs, forward
    assert "fwdonly computes forward passes only" in out.stdout  # their backward cases
    assert "fwdonly has no implementation of tanh" in out.stdout


def test_the_registry_test_holds_a_new_framework_to_its_declaration(tmp_path):
    """A framework that implements an operator under a misspelt name fails the registry's
    coverage test (it would otherwise be a silent skip)."""
    lacks = tuple(sorted(set(ops.REGISTRY) - {"relu", "gemm"}))
    source = ENGINE.replace("{lacks!r}", repr(lacks)).replace("    relu = staticmethod", "    rleu = staticmethod")
    path = framework_folder(tmp_path, "fwdonly", source)
    out = pytest_run(ROOT, "tests/frameworks/test_registry.py", "-k", "implements_exactly and fwdonly",
                     env={EXTRA_PATH: str(path)})
    assert out.returncode == 1 and "implements unregistered operators ['rleu']" in out.stdout, out.stdout[-3000:]


# The torch, TensorFlow, MXNet and JAX implementations of the new operator: one line each, beside relu's.
SQUARE = {
    "torch": "    square = staticmethod(lambda p, x: x * x)\n",
    "tensorflow": "    square = staticmethod(lambda p, x: x * x)\n",
    "mxnet": "    square = staticmethod(lambda F, p, x: x * x)\n",
    "jax": "    square = staticmethod(lambda p, x: x * x)\n",
}


@pytest.mark.full  # a copy of the tree run in all four frameworks (half a minute); make test-rest runs it
def test_an_operator_is_its_spec_and_one_line_per_framework(tmp_path):
    """An operator in an existing family: its spec in workloads/ops/<family>.py (here one entry of
    the element-wise table), then one line in each framework's operators. Nothing else: the
    benchmark, its markers and its check come from the registry."""
    for name in SQUARE:
        load_or_skip(name)
    tree = tree_copy(tmp_path)
    spec = tree / "src/opbench/workloads/ops/activations.py"
    text = spec.read_text()
    entry = '    "relu": (lambda x: np.maximum(x, 0), lambda x, y: (x > 0).astype(x.dtype), 1),\n'
    spec.write_text(text.replace(entry, entry + '    "square": (lambda x: x * x, lambda x, y: 2 * x, 1),\n'))
    touched = [spec]
    for framework, line in SQUARE.items():
        backend = tree / f"src/opbench/frameworks/{framework}/backend.py"
        lines = backend.read_text().splitlines(keepends=True)
        at = next(i for i, s in enumerate(lines) if re.match(r"\s+relu = staticmethod", s))
        backend.write_text("".join([*lines[:at + 1], line, *lines[at + 1:]]))
        touched.append(backend)
    out = pytest_run(tree, "benchmarks/ops/test_activations.py", "-m", "square", "--mode", "eager",
                     env={"PYTHONPATH": str(tree / "src")})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    passed = int(re.search(r"\b(\d+) passed\b", out.stdout).group(1))
    assert passed == 2 * 5, out.stdout[-2000:]  # forward and backward on NumPy and the four frameworks
    assert len(touched) == 5


TOY_SUITE = '''"""A toy suite: each selected framework's relu forward at the profile's first size, eager, on the
CPU (docs/contributing/extending.md, "A suite")."""

from opbench.core.case import Case
from opbench.suites.registry import Listing
from opbench.workloads import ops


def listing(request):
    spec = ops.get("relu")
    size = spec.shapes[request.settings.profile][0]
    return Listing([Case.operator(spec, "forward", framework, "cpu", "eager", "float32", size)
                    for framework in request.settings.frameworks])
'''

TOY_BENCHMARK = '''from opbench.suites.measure import measure


def test_toy(toy_case, benchmark):
    measure(benchmark, toy_case)
'''


def test_a_suite_is_its_package_one_row_and_its_benchmarks(tmp_path):
    """A suite: its package under suites/ with the listing of its cases, one row in
    suites/registry.py naming its fixture and listing, and its benchmark file. The plugin makes the
    fixture, parametrises the benchmark and runs the cases through the check and the timing."""
    tree = tree_copy(tmp_path)
    package = tree / "src/opbench/suites/toy"
    package.mkdir()
    (package / "__init__.py").write_text('"""A toy suite."""\n')
    (package / "cases.py").write_text(TOY_SUITE)
    registry = tree / "src/opbench/suites/registry.py"
    text = registry.read_text()
    assert text.count("\n)\nFIXTURES = ") == 1
    row = '    Suite("toy_case", "A toy case.", "opbench.suites.toy.cases:listing"),\n'
    registry.write_text(text.replace("\n)\nFIXTURES = ", f"\n{row})\nFIXTURES = "))
    (tree / "benchmarks/toy").mkdir()
    (tree / "benchmarks/toy/test_toy.py").write_text(TOY_BENCHMARK)
    out = pytest_run(tree, "benchmarks/toy", "--framework", "numpy", "-vv", env={"PYTHONPATH": str(tree / "src")})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert re.search(r"\b1 passed\b", out.stdout), out.stdout[-2000:]
    assert "test_toy[numpy-cpu-eager-float32-" in out.stdout, out.stdout[-2000:]


# A layer kind (extending.md, "A layer kind"): tanh as a layer of its own, with no parameters.
TANH_KIND = '''

@dataclass(frozen=True)
class Tanh:
    """A toy layer kind: tanh, element by element (tests/architecture/test_extending.py)."""

    def output(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return shape

    def parameters(self, shape: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
        return {}

'''

# The one entry each table takes, by file and table: the reference's forward and vjp, the least
# multiply-adds, the breakdown's operators, and one builder per framework.
TANH_ENTRIES = {
    "workloads/models/reference.py": {
        "FORWARD": "Tanh: lambda layer, path, params, x, run, tape: (np.tanh(x), None)",
        "BACKWARD": "Tanh: lambda layer, path, params, inp, aux, dx, run, grads: dx * (1 - np.tanh(inp) ** 2)"},
    "workloads/models/cost.py": {"LEAST_MACS": "Tanh: lambda layer, shape: 0"},
    "suites/breakdown/prediction.py": {
        "LAYERS": 'Tanh: lambda path, layer, shape, n: _act(path, "tanh", n, math.prod(shape))'},
    "frameworks/torch/models.py": {"LAYERS": "Tanh: _alone(lambda layer, shape: nn.Tanh())"},
    "frameworks/tensorflow/models.py": {
        "LAYERS": 'Tanh: held(lambda layer, fmt, kw: [keras.layers.Activation("tanh", **kw)])'},
    "frameworks/mxnet/models.py": {"LAYERS": 'Tanh: held(lambda layer, shape: [nn.Activation("tanh")])'},
    "frameworks/jax/models.py": {"LAYERS": "Tanh: lambda layer, params, path, x, training, state: jnp.tanh(x)"},
}

TANH_MODEL = '''

register(ModelSpec(
    name="toytanh",
    input_shape=(32,),
    layers=(Dense(64), Tanh(), Dense(10)),
    optimizer=Optimizer("sgd", 0.01),
    batch={"quick": 16, "full": 16},
    dataset="",
    notes="a toy model of the toy layer kind (tests/architecture/test_extending.py)",
))
'''


def _imports_tanh(text: str) -> str:
    return text.replace("from __future__ import annotations\n",
                        "from __future__ import annotations\n\nfrom opbench.workloads.models.spec import Tanh\n", 1)


@pytest.mark.full  # a copy of the tree and a model in all four frameworks; make test-rest runs it
def test_a_layer_kind_is_its_spec_and_one_entry_per_table(tmp_path):
    """A layer kind: its dataclass in spec.py with its shape rules, named in the Layer union, then
    one entry in each table extending.md lists. The tables' own tests accept it, and a model with it
    passes the equivalence check (training and inference) in every framework."""
    for name in ("torch", "tensorflow", "mxnet", "jax"):
        load_or_skip(name)
    tree = tree_copy(tmp_path)
    shutil.copytree(ROOT / "tests", tree / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    package = tree / "src/opbench"
    spec = package / "workloads/models/spec.py"
    text = spec.read_text()
    union = re.search(r"\nLayer = [^\n]+", text).group(0)
    spec.write_text(text.replace(union, f"\n{TANH_KIND}{union} | Tanh"))
    for where, entries in TANH_ENTRIES.items():
        path = package / where
        text = _imports_tanh(path.read_text())
        for table, entry in entries.items():
            assert text.count(f"\n{table} = {{\n") == 1, (where, table)
            text = text.replace(f"\n{table} = {{\n", f"\n{table} = {{\n    {entry},\n")
        path.write_text(text)
    catalogue = package / "workloads/models/catalogue.py"
    catalogue.write_text(_imports_tanh(catalogue.read_text()) + TANH_MODEL)
    env = {"PYTHONPATH": str(tree / "src")}
    tables = pytest_run(tree, "tests/frameworks/test_layer_tables.py", "tests/workloads/test_references.py", "-k",
                        "every_layer_kind", env=env)
    assert tables.returncode == 0, tables.stdout[-3000:] + tables.stderr[-3000:]
    assert re.search(r"\b6 passed\b", tables.stdout), tables.stdout[-2000:]  # reference, cost, breakdown, builders
    out = pytest_run(tree, "benchmarks/e2e/test_models.py", "-k", "toytanh", "--mode", "eager", "--precision",
                     "float32", "--framework", "torch,tensorflow,mxnet,jax", env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    # in each of the four frameworks: training, and inference at batch 1 and at its own batch
    assert re.search(r"\b12 passed\b", out.stdout), out.stdout[-2000:]


@pytest.mark.parametrize("step", ["A framework", "A forward-only engine", "An operator", "A suite", "A layer kind"])
def test_extending_md_gives_each_step_this_file_takes(step):
    page = (ROOT / "docs/contributing/extending.md").read_text()
    assert f"## {step}" in page and "tests/architecture/test_extending.py" in page
