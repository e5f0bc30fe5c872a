"""Files opbench writes: atomic replacement (a crash never leaves a torn result, page or plot), and
the up-front check that a place given on the command line can be written, made before any long
work so that a run is never lost at its end for want of a writable target.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


class NotWritable(ValueError):
    """A target given by the user cannot be written; the message is one line naming the option."""


def writable_folder(path: Path, option: str, create: bool = True) -> None:
    """Check that `path` is (or, with `create`, can become) a writable folder."""
    if path.exists() and not path.is_dir():
        raise NotWritable(f"{option} {path}: is a file, not a folder")
    if not create and not path.is_dir():
        raise NotWritable(f"{option} {path}: cannot write there (no such folder)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError as exc:
        raise NotWritable(f"{option} {path}: cannot write there ({exc.strerror or exc})") from None


def option_path(value) -> Path | None:
    """The path an output option names. pytest-benchmark before 5 opens --benchmark-json itself
    (argparse.FileType), so the option may hold an open file rather than its name."""
    if not value:
        return None
    return Path(value if isinstance(value, str | os.PathLike) else value.name)


def writable_file(path: Path, option: str, create_folder: bool = True) -> None:
    """Check that a file can be written at `path`: not a folder, its folder writable (made when
    `create_folder`), the file itself writable if it exists."""
    if path.is_dir():
        raise NotWritable(f"{option} {path}: is a folder, not a file")
    writable_folder(path.parent, option, create=create_folder)
    if path.exists() and not os.access(path, os.W_OK):
        raise NotWritable(f"{option} {path}: the file is not writable")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def replace_atomic(path: Path, write) -> None:
    """Call `write(temporary path)` next to `path`, then rename it into place: a crash never leaves a
    torn file. The file gets the mode a plain open() would give it (0666 less the umask), as
    pytest-benchmark's own files have, not mkstemp's 0600."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp" + path.suffix)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` atomically (see replace_atomic)."""
    replace_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_json_atomic(path: Path, document: dict) -> None:
    """Write a JSON document atomically (serialised first, so a bad document writes nothing)."""
    write_text_atomic(path, json.dumps(document, indent=4))
