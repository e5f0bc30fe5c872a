"""What installing a side changed beyond its named requirements (opbench.regression.envs): read from
pip's installation report and `pip check`, said before measuring, or a stop with --strict-env."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from opbench import cli
from opbench.regression import envs
from opbench.regression import process as upgrade
from opbench.results.store import ResultsError

# pip's --report for `pip install jax==0.10.2 jaxlib==0.10.2`, its NumPy at a version no environment has
# (99.1: the test runs on the NumPy 1.26 and the NumPy 2 lines alike)
REPORT = {"install": [
    {"metadata": {"name": "jax", "version": "0.10.2", "requires_dist": ["jaxlib<=0.10.2,>=0.10.2", "numpy>=2.0",
                                                                       "ml_dtypes>=0.5.0"]}, "requested": True},
    {"metadata": {"name": "jaxlib", "version": "0.10.2", "requires_dist": ["numpy>=2.0", "ml_dtypes>=0.5.0"]},
     "requested": True},
    {"metadata": {"name": "numpy", "version": "99.1", "requires_dist": []}, "requested": False},
    {"metadata": {"name": "ml_dtypes", "version": "99.0", "requires_dist": ["numpy>=2.1.0; python_version >= '3.13'"]},
     "requested": False},
]}


def test_every_unnamed_package_is_one_line_with_what_required_it():
    found = envs.changes(REPORT, ["jax==0.10.2", "jaxlib==0.10.2"])
    assert [c.name for c in found] == ["ml_dtypes", "numpy"]
    numpy = found[1]
    assert numpy.old == np.__version__ and numpy.new == "99.1"
    assert numpy.required_by == "jax 0.10.2, jaxlib 0.10.2, ml_dtypes 99.0"
    assert numpy.line("candidate") == (f"candidate: also changes numpy {np.__version__} -> 99.1 "
                                       "(required by jax 0.10.2, jaxlib 0.10.2, ml_dtypes 99.0)")


def test_a_package_at_the_version_here_is_no_change():
    same = {"install": [{"metadata": {"name": "numpy", "version": np.__version__}}]}
    assert envs.changes(same, ["jax==0.10.2"]) == []
    assert envs.changes({}, ["jax==0.10.2"]) == []  # no report (an older pip): nothing to say


def _fake_pip(tmp_path, report: dict | None, check: str):
    (tmp_path / "site").mkdir(exist_ok=True)
    calls = []

    def run(cmd, **kw):
        calls.append(cmd)
        if "--report" in cmd and report is not None:
            from pathlib import Path

            target = Path(cmd[cmd.index("--report") + 1])
            target.parent.mkdir(parents=True, exist_ok=True)  # venv creation is faked
            target.write_text(json.dumps(report))
        if cmd[-2:] == ["pip", "check"]:
            return subprocess.CompletedProcess(cmd, 1 if check else 0, stdout=check, stderr="")
        return subprocess.CompletedProcess(cmd, 0, stdout=str(tmp_path / "site"), stderr="")

    return run, calls


def test_the_side_says_what_else_changed_and_what_pip_left_unsatisfied(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(envs.venv.EnvBuilder, "create", lambda self, folder: None)
    broken = "mxnet 1.9.1 has requirement numpy<2.0.0,>1.16.0, but you have numpy 2.4.6."
    run, _ = _fake_pip(tmp_path, REPORT, broken)
    envs.make_env(tmp_path / "env-candidate", ["jax==0.10.2", "jaxlib==0.10.2"], run, "candidate")
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "opbench upgrade-check: candidate: installing jax==0.10.2 jaxlib==0.10.2"
    assert any("candidate: also changes numpy" in line for line in err)
    assert err[-1] == ("opbench upgrade-check: candidate: pip check: mxnet 1.9.1 has requirement "
                       "numpy<2.0.0,>1.16.0, but you have numpy 2.4.6.")


def test_strict_env_stops_in_one_line_before_measuring(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(envs.venv.EnvBuilder, "create", lambda self, folder: None)
    run, calls = _fake_pip(tmp_path, REPORT, "")
    monkeypatch.setattr(upgrade.subprocess, "run", run)
    code = cli.main(["upgrade-check", "--candidate", "jax==0.10.2", "jaxlib==0.10.2", "--strict-env",
                     "--design", "process", "--runs", "1", "--workdir", str(tmp_path / "w"), "--", "benchmarks/ops"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("opbench: error: --strict-env: candidate: also ")
    assert "ml_dtypes" in err[-1] and err[-1].endswith("(and 1 more)")
    assert not any("pytest" in c for c in calls)  # nothing was measured


def test_a_clean_install_says_nothing_more(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(envs.venv.EnvBuilder, "create", lambda self, folder: None)
    run, _ = _fake_pip(tmp_path, {"install": [{"metadata": {"name": "jax", "version": "0.10.2"}}]}, "")
    envs.make_env(tmp_path / "env-candidate", ["jax==0.10.2"], run, "candidate", strict=True)
    assert capsys.readouterr().err.strip().splitlines() == ["opbench upgrade-check: candidate: installing jax==0.10.2"]


def test_pip_failing_is_one_error(tmp_path, monkeypatch):
    monkeypatch.setattr(envs.venv.EnvBuilder, "create", lambda self, folder: None)
    (tmp_path / "site").mkdir()

    def run(cmd, **kw):
        return subprocess.CompletedProcess(cmd, 1 if "install" in cmd else 0, stdout=str(tmp_path / "site"), stderr="")

    with pytest.raises(ResultsError, match="pip could not install jax==99"):
        envs.make_env(tmp_path / "env", ["jax==99"], run, "candidate")


def _fake_envs(tmp_path, monkeypatch, run):
    """Environments that are folders holding 1 MB, pip and pytest faked by `run`, and the temporary
    folder under tmp_path."""
    def create(self, folder):
        Path(folder, "lib").mkdir(parents=True, exist_ok=True)
        Path(folder, "lib", "torch.so").write_bytes(b"\0" * 1_000_000)

    monkeypatch.setattr(envs.venv.EnvBuilder, "create", create)
    monkeypatch.setattr(upgrade.subprocess, "run", run)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))


@pytest.mark.parametrize("strict", [False, True])
def test_a_temporary_workdir_keeps_only_the_results_however_the_gate_ends(tmp_path, monkeypatch, capsys, strict):
    """Each gate without --workdir used to leave both environments (5.3 GB for a torch upgrade) in
    the temporary folder, run after run. It keeps its results now, and
    a gate that stopped before any result (here --strict-env) leaves nothing."""
    run, calls = _fake_pip(tmp_path, REPORT if strict else {}, "")
    _fake_envs(tmp_path, monkeypatch, run)
    code = cli.main(["upgrade-check", "--candidate", "jax==0.10.2", "jaxlib==0.10.2", "--design", "process",
                     "--runs", "1", *(["--strict-env"] if strict else []), "--", "benchmarks/ops"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2  # strict: the install changed NumPy; else the faked pytest saved no result
    left = list((tmp_path / "tmp").iterdir())
    assert err[-2].startswith("opbench: removed env-baseline, env-candidate (2 MB) from ")
    assert err[-2].endswith("; give --workdir to keep them for reuse")
    assert err[-1].startswith("opbench: error: ")  # the error stays the last line
    if strict:
        assert left == [] and not any("pytest" in c for c in calls)
    else:
        assert "saved no result" in err[-1]
        assert len(left) == 1 and [p.name[:8] for p in left[0].iterdir()] == ["results-"]


def test_a_chosen_workdir_keeps_its_environments_for_the_next_run(tmp_path, monkeypatch, capsys):
    run, _ = _fake_pip(tmp_path, {}, "")
    _fake_envs(tmp_path, monkeypatch, run)
    code = cli.main(["upgrade-check", "--candidate", "jax==0.10.2", "--design", "process", "--runs", "1",
                     "--workdir", str(tmp_path / "w"), "--", "benchmarks/ops"])
    assert code == 2 and "removed" not in capsys.readouterr().err
    assert (tmp_path / "w" / "env-candidate" / "lib" / "torch.so").is_file()
    assert (tmp_path / "w" / "env-baseline").is_dir() and not list((tmp_path / "tmp").iterdir())


def test_tidy_says_what_it_freed(tmp_path, capsys):
    for name in ("env-baseline", "caches/references", "results-1"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "env-baseline" / "big").write_bytes(b"\0" * 2_600_000)
    (tmp_path / "caches" / "references" / "ref").write_bytes(b"\0" * 500_000)
    envs.tidy(tmp_path)
    assert capsys.readouterr().err == (f"opbench: removed env-baseline, caches (3 MB) from {tmp_path}; "
                                       "give --workdir to keep them for reuse\n")
    assert [p.name for p in tmp_path.iterdir()] == ["results-1"]
