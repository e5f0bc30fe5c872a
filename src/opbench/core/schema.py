"""What a saved result says, written once for its writers (suites.measure, the breakdown, the
distributed suite) and its readers (results): the identity keys of every result's extra_info,
the directions, and the breakdown's operator families in report order."""

from __future__ import annotations

from typing import Any

OP_DIRECTIONS = ("forward", "backward")
MODEL_DIRECTIONS = ("inference", "training")
DIRECTIONS = (*OP_DIRECTIONS, *MODEL_DIRECTIONS, "convergence")

# The breakdown's families of profiled operators, (family, label) in report order.
FAMILIES = (
    ("conv", "conv"),
    ("dense", "dense/GEMM"),
    ("recurrent", "recurrent (fused RNN kernel)"),
    ("activation", "activation"),
    ("pooling", "pooling"),
    ("normalization", "normalization"),
    ("copy", "reshape/copy"),
    ("loss", "loss"),
    ("update", "optimizer update"),
    ("fused", "fused kernels"),
    ("other", "other"),
    ("unattributed", "unattributed"),
)
FAMILY_NAMES = tuple(family for family, _ in FAMILIES)

SUBJECTS = ("op", "model")  # the key naming what ran is one of these: the subject's kind
IDENTITY = ("direction", "family", "framework", "framework_version", "device", "mode", "dtype", "shape", "threads",
            "max_abs_err")  # ... and these follow it in every result


LOAD = "load"  # how busy the machine was while the result was timed: opbench.harness.load.Load.as_dict()


BUSY_MARK = " !"  # after a figure that rests on a result timed on a busy machine, in every table derived from time


def busy(extra: dict[str, Any]) -> bool:
    """Whether the result was timed while other work took more CPUs than its team left free."""
    return bool((extra.get(LOAD) or {}).get("busy"))


def load_line(saved: dict[str, Any]) -> str:
    """One line from a saved extra_info['load']."""
    free = max(0, saved["cpus"] - saved["team"])
    return (f"other work took {saved['other_cpus']:.2f} of {saved['cpus']} CPUs ({free:g} free beside "
            f"{saved['team']} threads), steal {saved['steal']:.0%}, run queue {saved['run_queue']:g}")


def width_label(nodes: int, workers: int) -> str:
    """A data-parallel group's width as ids and tables write it: 'w2' on one node, 'n2xw1' (nodes x
    workers per node) on several."""
    return f"w{workers}" if nodes == 1 else f"n{nodes}xw{workers}"


def identity(kind: str, name: str, **fields: Any) -> dict[str, Any]:
    """The identity block of a result's extra_info: `kind` ("op" or "model") names `name`, and
    `fields` are exactly the IDENTITY keys."""
    if kind not in SUBJECTS or set(fields) != set(IDENTITY):
        raise ValueError(f"an identity is one of {SUBJECTS} and the keys {IDENTITY}; got {kind!r}, {sorted(fields)}")
    return {kind: name, **{key: fields[key] for key in IDENTITY}}


def subject(extra: dict[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of what a result measured, from its extra_info; None if it does not say."""
    return next(((kind, extra[kind]) for kind in SUBJECTS if kind in extra), None)
