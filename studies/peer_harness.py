"""opbench's medians beside each framework's own way of timing the same call, in one run.

A harness that reports what it asked for rather than what ran can be off by a factor, not a
percentage: MXNet computed on one thread of two for months while opbench recorded two. This
script times a few operator calls with each framework's own method and sets them beside
opbench's medians of the same calls, all at the same thread count (every core the process may
use), so that such a factor shows:

- PyTorch: torch.utils.benchmark.Timer(...).blocked_autorange() (eager);
- MXNet: its opperf method, a Python timer around the call and mx.nd.waitall() after warm-up,
  with OMP_NUM_THREADS set before MXNet starts, as opperf's users do (eager NDArray);
- TensorFlow: timeit over the same tf.function (graph mode);
- JAX: timeit over the same jax.jit function, each call block_until_ready() (jit).

opbench runs as a user runs it (pytest over benchmarks/ops, one process per framework, as each
peer has) twice, and each peer twice, each run in a fresh process: the run-to-run spread of each
side is measured, and the two agree when their ratio is within the sum of the two spreads.

    .venv/bin/python studies/peer_harness.py [--frameworks torch,mxnet,tensorflow,jax] [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = {"torch": "eager", "mxnet": "eager", "tensorflow": "graph", "jax": "jit"}
# (opbench test, label, the call's parameters)
CALLS = (
    ("gemm", "256x256x256", {"m": 256, "k": 256, "n": 256}),
    ("gemm", "1024x1024x1024", {"m": 1024, "k": 1024, "n": 1024}),
    ("conv2d", "16x64x32x32-o64-k3-s1-p1", {"n": 16, "c": 64, "h": 32, "o": 64, "k": 3, "stride": 1, "pad": 1}),
    ("conv2d", "16x128x16x16-o128-k3-s2-p1", {"n": 16, "c": 128, "h": 16, "o": 128, "k": 3, "stride": 2, "pad": 1}),
    ("relu", "256x1024", {"n": 256, "d": 1024}),
)
MIN_RUN_S = 1.0  # each peer measurement runs the call for at least this long


def _inputs(name: str, p: dict, nhwc: bool = False):
    import numpy as np

    r = np.random.default_rng(0)
    if name == "gemm":
        return r.standard_normal((p["m"], p["k"]), np.float32), r.standard_normal((p["k"], p["n"]), np.float32)
    if name == "conv2d":
        x = r.standard_normal((p["n"], p["c"], p["h"], p["h"]), np.float32)
        w = r.standard_normal((p["o"], p["c"], p["k"], p["k"]), np.float32)
        return (x.transpose(0, 2, 3, 1).copy(), w.transpose(2, 3, 1, 0).copy()) if nhwc else (x, w)
    return (r.standard_normal((p["n"], p["d"]), np.float32),)


def _per_call(run, sync) -> float:
    """timeit's way: the median of repeated batches of calls, per call, over MIN_RUN_S seconds."""
    sync(run())
    number = max(1, int(0.05 / max(timeit.timeit(lambda: sync(run()), number=1), 1e-7)))
    times, start = [], time.perf_counter()
    while time.perf_counter() - start < MIN_RUN_S or len(times) < 5:
        times.append(timeit.timeit(lambda: sync(run()), number=number) / number)
    return statistics.median(times)


def peer_torch(name: str, p: dict) -> float:
    import torch
    import torch.nn.functional as F
    from torch.utils import benchmark

    args = [torch.from_numpy(a) for a in _inputs(name, p)]
    fn = {"gemm": torch.mm, "relu": torch.relu,
          "conv2d": lambda x, w: F.conv2d(x, w, stride=p.get("stride"), padding=p.get("pad"))}[name]
    timer = benchmark.Timer(stmt="fn(*args)", globals={"fn": fn, "args": args}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=MIN_RUN_S).median


def peer_mxnet(name: str, p: dict) -> float:
    import numpy as np

    if not hasattr(np, "bool"):
        np.bool = np.bool_
    import mxnet as mx

    args = [mx.nd.array(a) for a in _inputs(name, p)]
    fn = {"gemm": mx.nd.dot, "relu": mx.nd.relu,
          "conv2d": lambda x, w: mx.nd.Convolution(x, w, kernel=(p["k"], p["k"]), stride=(p["stride"],) * 2,
                                                   pad=(p["pad"],) * 2, num_filter=p["o"], no_bias=True)}[name]
    for _ in range(10):  # opperf's warm-up
        fn(*args)
    mx.nd.waitall()
    times, start = [], time.perf_counter()
    while time.perf_counter() - start < MIN_RUN_S or len(times) < 25:
        t0 = time.perf_counter()
        fn(*args)
        mx.nd.waitall()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peer_tensorflow(name: str, p: dict) -> float:
    import tensorflow as tf

    n = len(os.sched_getaffinity(0))
    tf.config.threading.set_intra_op_parallelism_threads(n)
    tf.config.threading.set_inter_op_parallelism_threads(n)
    args = [tf.constant(a) for a in _inputs(name, p, nhwc=True)]
    pad = [[0, 0], [p.get("pad", 0)] * 2, [p.get("pad", 0)] * 2, [0, 0]]
    fn = tf.function({"gemm": tf.linalg.matmul, "relu": tf.nn.relu,
                      "conv2d": lambda x, w: tf.nn.conv2d(x, w, p.get("stride"), pad)}[name], autograph=False)
    return _per_call(lambda: fn(*args), lambda out: out)


def peer_jax(name: str, p: dict) -> float:
    import jax
    import jax.numpy as jnp
    from jax import lax

    args = [jnp.asarray(a) for a in _inputs(name, p)]
    conv = lambda x, w: lax.conv_general_dilated(x, w, (p["stride"],) * 2, [(p["pad"],) * 2] * 2,
                                                  precision=lax.Precision.HIGHEST)
    fn = jax.jit({"gemm": lambda a, b: jnp.dot(a, b, precision=lax.Precision.HIGHEST), "relu": jax.nn.relu,
                  "conv2d": conv}[name])
    return _per_call(lambda: fn(*args), lambda out: out.block_until_ready())


def run_peer(framework: str) -> dict[str, float]:
    if framework == "torch":
        import torch

        torch.set_num_threads(len(os.sched_getaffinity(0)))
    measure = globals()[f"peer_{framework}"]
    return {f"{name}[{label}]": measure(name, p) for name, label, p in CALLS}


def peer_process(framework: str) -> dict[str, float]:
    """One peer run in a fresh process (MXNet's threads from OMP_NUM_THREADS, set before it starts)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(len(os.sched_getaffinity(0))), "TF_CPP_MIN_LOG_LEVEL": "2"}
    out = subprocess.run([sys.executable, __file__, "--peer", framework], check=True, capture_output=True,
                         text=True, env=env, timeout=900)
    return json.loads(out.stdout.strip().splitlines()[-1])


def opbench_run(frameworks: list[str]) -> dict[tuple[str, str], float]:
    """opbench's medians, as a user measures them: pytest over benchmarks/ops, one process."""
    names = " or ".join(sorted({n for n, _, _ in CALLS}))
    labels = " or ".join(label for _, label, _ in CALLS)
    modes = " or ".join(f"({f} and {MODES[f]})" for f in frameworks)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "run.json"
        subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "benchmarks" / "ops"), "-q",
                        "-p", "no:cacheprovider", "-m", f"({names}) and forward and ({modes})",
                        "-k", f"float32 and ({labels})",
                        "--benchmark-max-time=1", f"--benchmark-json={path}"], check=True, cwd=ROOT,
                       capture_output=True, timeout=1800)
        runs = json.loads(path.read_text())["benchmarks"]
    return {(b["extra_info"]["framework"], f"{b['extra_info']['op']}[{b['extra_info']['shape']}]"): b["stats"]["median"]
            for b in runs}


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.mean(values) if len(values) > 1 else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", default="torch,mxnet,tensorflow,jax")
    parser.add_argument("--runs", type=int, default=2, help="runs of each side, each a fresh process")
    parser.add_argument("--peer", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        print(json.dumps(run_peer(args.peer)))
        return
    frameworks = args.frameworks.split(",")
    # one opbench process per framework, as each peer has: PyTorch and MXNet share one OpenMP
    # runtime in a process (opbench.harness.openmp), and the peers never meet another framework
    ours = [{k: v for f in frameworks for k, v in opbench_run([f]).items()} for _ in range(args.runs)]
    peers = {f: [peer_process(f) for _ in range(args.runs)] for f in frameworks}
    print(f"threads: {len(os.sched_getaffinity(0))} (every core this process may use); "
          f"medians in ms; spread = (max - min) / mean over {args.runs} fresh-process runs")
    print(f"{'framework/mode':<18}{'call':<38}{'opbench':>9}{'peer':>9}{'ratio':>7}{'spread o/p':>13}  verdict")
    for f in frameworks:
        for name, label, _ in CALLS:
            key = f"{name}[{label}]"
            o = [run[(f, key)] * 1e3 for run in ours if (f, key) in run]
            q = [run[key] * 1e3 for run in peers[f]]
            if not o:
                print(f"{f + '/' + MODES[f]:<18}{key:<38}  not measured by opbench")
                continue
            ratio = statistics.median(o) / statistics.median(q)
            so, sp = spread(o), spread(q)
            verdict = "agrees" if abs(ratio - 1) <= so + sp else "DIFFERS"
            print(f"{f + '/' + MODES[f]:<18}{key:<38}{statistics.median(o):>9.3f}{statistics.median(q):>9.3f}"
                  f"{ratio:>7.2f}{so:>7.1%}/{sp:.1%}  {verdict}")


if __name__ == "__main__":
    main()
