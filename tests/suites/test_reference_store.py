"""The emulations kept between processes: computed once, read back by the next process, keyed by
what they read (the spec, the arithmetic), never kept for a data folder, and computed again when a
kept file is unreadable or the folder cannot be written."""

from __future__ import annotations

import pytest

from opbench.suites import model_reference, reference_store

calls: list[tuple] = []
context = {"spec": "a"}


@reference_store.kept(lambda args: context["spec"])
def emulation(name: str, batch: int, data_dir: str) -> dict:
    calls.append((name, batch, data_dir))
    return {"0.W": 1e-6 * batch}


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv(reference_store.VARIABLE, str(tmp_path))
    calls.clear()
    emulation.cache_clear()
    context["spec"] = "a"
    return tmp_path


def _next_process():
    emulation.cache_clear()  # what a new process starts with


def test_the_next_process_reads_what_the_first_made(store):
    assert emulation("mlp", 8, "") == {"0.W": 8e-6}
    _next_process()
    assert emulation("mlp", 8, "") == {"0.W": 8e-6} and calls == [("mlp", 8, "")]
    assert len(list(store.glob("emulation-*.pickle"))) == 1


def test_another_spec_or_argument_is_another_result(store):
    emulation("mlp", 8, "")
    context["spec"] = "b"  # the model's spec changed under the same name
    _next_process()
    emulation("mlp", 8, "")
    emulation("mlp", 16, "")
    assert calls == [("mlp", 8, ""), ("mlp", 8, ""), ("mlp", 16, "")]


def test_a_data_folder_is_never_kept_and_no_variable_keeps_nothing(store, monkeypatch):
    emulation("mlp", 8, "/data")
    assert not list(store.iterdir())
    monkeypatch.delenv(reference_store.VARIABLE)
    emulation("lenet", 8, "")
    assert not list(store.iterdir()) and len(calls) == 2


def test_an_unreadable_file_is_made_again_and_an_unwritable_folder_costs_nothing_more(store, monkeypatch):
    emulation("mlp", 8, "")
    (kept,) = store.glob("emulation-*.pickle")
    kept.write_bytes(b"torn")
    _next_process()
    assert emulation("mlp", 8, "") == {"0.W": 8e-6} and len(calls) == 2
    monkeypatch.setenv(reference_store.VARIABLE, str(kept / "not-a-folder"))
    _next_process()
    assert emulation("mlp", 8, "") == {"0.W": 8e-6} and len(calls) == 3


def test_the_models_emulations_are_kept_with_their_spec_and_draws(store):
    """The real emulation of the MLP gate: read back equal, keyed by the spec and DRAWS."""
    first = model_reference.emulated_errors("mlp", 8, "", 1, 1, False, "float32")
    model_reference._emulated_errors_both.cache_clear()
    assert model_reference.emulated_errors("mlp", 8, "", 1, 1, False, "float32") == first
    assert len(list(store.glob("_emulated_errors_both-*.pickle"))) == 1
    assert model_reference._spec(("mlp",))[1] == model_reference.DRAWS


SLOW = """
import sys, time
from opbench.suites import reference_store

@reference_store.kept(lambda args: "spec")
def emulation(name, batch, data_dir):
    with open(sys.argv[1], "a") as f:
        f.write("made\\n")
    time.sleep(1.0)  # long enough that the other process asks while this one makes it
    return {"0.W": 1e-6 * batch}

print(emulation("mlp", 8, ""))
"""


def test_processes_that_need_one_result_at_once_make_it_once(tmp_path):
    """make test's two lanes need the same emulations at the same time: one makes each, the
    other waits for it and reads it (a 2-core host computed them twice, side by side)."""
    import os
    import subprocess
    import sys

    made = tmp_path / "made"
    env = {**os.environ, reference_store.VARIABLE: str(tmp_path / "kept")}
    (tmp_path / "kept").mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", SLOW, str(made)], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]  # a bound on a hang
    assert [p.returncode for p in procs] == [0, 0]
    assert outs[0] == outs[1] == "{'0.W': 8e-06}\n"
    assert made.read_text() == "made\n"
