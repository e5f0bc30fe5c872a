"""The roofline guard: the most FLOP/s a device can physically do in a dtype, derived from the
hardware, and the check that no timed call claims more.

A call timed faster than its device's ceiling (times a small slack) did not wait for its work
(MXNet, unsynchronised, "runs" a 1024^3 GEMM at 120,710 GFLOP/s on a 2-core host). The ceiling
is an upper bound from physics, never a library's achieved speed: NumPy's GEMM depends on which
kernels its BLAS picked for the CPU (OpenBLAS 0.3.23 runs its Haswell kernels on AVX-512 Xeons
it does not know, a third of what oneDNN reaches there), so it is only reported beside results.

CPU: usable cores x SIMD lanes of the dtype x FMA units per core x 2 FLOPs x the maximum clock.
GPU: multiprocessors x dense FLOPs per multiprocessor per clock for the dtype (tensor cores
included) x the maximum clock. Whatever the hardware does not tell is replaced by a stated
generous bound, and the derivation of every ceiling says which facts it used.
"""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opbench.frameworks.base import GpuFacts

# Above the highest boost clock of any shipping CPU (6.2 GHz), for hosts that do not say theirs.
GENEROUS_CPU_HZ = 6.5e9
# Above the boost clock of any shipping GPU (2.5-2.6 GHz), for devices that do not say theirs.
GENEROUS_GPU_HZ = 3.0e9
GENEROUS_GPU_SMS = 300  # above any single device's multiprocessor count (B200: 148)
FLOPS_PER_FMA = 2
WIDE = ("float16", "bfloat16")


class Implausible(AssertionError):
    """A timing implies more FLOP/s than the device can do: the work was not all waited for."""


@dataclass(frozen=True)
class Ceiling:
    """A device's compute ceiling in one dtype and how it was derived."""

    gflops: float
    derivation: str

    def as_dict(self) -> dict[str, Any]:
        return {"gflops": self.gflops, "derivation": self.derivation}


# --- CPU ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CpuFacts:
    """What the operating system says of the CPU, as the ceiling needs it."""

    arch: str  # platform.machine(): x86_64, aarch64, ...
    vendor: str = ""
    family: int | None = None
    model: int | None = None
    flags: frozenset[str] = frozenset()
    cores: int = 1  # logical CPUs this process may run on (SMT siblings count: generous)
    max_hz: float | None = None  # the maximum clock, where the host tells it
    clock_source: str = ""  # where max_hz came from
    sve_bits: int | None = None  # arm64: the SVE vector length, where readable


def _field(cpuinfo: str, name: str) -> str:
    match = re.search(rf"^{re.escape(name)}\s*:\s*(.*)$", cpuinfo, re.MULTILINE)
    return match.group(1).strip() if match else ""


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def max_clock(sysfs: Callable[[str], str | None] = _read) -> tuple[float | None, str]:
    """(Hz, source) of the CPU's maximum clock from cpufreq, or (None, why not). acpi-cpufreq
    with boost on reports the base clock as the maximum, so it is not taken as one."""
    khz = sysfs("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    if not khz or not khz.isdigit():
        return None, "cpufreq not readable"
    if sysfs("/sys/devices/system/cpu/cpufreq/boost") == "1":
        return None, "cpufreq's maximum excludes boost (acpi-cpufreq)"
    return int(khz) * 1e3, "cpufreq maximum"


def read_cpu(cpuinfo: str | None = None, cores: int | None = None, arch: str | None = None,
             sysfs: Callable[[str], str | None] = _read) -> CpuFacts:
    """The facts of this host's CPU (or of a recorded /proc/cpuinfo, for tests)."""
    text = (sysfs("/proc/cpuinfo") or "") if cpuinfo is None else cpuinfo
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    hz, source = max_clock(sysfs)
    flags = _field(text, "flags") or _field(text, "Features")
    family, model = _field(text, "cpu family"), _field(text, "model")
    sve = sysfs("/proc/sys/abi/sve_default_vector_length")
    return CpuFacts(
        arch=arch or platform.machine(), vendor=_field(text, "vendor_id"),
        family=int(family) if family.isdigit() else None, model=int(model) if model.isdigit() else None,
        flags=frozenset(flags.split()), cores=cores, max_hz=hz, clock_source=source,
        sve_bits=int(sve) * 8 if sve and sve.isdigit() else None,
    )


def _x86_datapath(cpu: CpuFacts, isa_bits: int) -> tuple[int, str]:
    """The FMA datapath width in bits: the ISA's vector width, except on AMD cores known to
    split wider instructions (Zen 1: 128-bit units; Zen 4: AVX-512 on 256-bit units)."""
    if cpu.vendor == "AuthenticAMD" and cpu.family == 0x17 and (cpu.model or 0) < 0x30:
        return min(isa_bits, 128), "Zen 1: 128-bit FMA units"
    if cpu.vendor == "AuthenticAMD" and cpu.family == 0x19:
        return min(isa_bits, 256), "Zen 3/4: 256-bit FMA units"
    return isa_bits, ""


_NATIVE_X86 = {"bfloat16": ("amx_bf16", "avx512_bf16"), "float16": ("amx_fp16", "avx512_fp16")}


def _x86_lanes(cpu: CpuFacts, dtype: str) -> tuple[float, int, str]:
    f = cpu.flags
    isa = 512 if "avx512f" in f else 256 if ("avx2" in f or "avx" in f) else 128 if "sse" in f else 0
    if not isa:
        return 16, 2, "x86 without known SIMD flags: 512-bit vectors assumed"
    bits, why = _x86_datapath(cpu, isa)
    amx, avx512 = _NATIVE_X86.get(dtype, ("", ""))
    if amx in f:
        return 1024, 1, f"AMX tiles: 1024 {dtype} multiply-adds per clock ({amx})"
    if avx512 in f:
        lanes, what = bits / 16, f"{bits}-bit {dtype} FMA ({avx512})"
    else:
        lanes, what = bits / 32, f"{bits}-bit fp32 FMA" + (f" ({dtype} through float32)" if dtype in WIDE else "")
    return lanes, 2, what + (f"; {why}" if why else "")


def _arm_lanes(cpu: CpuFacts, dtype: str) -> tuple[float, int, str]:
    f = cpu.flags
    if "sve" in f:
        bits, units = cpu.sve_bits or 2048, 2
        what = f"{bits}-bit SVE" + ("" if cpu.sve_bits else " (length unknown: the architecture's maximum)")
    else:
        bits, units, what = 128, 4, "128-bit NEON"
    if dtype == "bfloat16" and "bf16" in f:
        return bits / 8, units, what + " bf16 matrix multiply-accumulate (BFMMLA: 4x fp32)"
    if dtype == "float16" and ("asimdhp" in f or "fphp" in f):
        return bits / 16, units, what + " fp16"
    return bits / 32, units, what + (" fp32" if dtype == "float32" else f" ({dtype} through float32)")


def _cpu_lanes(cpu: CpuFacts, dtype: str) -> tuple[float, int, str]:
    """(multiply-adds per FMA unit per clock in `dtype`, FMA units per core, what decided it).
    Two FMA units per x86 core unless known otherwise; four 128-bit (or two SVE) per arm64 core,
    as the widest Neoverse and Apple cores have."""
    if cpu.arch in ("x86_64", "AMD64", "i686", "x86"):
        return _x86_lanes(cpu, dtype)
    if cpu.arch in ("aarch64", "arm64"):
        return _arm_lanes(cpu, dtype)
    return 16, 4, f"unknown architecture {cpu.arch!r}: 512-bit vectors and 4 FMA units assumed"


def cpu_ceiling(cpu: CpuFacts, dtype: str) -> Ceiling:
    """The most FLOP/s `cpu` can do in `dtype`: cores x lanes x FMA units x 2 x maximum clock."""
    lanes, units, what = _cpu_lanes(cpu, dtype)
    if cpu.max_hz:
        hz, clock = cpu.max_hz, cpu.clock_source
    else:
        hz, clock = GENEROUS_CPU_HZ, f"generous bound: {cpu.clock_source or 'maximum clock unknown'}"
    gflops = cpu.cores * lanes * units * FLOPS_PER_FMA * hz / 1e9
    return Ceiling(gflops, f"{cpu.cores} cores x {lanes:g} {dtype} lanes x {units} FMA units x 2 FLOPs x "
                           f"{hz / 1e9:.2f} GHz ({clock}); {what}")


# --- GPU ------------------------------------------------------------------------------------
# Dense FLOPs per multiprocessor per clock, from NVIDIA's architecture whitepapers (published
# peak / (SMs x boost clock)). float32 is the CUDA cores' rate (two per FMA lane), not TF32's:
# opbench turns TF32 off in PyTorch and TensorFlow and runs JAX at matmul precision "highest", and
# checks float32 results to float32's accuracy, which TF32's 10-bit mantissa fails. (A ceiling with
# TF32 in it, 2048 on an H100, let a float32 GEMM claim 8 times what the CUDA cores can do; the
# fastest float32 GEMM measured on an H100 ran at 28.5 of its 66.9 TFLOP/s.) float16 and bfloat16
# include tensor cores; bfloat16 without tensor-core support runs at the float32 rate.
PER_SM_CLOCK = {
    (7, 0): {"float32": 128, "float16": 1024, "bfloat16": 128},  # V100
    (7, 2): {"float32": 128, "float16": 1024, "bfloat16": 128},  # Xavier
    (7, 5): {"float32": 128, "float16": 1024, "bfloat16": 128},  # T4, Turing
    (8, 0): {"float32": 128, "float16": 2048, "bfloat16": 2048},  # A100
    (8, 6): {"float32": 256, "float16": 1024, "bfloat16": 1024},  # A10, A40, RTX 30
    (8, 7): {"float32": 256, "float16": 1024, "bfloat16": 1024},  # Orin
    (8, 9): {"float32": 256, "float16": 1024, "bfloat16": 1024},  # L4, L40S, RTX 40
    (9, 0): {"float32": 256, "float16": 4096, "bfloat16": 4096},  # H100, H200
    (10, 0): {"float32": 256, "float16": 8192, "bfloat16": 8192},  # B200
    (12, 0): {"float32": 256, "float16": 1024, "bfloat16": 1024},  # RTX 50
}
# A capability newer than the table: twice the table's highest rate.
GENEROUS_PER_SM = {d: 2 * max(rates[d] for rates in PER_SM_CLOCK.values()) for d in ("float32", *WIDE)}

# Devices by name, for frameworks that tell only the name: (pattern, SMs, boost MHz, capability).
KNOWN_GPUS = (
    (r"\bH200\b", 132, 1980, (9, 0)),
    (r"\bH100\b.*\bPCIe\b", 114, 1755, (9, 0)),
    (r"\bH100\b|\bGH200\b", 132, 1980, (9, 0)),
    (r"\bA100\b", 108, 1410, (8, 0)),
    (r"\bA10G\b", 80, 1710, (8, 6)),
    (r"\bA10\b", 72, 1695, (8, 6)),
    (r"\bL40S\b", 142, 2520, (8, 9)),
    (r"\bL4\b", 58, 2040, (8, 9)),
    (r"\bT4\b", 40, 1590, (7, 5)),
    (r"\bV100\b", 80, 1530, (7, 0)),
    (r"\bB200\b", 148, 1965, (10, 0)),
)


def known_gpu(name: str) -> GpuFacts | None:
    for pattern, sms, mhz, capability in KNOWN_GPUS:
        if re.search(pattern, name):
            return GpuFacts(name, capability, sms, mhz * 1e6)
    return None


def gpu_ceiling(gpu: GpuFacts | None, dtype: str) -> Ceiling:
    """The most FLOP/s the GPU can do in `dtype`; facts it does not give come from the table of
    known devices by name, else from generous bounds (the derivation says which)."""
    gpu = gpu or GpuFacts()
    table = known_gpu(gpu.name) if gpu.name else None
    notes = []
    capability = gpu.capability or (table.capability if table else None)
    if capability in PER_SM_CLOCK:
        rate = PER_SM_CLOCK[capability][dtype]
    else:
        rate = GENEROUS_PER_SM[dtype]
        notes.append(f"capability {capability or 'unknown'}: generous {rate} FLOPs/SM/clock")
    sms = gpu.multiprocessors or (table.multiprocessors if table else None)
    if sms is None:
        sms = GENEROUS_GPU_SMS
        notes.append(f"multiprocessors unknown: generous {sms}")
    hz = gpu.clock_hz or (table.clock_hz if table else None)
    if hz is None:
        hz = GENEROUS_GPU_HZ
        notes.append("clock unknown: generous bound")
    cc = f"sm_{capability[0]}{capability[1]}" if capability else "sm_?"
    derivation = (f"{gpu.name or 'GPU'} ({cc}): {sms} SMs x {rate} {dtype} FLOPs per SM per clock x "
                  f"{hz / 1e9:.2f} GHz" + (f"; {'; '.join(notes)}" if notes else ""))
    return Ceiling(sms * rate * hz / 1e9, derivation)


# --- the guard ------------------------------------------------------------------------------
def check(flops: float | None, seconds: float, ceiling: Ceiling | None, slack: float,
          gain: float = 1.0) -> float | None:
    """GFLOP/s of a call taking `seconds`; raises Implausible above ceiling x slack x `gain`
    (the most work a known algorithm saves against the counted FLOPs: Winograd convolution)."""
    if not flops or seconds <= 0:
        return None
    gflops = flops / seconds / 1e9
    if ceiling and gflops > ceiling.gflops * slack * gain:
        saved = f" x {gain:g} (the most a fast algorithm saves)" if gain > 1 else ""
        raise Implausible(
            f"{gflops:,.0f} GFLOP/s is above {slack:g} x the device's ceiling of {ceiling.gflops:,.0f} GFLOP/s"
            f"{saved} [{ceiling.derivation}]: the timed call did not wait for its work (missing synchronisation?) "
            "or did not do it (a result kept from an earlier call?)"
        )
    return gflops


class Roofline:
    """One session's ceilings: --peak-gflops where given, else derived once per device and
    dtype; the GPU's facts come from the first framework that runs there."""

    def __init__(self, override_gflops: float | None, slack: float, threads: int,
                 cpu: CpuFacts | None = None) -> None:
        self.override, self.slack, self.threads = override_gflops, slack, threads
        self._cpu = cpu
        self._gpu: GpuFacts | None = None
        self._ceilings: dict[tuple[str, str], Ceiling] = {}

    def cpu(self) -> CpuFacts:
        if self._cpu is None:
            self._cpu = read_cpu()
        return self._cpu

    def ceiling(self, device: str, dtype: str, backend: Any = None) -> Ceiling:
        if self.override:
            return Ceiling(self.override, "given by --peak-gflops")
        key = (device, dtype)
        if key not in self._ceilings:
            if device == "cpu":
                self._ceilings[key] = cpu_ceiling(self.cpu(), dtype)
            else:
                if self._gpu is None and backend is not None:
                    self._gpu = backend.gpu_facts()
                self._ceilings[key] = gpu_ceiling(self._gpu, dtype)
        return self._ceilings[key]

    def check(self, flops: float | None, seconds: float, device: str, dtype: str, backend: Any = None,
              gain: float = 1.0) -> float | None:
        """GFLOP/s of a call taking `seconds` against the device's ceiling in `dtype`; None for a
        call that counts no FLOPs (a model step), whose ceiling is not derived at all."""
        if not flops:
            return None
        return check(flops, seconds, self.ceiling(device, dtype, backend), self.slack, gain)

    def derived(self, devices: tuple[str, ...], dtypes: tuple[str, ...]) -> dict[str, Any]:
        """The CPU ceilings for machine_info (same on every run of an unchanged host; a GPU's
        is in each GPU result's extra_info, since only a framework can read its facts)."""
        if "cpu" not in devices:
            return {}
        return {"slack": self.slack, "cpu": {d: self.ceiling("cpu", d).as_dict() for d in dtypes}}
