"""How long saved states are kept: each notebook has one (the newest save replaces the last), and a
state older than ``c.FracnbMeter.hibernation_keep_days`` is removed, in every server folder of the
user's home (a named server that was deleted leaves its states behind otherwise).

The server prunes when it starts and after each hibernation. A state's age is its manifest's
``saved_at``; an entry without a readable manifest (a save that crashed, a damaged state) ages by
its folder's modification time. Nothing is removed through a symbolic link.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from . import layout

DAY_S = 86400.0


def saved_time(entry: Path, root: Path) -> float:
    """When the entry's state was saved (POSIX seconds): its manifest's saved_at, else the folder's mtime."""
    with contextlib.suppress(OSError, ValueError, TypeError, layout.UnsafeStateError):
        return datetime.fromisoformat(str(layout.read_manifest(entry, root)["saved_at"])).timestamp()
    return os.lstat(entry).st_mtime


def expired(env: Mapping[str, str], keep_days: float, now: float) -> list[Path]:
    """The entries, in every server folder, saved more than ``keep_days`` ago (none when it is 0)."""
    root = layout.state_root(env)
    if keep_days <= 0 or not root.is_dir() or root.is_symlink():
        return []
    found = []
    for server in sorted(root.iterdir()):
        if server.is_symlink() or not server.is_dir():
            continue
        found += [entry for entry in layout.entries(server) if now - saved_time(entry, root) > keep_days * DAY_S]
    return found


def prune(env: Mapping[str, str], keep_days: float, now: float) -> list[Path]:
    """Remove the expired entries; the ones removed."""
    removed = []
    for entry in expired(env, keep_days, now):
        with contextlib.suppress(OSError, layout.UnsafeStateError):
            layout.discard(entry, layout.state_root(env))
            removed.append(entry)
    return removed
