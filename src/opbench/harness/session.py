"""What one measuring process works with: its settings, the allocator it runs under, the
physical roofline of its devices, NumPy's GEMM as the host's reported reference, and the study
aids (if any) that wrap prepared calls.

The pytest plugin makes one per session; the paired gate's workers get it from the session they
collect with. Measurement reads it and never reaches back into the plugin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opbench.frameworks import expect, load, start_threads
from opbench.harness import timing
from opbench.harness.config import Settings
from opbench.harness.roofline import Roofline

# A study aid (see opbench.testing): given a verified Prepared, it may replace its call and
# returns the extra_info entries that say what it did. Never registered by the suite itself.
CallWrapper = Callable[[Any], dict]


@dataclass
class Session:
    settings: Settings
    malloc: str = "default"
    roofline: Roofline = field(init=False)
    wrappers: list[CallWrapper] = field(default_factory=list)
    _numpy_gemm: float | None = field(default=None, init=False, repr=False)
    # the threads observed per (framework, mode, thread count): opbench.suites.measure.observed_threads
    observed: dict[tuple[str, str, int], Any] = field(default_factory=dict, init=False, repr=False)
    # the CPU threads of each framework that computes on a shared OpenMP runtime: opbench.harness.openmp
    openmp_teams: dict[str, int] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        s = self.settings
        self.roofline = Roofline(s.peak_gflops, s.roofline_slack, self.threads)
        start_threads(self.threads)  # before any framework loads: some fix their threads when they start
        expect(s.frameworks)  # and only these load: a worker of one framework imports no other

    @property
    def threads(self) -> int:
        return self.settings.threads[0]

    def numpy_gemm(self) -> float:
        """NumPy's fp32 GEMM GFLOP/s here, measured once per session: CPU results report it beside
        the roofline's ceiling, which never depends on it."""
        if self._numpy_gemm is None:
            self._numpy_gemm = numpy_gemm_gflops(self.threads)
        return self._numpy_gemm


def numpy_gemm_gflops(threads: int, size: int = 1024, repeats: int = 7) -> float:
    """The best fp32 GEMM GFLOP/s NumPy's BLAS reaches here: a reference reported beside results,
    never a ceiling (it measures one library's kernels, not the machine)."""
    import numpy as np

    load("numpy").set_threads(threads)
    r = np.random.default_rng(0)
    a, b = r.standard_normal((size, size), dtype=np.float32), r.standard_normal((size, size), dtype=np.float32)
    a @ b
    return 2 * size**3 / min(timing.rounds(lambda: a @ b, 1, repeats)) / 1e9
