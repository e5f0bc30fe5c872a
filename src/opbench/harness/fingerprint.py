"""The environment a run measured, saved in pytest-benchmark's machine_info.

Everything that decides a number goes in (framework versions and builds, BLAS, CUDA, threads,
CPU model and cores); CPU clock readings, which differ between every two runs and make every
comparison warn, are dropped.
"""

from __future__ import annotations

import os
import platform
from typing import Any

from opbench import frameworks
from opbench.harness import isa, openmp
from opbench.harness.config import Settings
from opbench.harness.roofline import Roofline

CLOCK_FIELDS = ("hz_actual", "hz_actual_friendly", "hz_advertised", "hz_advertised_friendly")


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (platform.processor() elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def framework_facts(names: tuple[str, ...]) -> dict[str, Any]:
    """Build facts of each framework, or why it is unavailable."""
    facts: dict[str, Any] = {}
    for name in names:
        try:
            facts[name] = frameworks.load(name).info()
        except frameworks.Unavailable as exc:
            facts[name] = {"unavailable": str(exc)}
    return facts


def update_machine_info(machine_info: dict, settings: Settings, threads: int, malloc: str = "default",
                        roofline: Roofline | None = None, used: tuple[str, ...] | None = None) -> None:
    """Add opbench's fingerprint to pytest-benchmark's machine_info, in place. Only what is the
    same on every run of an unchanged machine goes here (the CPU's derived ceilings, not NumPy's
    measured GEMM speed, which goes in extra_info): pytest-benchmark warns whenever machine_info
    differs. `used`: the frameworks the run measured (default: every selected one); only they are
    imported."""
    cpu = machine_info.get("cpu")
    if isinstance(cpu, dict):
        for key in CLOCK_FIELDS:
            cpu.pop(key, None)
    machine_info["opbench"] = {
        "frameworks": framework_facts(settings.frameworks if used is None else used),
        "threads": threads,
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "profile": settings.profile,
        "malloc": malloc,
    }
    waits = openmp.wait_settings()
    if waits:  # how the process's idle OpenMP workers wait (the paired gate's workers bound it)
        machine_info["opbench"]["openmp_wait"] = waits
    caps = isa.in_force()
    if caps:  # the run measured kernels held below the CPU's own (make test-isa)
        machine_info["opbench"]["isa_caps"] = caps
    if roofline is not None:
        machine_info["opbench"]["roofline"] = roofline.derived(settings.devices, settings.dtypes)
