"""Process-table look-ups the attribution needs (thin I/O over /proc, psutil elsewhere)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path

import psutil

CONTAINER_MARKERS = ("/.dockerenv", "/run/.containerenv")
# Reading /proc directly is several times faster than psutil.Process(pid).ppid().
_HAVE_PROC = Path("/proc/self/stat").exists()
STAT_BYTES = 4096  # more than a stat line holds (a few hundred bytes)


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid``, or None when it does not exist (or is not ours to see).

    One open and one read of ``/proc/<pid>/stat`` without a Python file object: the meter asks this
    for every GPU process at every reading, and pathlib's ``read_text`` took twice as long.
    """
    if not _HAVE_PROC:
        return _parent_pid_portable(pid)
    try:
        handle = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError:
        return _parent_pid_portable(pid)
    try:
        stat = os.read(handle, STAT_BYTES)
    except OSError:
        stat = b""
    finally:
        os.close(handle)
    try:
        # The command name (2nd field) may hold spaces and parentheses: split after the last ')'.
        return int(stat.rpartition(b")")[2].split(None, 2)[1])
    except (IndexError, ValueError):
        return _parent_pid_portable(pid)


def parents_for_one_reading() -> Callable[[int], int | None]:
    """:func:`parent_pid`, remembered for one reading: the usage document and the GPU-unused count walk
    the same ancestries, and a parent can change between readings (its own parent ended)."""
    return cache(parent_pid)


def _parent_pid_portable(pid: int) -> int | None:
    try:
        return psutil.Process(pid).ppid()
    except (psutil.Error, ValueError):
        return None


def looks_like_container(env: Mapping[str, str], exists: Callable[[str], bool]) -> bool:
    """Best-effort: a Kubernetes pod, or a Docker/Podman container."""
    return "KUBERNETES_SERVICE_HOST" in env or any(exists(path) for path in CONTAINER_MARKERS)


def server_pid() -> int:
    """The Jupyter server that started this kernel (jupyter_client exports JPY_PARENT_PID)."""
    value = os.environ.get("JPY_PARENT_PID", "")
    return int(value) if value.isdigit() else os.getppid()
