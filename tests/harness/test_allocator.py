"""The steady-state allocator: freed memory stays in the heap instead of going back to the kernel."""

from __future__ import annotations

import ctypes
import ctypes.util
import subprocess
import sys

import pytest

PROBE = """
import ctypes, ctypes.util, sys
import numpy as np
from opbench.harness import allocator

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.mallinfo2.restype = MallInfo2
print(allocator.apply(sys.argv[1]))
before = libc.mallinfo2().hblkhd  # blocks mapped while Python and NumPy started
big = np.ones(16 * 2**20)  # 128 MiB: mmap'd by glibc's defaults
print(libc.mallinfo2().hblkhd - before)
del big
print(libc.mallinfo2().arena)
allocator.release()
print(libc.mallinfo2().arena)
"""


def _has_mallinfo2() -> bool:
    name = ctypes.util.find_library("c")
    try:
        return name is not None and hasattr(ctypes.CDLL(name), "mallinfo2")
    except OSError:
        return False


@pytest.mark.skipif(not _has_mallinfo2(), reason="needs glibc 2.33 or newer (mallinfo2)")
@pytest.mark.parametrize("mode", ["steady", "default"])
def test_steady_keeps_big_blocks_in_the_heap(mode):
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True).stdout
    described, mmapped, heap_after_free, heap_after_release = out.split()[0], *map(int, out.split()[-3:])
    assert described == mode
    if mode == "steady":
        assert mmapped == 0 and heap_after_free >= 128 * 2**20  # freed, but kept for the next call
        assert heap_after_release < 128 * 2**20  # until release() hands it back before an RSS measurement
    else:
        assert mmapped >= 128 * 2**20 and heap_after_free < 128 * 2**20  # handed back to the kernel


def test_the_setting_is_validated():
    from opbench.harness.config import ConfigError, resolve

    assert resolve({}).malloc == "default"
    assert resolve({"malloc": "steady"}).malloc == "steady"
    with pytest.raises(ConfigError, match="malloc"):
        resolve({"malloc": "jemalloc"})
