"""An opt-in steady-state CPU allocator for the timed process (--malloc steady).

With glibc's defaults, a freed block above the dynamic mmap threshold goes back to the kernel and
the next call that allocates the same output faults its pages in again; where the threshold and
the heap top sit depends on what the process allocated before. `steady` turns glibc's mmap path
off and never trims the heap, so after the warm-up every framework reuses memory the way a
long-running service does. It is a choice of what to measure, recorded in machine_info, not a
default: it makes allocation-heavy operators faster, and whether it also steadies the
between-process spread has not been shown.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc

# mallopt parameters from glibc's malloc.h
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
NEVER_TRIM = 2**31 - 1  # mallopt takes an int: the largest trim threshold it accepts


@functools.cache
def _libc(function: str):
    """A function of the C library, or None where this C library has no such function."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c")), function)
    except (OSError, AttributeError, TypeError):
        return None


def steady() -> str:
    """Keep freed memory in the heap (glibc: no mmap'd blocks, no trimming). Returns what was
    done, for machine_info; where there is no glibc it says so and changes nothing."""
    mallopt = _libc("mallopt")
    if mallopt is None:
        return "default (no glibc mallopt in this C library)"
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    if mallopt(M_MMAP_MAX, 0) != 1 or mallopt(M_TRIM_THRESHOLD, NEVER_TRIM) != 1:
        return "default (mallopt refused the steady settings)"
    return "steady (glibc: M_MMAP_MAX=0, M_TRIM_THRESHOLD=2^31-1)"


def release() -> bool:
    """Collect the garbage (an earlier benchmark's model held only by reference cycles waits for a
    full collection), then hand the heap's free memory back to the kernel (glibc malloc_trim), so
    that a resident-set measurement that follows counts live memory, not what earlier benchmarks
    left and the steady allocator kept. False where there is no malloc_trim."""
    gc.collect()
    trim = _libc("malloc_trim")
    if trim is None:
        return False
    trim.argtypes, trim.restype = (ctypes.c_size_t,), ctypes.c_int
    trim(0)
    return True


def apply(mode: str) -> str:
    """Set the allocator for `mode` ('steady' or 'default') and describe the outcome."""
    return steady() if mode == "steady" else "default"
