"""Starting and stopping the testbed's own processes, identified by PID and start time."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import signal
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

from fracnb_testbed.errors import TestbedError

LOOPBACK = "127.0.0.1"
T = TypeVar("T")


@dataclass(frozen=True)
class ProcessRecord:
    """A started process: its PID plus its kernel start time, so a reused PID is never killed."""

    name: str
    pid: int
    start_ticks: int
    log: str

    def to_dict(self) -> dict:
        return asdict(self)


def start_ticks_of(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time since boot), or None if the PID is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may contain spaces and parentheses; fields follow the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


def is_alive(record: ProcessRecord) -> bool:
    """True while the recorded process (not a later one reusing its PID) runs and is no zombie."""
    if start_ticks_of(record.pid) != record.start_ticks:
        return False
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{record.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    return False


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def ensure_port_free(port: int, what: str, host: str = LOOPBACK) -> None:
    """Raise a TestbedError naming ``what`` if ``host:port`` is taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError as error:
            raise TestbedError(
                f"port {host}:{port} for {what} is taken ({error.strerror}); stop what uses it or pick another port"
            ) from error


def spawn(name: str, argv: Sequence[str], log: Path, env: dict[str, str] | None = None) -> ProcessRecord:
    """Start ``argv`` detached in its own session, stdout+stderr appended to ``log``."""
    if not Path(argv[0]).is_file():
        raise TestbedError(f"{name}: the program {argv[0]} does not exist")
    with log.open("ab") as log_file:
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    ticks = start_ticks_of(process.pid)
    # The component outlives this Popen (the CLI exits while it runs) and is tracked by PID;
    # marking the object finished stops it from warning about a running child when collected.
    process.returncode = 0
    return ProcessRecord(name, process.pid, ticks or 0, str(log))


def log_tail(path: str | Path, lines: int = 25) -> str:
    """The last lines of a log file, for error messages."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


def reap(pid: int) -> None:
    """Collect a child's exit status if it is our child, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def stop(record: ProcessRecord, grace: float = 10.0) -> bool:
    """SIGTERM, then SIGKILL after ``grace`` seconds. True if the process had been running."""
    if not is_alive(record):
        reap(record.pid)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        reap(record.pid)
        if not is_alive(record):
            return True
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, signal.SIGKILL)
    for _ in range(100):
        reap(record.pid)
        if not is_alive(record):
            break
        time.sleep(0.05)
    return True


class _Patience:
    """How long a wait may go on: it fails early if ``watched`` dies (with the tail of its log), fails
    after ``timeout`` seconds, and reports progress every 5 s."""

    def __init__(
        self,
        what: str,
        timeout: float,
        watched: ProcessRecord | None,
        progress: Callable[[str], None] | None,
    ) -> None:
        self.what, self.timeout, self.watched, self.progress = what, timeout, watched, progress
        self.started = time.monotonic()
        self.next_report = self.started + 5

    def check(self) -> None:
        """Raise TestbedError if the wait should end unsuccessfully; say how long it has lasted."""
        now, watched = time.monotonic(), self.watched
        if watched is not None and not is_alive(watched):
            reap(watched.pid)
            raise TestbedError(
                f"{watched.name} exited while waiting for {self.what}; the end of its log "
                f"{watched.log}:\n{log_tail(watched.log)}"
            )
        if now - self.started > self.timeout:
            tail = f"; the end of {watched.log}:\n{log_tail(watched.log)}" if watched else ""
            raise TestbedError(f"timed out after {self.timeout:.0f}s waiting for {self.what}{tail}")
        if self.progress is not None and now >= self.next_report:
            self.progress(f"still waiting for {self.what} ({now - self.started:.0f}s)")
            self.next_report = now + 5


def wait_until(
    check: Callable[[], T],
    *,
    what: str,
    timeout: float,
    watched: ProcessRecord | None = None,
    progress: Callable[[str], None] | None = None,
    interval: float = 0.2,
) -> T:
    """Poll ``check`` until it returns something true, and return that; fail early if ``watched`` dies,
    with the tail of its log, and after ``timeout`` seconds, naming ``what`` was awaited."""
    patience = _Patience(what, timeout, watched, progress)
    while not (result := check()):
        patience.check()
        time.sleep(interval)
    return result


async def wait_until_async(
    check: Callable[[], T | Awaitable[T]],
    *,
    what: str,
    timeout: float,
    watched: ProcessRecord | None = None,
    progress: Callable[[str], None] | None = None,
    interval: float = 0.2,
) -> T:
    """:func:`wait_until` inside a running event loop: the loop runs its other tasks between tries.
    ``check`` is a plain function or a coroutine function."""
    patience = _Patience(what, timeout, watched, progress)
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        patience.check()
        await asyncio.sleep(interval)


def stop_group(record: ProcessRecord, grace: float = 5.0) -> None:
    """SIGTERM the process group led by ``record`` (if it is still ours), SIGKILL what remains.

    The leader's exit ends the grace period, as a container's does when its main process exits.
    """
    if not is_alive(record):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and is_alive(record):
        reap(record.pid)
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(record.pid, signal.SIGKILL)
    reap(record.pid)


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
