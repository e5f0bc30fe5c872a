"""What instruction sets one library's kernels use, read from the library itself; run as a
subprocess under the caps of opbench.harness.isa (tests/harness/test_isa_caps.py). Prints one
JSON object: the ISA names the library's own reports carry (oneDNN's verbose ISA line and kernel
names, ATen's capability and inductor's vector ISA, OpenBLAS's core type) and, for XLA, the
vector instructions in the object code it compiled (dumped with --xla_dump_to)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def _xla_instructions(dump: str) -> dict[str, int]:
    """FMA instructions and 512-bit registers in every object file XLA wrote to `dump`."""
    text = "".join(subprocess.run(["objdump", "-d", str(o)], capture_output=True, text=True, check=True).stdout
                   for o in Path(dump).glob("*.o"))
    return {"objects": len(list(Path(dump).glob("*.o"))), "fma": len(re.findall(r"\bvfn?m(add|sub)", text)),
            "zmm": len(re.findall(r"%zmm", text))}


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
        print(json.dumps(probe(sys.argv[1], dump)), flush=True)
