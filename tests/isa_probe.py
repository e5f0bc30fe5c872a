"""What instruction sets one library's kernels use, read from the library itself; run as a
subprocess under the caps of opbench.harness.isa (tests/harness/test_isa_caps.py). Prints one
JSON object: the ISA names the library's own reports carry (oneDNN's verbose ISA line and kernel
names, ATen's capability and inductor's vector ISA, OpenBLAS's core type) and, for XLA, the
vector instructions in the object code it compiled (dumped with --xla_dump_to). A second
argument names the type: `float32` (the default) or `bfloat16`, the paths of the avx512 and
avx512_bf16 caps; or `features`, TensorFlow's answers to its CPU-feature questions."""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def _xla_instructions(dump: str) -> dict[str, int]:
    """FMA instructions, 512-bit registers, AVX-512 BF16 instructions and AMX instructions in every
    object file XLA wrote to `dump`."""
    text = "".join(subprocess.run(["objdump", "-d", str(o)], capture_output=True, text=True, check=True).stdout
                   for o in Path(dump).glob("*.o"))
    return {"objects": len(list(Path(dump).glob("*.o"))), "fma": len(re.findall(r"\bvfn?m(add|sub)", text)),
            "zmm": len(re.findall(r"%zmm", text)), "bf16": len(re.findall(r"\bv(dpbf16ps|cvtne2?ps2bf16)\b", text)),
            "amx": len(re.findall(r"\b(tdp\w+|ldtilecfg|tileloadd\w*)\b", text))}


def probe_bfloat16(library: str, dump: str) -> dict:
    """A convolution and a matrix product in bfloat16 (oneDNN's in PyTorch and TensorFlow), and one
    compiled by XLA with bfloat16 arithmetic after it (JAX, TensorFlow's jit_compile)."""
    if library == "torch":
        import torch

        torch.nn.functional.conv2d(torch.ones(8, 16, 32, 32, dtype=torch.bfloat16),
                                   torch.ones(32, 16, 3, 3, dtype=torch.bfloat16))
        a = torch.ones(64, 64, dtype=torch.bfloat16)
        a @ a
        return {}
    if library == "tensorflow":
        import tensorflow as tf

        tf.nn.conv2d(tf.ones((8, 32, 32, 16), tf.bfloat16), tf.ones((3, 3, 16, 32), tf.bfloat16), 1, "VALID").numpy()
        a = tf.ones((64, 64), tf.bfloat16)
        tf.matmul(a, a).numpy()
        tf.function(lambda a: tf.matmul(a, a) * a + a, jit_compile=True)(a).numpy()
        return {"xla": _xla_instructions(dump)}
    if library == "jax":
        import jax
        import jax.numpy as jnp

        a = jnp.ones((64, 64), jnp.bfloat16)
        jax.block_until_ready(jax.jit(lambda a: (a @ a) * a + a)(a))
        return {"xla": _xla_instructions(dump)}
    raise SystemExit(f"no bfloat16 probe for {library}")


def probe_features(library: str, dump: str) -> dict:
    """TensorFlow's CPU-feature answers by TSL's numbers: its own library's (`own`), those its callers get
    (`asked`: the first definition in the process's global scope, which LD_PRELOAD puts first; its own
    otherwise), and whether its oneDNN operations are on (`onednn_ops`)."""
    if library != "tensorflow":
        raise SystemExit(f"no CPU-feature probe for {library}")
    import tensorflow as tf
    from tensorflow.python.util import _pywrap_util_port

    name = "_ZN3tsl4port14TestCPUFeatureENS0_10CPUFeatureE"
    own = getattr(ctypes.CDLL(os.path.join(os.path.dirname(tf.__file__), "libtensorflow_framework.so.2")), name)
    asked = getattr(ctypes.CDLL(None), name, own)
    for f in (own, asked):
        f.restype, f.argtypes = ctypes.c_bool, [ctypes.c_int]
    return {"own": [bool(own(i)) for i in range(64)], "asked": [bool(asked(i)) for i in range(64)],
            "onednn_ops": bool(_pywrap_util_port.IsMklEnabled())}


def probe(library: str, dump: str) -> dict:
    if library == "torch":
        import torch
        from torch._inductor import cpu_vec_isa

        torch.nn.functional.conv2d(torch.ones(8, 16, 32, 32), torch.ones(32, 16, 3, 3))
        return {"aten": torch.backends.cpu.get_cpu_capability(), "inductor": str(cpu_vec_isa.pick_vec_isa())}
    if library == "mxnet":
        from opbench.frameworks.mxnet.loader import mx

        x, w = mx.nd.ones((8, 16, 32, 32)), mx.nd.ones((32, 16, 3, 3))
        mx.nd.Convolution(x, w, kernel=(3, 3), num_filter=32, no_bias=True).wait_to_read()
        return {}
    if library == "numpy":
        import numpy as np
        import threadpoolctl

        np.ones((64, 64)) @ np.ones((64, 64))
        return {"openblas": [i.get("architecture") for i in threadpoolctl.threadpool_info()
                             if i.get("internal_api") == "openblas"]}
    if library == "jax":
        import jax
        import jax.numpy as jnp

        jax.block_until_ready(jax.jit(lambda x: jnp.tanh(x @ x))(jnp.ones((64, 64))))
        return {"xla": _xla_instructions(dump)}
    if library == "tensorflow":
        import tensorflow as tf

        x = tf.ones((64, 64))
        tf.matmul(x, x).numpy()
        tf.function(lambda x: tf.tanh(tf.matmul(x, x)), jit_compile=True)(x).numpy()
        return {"xla": _xla_instructions(dump)}
    raise SystemExit(f"no probe for {library}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as dump:
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={dump}"
        # XLA must compile what is read here: a program JAX reads back from its persistent cache (make's test
        # targets keep one, keyed without the dump folder) writes no object code to read
        os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)
        probes = {"float32": probe, "bfloat16": probe_bfloat16, "features": probe_features}
        run = probes[(sys.argv[2:] or ["float32"])[0]]
        print(json.dumps(run(sys.argv[1], dump)), flush=True)
