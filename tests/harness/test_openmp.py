"""Frameworks on one OpenMP runtime (opbench.harness.openmp): which ones share it, as the process maps it;
when a case says it was timed beside another framework's team; and the order that keeps them
apart in a session."""

from __future__ import annotations

import subprocess
import sys

import pytest

from opbench import frameworks
from opbench.harness import openmp

MAPS = """\
7f0000000000-7f0000001000 r-xp 00000000 fd:01 42 /venv/site-packages/torch/lib/libgomp.so.1
7f0000002000-7f0000003000 r--p 00000000 fd:01 43 /usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0
7f0000004000-7f0000005000 rw-p 00000000 00:00 0
7f0000006000-7f0000007000 r-xp 00000000 fd:01 44 /opt/lib/my libgomp-free dir/libc.so.6
7f0000008000-7f0000009000 r-xp 00000000 fd:01 45 [vdso]
"""


def test_loaded_reads_runtime_files_from_the_maps(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(MAPS)
    assert openmp.loaded("libgomp", maps) == ["/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0",
                                              "/venv/site-packages/torch/lib/libgomp.so.1"]
    assert openmp.loaded("libiomp5", maps) == []
    assert openmp.loaded("libgomp", tmp_path / "absent") == []


def test_a_team_on_the_same_runtime_is_named_once_threads_exceed_the_cores():
    teams: dict[str, int] = {}
    assert openmp.shared_with(teams, "torch", "cpu", 2, cores=2) is None  # alone
    said = openmp.shared_with(teams, "mxnet", "cpu", 2, cores=2)
    assert said is not None and said.startswith("libgomp shared with torch (torch 2 + mxnet 2 threads on 2 cores")
    assert "mxnet" in openmp.shared_with(teams, "torch", "cpu", 2, cores=2)  # and back: both are throttled
    assert teams == {"torch": 2, "mxnet": 2}


@pytest.mark.parametrize(("framework", "device", "threads", "cores"), [
    ("mxnet", "cpu", 1, 2),   # one thread starts no team
    ("mxnet", "gpu", 2, 2),   # the work runs on the device
    ("mxnet", "cpu", 2, 4),   # 2 + 2 threads fit 4 cores: no throttle
    ("jax", "cpu", 2, 2),     # its own thread pool
    ("tensorflow", "cpu", 2, 2),
])
def test_no_shared_team_is_said_where_there_is_no_throttle(framework, device, threads, cores):
    teams = {"torch": 2}
    assert openmp.shared_with(teams, framework, device, threads, cores=cores) is None


def test_run_order_keeps_others_first_and_mxnet_last():
    names = ["mxnet", "numpy", "torch", "jax", None, "tensorflow"]
    assert sorted(names, key=openmp.run_order) == ["numpy", "jax", None, "tensorflow", "torch", "mxnet"]


@pytest.mark.parametrize("framework", sorted(openmp.RUNTIMES))
def test_each_declared_runtime_is_what_the_framework_maps(framework):
    """The declaration checked against the process: importing the framework alone maps its runtime."""
    try:
        frameworks.load(framework)
    except frameworks.Unavailable as exc:
        pytest.skip(str(exc))
    code = (f"from opbench import frameworks; from opbench.harness import openmp; "
            f"frameworks.load({framework!r}); "
            f"print(openmp.loaded(openmp.RUNTIMES[{framework!r}]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert "libgomp" in out.stdout.strip().splitlines()[-1], out.stdout + out.stderr


def test_wait_settings_are_the_set_wait_variables_only():
    env = {"GOMP_SPINCOUNT": "10000", "KMP_BLOCKTIME": "0", "OMP_NUM_THREADS": "2", "PATH": "/bin"}
    assert openmp.wait_settings(env) == {"GOMP_SPINCOUNT": "10000", "KMP_BLOCKTIME": "0"}
    assert openmp.wait_settings({}) == {}
