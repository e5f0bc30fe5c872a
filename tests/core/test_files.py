"""Output options as the pytest-benchmark in use hands them over."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from opbench.core.files import NotWritable, option_path, writable_file
from opbench.pytest_plugin import _check_json_target


def test_an_output_option_is_a_path_whether_given_as_a_name_or_as_the_file_pytest_benchmark_opened(tmp_path):
    """pytest-benchmark 4 and 5.2 open --benchmark-json themselves (argparse.FileType("wb"));
    5.3 keeps the name. Both give the same path; an unset option gives none."""
    target = tmp_path / "run.json"
    opened = argparse.FileType("wb")(str(target))
    try:
        assert option_path(opened) == target
    finally:
        opened.close()
    assert option_path(str(target)) == target
    assert option_path(target) == target
    assert option_path(None) is None
    assert option_path("") is None


class _Config:
    def __init__(self, value):
        self.option = argparse.Namespace(benchmark_json=value)


def test_the_json_target_check_takes_an_opened_file_and_still_refuses_a_folder(tmp_path):
    """An opened --benchmark-json is checked, not a TypeError traceback (seen with pytest-benchmark
    5.2.3); a folder given by name is still one usage line."""
    opened = argparse.FileType("wb")(str(tmp_path / "run.json"))
    try:
        _check_json_target(_Config(opened))
    finally:
        opened.close()
    _check_json_target(_Config(None))
    with pytest.raises(pytest.UsageError, match="--benchmark-json"):
        _check_json_target(_Config(str(tmp_path)))
    with pytest.raises(NotWritable):
        writable_file(Path(tmp_path), "--benchmark-json", create_folder=False)
