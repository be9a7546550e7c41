"""Process-table look-ups the attribution needs (thin I/O over /proc, psutil elsewhere)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import psutil

CONTAINER_MARKERS = ("/.dockerenv", "/run/.containerenv")
# Reading /proc directly is several times faster than psutil.Process(pid).ppid().
_HAVE_PROC = Path("/proc/self/stat").exists()


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid``, or None when it does not exist (or is not ours to see)."""
    if not _HAVE_PROC:
        return _parent_pid_portable(pid)
    stat = Path(f"/proc/{pid}/stat")
    try:
        # The command name (2nd field) may hold spaces and parentheses: split after the last ')'.
        fields = stat.read_text().rpartition(")")[2].split()
        return int(fields[1])
    except FileNotFoundError:
        return None
    except (OSError, IndexError, ValueError):
        return _parent_pid_portable(pid)


def _parent_pid_portable(pid: int) -> int | None:
    try:
        return psutil.Process(pid).ppid()
    except (psutil.Error, ValueError):
        return None


def looks_like_container(env: Mapping[str, str], exists: Callable[[str], bool]) -> bool:
    """Best-effort: a Kubernetes pod, or a Docker/Podman container."""
    return "KUBERNETES_SERVICE_HOST" in env or any(exists(path) for path in CONTAINER_MARKERS)
