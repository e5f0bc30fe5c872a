"""Instruction-set caps: run every library's AVX2 kernels on a host with AVX-512, so that one
machine checks the code paths of the common AVX2-only CI runner as well as its own; and, on a host
with AVX-512 BF16 or AMX, the bfloat16 paths of the older AVX-512 CPUs: `avx512` (Skylake-SP to Ice
Lake Xeons, the Intel CI runners of the large clouds: oneDNN emulates bfloat16 with AVX-512 integer
instructions) and `avx512_bf16` (AMD Zen 4 and 5, Cooper Lake: bfloat16 dot products without AMX).

Each library that picks kernels by the CPU has its own switch, read when it loads:

- oneDNN 3 (TensorFlow, PyTorch): ONEDNN_MAX_CPU_ISA; MXNet 1.9.1's oneDNN 2 reads
  DNNL_MAX_CPU_ISA (its MKLDNN_ spelling is ignored: measured, it kept AVX2 when asked for AVX);
- ATen's vectorised kernels and torch.compile's C++ kernels (inductor): ATEN_CPU_CAPABILITY;
- MKL (PyTorch's BLAS): MKL_ENABLE_INSTRUCTIONS;
- OpenBLAS (NumPy, the reference): OPENBLAS_CORETYPE;
- XLA (JAX, TensorFlow's jit_compile): the --xla_cpu_max_isa flag in XLA_FLAGS;
- TensorFlow's own choice of kernels, which it makes from CPUID, not from oneDNN's capped level: its
  oneDNN operations are on by default only where the CPU has AVX-512 VNNI, AVX-512 BF16, AVX-VNNI or
  AMX (else Eigen's kernels run, over oneDNN's sgemm), and bfloat16 goes to oneDNN wherever it has
  AVX-512F. A small library loaded with LD_PRELOAD (tsl_cpu_features.c, built once with the C
  compiler torch.compile uses) answers TensorFlow's CPU-feature questions as a CPU at the cap would,
  the features TSL numbers from OPBENCH_TSL_HIDDEN_FROM on answered "no" (TSL_HIDDEN_FROM).

`lowers` says whether a cap holds this CPU back at all (the CPU has the cap's own level and
something newer). `environment` adds them to an environment, with torch.compile's kernel cache in
a folder of the cap's own (INDUCTOR_CACHE); `python -m opbench.harness.isa avx2 CMD...` runs a command under them.
Whether each cap took effect is read from the library itself (tests/harness/test_isa_caps.py:
oneDNN's verbose ISA line and kernel names, ATen's capability, OpenBLAS's core type, the FMA
instructions in XLA's object code); MKL's verbose line names no instruction set on AMD CPUs, so
there its cap is set but not shown. `in_force` reads the caps a
process runs under, for the fingerprint of a saved run.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from opbench.harness.roofline import read_cpu

# The first feature of TSL's CPUFeature enumeration (tsl/platform/cpu_info.h, whose numbers are fixed) that a
# CPU at each cap lacks, and every later one: AVX512F (27) on an AVX2 CPU (Zen 2 and 3, Haswell to Comet Lake);
# AVX512_BF16 (39) on Skylake-SP to Ice Lake; AVX_VNNI (40: AMX, AVX512_FP16, AVX_NE_CONVERT follow it) on
# Zen 4. The avx cap (the tests' cap below every host, float32 only) leaves TensorFlow's answers alone: the
# features it lacks (AVX2, FMA, F16C, BMI...) are not one range of the enumeration.
TSL_HIDDEN_FROM = {"avx2": 27, "avx512": 39, "avx512_bf16": 40}
TSL_HIDDEN = "OPBENCH_TSL_HIDDEN_FROM"
TSL_SHIM = "tsl_cpu_features"
# The value each library's switch takes for an instruction set.
CAPS: dict[str, dict[str, str]] = {
    "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
             "MKL_ENABLE_INSTRUCTIONS": "AVX2", "OPENBLAS_CORETYPE": "Haswell", "xla": "AVX2",
             TSL_HIDDEN: str(TSL_HIDDEN_FROM["avx2"])},
    # ATen has no finer level than avx512, and torch.compile's C++ kernels, under it, still pick this CPU's
    # bfloat16 conversions and AMX flags (inductor's VecAMX); OpenBLAS serves NumPy's float64 reference, whose
    # kernels are the same on every AVX-512 CPU (SkylakeX)
    "avx512": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "DNNL_MAX_CPU_ISA": "AVX512_CORE", "ATEN_CPU_CAPABILITY": "avx512",
               "MKL_ENABLE_INSTRUCTIONS": "AVX512", "OPENBLAS_CORETYPE": "SkylakeX", "xla": "AVX512",
               TSL_HIDDEN: str(TSL_HIDDEN_FROM["avx512"])},
    "avx512_bf16": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16", "DNNL_MAX_CPU_ISA": "AVX512_CORE_BF16",
                    "ATEN_CPU_CAPABILITY": "avx512", "MKL_ENABLE_INSTRUCTIONS": "AVX512_E3",
                    "OPENBLAS_CORETYPE": "SkylakeX", "xla": "AVX512_BF16",
                    TSL_HIDDEN: str(TSL_HIDDEN_FROM["avx512_bf16"])},
    # below every FMA host: what the tests use to show a cap takes effect on any x86 machine
    "avx": {"ONEDNN_MAX_CPU_ISA": "AVX", "DNNL_MAX_CPU_ISA": "AVX", "ATEN_CPU_CAPABILITY": "default",
            "MKL_ENABLE_INSTRUCTIONS": "AVX", "OPENBLAS_CORETYPE": "Sandybridge", "xla": "AVX"},
}
# The /proc/cpuinfo flags of each cap's own level, and those of the newer sets it holds back: a cap lowers
# a CPU's kernels where the CPU has all of the first and any of the second.
LEVELS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "avx": (frozenset({"avx"}), frozenset({"avx2", "avx512f"})),
    "avx2": (frozenset({"avx2", "fma"}), frozenset({"avx512f"})),
    "avx512": (frozenset({"avx512f", "avx512dq", "avx512bw", "avx512vl"}), frozenset({"avx512_bf16", "amx_bf16"})),
    "avx512_bf16": (frozenset({"avx512_bf16"}), frozenset({"amx_bf16"})),
}
XLA_FLAG = "--xla_cpu_max_isa"
VARIABLES = tuple(k for k in CAPS["avx2"] if k != "xla")
# torch.compile keeps its C++ kernels on disk under keys that leave out the vector ISA they were built
# for (torch 2.13): a kernel built uncapped on an AVX-512 host is served to a capped process and computes
# wrong values (relu * 2 + 1 off by 10.3), and one built capped crashes an uncapped process ("malloc():
# unaligned tcache chunk detected"). So a capped process keeps its kernels in a folder of its own, beside
# the uncapped one (docs/explanation/trustworthy.md).
INDUCTOR_CACHE = "TORCHINDUCTOR_CACHE_DIR"


def environment(isa: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) with every library capped at `isa`; an XLA
    flag already in XLA_FLAGS is replaced, the others kept, and the TensorFlow CPU-feature library
    first in LD_PRELOAD (where a C compiler built it; else TensorFlow is left to answer for this CPU)."""
    if isa not in CAPS:
        raise ValueError(f"unknown instruction set {isa!r}; valid: {', '.join(CAPS)}")
    env = dict(os.environ if base is None else base)
    caps = CAPS[isa]
    for name in VARIABLES:  # a cap over another keeps none of the other's switches
        env.pop(name, None)
    env.update({k: v for k, v in caps.items() if k != "xla"})
    preload = [p for p in _preloaded(env) if not _is_shim(p)]
    if TSL_HIDDEN in caps:
        try:
            preload.insert(0, tsl_shim())
        except ShimUnavailable:
            del env[TSL_HIDDEN]  # TensorFlow answers for this CPU: in_force does not claim otherwise
    if preload:
        env["LD_PRELOAD"] = " ".join(preload)
    else:
        env.pop("LD_PRELOAD", None)
    flags = [f for f in shlex.split(env.get("XLA_FLAGS", "")) if not f.startswith(XLA_FLAG)]
    env["XLA_FLAGS"] = " ".join([*flags, f"{XLA_FLAG}={caps['xla']}"])
    env[INDUCTOR_CACHE] = kernel_cache(env)
    return env


def _preloaded(env: Mapping[str, str]) -> list[str]:
    """The libraries LD_PRELOAD names (separated by spaces or colons)."""
    return env.get("LD_PRELOAD", "").replace(":", " ").split()


def _is_shim(path: str) -> bool:
    return os.path.basename(path).startswith(TSL_SHIM)


class ShimUnavailable(RuntimeError):
    """No C compiler built tsl_cpu_features.c: TensorFlow answers for this CPU, not for the cap."""


@functools.cache
def tsl_shim() -> str:
    """The built TensorFlow CPU-feature library (tsl_cpu_features.c), compiled once per source into a
    folder of this user's in the temporary folder, with $CC, cc or gcc."""
    source = Path(__file__).with_name(f"{TSL_SHIM}.c")
    compiler = shlex.split(os.environ.get("CC", "")) or [c for c in (shutil.which("cc"), shutil.which("gcc")) if c][:1]
    if not compiler:
        raise ShimUnavailable("no C compiler (cc, gcc or $CC) to build the TensorFlow CPU-feature library")
    folder = Path(tempfile.gettempdir()) / f"opbench-isa-{os.getuid()}"
    built = folder / f"{TSL_SHIM}-{hashlib.sha256(source.read_bytes()).hexdigest()[:16]}.so"
    if not built.exists():
        folder.mkdir(parents=True, exist_ok=True)
        partial = built.with_suffix(f".{os.getpid()}.tmp")
        try:
            done = subprocess.run([*compiler, "-O2", "-shared", "-fPIC", "-o", str(partial), str(source), "-ldl"],
                                  check=False, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ShimUnavailable(f"{compiler[0]} could not build {source.name}: {exc}") from None
        if done.returncode != 0:
            partial.unlink(missing_ok=True)
            raise ShimUnavailable(f"{compiler[0]} could not build {source.name}: {done.stderr.strip()[-300:]}")
        os.replace(partial, built)  # whole or absent, for processes building it side by side
    return str(built)


def capped_cache(folder: str | None, isa: str) -> str:
    """The folder of torch.compile's kernels for a process capped at `isa`: beside `folder` (the
    uncapped one: TORCHINDUCTOR_CACHE_DIR, or torch's default in the temporary folder), never in it."""
    base = (folder or os.path.join(tempfile.gettempdir(), "torchinductor_opbench")).rstrip(os.sep)
    for other in CAPS:  # a folder already capped stands for its uncapped one
        base = base.removesuffix(f"-{other}")
    return f"{base}-{isa}"


def kernel_cache(env: Mapping[str, str]) -> str | None:
    """The folder of torch.compile's kernels for a process with `env` where ATEN_CPU_CAPABILITY caps
    it (at one of CAPS, or at any other value it takes): that cap's own, beside its
    TORCHINDUCTOR_CACHE_DIR (`capped_cache`); None for an uncapped process."""
    aten = env.get("ATEN_CPU_CAPABILITY")
    if not aten:
        return None
    named: dict[str, str] = {}
    for isa, caps in CAPS.items():  # avx512 and avx512_bf16 share ATen's level, so inductor's kernels: one folder
        named.setdefault(caps["ATEN_CPU_CAPABILITY"], isa)
    return capped_cache(env.get(INDUCTOR_CACHE), named.get(aten, aten.lower()))


def in_force(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caps set in `env` (default: this process's), by variable: empty on an uncapped run."""
    env = os.environ if env is None else env
    found = {k: env[k] for k in VARIABLES if env.get(k)}
    if not any(map(_is_shim, _preloaded(env))):
        found.pop(TSL_HIDDEN, None)  # the variable alone hides nothing
    xla = [f.split("=", 1)[1] for f in shlex.split(env.get("XLA_FLAGS", "")) if f.startswith(f"{XLA_FLAG}=")]
    if xla:
        found["XLA_FLAGS"] = f"{XLA_FLAG}={xla[-1]}"
    return found


def unchanged(isa: str, cpuinfo: str | None = None) -> str | None:
    """Why a cap at `isa` leaves this CPU's (or a recorded /proc/cpuinfo's) kernels as they are: it
    lacks the cap's own level, or has nothing newer; None where the cap lowers them."""
    own, newer = LEVELS[isa]
    flags = read_cpu(cpuinfo).flags
    if not own <= flags:
        return f"this CPU lacks {', '.join(sorted(own - flags))}, the {isa.upper()} cap's own level"
    if not newer & flags:
        return f"this CPU has nothing newer than {isa.upper()} ({' or '.join(sorted(newer))}): its kernels are these"
    return None


def lowers(isa: str, cpuinfo: str | None = None) -> bool:
    """Whether a cap at `isa` holds this CPU (or a recorded /proc/cpuinfo) to older kernels than its own."""
    return unchanged(isa, cpuinfo) is None


USAGE = (f"usage: python -m opbench.harness.isa {{{','.join(CAPS)}}} COMMAND [ARGS...]\n"
         f"       python -m opbench.harness.isa --lowers {{{','.join(CAPS)}}}")


def main(argv: list[str]) -> int:
    """`python -m opbench.harness.isa ISA CMD...`: run CMD with every library capped at ISA.
    `--lowers ISA`: exit 0 where that cap holds this CPU back, else 1 with the reason on one line."""
    if len(argv) == 2 and argv[0] == "--lowers" and argv[1] in CAPS:
        why = unchanged(argv[1])
        if why:
            print(f"the {argv[1].upper()} cap changes nothing here: {why}, which make test runs")
        return 1 if why else 0
    if len(argv) < 2 or argv[0] not in CAPS:
        print(USAGE, file=sys.stderr)
        return 2
    env = environment(argv[0])
    caps = " ".join(f"{k}={v}" for k, v in in_force(env).items())
    if TSL_HIDDEN in CAPS[argv[0]] and TSL_HIDDEN not in env:
        try:
            tsl_shim()
        except ShimUnavailable as exc:
            print(f"TensorFlow still sees this CPU's features, not the cap's: {exc}", file=sys.stderr, flush=True)
    why = unchanged(argv[0])
    note = f" ({why})" if why else ""
    print(f"ISA capped at {argv[0].upper()}{note}: {caps}; torch.compile's kernels in {env[INDUCTOR_CACHE]}",
          flush=True)
    try:
        os.execvpe(argv[1], argv[1:], env)
    except OSError as exc:
        print(f"cannot run {argv[1]}: {exc.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
