"""The user's time zone for the times the notebook side writes: the widget, ``%fracnb_restore``.

The browser knows the user's zone; the kernel does not. JupyterLab and Notebook 7 tell the server
extension the browser's IANA zone (``PUT {base_url}fracnb/api/display-zone``, display-zone.schema.json),
which keeps it in the user's state folder::

    ~/.local/state/fracnb/display-zone.json     ($XDG_STATE_HOME is honoured; 0600 in a 0700 folder)

Kernels read it when they write a time. Before any page told it, the zone the spawner passes
(``FRACNB_DISPLAY_TIMEZONE``, the hub's ``c.FracnbQueue.display_timezone``) is used, and without
that the kernel's own local zone. Every time is written with its zone's abbreviation.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

ZONE_FILE = "display-zone.json"
ZONE_VARIABLE = "FRACNB_DISPLAY_TIMEZONE"
MAX_FILE_BYTES = 4096  # a zone's name; anything bigger is not ours


def zone_path(env: Mapping[str, str]) -> Path:
    """Where the browser's zone is kept, beside the saved states (fracnb_meter.hibernation.layout)."""
    base = env.get("XDG_STATE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".local", "state")
    return Path(base) / "fracnb" / ZONE_FILE


def zone_named(name: str) -> ZoneInfo:
    """The IANA zone ``name``; ValueError saying what was wrong and what to send instead."""
    if not isinstance(name, str) or not name or len(name) > 64 or name.startswith(("/", ".")) or ".." in name:
        raise ValueError(f"{name!r} is not an IANA time zone name such as 'America/New_York' or 'UTC'")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"{name!r} is not a time zone this server knows; send an IANA name such as 'America/New_York' or 'UTC'"
        ) from None


def save_zone(env: Mapping[str, str], name: str) -> str:
    """Keep ``name`` as the user's zone (checked first; ValueError if it is not one), replacing the file
    atomically: a symlink in its place is replaced, never written through."""
    zone_named(name)
    path = zone_path(env)
    for folder in reversed([path.parent, *path.parent.parents]):
        if not folder.exists():
            with contextlib.suppress(FileExistsError):
                folder.mkdir(mode=0o700)
    partial = path.with_name(f".{ZONE_FILE}.{os.getpid()}")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        json.dump({"time_zone": name}, file)
    os.replace(partial, path)
    return name


def saved_zone_name(env: Mapping[str, str]) -> str | None:
    """The zone a page told, or None (none yet, a symlink, unreadable, not a zone)."""
    try:
        descriptor = os.open(zone_path(env), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        with os.fdopen(descriptor, "rb") as file:
            document: Any = json.loads(file.read(MAX_FILE_BYTES))
        name = document["time_zone"]
        zone_named(name)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return str(name)


def display_zone(env: Mapping[str, str]) -> ZoneInfo | None:
    """The zone to write times in: the browser's, else the spawner's, else None (the kernel's local zone)."""
    for name in (saved_zone_name(env), env.get(ZONE_VARIABLE, "").strip()):
        if name:
            with contextlib.suppress(ValueError):
                return zone_named(name)
    return None
