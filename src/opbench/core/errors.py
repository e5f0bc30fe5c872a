"""One-line messages from exceptions: every error opbench shows a user, writes to a result or
sends between processes is a single line, however many lines the framework's message had."""

from __future__ import annotations


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first non-empty line of the exception's message, at most `limit` characters. A first
    line that is only a heading (it ends with ':') gets the cause below it: TensorFlow's
    "Graph execution error:" is followed by where the node was defined (indented traceback lines)
    and only then by what went wrong ("Collective ops is aborted by: ...")."""
    lines = str(exc).strip().splitlines() or [""]
    head = lines[0].strip()
    if head.endswith(":"):
        cause = next((x.strip() for x in lines[1:] if x.strip() and not x[:1].isspace()
                      and not x.startswith("Detected at node")), "")
        head = f"{head} {cause}" if cause else head
    return head[:limit]


def one_line(exc: BaseException, limit: int = 300) -> str:
    """'TypeName: first line of the message' (or only the type's name when there is no message)."""
    text = first_line(exc, limit)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class DeclarationError(ValueError):
    """A workload declared outside opbench (opbench.api, a --workloads blueprint) that opbench cannot
    benchmark: one line, starting with where it was declared, saying what to fix."""
