"""The roofline's ceilings come from the hardware: recorded /proc/cpuinfo flag sets and clocks of
the hosts opbench runs on, and fake GPU properties, give the ceilings their datasheets allow;
an unsynchronised call still fails, and a library's speed never sets the ceiling."""

from __future__ import annotations

import pytest

from opbench.harness.roofline import (
    GENEROUS_CPU_HZ,
    KNOWN_GPUS,
    Ceiling,
    CpuFacts,
    GpuFacts,
    Implausible,
    Roofline,
    check,
    cpu_ceiling,
    gpu_ceiling,
    max_clock,
    read_cpu,
)

# Abridged /proc/cpuinfo of the hosts the suite has met (the flags the ceiling reads are all there).
EPYC_AVX2 = """vendor_id\t: AuthenticAMD
cpu family\t: 23
model\t\t: 49
model name\t: AMD EPYC 7B12
flags\t\t: fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi2
"""
# Zen 3 (the common hosted CI runner's CPU) and an Intel AVX2 part: 8 float32 lanes, 2 FMA pipes per core
EPYC_ZEN3 = """vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
flags\t\t: fpu sse sse2 ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes xsave avx f16c avx2 bmi1 bmi2 vaes vpclmulqdq
"""
XEON_HASWELL = """vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 63
model name\t: Intel(R) Xeon(R) CPU E5-2680 v3 @ 2.50GHz
flags\t\t: fpu sse sse2 ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes xsave avx f16c rdrand avx2 bmi1 bmi2
"""
EPYC_ZEN4 = """vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
flags\t\t: fpu sse sse2 fma avx f16c avx2 avx512f avx512dq avx512bw avx512vl avx512_bf16 avx512_vnni
"""
XEON_SPR = """vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 207
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu sse sse2 fma avx f16c avx2 avx512f avx512bw avx512vl avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8
"""
XEON_NO_AMX = XEON_SPR.replace(" amx_bf16 amx_tile amx_int8", "")
GRAVITON3 = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm sve i8mm bf16
CPU implementer\t: 0x41
CPU part\t: 0xd40
"""


def facts(text: str, cores: int = 2, arch: str = "x86_64", max_khz: str | None = "3500000", boost: str | None = None,
          sve_bytes: str | None = None) -> CpuFacts:
    files = {"/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq": max_khz,
             "/sys/devices/system/cpu/cpufreq/boost": boost, "/proc/sys/abi/sve_default_vector_length": sve_bytes}
    return read_cpu(text, cores=cores, arch=arch, sysfs=files.get)


@pytest.mark.parametrize("text, dtype, gflops", [
    # cores x lanes x 2 FMA units x 2 x 3.5 GHz
    (EPYC_AVX2, "float32", 2 * 8 * 2 * 2 * 3.5),
    (EPYC_AVX2, "bfloat16", 2 * 8 * 2 * 2 * 3.5),  # no native bf16: the fp32 rate
    (EPYC_ZEN3, "float32", 2 * 8 * 2 * 2 * 3.5),  # 256-bit AVX2: 8 lanes, 2 FMA pipes
    (EPYC_ZEN3, "bfloat16", 2 * 8 * 2 * 2 * 3.5),  # no avx512_bf16: through float32
    (EPYC_ZEN3, "float16", 2 * 8 * 2 * 2 * 3.5),  # f16c converts, the FMA is float32's
    (XEON_HASWELL, "float32", 2 * 8 * 2 * 2 * 3.5),
    (XEON_HASWELL, "bfloat16", 2 * 8 * 2 * 2 * 3.5),
    (EPYC_ZEN4, "float32", 2 * 8 * 2 * 2 * 3.5),  # AVX-512 on 256-bit units
    (EPYC_ZEN4, "bfloat16", 2 * 16 * 2 * 2 * 3.5),  # avx512_bf16 pairs
    (EPYC_ZEN4, "float16", 2 * 8 * 2 * 2 * 3.5),
    (XEON_NO_AMX, "float32", 2 * 16 * 2 * 2 * 3.5),
    (XEON_NO_AMX, "float16", 2 * 32 * 2 * 2 * 3.5),  # avx512_fp16
    (XEON_NO_AMX, "bfloat16", 2 * 32 * 2 * 2 * 3.5),
    (XEON_SPR, "float32", 2 * 16 * 2 * 2 * 3.5),
    (XEON_SPR, "bfloat16", 2 * 1024 * 1 * 2 * 3.5),  # AMX: 1024 bf16 multiply-adds per clock
    (XEON_SPR, "float16", 2 * 32 * 2 * 2 * 3.5),  # amx_fp16 is not there: avx512_fp16
])
def test_x86_ceilings_follow_flags_and_clock(text, dtype, gflops):
    ceiling = cpu_ceiling(facts(text), dtype)
    assert ceiling.gflops == pytest.approx(gflops)
    assert "3.50 GHz (cpufreq maximum)" in ceiling.derivation


def test_the_ceiling_is_above_what_oneDNN_reached_on_the_xeon_where_numpy_ran_haswell_kernels():
    """The Xeon (model 207) of the report: oneDNN reached 273 GFLOP/s (XLA GEMM 1024^3) on 2
    cores, NumPy's OpenBLAS 65; the derived ceiling (no cpufreq there) allows the former."""
    ceiling = cpu_ceiling(facts(XEON_SPR, max_khz=None), "float32")
    assert ceiling.gflops == pytest.approx(2 * 16 * 2 * 2 * GENEROUS_CPU_HZ / 1e9)
    check(2 * 1024**3, 2 * 1024**3 / 273e9, ceiling, 1.5)
    assert "generous bound" in ceiling.derivation


def test_arm64_sve_and_neon():
    g3 = cpu_ceiling(facts(GRAVITON3, cores=4, arch="aarch64", sve_bytes="32"), "float32")
    assert g3.gflops == pytest.approx(4 * 8 * 2 * 2 * 3.5)  # 256-bit SVE, 2 units
    bf16 = cpu_ceiling(facts(GRAVITON3, cores=4, arch="aarch64", sve_bytes="32"), "bfloat16")
    assert bf16.gflops == pytest.approx(4 * g3.gflops)  # BFMMLA
    neon = cpu_ceiling(facts(GRAVITON3.replace(" sve", ""), cores=4, arch="aarch64"), "float32")
    assert neon.gflops == pytest.approx(4 * 4 * 4 * 2 * 3.5)  # 4 x 128-bit units
    unknown_sve = cpu_ceiling(facts(GRAVITON3, cores=4, arch="aarch64"), "float32")
    assert unknown_sve.gflops > g3.gflops and "maximum" in unknown_sve.derivation


def test_unknown_flags_and_clocks_get_generous_bounds():
    bare = cpu_ceiling(facts("", max_khz=None), "float32")
    assert bare.gflops == pytest.approx(2 * 16 * 2 * 2 * GENEROUS_CPU_HZ / 1e9)
    assert "512-bit vectors assumed" in bare.derivation and "generous bound" in bare.derivation
    other = cpu_ceiling(facts("", arch="riscv64", max_khz=None), "float32")
    assert "unknown architecture" in other.derivation


def test_cpufreq_maximum_is_not_trusted_when_it_excludes_boost():
    assert max_clock({"/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq": "2600000"}.get) == (2.6e9,
                                                                                                    "cpufreq maximum")
    hz, why = max_clock({"/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq": "2600000",
                         "/sys/devices/system/cpu/cpufreq/boost": "1"}.get)
    assert hz is None and "boost" in why
    assert max_clock({}.get) == (None, "cpufreq not readable")


@pytest.mark.parametrize("gpu, dtype, tflops", [
    (GpuFacts("NVIDIA H100 80GB HBM3", (9, 0), 132, 1.98e9), "float16", 132 * 4096 * 1.98e9 / 1e12),
    (GpuFacts("NVIDIA H100 80GB HBM3", (9, 0), 132, 1.98e9), "float32", 132 * 256 * 1.98e9 / 1e12),  # no TF32
    (GpuFacts("NVIDIA A100-SXM4-40GB", (8, 0), 108, 1.41e9), "bfloat16", 108 * 2048 * 1.41e9 / 1e12),
    (GpuFacts("NVIDIA A100-SXM4-40GB", (8, 0), 108, 1.41e9), "float32", 108 * 128 * 1.41e9 / 1e12),
    # only the name, as TensorFlow and JAX tell it: the table fills the rest
    (GpuFacts("NVIDIA A100-SXM4-80GB"), "float16", 108 * 2048 * 1.41e9 / 1e12),
    (GpuFacts("NVIDIA H100 PCIe", (9, 0)), "float16", 114 * 4096 * 1.755e9 / 1e12),
    (GpuFacts("Tesla V100-SXM2-16GB", (7, 0), 80), "bfloat16", 80 * 128 * 1.53e9 / 1e12),  # no bf16 tensor cores
])
def test_gpu_ceilings_from_properties(gpu, dtype, tflops):
    assert gpu_ceiling(gpu, dtype).gflops / 1e3 == pytest.approx(tflops)


def test_gpu_ceilings_are_at_or_above_published_dense_peaks():
    """NVIDIA's dense peaks (TFLOP/s; float32 on the CUDA cores, TF32 off): the ceiling may be
    generous, never below them."""
    h100 = GpuFacts("NVIDIA H100 80GB HBM3", (9, 0), 132, 1.98e9)
    a100 = GpuFacts("NVIDIA A100-SXM4-40GB", (8, 0), 108, 1.41e9)
    for gpu, dtype, published in ((h100, "float16", 989.4), (h100, "float32", 66.9), (a100, "float16", 312),
                                  (a100, "float32", 19.5)):
        assert gpu_ceiling(gpu, dtype).gflops / 1e3 >= published * 0.999


def test_an_unknown_gpu_gets_generous_bounds_and_says_so():
    ceiling = gpu_ceiling(GpuFacts("Future GPU", (13, 0)), "float16")
    assert ceiling.gflops > 5e6  # 5 PFLOP/s: above any device the table knows
    assert "generous" in ceiling.derivation and "multiprocessors unknown" in ceiling.derivation
    known = [gpu_ceiling(GpuFacts("x", row[3], row[1], row[2] * 1e6), "float32").gflops
             for row in KNOWN_GPUS]
    assert gpu_ceiling(None, "float32").gflops > max(known)


def test_unsynchronised_mxnet_gemm_of_the_report_fails_on_every_host_kind():
    """120,710 GFLOP/s: what an unsynchronised MXNet 1024^3 GEMM claimed on a 2-core host."""
    seconds = 2 * 1024**3 / 120_710e9
    for text in (EPYC_AVX2, EPYC_ZEN4, XEON_SPR):
        with pytest.raises(Implausible, match="did not wait"):
            check(2 * 1024**3, seconds, cpu_ceiling(facts(text, max_khz=None), "float32"), 1.5)


def test_the_guard_message_carries_the_derivation_and_fast_algorithms_get_their_gain():
    ceiling = Ceiling(100.0, "2 cores x 8 lanes")
    with pytest.raises(Implausible, match=r"ceiling of 100 GFLOP/s \[2 cores x 8 lanes\]"):
        check(200e9, 1.0, ceiling, 1.5)
    assert check(200e9, 1.0, ceiling, 1.5, gain=9.0) == pytest.approx(200.0)  # 3x3 Winograd's bound
    assert check(None, 1.0, ceiling, 1.5) is None


def test_a_given_peak_overrides_and_numpy_never_sets_the_ceiling(monkeypatch):
    from opbench.harness import session

    monkeypatch.setattr(session, "numpy_gemm_gflops", lambda threads: pytest.fail("a ceiling measured NumPy"))
    derived = Roofline(None, 1.5, 2, cpu=facts(XEON_SPR))
    assert derived.ceiling("cpu", "float32").gflops == pytest.approx(448.0)
    assert derived.derived(("cpu",), ("float32",))["cpu"]["float32"]["gflops"] == pytest.approx(448.0)
    given = Roofline(10.0, 1.5, 2, cpu=facts(XEON_SPR))
    with pytest.raises(Implausible, match="--peak-gflops"):
        given.check(200e9, 1.0, "cpu", "float32")


def test_the_gpu_ceiling_asks_the_framework_once():
    class Backend:
        asked = 0

        def gpu_facts(self):
            Backend.asked += 1
            return GpuFacts("NVIDIA A100-SXM4-40GB", (8, 0), 108, 1.41e9)

    r = Roofline(None, 1.5, 2, cpu=facts(EPYC_AVX2))
    assert r.ceiling("gpu", "float16", Backend()).gflops == pytest.approx(108 * 2048 * 1.41)
    r.ceiling("gpu", "float32", Backend())
    assert Backend.asked == 1


def test_a_step_without_a_flop_count_derives_no_ceiling():
    """A model step counts no FLOPs: on an H100 an amp training step asked for a GPU ceiling in
    dtype 'amp' and every amp case failed with KeyError before this."""
    class Backend:
        def gpu_facts(self):
            raise AssertionError("no ceiling is derived for a call without FLOPs")

    r = Roofline(None, 1.5, 2, cpu=facts(EPYC_AVX2))
    assert r.check(None, 1e-3, "gpu", "amp", Backend()) is None
    assert r.check(0, 1e-3, "gpu", "float32", Backend()) is None


def test_a_timed_gpu_call_is_held_to_its_own_device():
    """The ceiling of a GPU call comes from the framework that ran it, not from generous bounds."""
    class Backend:
        def gpu_facts(self):
            return GpuFacts("NVIDIA H100 80GB HBM3", (9, 0), 132, 1.98e9)

    r = Roofline(None, 1.5, 2, cpu=facts(EPYC_AVX2))
    with pytest.raises(Implausible):  # 80 TFLOP/s of float32: past 1.5 x the CUDA cores' 66.9
        r.check(2 * 1024**3, 2 * 1024**3 / 110e12, "gpu", "float32", Backend())


def test_this_host_has_a_ceiling():
    ceiling = Roofline(None, 1.5, 1).ceiling("cpu", "float32")
    assert ceiling.gflops > 0 and "FLOPs" in ceiling.derivation


@pytest.mark.parametrize("text", [EPYC_ZEN3, XEON_HASWELL])
def test_an_avx2_only_cpu_is_derived_from_its_own_vector_width(text):
    """No AVX-512 flag: 256-bit vectors, 8 float32 lanes, 2 FMA units per core, and the
    derivation says so (the ceiling of the common CI runner, not of the hosts opbench grew on)."""
    derivation = cpu_ceiling(facts(text), "float32").derivation
    assert "8 float32 lanes x 2 FMA units" in derivation and "256-bit fp32 FMA" in derivation
