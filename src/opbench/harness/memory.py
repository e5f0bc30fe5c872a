"""A process's resident memory, read from the kernel's own accounting and never by sampling.

The kernel keeps each process's resident-set high-water mark (VmHWM in /proc/self/status), and
since Linux 4.0 a process may reset it to its present resident set (writing 5 to
/proc/self/clear_refs). Resetting before a case's timed rounds and reading after them gives that
case's peak exactly, with nothing running beside the rounds: a thread that polled the resident
set would wake during them. Where the reset is refused (older kernels, some sandboxes) the mark is
the process's since it started, and the scope says so.

The resident set counts the pages of mapped files too (RssFile: the libraries' code and data), and
how many of those a process has mapped follows the kernel's page cache, not the process: the same
case in the same torch build mapped 93-107 MiB of libtorch_cpu.so's code in a fresh clone's venv
after its make test and make bench, and 49-51 MiB once that byte-identical file was written anew
(Linux 6.18, ext4, 2026-11-30; which history gives the larger count was not found). So a case's
peak also comes with the file pages resident at its end, and `peak_anon_bytes`, the peak less
them: what the process itself allocated (heap, arrays, the framework's caches, shared memory), the
figure that depends on the case rather than on what the machine read before.
"""

from __future__ import annotations

from dataclasses import dataclass

STATUS, CLEAR_REFS = "/proc/self/status", "/proc/self/clear_refs"
RESET_PEAK = "5"  # clear_refs: "reset the peak resident set size to the current value"


def _status_kib(field: str) -> int | None:
    try:
        with open(STATUS, encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _status_bytes(field: str) -> int | None:
    kib = _status_kib(field)
    return None if kib is None else kib * 1024


def peak_rss() -> int | None:
    """This process's resident-set high-water mark in bytes (VmHWM), None where the kernel does not
    say. Not getrusage's ru_maxrss: Linux carries that across fork and exec, so a worker would
    report its parent's peak."""
    return _status_bytes("VmHWM")


def current_rss() -> int | None:
    """This process's resident set in bytes (VmRSS), None where the kernel does not say."""
    return _status_bytes("VmRSS")


def file_rss() -> int | None:
    """The file-backed part of this process's resident set in bytes (RssFile), None where the kernel
    does not say."""
    return _status_bytes("RssFile")


def anon_rss() -> int | None:
    """This process's resident set less its mapped files' pages, in bytes (VmRSS - RssFile: its
    anonymous and shared memory), None where the kernel does not say."""
    rss, files = current_rss(), file_rss()
    return None if rss is None or files is None else rss - files


def reset_peak_rss() -> bool:
    """Set the high-water mark to the present resident set; False where the kernel refuses."""
    try:
        with open(CLEAR_REFS, "w", encoding="ascii") as f:
            f.write(RESET_PEAK)
        return True
    except OSError:
        return False


@dataclass
class Peak:
    """The outcome of one PeakOf block, in bytes; None where the kernel gave no figure."""

    peak: int | None = None  # the resident set's highest point during the block (scope "block") or ever ("process")
    before: int | None = None  # the resident set when the block began
    scope: str = "block"
    files: int | None = None  # the mapped files' pages resident when the block ended (RssFile)

    @property
    def anon(self) -> int | None:
        """The peak less the file pages resident at the block's end: the process's own memory at its
        peak, within what the block mapped of files meanwhile (the rounds run code their warm-up ran)."""
        return None if self.peak is None or self.files is None else max(self.peak - self.files, 0)

    def as_extra(self) -> dict:
        """The extra_info fields every saved case carries."""
        return {"peak_rss_bytes": self.peak, "rss_before_bytes": self.before, "peak_rss_scope": self.scope,
                "rss_file_bytes": self.files, "peak_anon_bytes": self.anon}


class PeakOf:
    """The resident set's peak over a block: the mark reset on entry, read on exit."""

    def __enter__(self) -> Peak:
        self.result = Peak(scope="block" if reset_peak_rss() else "process")
        self.result.before = current_rss()
        return self.result

    def __exit__(self, *exc) -> None:
        self.result.peak = peak_rss()
        self.result.files = file_rss()
