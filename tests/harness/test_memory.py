"""A case's peak resident set: the kernel's high-water mark, reset before the block and read after."""

from __future__ import annotations

import numpy as np
import pytest

from opbench.harness import memory

MIB = 2**20


def _reset_or_skip() -> None:
    if memory.peak_rss() is None:
        pytest.skip("this system has no /proc/self/status VmHWM")
    if not memory.reset_peak_rss():
        pytest.skip("this kernel refuses to reset the high-water mark (/proc/self/clear_refs)")


def test_a_block_counts_what_it_held_not_what_ran_before_it():
    """400 MiB held and freed before the block, 64 MiB inside it: the block's peak is its own 64 MiB
    above where it began, not the process's earlier 400."""
    _reset_or_skip()
    earlier = np.ones(400 * MIB // 8)
    del earlier
    with memory.PeakOf() as peak:
        inside = np.ones(64 * MIB // 8)
        del inside
    assert peak.scope == "block"
    grew = peak.peak - peak.before
    assert 56 * MIB <= grew < 200 * MIB, f"{grew / MIB:.0f} MiB"


def test_the_mark_not_a_sample_sees_a_peak_however_short():
    """A peak however brief is in the mark: the kernel keeps it, nothing samples it."""
    _reset_or_skip()
    with memory.PeakOf() as peak:
        np.ones(128 * MIB // 8).sum()
    assert peak.peak - peak.before >= 120 * MIB


def test_a_kernel_that_refuses_the_reset_gives_the_process_peak_and_says_so(monkeypatch, tmp_path):
    monkeypatch.setattr(memory, "CLEAR_REFS", str(tmp_path / "absent" / "clear_refs"))
    with memory.PeakOf() as peak:
        pass
    assert peak.scope == "process" and peak.as_extra()["peak_rss_scope"] == "process"
    assert peak.peak is None or peak.peak >= (peak.before or 0)


def test_no_proc_gives_no_figure_rather_than_a_wrong_one(monkeypatch, tmp_path):
    monkeypatch.setattr(memory, "STATUS", str(tmp_path / "status"))
    with memory.PeakOf() as peak:
        pass
    assert peak.as_extra()["peak_rss_bytes"] is None and peak.before is None


def test_a_mapped_file_counts_in_the_files_pages_not_in_the_case_own_memory(tmp_path):
    """A library's pages are a mapped file's: how many are resident follows the page cache, not the
    case, so the case's own figure (peak_anon_bytes) leaves them out and the files' are kept apart."""
    _reset_or_skip()
    if memory.file_rss() is None:
        pytest.skip("this kernel does not say RssFile")
    import mmap

    path = tmp_path / "library"
    path.write_bytes(b"\1" * (64 * MIB))
    files_before, anon_before = memory.file_rss(), memory.anon_rss()
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped, memory.PeakOf() as peak:
        assert sum(mapped[i] for i in range(0, len(mapped), 4096)) == 64 * MIB // 4096  # every page touched
    extra = peak.as_extra()
    assert extra["rss_file_bytes"] == peak.files and peak.files - files_before >= 56 * MIB
    assert extra["peak_anon_bytes"] == peak.peak - peak.files
    assert peak.anon - anon_before < 32 * MIB, f"{(peak.anon - anon_before) / MIB:.0f} MiB"


def test_no_proc_gives_no_figure_for_the_files_either(monkeypatch, tmp_path):
    monkeypatch.setattr(memory, "STATUS", str(tmp_path / "status"))
    with memory.PeakOf() as peak:
        pass
    assert peak.as_extra()["rss_file_bytes"] is None and peak.as_extra()["peak_anon_bytes"] is None
    assert memory.anon_rss() is None
