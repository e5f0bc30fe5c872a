"""Both ends of a worker process (the paired gate's opbench.regression.worker, a distributed
benchmark's opbench.suites.distributed.worker).

The coordinator's end (WorkerProcess): start one, send it requests as JSON lines, read its replies
with a deadline, and make sure nothing is left running. A worker that exits raises WorkerDied, one
that misses its deadline is killed (with its whole process group) and raises WorkerHung; both
messages are one line naming the side.

The worker's end (reply_stream, serve): one request loop for every kind of worker. A request is a
JSON line with a "cmd"; every reply is one JSON line with "ok", and a request that fails is
answered with a one-line "error" while the worker stays up; "exit" or the end of input ends it.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from opbench.core.errors import one_line


class WorkerFailure(Exception):
    """A worker is gone (crashed, killed, or hung past its deadline); the message is one line."""


class WorkerDied(WorkerFailure):
    pass


class WorkerHung(WorkerFailure):
    pass


def last_line(path: Path) -> str:
    """The last non-empty line of a worker's log (what it said before dying)."""
    try:
        lines = [x.strip() for x in path.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


INTERRUPTS = {signal.SIGINT, signal.SIGTERM}
LIVE: set[WorkerProcess] = set()  # every worker started and not yet killed, whoever holds it


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Run the block with SIGINT and SIGTERM deferred to its end: start a process and register it
    there, and an interrupt cannot leave it started with nobody holding it.

    Blocking the signals (pthread_sigmask) does not do this: it holds them back from this thread
    alone, and the kernel hands a process's signal to any thread that does not block it (NumPy's
    BLAS threads), whose C handler has the main thread run the Python handler at its next
    instruction, inside subprocess.Popen included. So the handlers themselves are swapped for one
    that notes the signal, and the first signal noted is raised again once the owner's handlers
    are back. Signal handlers run in the main thread only: elsewhere the block just runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    previous = {s: signal.getsignal(s) for s in sorted(INTERRUPTS)}
    previous = {s: h for s, h in previous.items() if h is not None}  # None: a handler set outside Python
    for s in previous:
        signal.signal(s, lambda signum, frame: noted.append(signum))
    try:
        yield
    finally:
        restored = None
        for s, handler in previous.items():
            try:
                signal.signal(s, handler)  # runs any handler already due, the restored ones included
            except BaseException as exc:  # every handler is restored before one propagates
                restored = restored or exc
        if restored is not None:
            raise restored
        if noted:
            signal.raise_signal(noted[0])  # to the owner's handler: KeyboardInterrupt, or the default action


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block SIGTERM (a cancelled CI job, `kill`) ends a command as Ctrl-C does:
    KeyboardInterrupt, so workers and children are stopped and what finished is kept. Background
    jobs of a non-interactive shell ignore SIGINT, so for them this is the only clean way to stop;
    without it a parent of child pytests died at once and its child, in a session of its own, ran
    on. Signal handlers are set in the main thread only: elsewhere the block just runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def kill_all() -> None:
    """Kill every worker still running: the last step of an interrupted command, for workers
    whose owner was interrupted before it could close them."""
    for worker in list(LIVE):
        worker.kill()


class WorkerProcess:
    """One live worker: `python -m opbench.regression.worker` of an environment, its stderr in `log`."""

    def __init__(self, side: str, command: list[str], env: dict[str, str], log: Path) -> None:
        # `side` names the worker in every message: "the {side} worker died ..."
        self.side, self.log = side, log
        # Started and registered with interrupts deferred: one that landed between the fork and the
        # registration left a worker nobody closes (seen on busy machines, CI included).
        with interrupts_deferred(), open(log, "ab") as err:
            self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         env=env, start_new_session=True)
            LIVE.add(self)
        self._buffer = b""
        self._exit_sent = False

    def ask(self, request: dict, timeout: float) -> dict:
        """Send one request and wait up to `timeout` seconds for its reply."""
        self.send(request)
        return self.reply(request.get("cmd", "?"), timeout)

    def send(self, request: dict) -> None:
        """Send one request without waiting (workers of one collective step are all sent theirs
        before any reply is read)."""
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died() from None

    def reply(self, what: str, timeout: float) -> dict:
        """The next reply, waiting up to `timeout` seconds; `what` names the request in messages."""
        deadline = time.monotonic() + timeout
        while (got := self.read_ready()) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerHung(f"the {self.side} worker did not answer '{what}' within {timeout:.0f} s "
                                 "and was stopped")
            select.select([self.fileno()], [], [], left)
        return got

    def fileno(self) -> int:
        return self.proc.stdout.fileno()

    def read_ready(self) -> dict | None:
        """The next reply if one has arrived, else None, without blocking (call it when select says
        the pipe is readable, or to drain what is buffered). Raises WorkerDied on end of file."""
        if b"\n" not in self._buffer and select.select([self.fileno()], [], [], 0)[0]:
            chunk = os.read(self.fileno(), 1 << 16)
            if not chunk:
                raise self._died()
            self._buffer += chunk
        if b"\n" not in self._buffer:
            return None
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            self.kill()
            raise WorkerDied(f"the {self.side} worker answered garbage: {line[:120]!r}") from None

    def exited(self) -> WorkerDied | None:
        """Why the worker is gone, if it has exited (without waiting), else None."""
        return self._died() if self.proc.poll() is not None else None

    def _died(self) -> WorkerDied:
        code = self.proc.wait()
        reason = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        said = last_line(self.log)
        return WorkerDied(f"the {self.side} worker died ({reason})" + (f": {said}" if said else ""))

    def kill(self) -> None:
        """Stop the worker and anything it started, now."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        self._close_pipes()
        LIVE.discard(self)

    def request_exit(self) -> None:
        """Ask the worker to exit, without waiting (several workers then finish together)."""
        if self.proc.poll() is None and not self._exit_sent:
            self._exit_sent = True
            try:
                self.proc.stdin.write(b'{"cmd": "exit"}\n')
                self.proc.stdin.flush()
            except OSError:
                pass

    def close(self, grace: float = 10.0) -> None:
        """Ask the worker to exit; kill it if it does not within `grace` seconds."""
        self.request_exit()
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def _close_pipes(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass


def reply_stream() -> TextIO:
    """The worker's end of the pipe: the process's original stdout, line-buffered, for replies
    alone. Everything printed afterwards, by Python or by a framework's C code, goes to stderr
    (the worker's log) and cannot reach the protocol."""
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    return replies


def plain(value: Any) -> Any:
    """NumPy scalars and anything else JSON lacks, as plain values."""
    return value.item() if hasattr(value, "item") else str(value)


def serve(answer: Callable[[dict], dict], requests: Iterable[str], replies: TextIO) -> None:
    """Answer each request line with `answer` until "exit" or the end of `requests`."""
    for line in requests:
        request = json.loads(line)
        if request.get("cmd") == "exit":
            break
        try:
            reply = answer(request)
        except Exception as exc:  # a request that went wrong is an answer, not a dead worker
            reply = {"ok": False, "error": one_line(exc)}
        replies.write(json.dumps(reply, default=plain) + "\n")
        replies.flush()
