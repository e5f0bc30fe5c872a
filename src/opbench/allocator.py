"""A steady-state CPU allocator for the timed process.

With glibc's defaults, a freed block above the dynamic mmap threshold goes back to the kernel and
the next call that allocates the same output faults its pages in again, and where the threshold
and the heap top sit depends on what the process allocated before. Measured here, that left the
between-process spread of memory-bound operators (pooling, batch norm, from_numpy) at a median
of 9.6% against 3.5% once freed memory stayed in the heap: a process-to-process lottery that
the regression gate reads as noise. `steady` (the default) turns glibc's mmap path off and
never trims the heap, so after the warm-up every framework reuses memory the way a long-running
service does; the setting is recorded in machine_info. `default` leaves glibc alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util

# mallopt parameters from glibc's malloc.h
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
NEVER_TRIM = 2**31 - 1  # mallopt takes an int: the largest trim threshold it accepts


def steady() -> str:
    """Keep freed memory in the heap (glibc: no mmap'd blocks, no trimming). Returns what was
    done, for machine_info; where there is no glibc it says so and changes nothing."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return f"default (no glibc mallopt in {name or 'this C library'})"
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    if mallopt(M_MMAP_MAX, 0) != 1 or mallopt(M_TRIM_THRESHOLD, NEVER_TRIM) != 1:
        return "default (mallopt refused the steady settings)"
    return "steady (glibc: M_MMAP_MAX=0, M_TRIM_THRESHOLD=2^31-1)"


def apply(mode: str) -> str:
    """Set the allocator for `mode` ('steady' or 'default') and describe the outcome."""
    return steady() if mode == "steady" else "default"
