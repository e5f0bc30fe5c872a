"""Thread sweeps: one child process per count, merged into one pytest-benchmark document."""

from __future__ import annotations

import json
import os

import pytest

from opbench.core.files import write_json_atomic
from opbench.harness import children, sweep


def test_child_args_replace_saving_and_threads():
    args = ["benchmarks/ops", "--threads", "1,2", "--benchmark-json", "out.json", "--benchmark-autosave", "-k", "gemm",
            "--benchmark-save=base"]
    assert sweep.child_args(args, 2, "/tmp/t2.json") == [
        "benchmarks/ops", "-k", "gemm", "--threads=2", "--benchmark-json=/tmp/t2.json",
    ]


def test_merge_suffixes_names_and_records_counts():
    run = lambda n: {"machine_info": {"opbench": {}}, "benchmarks": [{"name": "test_x[a]", "fullname": "f::test_x[a]",
                                                                       "extra_info": {"threads": n}}]}
    merged = sweep.merge({2: run(2), 1: run(1)})
    assert [b["name"] for b in merged["benchmarks"]] == ["test_x[a]@t1", "test_x[a]@t2"]
    assert merged["machine_info"]["opbench"]["thread_sweep"] == [1, 2]


def test_write_atomic_leaves_no_partial_file(tmp_path):
    target = tmp_path / "run.json"
    target.write_text('{"old": true}')
    with pytest.raises(TypeError):
        write_json_atomic(target, {"bad": object()})
    assert json.loads(target.read_text()) == {"old": True}
    assert os.listdir(tmp_path) == ["run.json"]
    write_json_atomic(target, {"new": 1})
    assert json.loads(target.read_text()) == {"new": 1}


def test_next_number(tmp_path):
    assert children.next_number(tmp_path / "none") == "0001"
    (tmp_path / "0007_x.json").write_text("{}")
    assert children.next_number(tmp_path) == "0008"


def test_sweep_end_to_end(pytester: pytest.Pytester):
    pytester.makepyfile(test_b="""
import pytest
from opbench.suites.measure import measure

@pytest.mark.opbench(op="relu")
def test_relu(op_case, benchmark):
    measure(benchmark, op_case)
""")
    out = pytester.path / "sweep.json"
    result = pytester.runpytest_subprocess("--framework", "numpy", "--threads", "1,2", "--benchmark-max-time=0.01",
                                           f"--benchmark-json={out}", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    names = {b["name"]: b["extra_info"]["threads"] for b in json.loads(out.read_text())["benchmarks"]}
    assert names == {"test_relu[numpy-cpu-eager-float32-256x1024]@t1": 1,
                     "test_relu[numpy-cpu-eager-float32-256x1024]@t2": 2}
