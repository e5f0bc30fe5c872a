"""The instruction-set caps take effect, read from each library itself (tests/isa_probe.py in a
subprocess): capped below this CPU at AVX, which every FMA host exceeds, no library runs a kernel
of a newer set, so the switches work on whatever host runs this; capped at AVX2 on an AVX-512
host (make test-isa), none runs an AVX-512 kernel; capped at AVX512 or AVX512_BF16 on a host with
AVX-512 BF16 or AMX, bfloat16 runs on the older CPUs' kernels. MKL's verbose line names no
instruction set on AMD CPUs, so its cap is set but not shown here."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from opbench import frameworks
from opbench.harness import isa
from opbench.harness.roofline import read_cpu

ROOT = Path(__file__).resolve().parents[2]
NEWER = {"avx": ("avx2", "avx512", "amx"), "avx2": ("avx512", "amx", "avx2_vnni")}
# What each library reports under a cap, by its own names.
ONEDNN = {"avx": "Intel AVX", "avx2": "Intel AVX2"}
ATEN = {"avx": ("DEFAULT", "INVALID_VEC_ISA"), "avx2": ("AVX2", "avx2")}
OPENBLAS = {"avx": "Sandybridge", "avx2": "Haswell"}
LIBRARIES = ("torch", "mxnet", "tensorflow", "jax", "numpy")
# The bfloat16 caps: oneDNN's ISA line and the suffix of its bfloat16 kernels (PyTorch, TensorFlow), the
# kernels it must not run, and the instructions XLA must not emit (JAX; TensorFlow's XLA emitted no bfloat16
# or AMX instruction even uncapped on the Xeon). MXNet computes no bfloat16 on the CPU, and NumPy's
# reference is float64.
BF16_ONEDNN = {"avx512": ("Intel AVX-512 with AVX512BW, AVX512VL, and AVX512DQ extensions", ":avx512_core"),
               "avx512_bf16": ("Intel AVX-512 with Intel DL Boost and bfloat16 support", ":avx512_core_bf16")}
BF16_NEWER = {"avx512": (("avx512_core_bf16", "avx512_core_fp16", "amx", "avx10"), ("bf16", "amx")),
              "avx512_bf16": (("avx512_core_fp16", "amx", "avx10"), ("amx",))}
_VERBOSE = r"^(?:onednn|dnnl)_verbose,(?:v1,)?"  # oneDNN 3's lines and MXNet's oneDNN 2's
_EXEC = _VERBOSE + r"(?:primitive,)?exec,cpu,"
_KERNEL = re.compile(_EXEC + r"[^,]*,([^,]*),", re.M)
_EXEC_LINE = re.compile(_EXEC + r".*$", re.M)
_ISA_LINE = re.compile(_VERBOSE + r"info,cpu,isa:(.+?)\s*$", re.M)


def _unchanged(cap: str) -> str:
    return f"the {cap} cap changes nothing here: {isa.unchanged(cap)}"


def _skip_unless_it_lowers(cap: str) -> None:
    if not isa.lowers(cap):
        pytest.skip(_unchanged(cap))


# a test of what the AVX2 cap changes, which on a CPU without AVX-512 is nothing
LOWERS_AVX2 = pytest.mark.skipif(not isa.lowers("avx2"), reason=_unchanged("avx2"))


def _probe(library: str, cap: str, dtype: str = "float32") -> tuple[dict, str]:
    if library != "numpy":
        try:
            frameworks.load(library)
        except frameworks.Unavailable as exc:
            pytest.skip(str(exc))
    if library in ("jax", "tensorflow") and not shutil.which("objdump"):
        pytest.skip("objdump (binutils) is needed to read XLA's object code")
    env = isa.environment(cap, {**os.environ, "ONEDNN_VERBOSE": "1", "DNNL_VERBOSE": "1",
                                "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])})
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "isa_probe.py"), library, dtype], env=env, cwd=ROOT,
                          check=False, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr + done.stdout


def _kernels(library: str, cap: str, log: str, newer_names) -> list[str]:
    """oneDNN's kernels in `log`, none of them named for an instruction set in `newer_names`."""
    kernels = _KERNEL.findall(log)
    newer = [k for k in kernels if any(n in k.lower() for n in newer_names)]
    assert not newer, f"{library} under the {cap} cap ran {sorted(set(newer))}"
    return kernels


def _check(library: str, cap: str) -> None:
    seen, log = _probe(library, cap)
    kernels = _kernels(library, cap, log, NEWER[cap])
    if library in ("torch", "mxnet", "tensorflow"):
        said = set(_ISA_LINE.findall(log))
        assert said == {ONEDNN[cap]}, f"{library}'s oneDNN says {said or 'nothing'}, not {ONEDNN[cap]}"
    if library in ("torch", "mxnet"):
        assert kernels, f"{library} ran no oneDNN kernel to read"
    if library == "torch":
        assert (seen["aten"], seen["inductor"]) == ATEN[cap]
    if library == "numpy":
        assert seen["openblas"] and set(seen["openblas"]) == {OPENBLAS[cap]}
    if library in ("jax", "tensorflow"):
        xla = seen["xla"]
        assert xla["objects"] and not xla["zmm"], xla
        if cap == "avx":
            assert xla["fma"] == 0, f"XLA in {library} emitted {xla['fma']} FMA instructions under the AVX cap"


@pytest.mark.skipif(not {"avx", "fma"} <= read_cpu().flags, reason="needs an x86 CPU with FMA, newer than the AVX cap")
@pytest.mark.parametrize("library", LIBRARIES)
def test_a_cap_below_this_cpu_takes_effect(library):
    _check(library, "avx")


@LOWERS_AVX2
@pytest.mark.parametrize("library", LIBRARIES)
def test_the_avx2_caps_take_effect_on_an_avx512_host(library):
    _check(library, "avx2")


@pytest.mark.parametrize("cap", ["avx512", "avx512_bf16"])
@pytest.mark.parametrize("library", ["torch", "tensorflow", "jax"])
def test_the_bfloat16_caps_take_effect(library, cap):
    """oneDNN's bfloat16 kernels are the older CPUs' (emulated with AVX-512 integer instructions under
    avx512, AVX-512 BF16 dot products without AMX under avx512_bf16), and XLA emits no newer instruction."""
    _skip_unless_it_lowers(cap)
    seen, log = _probe(library, cap, "bfloat16")
    newer_kernels, newer_instructions = BF16_NEWER[cap]
    kernels = _kernels(library, cap, log, newer_kernels)
    if library in ("torch", "tensorflow"):
        said, suffix = BF16_ONEDNN[cap]
        assert set(_ISA_LINE.findall(log)) == {said}, f"{library}'s oneDNN says {set(_ISA_LINE.findall(log))}"
        assert any(k.endswith(suffix) for k in kernels), f"{library} ran no {suffix} kernel: {sorted(set(kernels))}"
    if library in ("jax", "tensorflow"):
        xla = seen["xla"]
        assert xla["objects"] and not any(xla[n] for n in newer_instructions), xla


# TSL's numbers for CPU features whose /proc/cpuinfo flags Linux prints, at and after each cap's first hidden one
TSL_FLAGS = {27: "avx512f", 38: "avx512_vnni", 39: "avx512_bf16", 40: "avx_vnni", 41: "amx_tile", 43: "amx_bf16",
             44: "avx512_fp16"}


@pytest.mark.parametrize("cap", list(isa.TSL_HIDDEN_FROM))
def test_tensorflow_asks_the_cpu_a_cap_stands_for(cap):
    """The caps hide TensorFlow's CPU features by TSL's numbers (isa.TSL_HIDDEN_FROM): its own answers
    for those numbers are this CPU's flags of those names. Under a cap its callers hear "no" for every
    feature from the cap's first hidden one on and its own answer below it; under the AVX2 cap its
    oneDNN operations are off, as on an AVX2 CPU (TensorFlow turns them on by default only with
    AVX-512 VNNI, AVX-512 BF16, AVX-VNNI or AMX)."""
    _skip_unless_it_lowers(cap)
    seen, _ = _probe("tensorflow", cap, "features")
    flags = read_cpu().flags
    assert {n: seen["own"][n] for n in TSL_FLAGS} == {n: flag in flags for n, flag in TSL_FLAGS.items()}
    first = isa.TSL_HIDDEN_FROM[cap]
    assert any(seen["own"][first:]), "the cap lowers this CPU, so TensorFlow has a feature to hide"
    assert seen["asked"][:first] == seen["own"][:first] and not any(seen["asked"][first:]), seen
    if cap == "avx2":
        assert seen["onednn_ops"] is False


@LOWERS_AVX2
def test_tensorflow_computes_bfloat16_under_the_avx2_cap_as_an_avx2_cpu_does():
    """On an AVX2 CPU TensorFlow computes bfloat16 with Eigen (over oneDNN's float32 sgemm); told this
    CPU's AVX-512 it sent bfloat16 to oneDNN, which has no AVX2 bfloat16 convolution (AbortedError)."""
    _, log = _probe("tensorflow", "avx2", "bfloat16")
    ran = _EXEC_LINE.findall(log)
    assert ran and not [line for line in ran if "bf16" in line], ran
    assert any(",gemm_api," in line for line in ran), ran


def test_the_caps_environment_and_what_a_run_records(tmp_path, monkeypatch):
    env = isa.environment("avx2", {"XLA_FLAGS": "--xla_cpu_max_isa=SSE4_2 --xla_force_host_platform_device_count=2"})
    assert env["ONEDNN_MAX_CPU_ISA"] == env["DNNL_MAX_CPU_ISA"] == "AVX2" and env["ATEN_CPU_CAPABILITY"] == "avx2"
    assert env["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2 --xla_cpu_max_isa=AVX2"
    assert isa.in_force(env)["XLA_FLAGS"] == "--xla_cpu_max_isa=AVX2" and isa.in_force({}) == {}
    # TensorFlow's CPU-feature library, first in LD_PRELOAD and once, and its switch, recorded where both are set
    assert env["LD_PRELOAD"] == isa.tsl_shim() and isa.in_force(env)[isa.TSL_HIDDEN] == "27"
    assert isa.environment("avx512", {"LD_PRELOAD": "/lib/a.so"})["LD_PRELOAD"] == f"{isa.tsl_shim()} /lib/a.so"
    assert isa.environment("avx2", env) == env and isa.TSL_HIDDEN not in isa.in_force({isa.TSL_HIDDEN: "27"})
    below = isa.environment("avx", {**env, "LD_PRELOAD": f"{env['LD_PRELOAD']}:/lib/a.so"})
    assert isa.TSL_HIDDEN not in below and below["LD_PRELOAD"] == "/lib/a.so"
    # without a compiler TensorFlow answers for this CPU, and nothing claims otherwise
    isa.tsl_shim.cache_clear()
    monkeypatch.setattr(isa.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-cc"))
    try:
        bare = isa.environment("avx2", {})
        assert "LD_PRELOAD" not in bare and isa.TSL_HIDDEN not in bare and bare["ONEDNN_MAX_CPU_ISA"] == "AVX2"
        with pytest.raises(isa.ShimUnavailable, match="could not build"):
            isa.tsl_shim()
    finally:
        isa.tsl_shim.cache_clear()
    assert isa.lowers("avx2", "flags\t: fpu avx2 fma avx512f\n") and not isa.lowers("avx2", "flags\t: fpu avx2 fma\n")
    with pytest.raises(ValueError, match="unknown instruction set"):
        isa.environment("sse9")


ZEN3 = "vendor_id\t: AuthenticAMD\nflags\t\t: fpu sse avx fma avx2\n"
ICELAKE = "vendor_id\t: GenuineIntel\nflags\t\t: fpu avx fma avx2 avx512f avx512dq avx512bw avx512vl avx512_vnni\n"
ZEN4 = "vendor_id\t: AuthenticAMD\nflags\t\t: fpu avx fma avx2 avx512f avx512dq avx512bw avx512vl avx512_bf16\n"
SAPPHIRE_RAPIDS = ICELAKE.replace("avx512_vnni", "avx512_vnni avx512_bf16 avx512_fp16 amx_bf16 amx_tile")


@pytest.mark.parametrize(("cpuinfo", "lowered"), [
    pytest.param(ZEN3, {"avx"}, id="zen3"),
    pytest.param(ICELAKE, {"avx", "avx2"}, id="icelake"),
    pytest.param(ZEN4, {"avx", "avx2", "avx512"}, id="zen4"),
    pytest.param(SAPPHIRE_RAPIDS, {"avx", "avx2", "avx512", "avx512_bf16"}, id="sapphire-rapids"),
])
def test_a_cap_lowers_only_a_cpu_above_it(cpuinfo, lowered):
    """Each cap runs where the CPU has its level and something newer, so `make test-isa` checks every
    older path a host can stand in for, and says why it skips the others."""
    assert {cap for cap in isa.CAPS if isa.lowers(cap, cpuinfo)} == lowered
    assert "lacks avx512_bf16" in isa.unchanged("avx512_bf16", ICELAKE)
    assert "nothing newer than AVX512" in isa.unchanged("avx512", ICELAKE)


def test_the_command_line_says_whether_a_cap_lowers_this_cpu():
    run = [sys.executable, "-m", "opbench.harness.isa"]
    done = subprocess.run([*run, "--lowers", "avx2"], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == (0 if isa.lowers("avx2") else 1), done.stdout + done.stderr
    why = isa.unchanged("avx2")
    assert done.stdout == (f"the AVX2 cap changes nothing here: {why}, which make test runs\n" if why else "")
    bad = subprocess.run([*run, "--lowers", "sse9"], check=False, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("usage:"), bad.stderr


def test_a_capped_process_keeps_torch_compiles_kernels_beside_the_uncapped_ones():
    env = isa.environment("avx2", {isa.INDUCTOR_CACHE: "/work/.cache/inductor/"})
    assert env[isa.INDUCTOR_CACHE] == "/work/.cache/inductor-avx2"
    assert isa.environment("avx", env)[isa.INDUCTOR_CACHE] == "/work/.cache/inductor-avx"  # not inductor-avx2-avx
    assert isa.environment("avx2", env) == env
    assert isa.environment("avx2", {})[isa.INDUCTOR_CACHE].endswith("torchinductor_opbench-avx2")
    # both AVX-512 caps leave ATen (so inductor) at avx512: they compile the same kernels, in one folder
    assert isa.environment("avx512_bf16", env)[isa.INDUCTOR_CACHE] == "/work/.cache/inductor-avx512"
    assert isa.environment("avx512", env)[isa.INDUCTOR_CACHE] == "/work/.cache/inductor-avx512"


# torch.compile's kernels, compared with eager torch, in a fresh process (the kernel cache is on disk)
_COMPILED_RELU = """
import torch
x = torch.randn(256, 1024, generator=torch.Generator().manual_seed(0))
got = torch.compile(lambda x: torch.relu(x) * 2 + 1)(x)
print(float((got - (torch.relu(x) * 2 + 1)).abs().max()))
"""


@pytest.mark.skipif(not isa.lowers("avx2"), reason="this CPU has no AVX-512: capped and uncapped kernels are one")
@pytest.mark.parametrize("order", [pytest.param(("", "avx2"), id="uncapped-then-capped"),
                                   pytest.param(("avx2", ""), id="capped-then-uncapped", marks=pytest.mark.full)])
def test_kernels_compiled_under_one_cap_are_never_served_to_another(order, tmp_path):
    """torch 2.13's kernel cache keys leave the vector ISA out: with one folder, a kernel built
    uncapped gave a capped process values 10.3 off, and one built capped crashed the uncapped
    process. isa.environment keeps each cap's kernels apart, so both orders compute right."""
    try:
        frameworks.load("torch")
    except frameworks.Unavailable as exc:
        pytest.skip(str(exc))
    base = {**os.environ, isa.INDUCTOR_CACHE: str(tmp_path / "inductor")}
    for cap in order:
        env = isa.environment(cap, base) if cap else base
        done = subprocess.run([sys.executable, "-c", _COMPILED_RELU], env=env, check=False, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, f"{cap or 'uncapped'}: {done.stderr[-1500:]}"
        assert float(done.stdout.split()[-1]) == 0.0, f"{cap or 'uncapped'} compiled relu is off: {done.stdout}"
