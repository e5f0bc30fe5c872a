"""One-line messages from exceptions: every error opbench shows a user, writes to a result or
sends between processes is a single line, however many lines the framework's message had."""

from __future__ import annotations


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first non-empty line of the exception's message, at most `limit` characters."""
    return (str(exc).strip().splitlines() or [""])[0][:limit]


def one_line(exc: BaseException, limit: int = 300) -> str:
    """'TypeName: first line of the message' (or only the type's name when there is no message)."""
    text = first_line(exc, limit)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
